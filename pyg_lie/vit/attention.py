"""Equivariant multi-head self-attention over patch tokens (the paper's Section 4.4).

With a G-invariant inner product on ``V`` (the Euclidean one: all irreps are
orthogonal) and a G-stable orthogonal decomposition ``V = V_1 + ... + V_h`` into
heads, the scores ``alpha^(r)(a, b) = <Pi_r q(a), Pi_r k(b)> / sqrt(dim V_r)`` are
invariant, so ``y^(r)(a) = sum_b softmax_b(alpha^(r)) Pi_r v(b)`` is equivariant.

Head decompositions (``Pi_r`` selects whole irrep channels):

* ``coupled``: ``V_r = (+)_rho R^{C_rho/h} (x) V_rho`` (every head sees every irrep);
* ``irrepwise``: each irrep ``rho`` is split into ``h_rho`` heads of ``C_rho/h_rho``
  channels (default ``h_rho = h``), ``sum_rho h_rho`` heads in all.

The layer is a PyG ``MessagePassing`` on the patch graph (complete by default); the
softmax over each target's incoming edges is the shared
:func:`pyg_lie.nn.attention_core.edge_attention`. When all heads have the same size
(always for ``coupled``), the default fused path computes scores and weighted sums
with the CSR kernels LieSelfAttention uses (:mod:`pyg_lie.ops.csr`: batched
matrix products on the complete patch graph, SDDMM / SpMM otherwise), so no ``(E, d)``
tensor is formed.
"""
from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing

from .. import _checks
from ..neighbors import complete_graph as _complete_graph
from ..nn import _explain
from ..nn._explain import check_explain_mode, explain_mask, masked_edge_attention
from ..ops import CSRStructure, csr_scores, to_edge_order
from ..nn.attention_core import csr_edge_attention, edge_attention
from .field_type import FieldType
from .linear import EquivariantLinear

__all__ = ["EquivariantSelfAttention", "head_assignment", "complete_graph", "radius_patch_graph"]


def head_assignment(V: FieldType, heads: int, mode: str = "coupled",
                    irrep_heads: Optional[Mapping[str, int]] = None) -> list[list[int]]:
    """Head id of every channel, per irrep: ``[[head of channel c of rho] for rho]``."""
    out: list[list[int]] = []
    if mode == "coupled":
        for r, C, _ in V.blocks:
            if C % heads:
                raise ValueError(f"heads: coupled attention needs every C_rho divisible by heads={heads}; "
                                 f"{r.name} has C={C} in {V}")
            out.append([c // (C // heads) for c in range(C)] if C else [])
        return out
    if mode == "irrepwise":
        nxt = 0
        for r, C, _ in V.blocks:
            h = (irrep_heads or {}).get(r.name, heads) if C else 0
            if C and (h < 1 or C % h):
                raise ValueError(f"irrep_heads: C_{r.name}={C} is not divisible by its {h} heads")
            out.append([nxt + c // (C // h) for c in range(C)] if C else [])
            nxt += h
        return out
    raise ValueError(f"attention: must be 'coupled' or 'irrepwise', got {mode!r}")


def complete_graph(batch: int, nodes: int, device=None) -> Tensor:
    """Edges ``j -> i`` between all tokens (incl. self loops) of each of ``batch`` images of
    ``nodes`` tokens, sorted by ``(i, j)``: :func:`pyg_lie.neighbors.complete_graph` of the
    images' token batch vector."""
    batch, nodes = _checks.nonnegative_int("batch", batch), _checks.nonnegative_int("nodes", nodes)
    return _complete_graph(torch.arange(batch, device=device).repeat_interleave(nodes))


def radius_patch_graph(positions: Tensor, radius: float, batch: int, with_cls: bool = True) -> Tensor:
    """Edges between patches with centre distance ``<= radius`` (G-invariant); the class
    token (node 0 of each image when ``with_cls``) is connected to and from everything."""
    radius = _checks.nonnegative_float("radius", radius)
    batch = _checks.nonnegative_int("batch", batch)
    Np = positions.shape[0]
    d = torch.cdist(positions.double(), positions.double())
    adj = d <= radius + 1e-9
    if with_cls:
        full = torch.ones(Np + 1, Np + 1, dtype=torch.bool, device=positions.device)
        full[1:, 1:] = adj
        adj = full
    dst, src = adj.nonzero(as_tuple=True)
    n = adj.shape[0]
    off = (torch.arange(batch, device=positions.device) * n).repeat_interleave(src.numel())
    return torch.stack([src.repeat(batch) + off, dst.repeat(batch) + off])


class EquivariantSelfAttention(MessagePassing):
    """G-equivariant multi-head self-attention as a message-passing layer.

    Args:
        field_type: token type ``V`` (input and output).
        heads: number of heads ``h`` (per irrep for ``irrepwise``).
        attention: ``"coupled"`` or ``"irrepwise"``.
        irrep_heads: ``{irrep: h_rho}`` for ``irrepwise``.
        head_ids: explicit ``[[head of channel] per irrep]`` (overrides the above; used
            by :meth:`EquivariantViT.restrict`).
        dropout: dropout on attention weights (training only).
        bias: biases (trivial irrep only) in the q/k/v/o maps.
        normalization: ``"softmax"`` or ``"constant"`` (alias ``"mean"``; see ``edge_attention``).
        fused: ``"auto"`` (default) and ``True`` use the CSR kernels when all heads have
            the same size (else the message-passing path); ``False`` always runs
            ``propagate``. Same results either way (tested). Under PyG's explainer the
            layer takes the message-passing path.
        explain_mode: where PyG's explainer edge mask acts: ``"score"`` (default; a log-bias on
            the scores, a 0/1 mask equals removing the edges) or ``"message"`` (the messages
            after the softmax, PyG's default); see :mod:`pyg_lie.nn._explain`.

    Shapes:
        ``x``: ``(N, V.dim)``; ``edge_index``: ``(2, E)`` with ``j -> i`` edges;
        output ``(N, V.dim)``; with ``return_attention_weights=True`` also
        ``(edge_index, alpha)``, PyG's convention, with ``alpha (E, num_heads)`` in the order of
        ``edge_index`` (which is returned as given, an ``EdgeIndex`` included).

    Example:
        >>> import torch
        >>> from pyg_lie.vit import EquivariantSelfAttention, FieldType
        >>> from pyg_lie.vit.attention import complete_graph
        >>> _ = torch.manual_seed(0)
        >>> V = FieldType.regular("C4", 2)       # 2 copies of C4's regular representation
        >>> layer = EquivariantSelfAttention(V, heads=2)
        >>> x, edge_index = torch.randn(5, V.dim), complete_graph(1, 5)
        >>> out = layer(x, edge_index)
        >>> out.shape
        torch.Size([5, 8])
        >>> torch.allclose(layer(V.transform(x, 1), edge_index), V.transform(out, 1), atol=1e-5)  # equivariant
        True
    """

    def __init__(self, field_type: FieldType, heads: int = 1, attention: str = "coupled",
                 irrep_heads: Optional[Mapping[str, int]] = None, head_ids: Optional[Sequence[Sequence[int]]] = None,
                 dropout: float = 0.0, bias: bool = True, normalization: str = "softmax",
                 fused: Union[bool, str] = "auto", *, explain_mode: str = "score"):
        super().__init__(aggr="sum", node_dim=0)
        V = field_type
        if normalization not in ("softmax", "constant", "mean"):
            raise ValueError(f"normalization must be 'softmax' or 'constant' (alias 'mean'), got {normalization!r}")
        if not isinstance(field_type, FieldType):
            raise ValueError(f"field_type must be a FieldType, got {type(field_type).__name__}")
        dropout = _checks.probability("dropout", dropout)
        if head_ids is None:
            heads = _checks.positive_int("heads", heads)
        self.field_type, self.attention, self.dropout, self.normalization = V, attention, dropout, normalization
        if head_ids is None:
            head_ids = head_assignment(V, heads, attention, irrep_heads)
        if isinstance(head_ids, (str, bytes)) or not isinstance(head_ids, Sequence) or \
                len(head_ids) != len(V.blocks) or not all(isinstance(h, Sequence) for h in head_ids):
            raise ValueError(f"head_ids must hold one list of head ids per irrep of the field type ({len(V.blocks)}: "
                             f"{[r.name for r, _, _ in V.blocks]}), got {head_ids!r}")
        self.head_ids = [[_checks.nonnegative_int("head_ids entries", c) for c in h] for h in head_ids]
        feat_head = []
        for (r, C, _), ids in zip(V.blocks, self.head_ids):
            if len(ids) != C:
                raise ValueError("head_ids: one head id per channel of every irrep is required")
            for c in range(C):
                feat_head += [ids[c]] * r.dim
        fh = torch.as_tensor(feat_head, dtype=torch.long)
        self.heads = int(fh.max().item()) + 1 if fh.numel() else 1
        counts = torch.bincount(fh, minlength=self.heads).double()
        if (counts == 0).any():
            raise ValueError("head_ids: every head needs at least one channel")
        onehot = F.one_hot(fh, self.heads).double() / counts.sqrt()[None]  # (D, H), 1/sqrt(dim V_r)
        self.register_buffer("feat_head", fh, persistent=False)
        self.register_buffer("score_proj", onehot, persistent=False)
        self.register_buffer("head_expand", F.one_hot(fh, self.heads).double().T.contiguous(), persistent=False)
        if fused not in (True, False, "auto"):
            raise ValueError(f"fused must be True, False or 'auto', got {fused!r}")
        self.fused = fused
        self.explain_mode = check_explain_mode(explain_mode)
        # channels grouped by head (stable), for the (N, H, D / H) layout of the fused path
        self.equal_heads = bool((counts == counts[0]).all())
        head_perm = torch.argsort(fh, stable=True)
        self.register_buffer("head_perm", head_perm, persistent=False)
        self.register_buffer("head_unperm", torch.argsort(head_perm), persistent=False)
        self.q = EquivariantLinear(V, V, bias)
        self.k = EquivariantLinear(V, V, bias)
        self.v = EquivariantLinear(V, V, bias)
        self.o = EquivariantLinear(V, V, bias)
        self._alpha: Optional[Tensor] = None

    def reset_parameters(self) -> None:
        for lin in (self.q, self.k, self.v, self.o):
            lin.reset_parameters()

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.field_type.dim}, {self.field_type.dim}, heads={self.heads}, "
                f"attention={self.attention!r}, group={self.field_type.group.name})")

    def forward(self, x: Tensor, edge_index: Tensor, return_attention_weights: Optional[bool] = None,
                csr: Optional[CSRStructure] = None):
        """Attention over each target's incoming edges: ``(N, V.dim)``, and with
        ``return_attention_weights=True`` the pair ``(out, (edge_index, alpha))``.

        ``csr`` optionally passes ``CSRStructure.build(edge_index, N)``, built once for a
        stack of layers on the same graph (fused path only).

        ``ValueError`` if ``x`` is not ``(N, V.dim)`` floating point or ``edge_index`` is not
        an integer ``(2, E)`` tensor of indices in ``[0, N)`` (one ``aminmax``, left out
        under ``torch.compile``)."""
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != self.field_type.dim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (N, {self.field_type.dim}) (the field type's dimension), got {got}")
        _checks.floating("x", x)
        _checks.edge_index(edge_index)
        mask = explain_mask(self, edge_index.shape[1])
        if self.fused is not False and self.equal_heads and mask is None:  # CSRStructure.build checks the indices
            return self._forward_fused(x, edge_index, return_attention_weights, csr)
        plain = _checks.index_tensor("edge_index", edge_index, x.shape[0])
        if mask is not None and check_explain_mode(self.explain_mode) == "message":
            mask = None  # explain_message applies it to the messages
        q, k, v = self.q(x), self.k(x), self.v(x)
        self._alpha = None
        out = self.propagate(plain, q=q, k=k, v=v, edge_mask=mask, size=None)
        out = self.o(out)
        alpha, self._alpha = self._alpha, None
        if return_attention_weights:
            return out, (edge_index, alpha)
        return out

    def _forward_fused(self, x: Tensor, edge_index: Tensor, return_attention_weights: bool,
                       csr: Optional[CSRStructure]):
        N, H = x.shape[0], self.heads
        if csr is None:
            csr = CSRStructure.build(edge_index, N)
        q, k, v = (t.index_select(-1, self.head_perm).view(N, H, -1) for t in (self.q(x), self.k(x), self.v(x)))
        score = csr_scores(csr, q * (1.0 / math.sqrt(q.shape[-1])), k)  # (H, E); q scaled: (N, H, D) < (H, E)
        out, w = csr_edge_attention(csr, score, v, self.normalization, self.dropout, self.training)
        alpha = w.t()
        out = self.o(out.index_select(-1, self.head_unperm))
        if return_attention_weights:
            return out, (edge_index, to_edge_order(csr, alpha))
        return out

    def message(self, q_i: Tensor, k_j: Tensor, v_j: Tensor, edge_mask: Optional[Tensor], index: Tensor,
                ptr: Optional[Tensor], size_i: Optional[int]) -> Tensor:
        score = (q_i * k_j) @ self.score_proj.to(q_i.dtype)  # (E, H)
        num_nodes = size_i if size_i is not None else int(index.max()) + 1
        if edge_mask is None:
            alpha = edge_attention(score, index, num_nodes=num_nodes, normalization=self.normalization, ptr=ptr)
        else:  # an explainer's mask, before the normalisation (pyg_lie.nn._explain)
            alpha = masked_edge_attention(score, index, num_nodes, edge_mask, self.normalization)
        self._alpha = alpha
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        return v_j * (alpha @ self.head_expand.to(alpha.dtype))  # (E, H) -> (E, D) per-feature weights

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        # score mode: the mask already acted on the scores; message mode: PyG's message masking
        return _explain.explain_message(self, inputs, dim_size)

    def macs_per_token(self) -> int:
        return 4 * self.q.macs_per_token()
