"""Odd but possible inputs to the public entry points end in a ValueError / TypeError that
names the argument, or in the correct result: never a crash, a hang or silent garbage.

Cases that crashed or hung the interpreter run in a subprocess with a time limit, so that a
regression fails its test instead of killing the test run.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pyg_lie.groups import SE2, get_group
from pyg_lie.nn.lie_self_attention import LieSelfAttention
from pyg_lie.nn.lifted_edges import expand_edges

PRELUDE = """
import torch, pytest
from torch_geometric import EdgeIndex, Index
from pyg_lie.groups import SE2, get_group
from pyg_lie.nn.lie_self_attention import LieSelfAttention
torch.manual_seed(0)

def se2_graph(N=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    g = SE2().random(N, generator=gen) if 'generator' in SE2().random.__code__.co_varnames else SE2().random(N)
    ei = torch.cartesian_prod(torch.arange(N), torch.arange(N)).t().flip(0).contiguous()  # all pairs, sorted
    return g, ei
"""


def run_case(body: str, timeout: float = 120) -> str:
    """Run ``body`` in a fresh interpreter; fail on a crash, a hang or a failed assertion."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint('CASE-DONE')\n"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the case hung (no end within {timeout} s)")
    assert r.returncode == 0 and "CASE-DONE" in r.stdout, (
        f"exit status {r.returncode} (negative: killed by a signal)\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return r.stdout


# --------------------------------------------------------------- 1: radius graph hang
def test_radius_graph_extent_overflow_does_not_hang():
    run_case("""
    from pyg_lie.neighbors import radius_graph
    from pyg_lie.models import LieTransformer

    def reference(pos, r, batch, loop):
        d2 = ((pos[:, None] - pos[None]) ** 2).sum(-1)  # float64 differences: inf where they overflow
        keep = (d2 <= r * r) & (batch[:, None] == batch[None])
        if not loop:
            keep.fill_diagonal_(False)
        tgt, src = keep.nonzero(as_tuple=True)
        return torch.stack([src, tgt])

    pos = torch.tensor([[1e308], [-1e308]], dtype=torch.float64)
    for loop in (False, True):
        assert torch.equal(radius_graph(pos, 1.0, loop=loop), reference(pos, 1.0, torch.zeros(2), loop))
    pos = torch.tensor([[1e308, 0, 0], [-1e308, 0, 0], [0, 0, 0], [0.5, 0, 0], [1e308, 1e308, -1e308],
                        [-1e308, 5, 5], [-1e308, 5, 5.5]], dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    for loop in (False, True):
        assert torch.equal(radius_graph(pos, 1.0, batch, loop=loop), reference(pos, 1.0, batch, loop))
    m = LieTransformer("T2", 1, 8, 1, num_layers=1, heads=2, radius=1.0).double()
    out = m(torch.ones(2, 1, dtype=torch.float64), torch.tensor([[1e308, 0], [-1e308, 0]], dtype=torch.float64))
    assert torch.isfinite(out).all()
    """, timeout=90)


# ------------------------------------------- 2: EquivariantSelfAttention, edge_index range
def test_vit_attention_edge_index_out_of_range():
    run_case("""
    from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group as vit_group
    for fused in ("auto", False):
        m = EquivariantSelfAttention(FieldType.regular(vit_group("C4"), 4), heads=2, fused=fused)
        N = 10
        x = torch.randn(N, m.field_type.dim)
        ei = torch.cartesian_prod(torch.arange(N), torch.arange(N)).t().flip(0).contiguous()
        ref = m(x, ei)
        assert torch.isfinite(ref).all()
        for bad in (10 ** 9, -10 ** 9, 67, N, -1):
            e = ei.clone()
            e[0, 5] = bad
            with pytest.raises(ValueError, match="edge_index"):
                m(x, e)
        assert torch.equal(m(x, ei), ref)
        with pytest.raises(ValueError, match="x must have shape"):
            m(x[:, :3], ei)
    """)


# ------------------------------------------------------------- 3: edge_attention's ptr
def test_edge_attention_bad_ptr():
    run_case("""
    from pyg_lie.nn.attention_core import edge_attention
    idx = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 3])
    good = torch.tensor([0, 2, 5, 7, 10])
    for dtype in (torch.float32, torch.float64):
        for heads_first in (False, True):
            score = (torch.randn(4, 10, dtype=dtype).t() if heads_first else torch.randn(10, 4, dtype=dtype))
            score.requires_grad_(True)
            w = edge_attention(score, idx, 4, ptr=good)
            torch.testing.assert_close(torch.zeros(4, 4, dtype=dtype).index_add_(0, idx, w),
                                       torch.ones(4, 4, dtype=dtype))
            w.sum().backward()
            for bad in ([0, 2, 5, 7, 10 ** 9], [0, 2, -5, 7, 10], [0, 2, 5, 7, 9], [1, 2, 5, 7, 10],
                        [0, 5, 2, 7, 10], [0, 2, 5, 7, 10, 12]):
                with pytest.raises(ValueError, match="ptr"):
                    edge_attention(score, idx, 4, ptr=torch.tensor(bad))
            with pytest.raises(ValueError, match="index"):
                edge_attention(score, idx[:5], 4, ptr=good)
    """)


# ------------------------------------ 4, 5: LieSelfAttention with a precomputed rel_log
def test_lie_self_attention_rel_log_with_bad_edges_or_shape():
    run_case("""
    m = LieSelfAttention(16, 32, "SE2", heads=4)
    g, ei = se2_graph()
    x = torch.randn(g.shape[0], 16)
    rl = SE2().relative_log(g, ei, one_sided_cut=True)
    ref = m(x, ei, g, rel_log=rl)
    torch.testing.assert_close(ref, m(x, ei, g))
    e = ei.clone()
    e[0, 5] = 10 ** 6
    with pytest.raises(ValueError, match="edge_index"):
        m(x, e, g, rel_log=rl)
    # rel_log of the wrong width or length: the layer's own check names rel_log (and below it,
    # the native boundary refuses it too); the same on the message-passing path
    for fused in ("auto", False):
        m.fused = fused
        for bad in (torch.randn(2_000_000, 2), torch.randn(rl.shape[0], 5), torch.randn(10, 3),
                    torch.randn(1, 3)):
            with pytest.raises(ValueError, match="rel_log"):
                m(x, ei, g, rel_log=bad)
    m.fused = "auto"
    assert torch.equal(m(x, ei, g, rel_log=rl), ref)
    """)


# ----------------------------------------------- 6: a CSRStructure of another graph
def test_csr_structure_of_another_graph():
    run_case("""
    from pyg_lie.ops import CSRStructure
    g, ei = se2_graph()
    N = g.shape[0]
    x = torch.randn(N, 16)
    other = torch.randint(0, 1000, (2, 500))
    other = other[:, torch.argsort(other[1] * 1000 + other[0])]
    for combine in ("multiplicative", "additive"):
        m = LieSelfAttention(16, 32, "SE2", heads=4, combine=combine)
        with pytest.raises(ValueError, match="csr"):
            m(x, ei, g, csr=CSRStructure.build(other, 10 ** 6))
        with pytest.raises(ValueError, match="csr"):
            CSRStructure.build(other, 10 ** 6).check(N, ei.shape[1])
    # made by hand with indices out of range or a bad pointer: refused when made
    s = CSRStructure.build(ei, N)
    with pytest.raises(ValueError, match="col"):
        CSRStructure(None, s.row, s.col + N, s.crow, N)
    crow = s.crow.clone()
    crow[3] = 10 ** 9
    with pytest.raises(ValueError, match="row pointer"):
        CSRStructure(None, s.row, s.col, crow, N)
    # the native kernels check what they read themselves
    from pyg_lie.ops import _native
    if _native.available():
        A = torch.randn(N, 2, 8)
        col = s.col.clone()
        col[7] = 10 ** 9
        with pytest.raises(ValueError):
            _native.csr_sddmm(A, A, s.crow, col)
        with pytest.raises(ValueError):
            _native.csr_spmm(torch.randn(2, col.numel()), A, s.crow, col)
        with pytest.raises(ValueError):
            _native.csr_attention(A, A, A, torch.randn(2, col.numel()), s.crow, col)
    """)


# -------------------------------------------------------- 7: EdgeIndex / Index anywhere
def test_edge_index_and_index_subclasses():
    run_case("""
    from pyg_lie.nn import lifted_edges as le
    from pyg_lie.nn.s2_attention_conv import S2AttentionConv
    from pyg_lie.nn.lie_algebra_attention import LieAlgebraAttention
    from pyg_lie.ops import argsort_keys, sort_keys
    from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group as vit_group
    g, ei = se2_graph()
    N = g.shape[0]
    E = EdgeIndex(ei, sparse_size=(N, N))
    G = SE2()
    torch.testing.assert_close(G.relative_log(g, E, one_sided_cut=True), G.relative_log(g, ei, one_sided_cut=True))
    base = torch.tensor([[0, 1, 0, 1], [0, 0, 1, 1]])
    assert torch.equal(le.expand_edges(EdgeIndex(base, sparse_size=(2, 2)), 2, 3), le.expand_edges(base, 2, 3))
    assert torch.equal(le.threshold_edges(E, g, G, 1.0), le.threshold_edges(ei, g, G, 1.0))
    batch = torch.tensor([0, 0, 1, 1, 1])
    assert torch.equal(le.full_graph(Index(batch, dim_size=2)), le.full_graph(batch))
    key = torch.randint(0, 100, (50,))
    assert torch.equal(sort_keys(Index(key)), sort_keys(key))
    assert all(torch.equal(a, b) for a, b in zip(argsort_keys(Index(key)), argsort_keys(key)))
    plan = S2AttentionConv.build_plan(E, N, N)
    ref = S2AttentionConv.build_plan(ei, N, N)
    assert plan.num_isolated == ref.num_isolated
    x = torch.randn(N, 16)
    for fused in (True, False):
        m = LieSelfAttention(16, 32, "SE2", heads=4, fused=fused)
        torch.testing.assert_close(m(x, E, g), m(x, ei, g))
    m = LieAlgebraAttention(16, 16, "SE2", heads=2)
    torch.testing.assert_close(m(x, E, g), m(x, ei, g))
    m = EquivariantSelfAttention(FieldType.regular(vit_group("C4"), 4), heads=2)
    xv = torch.randn(N, m.field_type.dim)
    torch.testing.assert_close(m(xv, E), m(xv, ei))
    """)


# ----------------------------------------------------------- 8: FakeTensorMode, meta
def test_fake_tensor_mode_and_meta_tensors():
    run_case("""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from pyg_lie.nn.lie_algebra_attention import LieAlgebraAttention
    from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group as vit_group
    g, ei = se2_graph()
    N = g.shape[0]
    x = torch.randn(N, 16)
    layers = [LieSelfAttention(16, 32, "SE2", heads=4), LieSelfAttention(16, 32, "SO3", heads=4),
              LieAlgebraAttention(16, 32, "SE2", heads=2)]
    vit = EquivariantSelfAttention(FieldType.regular(vit_group("C4"), 4), heads=2)
    xv = torch.randn(N, vit.field_type.dim)
    g3 = get_group("SO3").random(N)
    with FakeTensorMode(allow_non_fake_inputs=True):
        assert layers[0](x, ei, g).shape == (N, 32)
        assert layers[1](x, ei, g3).shape == (N, 32)
        assert layers[2](x, ei, g).shape[0] == N
        assert vit(xv, ei).shape == xv.shape
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fx, fei, fg = mode.from_tensor(x), mode.from_tensor(ei), mode.from_tensor(g)
        fx.requires_grad_(True)
        layers[0](fx, fei, fg).sum().backward()
        assert fx.grad.shape == x.shape
    m = LieSelfAttention(16, 32, "SE2", heads=4).to("meta")
    out = m(x.to("meta"), ei.to("meta"), g.to("meta"))
    assert out.shape == (N, 32) and out.device.type == "meta"
    """)


# ------------------------------------------------------------- 9: negative indices
@pytest.mark.parametrize("group,opts", [("SO3", {}), ("SE3", {}), ("SO2", {}), ("SE2", {"fused": False}),
                                        ("SO3", {"combine": "multiplicative"}), ("SO3", {"fused": False})])
def test_negative_indices_raise(group, opts):
    G = get_group(group)
    N = 9
    m = LieSelfAttention(8, 8, G, heads=2, **opts).double()
    g = G.random(N).double()
    x = torch.randn(N, 8, dtype=torch.float64)
    ei = torch.cartesian_prod(torch.arange(N), torch.arange(N)).t().flip(0).contiguous()
    m(x, ei, g)
    for bad in (-1, -N, N):
        e = ei.clone()
        e[0, 0] = bad
        with pytest.raises(ValueError, match="edge_index"):
            m(x, e, g)
        with pytest.raises(ValueError, match="edge_index"):
            G.relative_log(g, e)


# ----------------------------------------------- 10: narrow integer types of edge_index
@pytest.mark.parametrize("dtype,N", [(torch.int32, 50_000), (torch.uint8, 64), (torch.int16, 300)])
def test_narrow_edge_index_types(dtype, N):
    from pyg_lie.neighbors import radius_graph

    torch.manual_seed(0)
    G = SE2()
    g = G.random(N)
    pos = g[:, :2, 2]
    scale = (N / 2.0) ** 0.5
    pos = pos * scale / pos.abs().max()  # about 2 neighbours per unit disc
    g = g.clone()
    g[:, :2, 2] = pos
    ei = radius_graph(pos, 1.0, loop=True)
    perm = torch.randperm(ei.shape[1])  # unsorted: the keys are formed
    ei = ei[:, perm]
    m = LieSelfAttention(8, 8, "SE2", heads=2)
    x = torch.randn(N, 8)
    ref = m(x, ei, g)
    torch.testing.assert_close(m(x, ei.to(dtype), g), ref)


# ------------------------------------------------------------- 11: expand_edges' K
def test_expand_edges_checks_k_and_order():
    ei = torch.tensor([[0, 1, 0, 1], [0, 0, 1, 1]])
    for K in (-1, 0, 1.5, None):
        with pytest.raises(ValueError, match="K"):
            expand_edges(ei, 2, K)
    with pytest.raises(ValueError, match="edge_index"):
        expand_edges(torch.tensor([[0, 1], [0, 5]]), 2, 2)
    with pytest.raises(ValueError, match="edge_index"):
        expand_edges(torch.tensor([[0, 1], [0, -1]]), 2, 2)
    with pytest.raises(ValueError, match="sorted"):
        expand_edges(torch.tensor([[0, 1, 0], [1, 0, 0]]), 2, 2)
    out = expand_edges(ei, 2, 2)
    assert out.shape == (2, 16) and int(out.min()) >= 0 and int(out.max()) < 4


# ------------------------------------------------------ 12: empty graphs in a batch
def test_lie_algebra_transformer_empty_graph_predicts_identity():
    from pyg_lie.models.lie_algebra_transformer import LieAlgebraTransformer

    torch.manual_seed(0)
    m = LieAlgebraTransformer("SE2", hidden_channels=16, num_layers=1)
    g = SE2().random(4)
    eye = torch.eye(3)
    out = m(g, batch=torch.tensor([0, 0, 2, 2]))
    assert torch.isfinite(out.prediction).all()
    torch.testing.assert_close(out.prediction[1], eye)
    out2 = m(g, batch=torch.tensor([0, 0, 1, 1]), num_graphs=3)
    torch.testing.assert_close(out2.prediction[2], eye)
    torch.testing.assert_close(out2.prediction[:2], out.prediction[[0, 2]])
    out.prediction.sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in m.parameters())
