"""Fourier nonlinearities on G-sets (the paper's Section 4.3, Eq. 9-11).

For a finite G-set ``X = (disjoint union) n_alpha X_alpha`` the map
``V' --FT^-1--> C(X, R) --sigma pointwise--> C(X, R) --FT--> V'`` is equivariant for
any ``sigma``. ``FT`` is orthogonal and computed orbit by orbit; orbits with the same
action pattern are batched, so the cost is ``sum_alpha n_alpha |X_alpha|^2`` per token.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..groups.finite import FiniteO2Group, o2_group
from ..groups.finite_reps import GSet
from .field_type import FieldType

__all__ = ["FourierNonlinearity", "gset_family", "gset_from_spec", "GSET_FAMILIES"]

GSET_FAMILIES = ("regular", "regular+trivial", "quotients")


def gset_from_spec(group: Union[str, FiniteO2Group], spec: Mapping[str, int]) -> GSet:
    """``{"e": 2, "t": 1, "tr,r2": 1}`` -> ``2 G/{e} + G/<t> + G/<tr, r^2>``.

    Keys are comma-separated generator words (``"e"``: the trivial subgroup,
    ``"G"``: the whole group, so ``G/G`` is one fixed point).
    """
    G = o2_group(group)
    sets = []
    for key, count in spec.items():
        if key.strip() in ("G", "all"):
            H = list(range(G.order))
        else:
            H = G.closure([G.word(w) for w in key.split(",")])
        sets += [GSet.quotient(G, H)] * int(count)
    if not sets:
        raise ValueError("mlp_gset: the G-set must not be empty")
    return GSet.disjoint_union(sets)


def gset_family(group: Union[str, FiniteO2Group], family: str, copies: int) -> GSet:
    """The three families of the paper's Section 5.3, ``copies`` times.

    * ``"regular"``: ``n`` copies of ``G`` (regular action);
    * ``"regular+trivial"``: ``n`` copies of ``G`` plus ``|G|`` fixed points;
    * ``"quotients"``: ``n`` copies of ``G/<r> + G/<t> + G/<tr, r^2>`` (dihedral ``G``
      with even ``n``; ``G/<r> + G/<t>`` for odd ``n``): every irrep appears.
    """
    G = o2_group(group)
    if copies < 1:
        raise ValueError(f"mlp copies must be >= 1, got {copies}")
    if family == "regular":
        spec = {"e": copies}
    elif family == "regular+trivial":
        spec = {"e": copies, "G": copies * G.order}
    elif family == "quotients":
        if not G.dihedral or G.n == 1:
            raise ValueError(f"mlp_gset: 'quotients' needs a dihedral group D_n with n >= 2, got {G.name}; "
                             "use 'regular' or 'regular+trivial'")
        spec = {"r": copies, "t": copies}
        if G.n % 2 == 0:
            spec["tr,r2"] = copies
    else:
        raise ValueError(f"mlp_gset: unknown family {family!r}; choose one of {GSET_FAMILIES} or pass a dict")
    return gset_from_spec(G, spec)


class FourierNonlinearity(nn.Module):
    """``FT o sigma o FT^{-1}`` on a G-set.

    Args:
        gset: the G-set ``X``.
        activation: pointwise ``sigma`` (default GELU).

    Attributes:
        field_type: ``V'`` with ``C'_rho = sum_alpha Gamma^alpha_rho n_alpha``.

    Shapes:
        input/output ``(..., field_type.dim)``.
    """

    def __init__(self, gset: GSet, activation: Optional[Callable[[Tensor], Tensor]] = None):
        if not isinstance(gset, GSet):
            raise ValueError(f"gset must be a GSet (e.g. gset_family(group, 'regular', copies)), got "
                             f"{type(gset).__name__}")
        if activation is not None and not callable(activation):
            raise ValueError(f"activation must be a callable (e.g. torch.nn.functional.gelu) or None, got "
                             f"{activation!r}")
        super().__init__()
        self.gset = gset
        self.activation = activation if activation is not None else F.gelu
        G = gset.group
        patterns: dict[bytes, dict] = {}
        for orb in gset.orbits():
            loc = {x: i for i, x in enumerate(orb)}
            table = np.array([[loc[int(gset.perm[g, x])] for x in orb] for g in range(G.order)])
            key = table.tobytes() + bytes(str(table.shape), "ascii")
            if key not in patterns:
                Q = GSet(G, table).fourier_basis()
                slots = [(name, a, j) for name in Q for a in range(Q[name].shape[0]) for j in range(Q[name].shape[1])]
                mat = np.concatenate([Q[name].reshape(-1, len(orb)) for name in Q], 0)  # (|O|, |O|) orthogonal
                patterns[key] = {"Q": mat, "slots": slots, "orbits": []}
            patterns[key]["orbits"].append(orb)
        self.patterns = list(patterns.values())
        mult = {r.name: 0 for r in G.irreps}
        for p in self.patterns:
            for name, a, j in p["slots"]:
                if j == 0:
                    mult[name] += len(p["orbits"])
        self.field_type = FieldType(G, mult)
        # field-type flat index of each pattern-layout coefficient (pattern, copy, slot)
        offsets = {r.name: s.start for r, _, s in self.field_type.blocks}
        next_channel = {r.name: 0 for r in G.irreps}
        order = []
        for i, p in enumerate(self.patterns):
            for _ in p["orbits"]:
                base = {}
                for name, a, j in p["slots"]:
                    if (name, a) not in base:
                        base[(name, a)] = next_channel[name]
                        next_channel[name] += 1
                    d = G.irrep(name).dim
                    order.append(offsets[name] + base[(name, a)] * d + j)
            self.register_buffer(f"Q{i}", torch.as_tensor(p["Q"], dtype=torch.float64), persistent=False)
        order = torch.as_tensor(order)
        self.register_buffer("gather", order, persistent=False)
        self.register_buffer("scatter", torch.argsort(order), persistent=False)
        self.sizes = [len(p["orbits"]) * len(p["slots"]) for p in self.patterns]

    def extra_repr(self) -> str:
        orb = ", ".join(f"{len(p['orbits'])}x|X|={len(p['slots'])}" for p in self.patterns)
        return f"{self.gset.group.name}-set of size {self.gset.size} ({orb}) -> {self.field_type}"

    def macs_per_token(self) -> int:
        return sum(2 * len(p["orbits"]) * len(p["slots"]) ** 2 for p in self.patterns)

    def to_gset(self, x: Tensor) -> list[Tensor]:
        """``FT^{-1}``: features ``(..., dim)`` to functions on the orbits ``[(..., n_p, |O_p|)]``."""
        z = x.index_select(-1, self.gather)
        outs = []
        for i, chunk in enumerate(torch.split(z, self.sizes, dim=-1)):
            Q = getattr(self, f"Q{i}").to(x.dtype)
            outs.append(chunk.reshape(*x.shape[:-1], -1, Q.shape[0]) @ Q)
        return outs

    def from_gset(self, fs: list[Tensor]) -> Tensor:
        parts = []
        for i, f in enumerate(fs):
            Q = getattr(self, f"Q{i}").to(f.dtype)
            parts.append((f @ Q.T).flatten(-2))
        return torch.cat(parts, -1).index_select(-1, self.scatter)

    def forward(self, x: Tensor) -> Tensor:
        return self.from_gset([self.activation(f) for f in self.to_gset(x)])


def synthesis_matrix(act: FourierNonlinearity) -> Tensor:
    """Dense ``FT^{-1}`` of a :class:`FourierNonlinearity`: ``(|X|, dim)`` float64, columns
    are the functions on ``X`` (in the G-set's point order) of the basis features."""
    D = act.field_type.dim
    eye = torch.eye(D, dtype=torch.float64, device=act.gather.device)
    Phi = torch.zeros(act.gset.size, D, dtype=torch.float64, device=eye.device)
    for p, f in zip(act.patterns, act.to_gset(eye)):
        for s, orb in enumerate(p["orbits"]):
            Phi[torch.as_tensor(orb)] = f[:, s, :].T
    return Phi
