r"""Sequence completion on a matrix Lie group (Musialski, arXiv 2606.20547, sec. 5).

A sequence is ``g_k = g_0 exp(k xi)``, ``k = 0 .. L-1`` (paper: ``L = 8``), with
``g_0 = group.random()`` and a random step ``xi`` in the algebra. One *interior*
element (``1 <= k* <= L-2``) is removed, the remaining ``L - 1`` are shuffled and
the task is to predict ``g_{k*}``.

Chart. All relative poses ``g_k^{-1} g_{k'} = exp((k' - k) xi)`` must lie in the
principal log chart so that ``log`` returns ``(k' - k) xi``. That holds iff every
eigenvalue ``mu`` of ``(L-1) hat(xi)`` has ``|Im mu| < pi`` (for SO(n)/SE(n): the
rotation angle times ``L-1`` is below ``pi``; for Aff(n): also no eigenvalue of the
linear part on the negative real axis). It is enforced through Bendixson's bound
``|Im mu| <= ||skew part of the linear part||_2`` (exact for SO(n)/SE(n)). The step is drawn blockwise,
each block ``xi[b]`` gets a uniformly random direction and the norm
``r sqrt(|b|) std_b`` with ``r ~ U[0.5, 1]`` (``std = step_std.get(block, 0.2)``,
``translation`` 0.5, ``rotation`` 0.4 by default; the typical size of ``N(0, std^2 I)`` without its
near-zero tail, so the step length varies by at most 2x), and rescaled if needed so that ``max |Im mu| <= margin * pi``
(``margin = 0.9``) on that bound. Everything is a deterministic function of ``seed``.

Items are :class:`torch_geometric.data.Data` with

* ``g (n, m, m)``: the shuffled remaining elements (``n = L - 1``; node dim 0),
* ``target (1, m, m)``: the missing element,
* ``xi (1, dim)``, ``missing (1,)`` (its index ``k*``), ``order (n,)`` (the
  original index of each token),

so a :class:`~torch_geometric.loader.DataLoader` batches sequences of different
lengths through the ``batch`` vector, never by padding. ``length`` may be an int
or a ``(min, max)`` range (inclusive).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, Dataset

from .._checks import nonnegative_float, positive_int
from ..groups import LieGroup, get_group

DEFAULT_STEP_STD = {"translation": 0.5, "rotation": 0.4}


class LieSequenceCompletion(Dataset):
    r"""In-memory sequence-completion data set (see the module docstring).

    Args:
        group: group name or object.
        num_sequences: number of sequences.
        length: ``L`` (>= 3) or an inclusive range ``(L_min, L_max)``.
        seed: everything is a deterministic function of it.
        step_std: per-block standard deviation of ``xi`` (default 0.2, translation 0.5).
        margin: relative-pose chart margin, ``max |Im eig((L-1) hat xi)| <= margin * pi``.
        dtype: dtype of the stored elements (float64 by default; cast in the model).
    """

    def __init__(self, group: Union[str, LieGroup], num_sequences: int, length: Union[int, Sequence[int]] = 8,
                 seed: int = 0, step_std: Optional[dict] = None, margin: float = 0.9,
                 dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.group = get_group(group)
        num_sequences = positive_int("num_sequences", num_sequences)
        lo, hi = (length, length) if isinstance(length, int) else tuple(length)
        if not (isinstance(lo, int) and isinstance(hi, int) and 3 <= lo <= hi):
            raise ValueError(f"length must be an int >= 3 or a range (min, max) with 3 <= min <= max, got {length!r}")
        if not 0 < margin < 1:
            raise ValueError(f"margin must be in (0, 1), got {margin}")
        self.num_sequences, self.length_range, self.seed, self.margin = num_sequences, (lo, hi), seed, margin
        std = dict(DEFAULT_STEP_STD)
        std.update(step_std or {})
        unknown = set(std) - set(self.group.blocks) - set(DEFAULT_STEP_STD)
        if unknown:
            raise ValueError(f"step_std has unknown blocks {sorted(unknown)}; {self.group.name} has "
                             f"{list(self.group.blocks)}")
        for block, value in std.items():
            nonnegative_float(f"step_std[{block!r}]", value)
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
        self.step_std = std
        self._items = self._generate(dtype)

    def _generate(self, dtype) -> list[Data]:
        G, gen = self.group, torch.Generator().manual_seed(int(self.seed))
        S, (lo, hi) = self.num_sequences, self.length_range
        lengths = torch.randint(lo, hi + 1, (S,), generator=gen)
        scale = torch.full((G.dim,), 0.15, dtype=torch.float64)
        for name, sl in G.blocks.items():
            if name in self.step_std:
                scale[sl] = self.step_std[name]
        # blockwise: uniformly random direction in each block, magnitude in [0.5, 1] * std * sqrt(|b|)
        xi = torch.randn(S, G.dim, generator=gen, dtype=torch.float64)
        for sl in G.blocks.values():
            n = float(xi[:, sl].shape[1])
            r = 0.5 + 0.5 * torch.rand(S, 1, generator=gen, dtype=torch.float64)
            xi[:, sl] = xi[:, sl] / xi[:, sl].norm(dim=1, keepdim=True).clamp(min=1e-12) * r * math.sqrt(n)
        xi = xi * scale
        # chart: |Im eig((L-1) hat(xi))| <= margin * pi
        # Bendixson: |Im eig(X)| <= ||(X - X^T) / 2||_2 for the linear part X of hat(xi) (the
        # translation column does not change the spectrum); exact for SO(n)/SE(n), conservative
        # for Aff(n); singular values never fail to converge, unlike eigvals on nilpotent parts
        n = G.space_dim
        X = G.hat(xi)[..., :n, :n]
        im = torch.linalg.matrix_norm((X - X.transpose(-1, -2)) / 2, ord=2) * (lengths - 1)
        xi = xi * torch.clamp(self.margin * math.pi / im.clamp(min=1e-300), max=1.0)[:, None]
        g0 = G.random(S, generator=gen, dtype=torch.float64)
        items = []
        for s in range(S):
            L = int(lengths[s])
            k = torch.arange(L, dtype=torch.float64)
            seq = G.compose(g0[s].expand(L, -1, -1), G.exp(k[:, None] * xi[s]))
            missing = int(torch.randint(1, L - 1, (1,), generator=gen))
            keep = torch.cat([torch.arange(missing), torch.arange(missing + 1, L)])
            keep = keep[torch.randperm(L - 1, generator=gen)]
            items.append(Data(g=seq[keep].to(dtype), target=seq[missing:missing + 1].to(dtype),
                              xi=xi[s:s + 1].to(dtype), missing=torch.tensor([missing]), order=keep,
                              num_nodes=L - 1))
        return items

    def len(self) -> int:
        return len(self._items)

    def get(self, idx: int) -> Data:
        return self._items[idx]

    def batch_all(self, indices: Optional[Tensor] = None) -> Batch:
        """All (or the selected) sequences as one :class:`~torch_geometric.data.Batch`."""
        items = self._items if indices is None else [self._items[int(i)] for i in indices]
        return Batch.from_data_list(items)

    def __repr__(self) -> str:
        lo, hi = self.length_range
        L = lo if lo == hi else f"{lo}-{hi}"
        return f"{self.__class__.__name__}({self.group.name}, {len(self)}, length={L}, seed={self.seed})"
