"""The operator layer: each primitive is one ``torch.library`` operator with a composite (pure
torch) implementation that defines its semantics, the native C kernels on CPU where they apply,
and a Triton kernel (CUDA, or CPU tensors under Triton's interpreter).

* :func:`csr_attention` / :func:`csr_softmax_attention`: fused softmax attention on
  target-sorted CSR edges (``torch.ops.pyg_lie.csr_attention`` and its backward).
* :func:`mlp` / :func:`edge_mlp`: per-edge ``Linear``/``SiLU`` MLPs, shared or one per head
  (``torch.ops.pyg_lie.mlp`` and its backward).
* :func:`sddmm`, :func:`spmm`, :func:`spmm_permuted`, :func:`segment_softmax`: the unfused
  products and softmax on CSR edges (:mod:`pyg_lie.ops.sparse`).
* :func:`sort_keys`, :func:`argsort_keys`, :func:`csr_scan`, :func:`csr_transpose`,
  :func:`expand_edges`, :func:`complete_edges`, :func:`radius_graph`: graph construction
  (:mod:`pyg_lie.ops.graph`).
* :func:`se2_relative_log`: relative logarithms of SE(2) elements on edges
  (:mod:`pyg_lie.ops.lie`).

Which implementation runs is chosen per call from the device and :func:`set_backend`
(``auto``, ``composite``, ``native``, ``triton``; the environment variable
``PYG_LIE_BACKEND`` sets it at import); :func:`dispatch_counts` tells which ran. Every
operator is differentiable twice: the differentiable backward is written in torch operations
and never re-enters the operator. See ``docs/ops.md``.
"""
from __future__ import annotations

from ._backend import (BACKENDS, backend, dispatch_counts, get_backend, native_available, reset_dispatch_counts,
                       serves, set_backend, triton_available)
from ._common import transpose_csr
from .attention import composite_attention, composite_attention_backward, csr_attention, csr_softmax_attention
from .graph import (argsort_keys, complete_edges, csr_scan, csr_transpose, expand_edges, radius_graph,
                    sort_keys)
from .lie import se2_relative_log
from .mlp import composite_mlp, composite_mlp_backward, edge_mlp, mlp
from .sparse import sddmm, segment_softmax, spmm, spmm_permuted, transposed_spmm

__all__ = ["BACKENDS", "backend", "set_backend", "get_backend", "serves", "dispatch_counts", "reset_dispatch_counts",
           "triton_available", "native_available", "csr_attention", "csr_softmax_attention", "composite_attention",
           "composite_attention_backward", "mlp", "edge_mlp", "composite_mlp", "composite_mlp_backward",
           "transpose_csr", "sddmm", "spmm", "spmm_permuted", "transposed_spmm", "segment_softmax", "sort_keys",
           "argsort_keys", "csr_scan", "csr_transpose", "expand_edges", "complete_edges", "radius_graph",
           "se2_relative_log"]
