"""Fast paths and graph construction for S^2 neighbourhood attention.

Two pieces live here:

* :func:`geodesic_neighbors` -- the geodesic-radius neighbour search on the unit
  sphere used to build S^2 attention graphs. It calls
  :func:`pyg_lie.neighbors.geodesic_radius` when that module is available and
  otherwise falls back to a private chunked float64 brute force with the same
  contract (pairs with geodesic distance ``<= theta``, compared through the
  chord ``|x - y| <= 2 sin(theta / 2)``, sorted by target then source).
* :class:`NeighborhoodPlan` and :func:`planned_attention` -- a "fused CSR"
  formulation of the per-target softmax attention. Targets are grouped by their
  in-degree ``K``; inside a group every neighbourhood is a dense ``(n, K)`` index
  block, so scores, softmax and aggregation are dense tensor ops along a
  neighbour axis (no scatter in the forward pass). On equiangular-type grids
  there are only a handful of distinct degrees (one per latitude band), so the
  number of groups is small and independent of the longitude resolution.
"""
from __future__ import annotations

import math
import warnings
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from .. import _checks as checks
from .._sort import argsort_keys
from ._autocast import float32_under_autocast
from .attention_core import dense_edge_attention

__all__ = ["geodesic_neighbors", "NeighborhoodPlan", "planned_attention"]


# --------------------------------------------------------------------------- neighbours
def _geodesic_radius_bruteforce(x: Tensor, y: Tensor, theta: float, chunk: int = 1024) -> Tensor:
    """All pairs ``(j, i)`` with ``d(x_j, y_i) <= theta`` on the unit sphere (float64 chord test).

    Args:
        x: ``(Nx, 3)`` source points (unit vectors).
        y: ``(Ny, 3)`` target points (unit vectors).
        theta: geodesic radius in radians.

    Returns:
        ``(2, E)`` int64, row 0 sources, row 1 targets, sorted by target then source.
    """
    x64 = x.detach().to(torch.float64)
    y64 = y.detach().to(torch.float64)
    if theta >= math.pi:
        r2 = 4.0 + 1.0  # every pair
    else:
        r2 = (2.0 * math.sin(0.5 * theta)) ** 2
    rows, cols = [], []
    for start in range(0, y64.shape[0], chunk):
        yc = y64[start : start + chunk]
        d2 = (yc[:, None, :] - x64[None, :, :]).pow(2).sum(-1)  # (c, Nx)
        ti, sj = torch.nonzero(d2 <= r2, as_tuple=True)  # row-major: sorted by target then source
        rows.append(sj)
        cols.append(ti + start)
    if not rows:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    return torch.stack([torch.cat(rows), torch.cat(cols)], 0).to(x.device)


def geodesic_neighbors(x: Tensor, y: Tensor, theta: float) -> Tensor:
    """Geodesic-radius neighbourhoods on the unit sphere.

    Uses :func:`pyg_lie.neighbors.geodesic_radius` when available (with
    ``max_num_neighbors=None``, i.e. no truncation) and the private float64
    brute force otherwise. Both return edges sorted by target then source.

    Args:
        x: ``(Nx, 3)`` source points on S^2.
        y: ``(Ny, 3)`` target points on S^2.
        theta: radius in radians (already including any widening factor).

    Returns:
        ``(2, E)`` edge index ``[source; target]``.
    """
    try:
        from pyg_lie.neighbors import geodesic_radius  # type: ignore
    except ImportError:  # pragma: no cover - depends on the sibling module being present
        return _geodesic_radius_bruteforce(x, y, theta)
    ei = geodesic_radius(x.to(torch.float64), y.to(torch.float64), theta, max_num_neighbors=None)
    return _sort_by_target(ei, x.shape[0])


def _sort_by_target(edge_index: Tensor, num_src: int) -> Tensor:
    key = edge_index[1].to(torch.int64) * max(int(num_src), 1) + edge_index[0].to(torch.int64)
    perm = argsort_keys(key)[1]
    return edge_index[:, perm].to(torch.long)


# --------------------------------------------------------------------------- plan
class Block:
    """One group of targets processed together.

    * ``dst`` ``(n,)``: the targets;
    * ``shared`` ``(S,)``: sources every target of the block attends to (``S = 0``
      for a plain degree bucket); their scores come from one dense matmul;
    * ``src`` ``(n, K)``: the remaining sources of each target (same ``K`` for all);
    * ``eid_shared`` ``(n, S)``, ``eid`` ``(n, K)``: positions of those edges in the
      original ``edge_index`` (for ``return_attention_weights``).
    """

    __slots__ = ("dst", "shared", "src", "eid_shared", "eid")

    def __init__(self, dst: Tensor, shared: Tensor, src: Tensor, eid_shared: Tensor, eid: Tensor) -> None:
        self.dst, self.shared, self.src, self.eid_shared, self.eid = dst, shared, src, eid_shared, eid

    def to(self, device) -> "Block":
        return Block(*(getattr(self, a).to(device) for a in self.__slots__))


class NeighborhoodPlan:
    """Target-sorted neighbourhoods regrouped into dense blocks (a bucketed CSR).

    Targets are grouped by in-degree ``K``: inside a group every neighbourhood is a
    dense ``(n, K)`` index block, so scores, softmax and aggregation need no
    scatter. Optionally (``dst_groups``, e.g. the latitude ring of each target on a
    grid) a group of targets whose neighbourhoods share at least ``min_shared``
    sources -- the full polar rings of an equiangular grid -- gets those shared
    sources as one dense matmul block.

    ``inv`` ``(num_dst,)`` maps the concatenation ``[targets of block 0, block 1,
    ..., isolated targets]`` back to node order. Plans are built once per graph
    (Python loops, data dependent) and then reused; see :meth:`to` for devices.
    """

    def __init__(self, blocks: List[Block], inv: Tensor, num_src: int, num_dst: int, num_edges: int,
                 num_isolated: int) -> None:
        self.blocks = blocks
        self.inv = inv
        self.num_src = int(num_src)
        self.num_dst = int(num_dst)
        self.num_edges = int(num_edges)
        self.num_isolated = int(num_isolated)

    @classmethod
    def from_edge_index(cls, edge_index: Tensor, num_src: int, num_dst: int, keep_order: bool = False,
                        dst_groups: Optional[Tensor] = None, min_shared: int = 64) -> "NeighborhoodPlan":
        """Build a plan from a ``(2, E)`` edge index ``[source; target]`` (any edge order, no duplicates).

        Args:
            keep_order: order the sources of a neighbourhood as they appear in
                ``edge_index`` (default: by source index). The grid layer uses this to
                give every longitude the same summation order.
            dst_groups: optional ``(num_dst,)`` labels; targets with one label and one
                degree are checked for ``>= min_shared`` common sources.
        """
        checks.edge_index(edge_index)
        device = edge_index.device
        ei = edge_index.to(torch.long)
        E = ei.shape[1]
        key = ei[1] if keep_order else ei[1] * max(int(num_src), 1) + ei[0]
        perm = argsort_keys(key)[1]
        src_sorted = ei[0, perm]
        dst_sorted = ei[1, perm]
        deg = torch.bincount(dst_sorted, minlength=num_dst)
        ptr = torch.zeros(num_dst + 1, dtype=torch.long, device=device)
        ptr[1:] = torch.cumsum(deg, 0)
        empty = torch.empty(0, dtype=torch.long, device=device)
        blocks: List[Block] = []
        remaining = deg > 0
        if dst_groups is not None:
            dst_groups = dst_groups.to(device=device, dtype=torch.long)
            for label in torch.unique(dst_groups).tolist():
                targets = torch.nonzero((dst_groups == label) & remaining, as_tuple=True)[0]
                if targets.numel() < 2:
                    continue
                Ks = torch.unique(deg[targets])
                if Ks.numel() != 1:
                    continue
                K = int(Ks[0])
                pos = ptr[targets].unsqueeze(1) + torch.arange(K, device=device).unsqueeze(0)
                src, eid = src_sorted[pos], perm[pos]
                count = torch.bincount(src.reshape(-1), minlength=num_src)
                is_shared = count[src] == targets.numel()
                S = int(is_shared[0].sum())
                if S < min_shared:
                    continue
                n = targets.numel()
                s_m, e_m = src[is_shared].view(n, S), eid[is_shared].view(n, S)
                order = torch.argsort(s_m, dim=1)
                shared = s_m[0, order[0]]
                blocks.append(Block(targets, shared, src[~is_shared].view(n, K - S),
                                    torch.gather(e_m, 1, order), eid[~is_shared].view(n, K - S)))
                remaining[targets] = False
        for K in torch.unique(deg[remaining]).tolist():
            targets = torch.nonzero(remaining & (deg == K), as_tuple=True)[0]
            pos = ptr[targets].unsqueeze(1) + torch.arange(K, device=device).unsqueeze(0)
            blocks.append(Block(targets, empty, src_sorted[pos], empty.view(targets.numel(), 0), perm[pos]))
        isolated = torch.nonzero(deg == 0, as_tuple=True)[0]
        order_t = torch.cat([b.dst for b in blocks] + [isolated])
        inv = torch.empty_like(order_t)
        inv[order_t] = torch.arange(order_t.numel(), device=device)
        return cls(blocks, inv, num_src, num_dst, E, isolated.numel())

    def _build_source_csr(self) -> None:
        # CSR (num_src x E_p) summing per-edge gradient rows (non-shared edges, in block order) into
        # their sources: one sparse-dense matmul instead of a slow scatter (index_add_) on CPU
        edge_src = torch.cat([b.src.reshape(-1) for b in self.blocks]) if self.blocks else self.inv.new_empty(0)
        order = argsort_keys(edge_src)[1]
        crow = torch.zeros(self.num_src + 1, dtype=torch.long, device=self.inv.device)
        crow[1:] = torch.cumsum(torch.bincount(edge_src, minlength=self.num_src), 0)
        self._src_crow, self._src_col = crow, order
        self._src_csr = {}

    def source_csr(self, dtype: torch.dtype) -> Tensor:
        """Sparse ``(num_src, E_p)`` 0/1 matrix mapping non-shared edges (block order) to sources."""
        if not hasattr(self, "_src_crow"):
            self._build_source_csr()
        csr = self._src_csr.get(dtype)
        if csr is None:
            vals = torch.ones(self._src_col.numel(), dtype=dtype, device=self._src_col.device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
                csr = torch.sparse_csr_tensor(self._src_crow, self._src_col, vals,
                                              size=(self.num_src, self._src_col.numel()), check_invariants=False)
            self._src_csr[dtype] = csr
        return csr

    def flat(self) -> Tuple[List[Tensor], List[int]]:
        """The plan as operator arguments (cached): tensors ``[inv, source CSR row pointer and
        columns, then dst, shared, src of every block]`` and sizes ``[num_src, num_dst,
        num_edges, num_isolated]``; :meth:`from_flat` inverts it (without the edge ids)."""
        if not hasattr(self, "_flat"):
            if not hasattr(self, "_src_crow"):
                self._build_source_csr()
            tensors = [self.inv, self._src_crow, self._src_col]
            for b in self.blocks:
                tensors += [b.dst, b.shared, b.src]
            self._flat = (tensors, [self.num_src, self.num_dst, self.num_edges, self.num_isolated])
        return self._flat

    @classmethod
    def from_flat(cls, tensors: List[Tensor], sizes: List[int]) -> "NeighborhoodPlan":
        inv, crow, col, *rest = tensors
        blocks = []
        for dst, shared, src in zip(*[iter(rest)] * 3):
            none = src.new_empty(0)
            blocks.append(Block(dst, shared, src, none, none))
        plan = cls(blocks, inv, *sizes)
        plan._src_crow, plan._src_col, plan._src_csr = crow, col, {}
        return plan

    def to(self, device) -> "NeighborhoodPlan":
        return NeighborhoodPlan([b.to(device) for b in self.blocks], self.inv.to(device), self.num_src,
                                self.num_dst, self.num_edges, self.num_isolated)

    @property
    def degrees(self) -> List[Tuple[int, int]]:
        """``(shared, remaining)`` degree of each block."""
        return [(int(b.shared.numel()), int(b.src.shape[1])) for b in self.blocks]

    def __repr__(self) -> str:
        return (f"NeighborhoodPlan(num_src={self.num_src}, num_dst={self.num_dst}, "
                f"num_edges={self.num_edges}, blocks={self.degrees}, isolated={self.num_isolated})")


# --------------------------------------------------------------------------- attention
_CHUNK_ELEMS = 1 << 20  # gathered elements per chunk (4 MiB of float32): bounds temporaries, few ops


def _chunks(n: int, per_row: int):
    step = max(1, _CHUNK_ELEMS // max(per_row, 1))
    return range(0, n, step), step


def _block_forward(q2: Tensor, k2: Tensor, v2: Tensor, log_w: Optional[Tensor], b: Block, out: Tensor
                   ) -> Tensor:
    """Forward of one block on channel-major ``q2 (N_dst, D, M)``, ``k2 (N_src, D, M)``, ``v2 (N_src, Dv, M)``.

    ``M`` = batch x heads is innermost so that the reductions over ``D`` and over
    the neighbours are vectorised along it. Writes the block's outputs into ``out``
    (rows ``b.dst``) and returns its attention weights, ``(M, n, S + K)`` for a
    shared block and ``(n, K, M)`` for a plain one.
    """
    n, K = b.src.shape
    S = b.shared.numel()
    D, M = q2.shape[1], q2.shape[2]
    Dv = v2.shape[1]
    if S == 0:
        alphas = []
        starts, step = _chunks(n, K * M * max(D, Dv))
        for i in starts:
            dst, src = b.dst[i:i + step], b.src[i:i + step]
            c = dst.numel()
            flat = src.reshape(-1)
            s = (k2.index_select(0, flat).view(c, K, D, M) * q2.index_select(0, dst).unsqueeze(1)).sum(2)
            if log_w is not None:
                s = s + log_w.index_select(0, flat).view(c, K, 1)
            a = dense_edge_attention(s, dim=1)  # (c, K, M)
            o = (v2.index_select(0, flat).view(c, K, Dv, M) * a.unsqueeze(2)).sum(1)
            out.index_copy_(0, dst, o)
            alphas.append(a)
        return torch.cat(alphas, 0)
    # shared sources: one batched matmul over the M = batch x heads slices
    qd = q2.index_select(0, b.dst)  # (n, D, M)
    qT = qd.permute(2, 0, 1).contiguous()  # (M, n, D)
    ks = k2.index_select(0, b.shared).permute(2, 1, 0).contiguous()  # (M, D, S)
    vs = v2.index_select(0, b.shared).permute(2, 0, 1).contiguous()  # (M, S, Dv)
    s = torch.bmm(qT, ks)  # (M, n, S)
    if log_w is not None:
        s = s + log_w.index_select(0, b.shared).view(1, 1, S)
    if K > 0:
        flat = b.src.reshape(-1)
        sp = (k2.index_select(0, flat).view(n, K, D, M) * qd.unsqueeze(1)).sum(2)  # (n, K, M)
        if log_w is not None:
            sp = sp + log_w.index_select(0, flat).view(n, K, 1)
        s = torch.cat([s, sp.permute(2, 0, 1)], dim=2)  # (M, n, S + K)
    a = dense_edge_attention(s, dim=2)
    o = torch.bmm(a[:, :, :S], vs).permute(1, 2, 0)  # (n, Dv, M)
    if K > 0:
        vg = v2.index_select(0, b.src.reshape(-1)).view(n, K, Dv, M)
        o = o + (vg * a[:, :, S:].permute(1, 2, 0).unsqueeze(2)).sum(1)
    out.index_copy_(0, b.dst, o.contiguous())
    return a


def _block_backward(q2, k2, v2, b: Block, a: Tensor, g2: Tensor, dq: Tensor, dk: Tensor, dv: Tensor,
                    contrib: Tensor) -> None:
    """Gradients of one block; softmax backward ``ds = a (da - sum_j a da)``.

    ``dq`` rows of the block's targets are written; the per-edge key/value gradient
    rows of non-shared edges go to ``contrib`` ``(n * K, (D + Dv) * M)`` (summed into
    sources later by one sparse matmul); shared sources are added to the 2-D
    ``dk``/``dv`` ``(N_src, D * M)`` views directly.
    """
    n, K = b.src.shape
    S = b.shared.numel()
    D, M = q2.shape[1], q2.shape[2]
    Dv = v2.shape[1]
    if S == 0:
        starts, step = _chunks(n, K * M * max(D, Dv))
        for i in starts:
            dst, src = b.dst[i:i + step], b.src[i:i + step]
            ac = a[i:i + step]  # (c, K, M)
            c = dst.numel()
            flat = src.reshape(-1)
            rows = contrib[i * K:(i + c) * K]
            gc = g2.index_select(0, dst).unsqueeze(1)  # (c, 1, Dv, M)
            da = (v2.index_select(0, flat).view(c, K, Dv, M) * gc).sum(2)  # (c, K, M)
            torch.mul(ac.unsqueeze(2), gc, out=rows[:, D * M:].view(c, K, Dv, M))
            ds = ac * (da - (ac * da).sum(1, keepdim=True))
            dsu = ds.unsqueeze(2)
            dq.index_copy_(0, dst, (k2.index_select(0, flat).view(c, K, D, M) * dsu).sum(1))
            torch.mul(dsu, q2.index_select(0, dst).unsqueeze(1), out=rows[:, :D * M].view(c, K, D, M))
        return
    gd = g2.index_select(0, b.dst)  # (n, Dv, M)
    qd = q2.index_select(0, b.dst)  # (n, D, M)
    gT = gd.permute(2, 0, 1).contiguous()  # (M, n, Dv)
    qT = qd.permute(2, 0, 1).contiguous()  # (M, n, D)
    ks = k2.index_select(0, b.shared).permute(2, 0, 1).contiguous()  # (M, S, D)
    vsT = v2.index_select(0, b.shared).permute(2, 1, 0).contiguous()  # (M, Dv, S)
    da = torch.bmm(gT, vsT)  # (M, n, S)
    if K > 0:
        flat = b.src.reshape(-1)
        dap = (v2.index_select(0, flat).view(n, K, Dv, M) * gd.unsqueeze(1)).sum(2)  # (n, K, M)
        da = torch.cat([da, dap.permute(2, 0, 1)], dim=2)
    ds = a * (da - (a * da).sum(2, keepdim=True))  # (M, n, S + K)
    a_s = a[:, :, :S].transpose(1, 2).contiguous()
    ds_s = ds[:, :, :S].contiguous()
    # shared sources are distinct, so accumulate with select + copy (CPU index_add_ goes through a slow,
    # badly threaded scatter_add_)
    dv.index_copy_(0, b.shared, dv.index_select(0, b.shared)
                   + torch.bmm(a_s, gT).permute(1, 2, 0).reshape(S, Dv * M))
    dk.index_copy_(0, b.shared, dk.index_select(0, b.shared)
                   + torch.bmm(ds_s.transpose(1, 2), qT).permute(1, 2, 0).reshape(S, D * M))
    dqd = torch.bmm(ds_s, ks).permute(1, 2, 0)  # (n, D, M)
    if K > 0:
        ap = a[:, :, S:].permute(1, 2, 0).unsqueeze(2)  # (n, K, 1, M)
        dsp = ds[:, :, S:].permute(1, 2, 0).unsqueeze(2)
        torch.mul(ap, gd.unsqueeze(1), out=contrib[:, D * M:].view(n, K, Dv, M))
        dqd = dqd + (k2.index_select(0, flat).view(n, K, D, M) * dsp).sum(1)
        torch.mul(dsp, qd.unsqueeze(1), out=contrib[:, :D * M].view(n, K, D, M))
    dq.index_copy_(0, b.dst, dqd.contiguous())


def _planned_forward(q2: Tensor, k2: Tensor, v2: Tensor, log_w: Optional[Tensor], plan: "NeighborhoodPlan"
                     ) -> List[Tensor]:
    """``[out (N_dst, Dv, M), attention weights of every block]``."""
    shape = (plan.num_dst, v2.shape[1], v2.shape[2])
    out = v2.new_zeros(shape) if plan.num_isolated else v2.new_empty(shape)
    return [out, *[_block_forward(q2, k2, v2, log_w, b, out) for b in plan.blocks]]


def _planned_backward(g2: Tensor, q2: Tensor, k2: Tensor, v2: Tensor, alphas: List[Tensor],
                      plan: "NeighborhoodPlan") -> List[Tensor]:
    """``[dq, dk, dv]`` from the saved attention weights."""
    dq = torch.zeros_like(q2) if plan.num_isolated else torch.empty_like(q2)
    D, M, Dv = q2.shape[1], q2.shape[2], v2.shape[1]
    dk, dv = torch.zeros_like(k2), torch.zeros_like(v2)
    dk2, dv2 = dk.view(dk.shape[0], -1), dv.view(dv.shape[0], -1)
    sizes = [b.src.numel() for b in plan.blocks]
    contrib = q2.new_empty(sum(sizes), (D + Dv) * M)
    off = 0
    for b, a, size in zip(plan.blocks, alphas, sizes):
        _block_backward(q2, k2, v2, b, a, g2, dq, dk2, dv2, contrib[off:off + size])
        off += size
    if contrib.shape[0] > 0:
        summed = plan.source_csr(contrib.dtype) @ contrib  # (N_src, (D + Dv) * M)
        dk2.add_(summed[:, :D * M])
        dv2.add_(summed[:, D * M:])
    return [dq, dk, dv]


# The fused kernels as custom operators (the plan travels flattened, see NeighborhoodPlan.flat),
# so that torch.compile calls them as they are: traced, the gathers' backward became
# element-wise atomic scatter loops (measured 4x slower than eager on CPU).
@torch.library.custom_op("pyg_lie::s2_planned_attention", mutates_args=())
def _planned_op(q2: Tensor, k2: Tensor, v2: Tensor, log_w: Optional[Tensor], plan_tensors: List[Tensor],
                plan_sizes: List[int]) -> List[Tensor]:
    return _planned_forward(q2, k2, v2, log_w, NeighborhoodPlan.from_flat(plan_tensors, plan_sizes))


@_planned_op.register_fake
def _(q2, k2, v2, log_w, plan_tensors, plan_sizes):
    M, Dv = v2.shape[2], v2.shape[1]
    out = [v2.new_empty(plan_sizes[1], Dv, M)]
    for dst, shared, src in zip(*[iter(plan_tensors[3:])] * 3):
        n, K, S = dst.shape[0], src.shape[1], shared.shape[0]
        out.append(v2.new_empty(n, K, M) if S == 0 else v2.new_empty(M, n, S + K))
    return out


@torch.library.custom_op("pyg_lie::s2_planned_attention_backward", mutates_args=())
def _planned_backward_op(g2: Tensor, q2: Tensor, k2: Tensor, v2: Tensor, alphas: List[Tensor],
                         plan_tensors: List[Tensor], plan_sizes: List[int]) -> List[Tensor]:
    return _planned_backward(g2.contiguous(), q2, k2, v2, alphas, NeighborhoodPlan.from_flat(plan_tensors, plan_sizes))


@_planned_backward_op.register_fake
def _(g2, q2, k2, v2, alphas, plan_tensors, plan_sizes):
    return [torch.empty_like(q2), torch.empty_like(k2), torch.empty_like(v2)]


def _planned_setup(ctx, inputs, output) -> None:
    q2, k2, v2, _, plan_tensors, ctx.plan_sizes = inputs
    ctx.num_alphas, ctx.num_plan = len(output) - 1, len(plan_tensors)
    ctx.save_for_backward(q2, k2, v2, *output[1:], *plan_tensors)


def _planned_grad(ctx, grads: List[Tensor]):
    q2, k2, v2, *rest = ctx.saved_tensors
    alphas, plan_tensors = rest[:ctx.num_alphas], rest[ctx.num_alphas:]
    dq, dk, dv = _planned_backward_op(grads[0], q2, k2, v2, alphas, plan_tensors, ctx.plan_sizes)
    return dq, dk, dv, None, [None] * ctx.num_plan, None


def _no_double_backward(ctx, grads):
    raise RuntimeError("the fused S^2 attention kernel is once differentiable; for second derivatives "
                       "use optimized_kernel=False (S2NeighborhoodAttention) or "
                       "planned_attention(..., fused=False), whose composite path supports them")


_planned_op.register_autograd(_planned_grad, setup_context=_planned_setup)
_planned_backward_op.register_autograd(_no_double_backward, setup_context=lambda ctx, inputs, output: None)
float32_under_autocast(_planned_op, _planned_backward_op)


def fused_planned_attention(q2: Tensor, k2: Tensor, v2: Tensor, log_w: Optional[Tensor],
                            plan: "NeighborhoodPlan") -> Tensor:
    """Fused forward and hand-written backward on channel-major ``q2 (N_dst, D, M)``,
    ``k2 (N_src, D, M)``, ``v2 (N_src, Dv, M)``; saves only q, k, v and the attention
    weights; no gradient for ``log_w``. Returns ``(N_dst, Dv, M)``."""
    tensors, sizes = plan.flat()
    return _planned_op(q2.contiguous(), k2.contiguous(), v2.contiguous(), log_w, tensors, sizes)[0]


def _composite(q2, k2, v2, log_w, plan, need_weights):
    """Same maths with plain autograd ops (used for torch.compile, weights, double backward)."""
    outs, alphas = [], []
    M, D, Dv = q2.shape[1], q2.shape[2], v2.shape[2]
    for b in plan.blocks:
        n, K = b.src.shape
        src = torch.cat([b.shared.unsqueeze(0).expand(n, -1), b.src], 1)
        eid = torch.cat([b.eid_shared, b.eid], 1)
        Kt = src.shape[1]
        flat = src.reshape(-1)
        s = (k2.index_select(0, flat).view(n, Kt, M, D) * q2.index_select(0, b.dst).unsqueeze(1)).sum(-1)
        if log_w is not None:
            s = s + log_w.index_select(0, flat).view(n, Kt, 1)
        a = dense_edge_attention(s, dim=1)
        outs.append((v2.index_select(0, flat).view(n, Kt, M, Dv) * a.unsqueeze(-1)).sum(1))
        if need_weights:
            alphas.append((eid.reshape(-1), a.reshape(n * Kt, M)))
    outs.append(v2.new_zeros(plan.num_isolated, M, Dv))
    out = torch.cat(outs, 0).index_select(0, plan.inv)
    alpha = None
    if need_weights:
        alpha = q2.new_zeros(plan.num_edges, M)
        for eid, a in alphas:
            alpha = alpha.index_copy(0, eid, a)
    return out, alpha


def planned_attention(q: Tensor, k: Tensor, v: Tensor, log_w: Optional[Tensor], plan: NeighborhoodPlan,
                      need_weights: bool = False, fused: Optional[bool] = None) -> Tuple[Tensor, Optional[Tensor]]:
    r"""Quadrature-weighted neighbourhood softmax attention on a :class:`NeighborhoodPlan`.

    .. math::
        y_i = \sum_{j \in N(i)} \frac{w_j \exp(q_i \cdot k_j)}{\sum_{l \in N(i)} w_l \exp(q_i \cdot k_l)} v_j

    computed as a softmax of ``q_i . k_j + log w_j`` over each neighbourhood.

    Args:
        q: ``(N_dst, *, H, D)`` queries (already scaled).
        k: ``(N_src, *, H, D)`` keys.
        v: ``(N_src, *, H, Dv)`` values.
        log_w: ``(N_src,)`` log quadrature weights of the sources, or ``None``.
        plan: the grouped neighbourhoods.
        need_weights: also return the attention weights in edge order ``(E, *, H)``.
        fused: use the fused custom operator with its hand-written backward
            (default: unless returning weights, or ``log_w`` needs a gradient). It is
            once-differentiable; the composite path supports double backward.

    Returns:
        ``(N_dst, *, H, Dv)`` output (zeros for targets without neighbours) and
        optionally the ``(E, *, H)`` attention weights.
    """
    lead = q.shape[1:-1]
    q2 = q.reshape(q.shape[0], -1, q.shape[-1])
    k2 = k.reshape(k.shape[0], -1, k.shape[-1])
    v2 = v.reshape(v.shape[0], -1, v.shape[-1])
    if fused is None:
        fused = not (need_weights or (log_w is not None and log_w.requires_grad))
    if fused:
        # channel-major (N, D, M) so that every reduction runs over a non-innermost dim
        out = fused_planned_attention(q2.transpose(1, 2), k2.transpose(1, 2), v2.transpose(1, 2), log_w, plan)
        out, alpha = out.transpose(1, 2), None
    else:
        out, alpha = _composite(q2, k2, v2, log_w, plan, need_weights)
    out = out.view(out.shape[0], *lead, v.shape[-1])
    if alpha is not None:
        alpha = alpha.view(alpha.shape[0], *lead)
    return out, alpha
