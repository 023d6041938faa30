"""The operator layer: each primitive is one ``torch.library`` operator with a composite (pure
torch) implementation that defines its semantics, the native C kernels on CPU where they apply,
and a Triton kernel (CUDA, or CPU tensors under Triton's interpreter).

* :class:`CSRStructure`: a graph's edges sorted by target, with its row pointer and (built on
  first use) the transposed pattern; the type every structure-level function takes
  (:mod:`pyg_lie.ops.csr`).
* :func:`csr_attention` / :func:`csr_softmax_attention`: fused softmax attention on
  target-sorted CSR edges (``torch.ops.pyg_lie.csr_attention`` and its backward); on a
  structure, :func:`csr_softmax_attention` also chooses the unfused steps where they win.
* :func:`csr_scores`, :func:`csr_aggregate`, :func:`csr_softmax`, :func:`csr_sddmm`,
  :func:`csr_spmm`, :func:`to_edge_order`: the steps of attention on a structure.
* :func:`mlp` / :func:`edge_mlp`: per-edge ``Linear``/``SiLU`` MLPs, shared or one per head
  (``torch.ops.pyg_lie.mlp`` and its backward).
* :func:`sddmm`, :func:`spmm`, :func:`spmm_permuted`, :func:`segment_softmax`,
  :func:`dense_softmax`: the unfused products and softmaxes on CSR edges
  (:mod:`pyg_lie.ops.sparse`).
* :func:`sort_keys`, :func:`argsort_keys`, :func:`csr_scan`, :func:`csr_transpose`,
  :func:`expand_edges`, :func:`complete_edges`, :func:`radius_graph`: graph construction
  (:mod:`pyg_lie.ops.graph`).
* :func:`se2_relative_log`: relative logarithms of SE(2) elements on edges
  (:mod:`pyg_lie.ops.lie`).

Which implementation runs is chosen inside this package, per call, from the device, the inputs
and the selection of :func:`set_backend` (``auto``, ``composite``, ``native``, ``triton``; the
environment variable ``PYG_LIE_BACKEND`` sets it at import; :func:`backend` overrides it in
one thread); :func:`dispatch_counts` tells which ran. The layers above call one function per
primitive and never choose a kernel. Every operator is differentiable twice: the differentiable backward is written in torch operations
and never re-enters the operator. See ``docs/ops.md``.
"""
from __future__ import annotations

from ._backend import (BACKENDS, backend, dispatch_counts, get_backend, native_available, reset_dispatch_counts,
                       serves, set_backend, triton_available)
from ._common import transpose_csr
from .attention import composite_attention, composite_attention_backward, csr_attention
from .csr import (CSRStructure, csr_aggregate, csr_scores, csr_sddmm, csr_softmax, csr_softmax_attention, csr_spmm,
                  to_edge_order)
from .graph import (argsort_keys, complete_edges, csr_scan, csr_transpose, expand_edges, radius_graph,
                    sort_keys)
from .lie import se2_relative_log
from .mlp import composite_mlp, composite_mlp_backward, edge_mlp, mlp
from .sparse import dense_softmax, sddmm, segment_softmax, spmm, spmm_permuted, transposed_spmm

__all__ = ["BACKENDS", "backend", "set_backend", "get_backend", "serves", "dispatch_counts", "reset_dispatch_counts",
           "triton_available", "native_available", "csr_attention", "csr_softmax_attention", "composite_attention",
           "CSRStructure", "csr_scores", "csr_aggregate", "csr_sddmm", "csr_spmm", "csr_softmax", "to_edge_order",
           "dense_softmax",
           "composite_attention_backward", "mlp", "edge_mlp", "composite_mlp", "composite_mlp_backward",
           "transpose_csr", "sddmm", "spmm", "spmm_permuted", "transposed_spmm", "segment_softmax", "sort_keys",
           "argsort_keys", "csr_scan", "csr_transpose", "expand_edges", "complete_edges", "radius_graph",
           "se2_relative_log"]
