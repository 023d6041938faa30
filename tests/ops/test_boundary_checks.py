"""The operators' entry points check every size for int64 overflow and every CSR pointer for a
start at 0, an end at E and monotonicity, for every dtype, before a kernel reads the data:
bad input is a ValueError naming the argument, never a crash or weights above 1."""
import pytest
import torch

import pyg_lie.ops as ops

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
BAD_POINTERS = [[10 ** 12, 10 ** 12 + 2, 10 ** 12 + 5], [2, 4, 7], [0, 5, 4], [0, 2, 6], [-1, 2, 5], [0, 9, 5]]


def test_complete_edges_count_overflow_raises():
    with pytest.raises(ValueError, match="start describes graphs"):
        ops.complete_edges(torch.tensor([0, 2 ** 32]))
    with pytest.raises(ValueError, match="start describes graphs"):
        ops.complete_edges(torch.tensor([0, 2 ** 31, 2 ** 32, 3 * 2 ** 31]))
    with pytest.raises(ValueError, match="start must begin at 0"):
        ops.complete_edges(torch.tensor([1, 3]))
    with pytest.raises(ValueError, match="non-decreasing"):
        ops.complete_edges(torch.tensor([0, 3, 2]))
    with pytest.raises(ValueError, match="start must hold integer"):
        ops.complete_edges(torch.tensor([0.0, 2.0]))


def test_native_complete_edges_checks_the_count_too():
    from pyg_lie.ops import _native
    if not _native.available():
        pytest.skip("native kernels not built")
    with pytest.raises(ValueError, match="start describes graphs"):
        _native.complete_edges(torch.tensor([0, 2 ** 32]))


def test_complete_edges_valid_equals_reference():
    from pyg_lie.ops.graph import composite_complete_edges
    start = torch.tensor([0, 3, 3, 7, 8])
    out = ops.complete_edges(start)
    assert torch.equal(out, composite_complete_edges(start))
    assert out.shape == (2, 9 + 16 + 1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ptr", BAD_POINTERS)
@pytest.mark.parametrize("dim", [0, 1])
def test_segment_softmax_bad_pointer_raises_for_every_dtype(dtype, ptr, dim):
    E = 7 if ptr == [2, 4, 7] else 5  # every pointer is wrong for these edges
    s = torch.randn(3, E, dtype=torch.float64).to(dtype)
    s = s if dim == 1 else s.t().contiguous()
    with pytest.raises(ValueError, match="ptr"):
        ops.segment_softmax(s, torch.tensor(ptr), dim)


@pytest.mark.parametrize("dtype", FLOATS)
def test_segment_softmax_valid_pointer_every_dtype_matches_reference(dtype):
    torch.manual_seed(0)
    s64 = torch.randn(3, 7, dtype=torch.float64)
    ptr = torch.tensor([0, 2, 2, 7])
    w = ops.segment_softmax(s64.to(dtype), ptr)
    ref = torch.cat([torch.softmax(s64[:, a:b], 1) for a, b in ((0, 2), (2, 7))], 1)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-6, torch.float64: 1e-12}[dtype]
    assert torch.allclose(w.double(), ref, atol=tol, rtol=0)


def test_segment_softmax_pointer_dtypes_and_shapes():
    s = torch.randn(2, 4)
    with pytest.raises(TypeError, match="ptr"):
        ops.segment_softmax(s, torch.tensor([0.0, 4.0]))
    with pytest.raises(ValueError, match="ptr"):
        ops.segment_softmax(s, torch.zeros(0, dtype=torch.long))
    with pytest.raises(TypeError, match="s must be a floating"):
        ops.segment_softmax(torch.ones(2, 4, dtype=torch.long), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="dim"):
        ops.segment_softmax(s, torch.tensor([0, 4]), dim=2)
    w = ops.segment_softmax(s, torch.tensor([0, 4], dtype=torch.int32))
    assert torch.allclose(w, torch.softmax(s, 1))


def test_expand_edges_size_overflow_and_pattern():
    ptr, col = torch.tensor([0, 1]), torch.tensor([0])
    with pytest.raises(ValueError, match=r"E K\^2"):
        ops.expand_edges(ptr, col, 2 ** 40)
    with pytest.raises(ValueError, match="K must be a positive int"):
        ops.expand_edges(ptr, col, 0)
    with pytest.raises(ValueError, match="ptr must run from 0"):
        ops.expand_edges(torch.tensor([0, 3]), col, 2)
    with pytest.raises(ValueError, match="col holds node index"):
        ops.expand_edges(ptr, torch.tensor([2 ** 62]), 4)
    out = ops.expand_edges(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), 2)
    from pyg_lie.ops.graph import composite_expand_edges
    assert torch.equal(out, composite_expand_edges(torch.tensor([0, 1, 2]), torch.tensor([1, 0]), 2))


def test_csr_transpose_and_scan_check_their_inputs():
    with pytest.raises(ValueError, match="col holds node index 5"):
        ops.csr_transpose(torch.tensor([0, 1, 3]), torch.tensor([0, 5, 1]))
    with pytest.raises(ValueError, match="crow must run from 0"):
        ops.csr_transpose(torch.tensor([0, 1, 9]), torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match="num_nodes"):
        ops.csr_scan(torch.tensor([0]), torch.tensor([0]), -1)
    with pytest.raises(ValueError, match="src and dst"):
        ops.csr_scan(torch.tensor([0, 1]), torch.tensor([0]), 2)
    from pyg_lie.ops.graph import composite_csr_scan
    crow, info = composite_csr_scan(torch.tensor([1, 0]), torch.tensor([0, 1]), 2)
    assert info[0] == 1 and crow.tolist() == [0, 1, 2]
    crow, info = composite_csr_scan(torch.tensor([1, 0]), torch.tensor([0, 0]), 2)
    assert info[0] == 0  # sources out of order


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_products_check_the_pattern(dtype):
    A, B = torch.randn(2, 1, 4, dtype=dtype), torch.randn(3, 1, 4, dtype=dtype)
    with pytest.raises(ValueError, match="col must hold indices in"):
        ops.sddmm(A, B, torch.tensor([0, 1, 2]), torch.tensor([5, 0]))
    with pytest.raises(ValueError, match="crow must be a CSR row pointer"):
        ops.sddmm(A, B, torch.tensor([0, 3, 2]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="crow must have one entry more"):
        ops.sddmm(A, B, torch.tensor([0, 2]), torch.tensor([1, 0]))
    w = torch.randn(1, 2, dtype=dtype)
    with pytest.raises(ValueError, match="crow must be a CSR row pointer"):
        ops.spmm(w, B, torch.tensor([2, 4, 2]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="wperm"):
        ops.spmm_permuted(w, torch.tensor([0, 7]), B, torch.tensor([0, 1, 2]), torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="transposed pattern"):
        ops.sddmm(A, B, torch.tensor([0, 1, 2]), torch.tensor([1, 0]), crow_t=torch.tensor([0, 1, 2, 2]))
    with pytest.raises(ValueError, match="perm_t"):
        ops.sddmm(A, B, torch.tensor([0, 1, 2]), torch.tensor([1, 0]), torch.tensor([0, 1, 2, 2]),
                  torch.tensor([1, 0]), torch.tensor([1, 9]), torch.tensor([1, 0]))
    # valid patterns give the dense reference
    crow, col = torch.tensor([0, 1, 3]), torch.tensor([2, 0, 1])
    s = ops.sddmm(A, B, crow, col)
    ref = torch.stack([(A[0] * B[2]).sum(-1), (A[1] * B[0]).sum(-1), (A[1] * B[1]).sum(-1)], 1)
    assert torch.allclose(s, ref)
    wv = torch.randn(1, 3, dtype=dtype)
    out = ops.spmm(wv, B, crow, col)
    assert torch.allclose(out[0], wv[0, 0] * B[2]) and torch.allclose(out[1], wv[0, 1] * B[0] + wv[0, 2] * B[1])


def test_se2_relative_log_checks_cut_and_indices():
    from pyg_lie.groups import SE2
    g = SE2().random(3)
    ei = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="cut_below"):
        ops.se2_relative_log(g, ei, float("nan"))
    with pytest.raises(ValueError, match="edge_index"):
        ops.se2_relative_log(g, torch.tensor([[0, 3], [1, 2]]))
    assert torch.isfinite(ops.se2_relative_log(g, ei, -3.0)).all()


@pytest.mark.parametrize("dtype", FLOATS)
def test_registered_segment_softmax_checks_cpu_pointers_too(dtype):
    """A direct ``torch.ops.pyg_lie`` call (and so a compiled graph) never hands a shifted
    pointer to ``segment_reduce(unsafe=True)`` (a segmentation fault in float64) or the kernel."""
    s = torch.randn(1, 5, dtype=torch.float64).to(dtype)
    for ptr in ([10 ** 12, 10 ** 12 + 2, 10 ** 12 + 5], [2, 4, 5], [0, 9, 5]):
        with pytest.raises(ValueError, match="ptr"):
            torch.ops.pyg_lie.segment_softmax(s, torch.tensor(ptr), 1)
        with pytest.raises(ValueError, match="ptr"):
            torch.ops.pyg_lie.segment_softmax_backward(s, s, torch.tensor(ptr), 1)


@pytest.mark.parametrize("bad", [0, 2.5, True])
def test_mlp_chunk_must_be_a_positive_int(bad):
    x = torch.randn(5, 3, dtype=torch.float64)
    params = [torch.randn(4, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64),
              torch.randn(2, 4, dtype=torch.float64), torch.randn(2, dtype=torch.float64)]
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        ops.mlp(x, params, chunk=bad)
    assert torch.allclose(ops.mlp(x, params, chunk=2), ops.mlp(x, params))
