"""LieSelfAttention: equivariance in float64 for every group, PyG integration, numerics."""
import re

import pytest
import torch
from torch_geometric.nn import Sequential

from pyg_lie.testing import dense_lie_self_attention
from pyg_lie.groups import GROUPS, get_group
from pyg_lie.nn.lie_self_attention import LieSelfAttention
from pyg_lie.nn.lie_transformer_block import LieTransformerBlock
from pyg_lie.nn.lift import Lift
from pyg_lie.nn.lifted_edges import lifted_edges
from pyg_lie.models.lie_transformer import _orbit_dim

GROUP_NAMES = [n for n in ("T2", "T3", "SO2", "SE2", "SO3", "SE3") if n in GROUPS]
OPTIONS = [
    dict(content="dot_product", combine="additive", normalization="softmax"),
    dict(content="linear_concat_linear", combine="mlp", normalization="constant"),
    dict(content="dot_product", combine="multiplicative", normalization="constant", location="mlp"),
    dict(content="linear_concat_linear", location="identity", combine="mlp", normalization="softmax"),
    dict(content="dot_product", combine="additive", normalization="softmax", kernel_per_head=True),
]


def cloud(group, n=14, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randn(n, group.space_dim, generator=gen, dtype=dtype)
    if group.name in ("SO2", "SO3"):
        pos = pos + 0.1 * pos.sign()  # stay away from the origin
    return pos


def setup(name, opts, K=None, dtype=torch.float64):
    G = get_group(name)
    K = K or (1 if G.stabilizer_dim == 0 else 3)
    kdim = _orbit_dim(G)
    layer = LieSelfAttention(8, 8, G, heads=2, kernel_dim=8, invariant_dim=kdim, **opts).to(dtype)
    pos = cloud(G, dtype=dtype)
    x = torch.randn(pos.size(0), 8, dtype=dtype)
    lifted = Lift(G, K).eval()(x, pos)
    ei = lifted_edges(pos, None, K, radius=1.5)
    inv = G.orbit_invariants(pos)
    inv = None if inv is None else inv[lifted.index]
    return G, layer, pos, lifted, ei, inv


@pytest.mark.parametrize("name", GROUP_NAMES)
@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_equivariance_float64(name, opt):
    """Output on lifted nodes u g equals output on g (same features), edges from u . pos."""
    G, layer, pos, lifted, ei, inv = setup(name, OPTIONS[opt])
    out = layer(lifted.x, ei, lifted.g, inv)
    for s in range(2):
        u = G.random(generator=torch.Generator().manual_seed(10 + s), dtype=torch.float64)
        pos2 = G.act(u, pos)
        ei2 = lifted_edges(pos2, None, lifted.g.size(0) // pos.size(0), radius=1.5)
        assert torch.equal(ei, ei2)  # base radius graph is exactly invariant
        inv2 = G.orbit_invariants(pos2)
        inv2 = None if inv2 is None else inv2[lifted.index]
        out2 = layer(lifted.x, ei2, u @ lifted.g, inv2)
        assert torch.allclose(out, out2, atol=1e-10, rtol=0), (out - out2).abs().max()
    # the check can fail: a non-equivariant perturbation (absolute g) is caught
    g_bad = lifted.g.clone()
    busiest = torch.bincount(ei[1]).argmax()
    g_bad[busiest] = G.random(generator=torch.Generator().manual_seed(99), dtype=torch.float64) @ g_bad[busiest]
    assert not torch.allclose(layer(lifted.x, ei, g_bad, inv), out, atol=1e-6)


@pytest.mark.parametrize("opt", [0, 2, 4])
def test_matches_dense_formulation(opt):
    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[opt])
    out, (ei_out, w) = layer(lifted.x, ei, lifted.g, return_attention_weights=True)
    assert w.shape == (ei.size(1), 2) and torch.equal(ei_out, ei)
    M = lifted.x.size(0)
    adj = torch.zeros(M, M, dtype=torch.bool)
    adj[ei[1], ei[0]] = True
    dense = dense_lie_self_attention(layer, lifted.x[None], lifted.g[None], adj[None])[0]
    assert torch.allclose(out, dense, atol=1e-10)
    if layer.normalization == "softmax":
        s = torch.zeros(M, 2, dtype=w.dtype).index_add_(0, ei[1], w)
        assert torch.allclose(s, torch.ones_like(s))


def test_empty_neighbourhood_and_residual():
    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[0])
    keep = ei[1] != 0  # lifted node 0 receives nothing
    out = layer(lifted.x, ei[:, keep], lifted.g)
    assert torch.isfinite(out).all() and torch.equal(out[0], torch.zeros(8, dtype=out.dtype))
    block = LieTransformerBlock(8, G, heads=2, kernel_dim=8).double()
    y = block(lifted.x, ei[:, keep], lifted.g)
    expect = lifted.x[0] + block.mlp(block.norm2(lifted.x[0]))
    assert torch.allclose(y[0], expect)
    # no edges at all, constant normalisation too
    layer_c = LieSelfAttention(8, 8, G, heads=2, normalization="constant").double()
    out = layer_c(lifted.x, ei[:, :0], lifted.g)
    assert torch.equal(out, torch.zeros_like(out))


def test_coincident_points_gradients_and_double_backward():
    G = get_group("SE2")
    layer = LieSelfAttention(4, 4, G, heads=2).double()
    pos = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.3, 0.1], [0.3, 0.1]], dtype=torch.float64,
                       requires_grad=True)
    lift = Lift(G, 2).eval()
    x = torch.randn(4, 4, dtype=torch.float64)
    h = G.stabilizer_random(4, 2, dtype=torch.float64)
    h[1] = h[0]  # identical lifts of coincident points: log at the identity off the diagonal too
    lifted = lift(x, pos, stabilizer=h)
    ei = lifted_edges(pos.detach(), None, 2, radius=1.0)
    out = layer(lifted.x, ei, lifted.g)
    (gp,) = torch.autograd.grad(out.pow(2).sum(), pos, create_graph=True)
    assert torch.isfinite(gp).all()
    gp.pow(2).sum().backward()  # double backward into the parameters
    for p in layer.parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all()


def test_float32_and_repr_and_state_dict():
    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[0], dtype=torch.float32)
    out = layer(lifted.x, ei, lifted.g)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert repr(layer).startswith("LieSelfAttention(8, 8, group=SE2, heads=2")
    other = LieSelfAttention(8, 8, "SE2", heads=2, kernel_dim=8)
    other.load_state_dict(layer.state_dict())
    assert torch.equal(other(lifted.x, ei, lifted.g), out)
    other.reset_parameters()
    assert not torch.equal(other(lifted.x, ei, lifted.g), out)


def test_pyg_sequential():
    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[0], dtype=torch.float32)
    model = Sequential("x, edge_index, g", [
        (LieSelfAttention(8, 16, "SE2", heads=4), "x, edge_index, g -> x"),
        torch.nn.SiLU(),
        (LieSelfAttention(16, 8, "SE2", heads=2), "x, edge_index, g -> x"),
    ])
    assert model(lifted.x, ei, lifted.g).shape == (lifted.x.size(0), 8)


@pytest.mark.parametrize("bad", ["heads", "content", "identity_additive", "g_shape", "invariants",
                                 "per_head_combine_mlp", "per_head_identity", "per_head_not_bool",
                                 "float_edge_index", "edge_index_rows"])
def test_bad_arguments(bad):
    G, layer, pos, lifted, ei, inv = setup("SO2", OPTIONS[0], dtype=torch.float32)
    messages = {"heads": "out_channels (10) must be divisible by heads (4)",
                "content": "content must be one of ('dot_product', 'linear_concat_linear'), got 'cosine'",
                "identity_additive": "location='identity' gives a vector k_l, which needs combine='mlp'",
                "per_head_combine_mlp": "kernel_per_head=True needs location='mlp' and combine 'additive'",
                "per_head_identity": "kernel_per_head=True needs location='mlp' and combine 'additive'",
                "per_head_not_bool": "kernel_per_head must be True or False, got 'yes'",
                "invariants": "invariants must have shape (14, 1) (invariant_dim=1), got None",
                "float_edge_index": "edge_index must hold integer node indices, got torch.float32",
                "edge_index_rows": "edge_index must have shape (2, E)", "g_shape": "g must hold one SO2 element"}
    with pytest.raises(ValueError, match=re.escape(messages[bad])):
        if bad == "heads":
            LieSelfAttention(8, 10, "SE2", heads=4)
        elif bad == "content":
            LieSelfAttention(8, 8, "SE2", content="cosine")
        elif bad == "identity_additive":
            LieSelfAttention(8, 8, "SE2", location="identity", combine="additive")
        elif bad == "g_shape":
            layer(lifted.x, ei, lifted.g[:-1], inv)
        elif bad == "per_head_combine_mlp":
            LieSelfAttention(8, 8, "SE2", combine="mlp", kernel_per_head=True)
        elif bad == "per_head_identity":
            LieSelfAttention(8, 8, "SE2", location="identity", combine="mlp", kernel_per_head=True)
        elif bad == "per_head_not_bool":
            LieSelfAttention(8, 8, "SE2", kernel_per_head="yes")
        elif bad == "float_edge_index":  # would be truncated to node ids without a word
            layer(lifted.x, ei.float(), lifted.g, inv)
        elif bad == "edge_index_rows":
            layer(lifted.x, ei.t(), lifted.g, inv)
        else:
            layer(lifted.x, ei, lifted.g, None)


def test_torch_compile_block_fullgraph():
    """A block compiles without graph breaks (fullgraph=True raises on any break)."""
    G = get_group("SE2")
    block = LieTransformerBlock(8, G, heads=2, kernel_dim=8)
    pos = torch.randn(10, 2)
    lifted = Lift(G, 2).eval()(torch.randn(10, 8), pos)
    ei = lifted_edges(pos, None, 2, radius=1.5)
    ref = block(lifted.x, ei, lifted.g)
    compiled = torch.compile(block, fullgraph=True, backend="eager")
    out = compiled(lifted.x, ei, lifted.g)
    assert torch.allclose(out, ref, atol=1e-5)


def _block_grads(f, x, block, *args, **kwargs):
    block.zero_grad()
    x = x.detach().clone().requires_grad_()
    out = f(x, *args, **kwargs)
    out.pow(2).sum().backward()
    return [out.detach(), x.grad] + [p.grad.clone() for p in block.parameters()]


@pytest.mark.parametrize("graph", ["radius", "complete"])
def test_compiled_block_runs_the_fused_kernels(monkeypatch, graph):
    """Under torch.compile (AOT autograd, fullgraph) the fused path's custom operators run as
    they are, forward and backward, with or without a precomputed CSR structure: the same
    values and gradients as eager, in float64."""
    from pyg_lie import ops
    from pyg_lie.ops import CSRStructure

    class _Calls:  # runs of the sparse products, on any backend
        def clear(self):
            ops.reset_dispatch_counts()

        def __len__(self):
            return sum(n for (op, _), n in ops.dispatch_counts().items() if op in ("csr_sddmm", "csr_spmm"))
    calls = _Calls()
    G = get_group("SE2")
    torch.manual_seed(0)
    block = LieTransformerBlock(8, G, heads=2, kernel_dim=8).double()
    pos = torch.randn(12, 2, dtype=torch.float64)
    batch = torch.arange(2).repeat_interleave(6)
    lifted = Lift(G, 2).eval()(torch.randn(12, 8, dtype=torch.float64), pos, batch)
    ei = lifted_edges(pos, batch, 2, radius=1.5 if graph == "radius" else None)
    csr = CSRStructure.build(ei, lifted.x.size(0))
    assert csr.complete == (graph == "complete")
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")
    for c in (None, csr):
        ref = _block_grads(block, lifted.x, block, ei, lifted.g, csr=c)
        calls.clear()
        got = _block_grads(compiled, lifted.x, block, ei, lifted.g, csr=c)
        # the batched products of complete clouds need no sparse kernel (built under compile,
        # a structure is never marked complete)
        assert (len(calls) > 0) == (graph == "radius" or c is None)
        for a, b in zip(ref, got):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_inductor_compiled_block_matches_eager():
    """The default backend (inductor) on a radius graph: values and gradients as eager."""
    G = get_group("SE2")
    torch.manual_seed(1)
    block = LieTransformerBlock(16, G, heads=4, kernel_dim=8)
    pos = torch.randn(40, 2)
    lifted = Lift(G, 2).eval()(torch.randn(40, 16), pos)
    ei = lifted_edges(pos, None, 2, radius=1.0)
    ref = _block_grads(block, lifted.x, block, ei, lifted.g)
    got = _block_grads(torch.compile(block, fullgraph=True), lifted.x, block, ei, lifted.g)
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_sparse_operators_pass_opcheck():
    """Schema, fake implementation and autograd registration of the CSR custom operators."""
    from pyg_lie.ops import CSRStructure
    G, layer, pos, lifted, ei, inv = setup("SO2", OPTIONS[0])
    s = CSRStructure.build(ei[:, torch.randperm(ei.size(1))], lifted.x.size(0))
    n = lifted.x.size(0)
    A = torch.randn(n, 2, 3, dtype=torch.float64, requires_grad=True)  # (N, heads, D)
    B = torch.randn(n, 2, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, s.row.numel(), dtype=torch.float64, requires_grad=True)  # (heads, E)
    torch.library.opcheck(torch.ops.pyg_lie.csr_sddmm, (A, B, *s.parts(True)))
    torch.library.opcheck(torch.ops.pyg_lie.csr_spmm, (w, B, *s.parts(True)))
    # the backward passes' SpMM on the transposed pattern (no autograd formula: no gradients)
    crow, col, crow_t, col_t, perm_t, iperm_t = s.parts(True)
    torch.library.opcheck(torch.ops.pyg_lie.csr_spmm_permuted, (w.detach(), perm_t, B.detach(), crow_t, col_t))


@pytest.mark.parametrize("name", [n for n in ("SO2", "SE2", "SO3", "SE3") if n in GROUPS])
def test_one_sided_cut_is_exact_and_one_sided(name):
    G = get_group(name)
    rot = G.blocks["rotation"]
    xi = torch.zeros(3, G.dim, dtype=torch.float64)
    axis = torch.tensor([1.0] if rot.stop - rot.start == 1 else [-0.6, 0.0, 0.8], dtype=torch.float64)
    xi[0, rot] = 2 ** 0.5 * (torch.pi - 1e-12) * axis
    xi[2, rot] = 2 ** 0.5 * 2.0 * axis
    if G.dim > rot.stop - rot.start:
        xi[:, : rot.start] = torch.tensor([0.3, -0.7, 0.2][: rot.start], dtype=torch.float64)
    g = G.exp(xi)
    step = torch.zeros(1, G.dim, dtype=torch.float64)
    step[0, rot] = 2 ** 0.5 * 2e-12 * axis
    g[1] = g[0] @ G.exp(step)[0]  # just across the cut: principal log flips sign
    assert (G.log(g[1:2]) - G.log(g[0:1])).abs().max() > 1.0
    ident = G.identity(3, dtype=torch.float64)
    gg = torch.cat([ident, g])  # edge j = 3 + r -> i = r: log(I^-1 g_r)
    ei = torch.stack([torch.arange(3) + 3, torch.arange(3)])
    out = G.relative_log(gg, ei, one_sided_cut=True)
    assert torch.allclose(G.exp(out), g, atol=1e-9)  # same elements
    assert torch.allclose(out[0], out[1], atol=1e-9)  # both sides of the cut agree
    assert torch.allclose(out[2:], G.log(g[2:]))  # away from the cut: the principal log


def test_graphgym_registration_idempotent():
    import pyg_lie
    from torch_geometric.data import Data
    out1 = pyg_lie.register_graphgym()
    out2 = pyg_lie.register_graphgym()  # no KeyError on the second call
    assert out1 == out2 and "lie_self_attention" in out1
    from torch_geometric.graphgym.models.layer import LayerConfig
    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[0], dtype=torch.float32)
    gg = out1["lie_self_attention"](LayerConfig(dim_in=8, dim_out=16))
    b = gg(Data(x=lifted.x, edge_index=ei, g=lifted.g))
    assert b.x.shape == (lifted.x.size(0), 16)
    pooled = out1["group_mean"](b.x, lifted.batch)
    assert pooled.shape == (1, 16)


@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_fused_path_matches_message_passing(opt):
    G, layer, pos, lifted, ei, inv = setup("SO2", OPTIONS[opt])
    perm = torch.randperm(ei.size(1))  # unsorted edges too
    for e in (ei, ei[:, perm]):
        layer.fused = True
        a, (ea, wa) = layer(lifted.x, e, lifted.g, inv, return_attention_weights=True)
        layer.fused = False
        b, (eb, wb) = layer(lifted.x, e, lifted.g, inv, return_attention_weights=True)
        assert torch.allclose(a, b, atol=1e-12) and torch.equal(ea, eb) and torch.allclose(wa, wb, atol=1e-12)
    # first and second derivatives of the fused kernels
    from torch.autograd import gradcheck, gradgradcheck
    from pyg_lie.ops import CSRStructure, csr_sddmm as sddmm, csr_spmm as spmm
    s = CSRStructure.build(ei[:, perm], lifted.x.size(0))
    A = torch.randn(lifted.x.size(0), 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(ei.size(1), dtype=torch.float64, requires_grad=True)
    assert gradcheck(lambda a, b: sddmm(s, a, b), (A, A.detach().clone().requires_grad_()))
    assert gradgradcheck(lambda w_, a: spmm(s, w_, a), (w, A))
    # several heads in one call
    A3 = torch.randn(lifted.x.size(0), 2, 3, dtype=torch.float64, requires_grad=True)
    w3 = torch.randn(2, ei.size(1), dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda a, b: sddmm(s, a, b), (A3, A3.detach().clone().requires_grad_()))
    assert gradgradcheck(lambda w_, a: spmm(s, w_, a), (w3, A3))


@pytest.mark.parametrize("opt", [0, 1])
@pytest.mark.parametrize("clouds", [1, 3])
def test_uniform_degree_and_complete_block_paths(opt, clouds):
    """All pairs within equal-size clouds: the fused path uses batched matrix products
    (``complete``); any uniform in-degree normalises densely (``degree``). Both must equal
    the scatter / sparse-product path (same CSR with ``degree=0``), values and gradients."""
    import dataclasses

    from pyg_lie.ops import CSRStructure

    G, layer, pos, lifted, ei, inv = setup("SE2", OPTIONS[opt])
    n = lifted.x.size(0)
    M = clouds * n
    gen = torch.Generator().manual_seed(0)
    x0 = torch.cat([lifted.x] + [torch.randn(lifted.x.shape, generator=gen, dtype=torch.float64)
                                 for _ in range(clouds - 1)])
    g = torch.cat([lifted.g] + [G.random(n, generator=gen, dtype=torch.float64) for _ in range(clouds - 1)])
    invs = None if inv is None else inv.repeat(clouds, 1)
    full = torch.cat([torch.cartesian_prod(torch.arange(n), torch.arange(n)).t() + b * n
                      for b in range(clouds)], 1)  # every pair within each cloud, both ways
    full = full[:, torch.randperm(full.size(1), generator=gen)]
    csr = CSRStructure.build(full, M)
    assert csr.degree == n and csr.complete
    assert CSRStructure.build(ei, n).degree == 0  # radius graph: degrees differ
    res = []
    for c in (csr, dataclasses.replace(csr, complete=False), dataclasses.replace(csr, degree=0, complete=False)):
        layer.zero_grad()
        x = x0.detach().clone().requires_grad_()
        out, (_, w) = layer(x, full, g, invs, return_attention_weights=True, csr=c)
        out.pow(2).sum().backward()
        res.append([out.detach(), w.detach(), x.grad] + [p.grad.clone() for p in layer.parameters()])
    for other in res[1:]:
        for a, b in zip(res[0], other):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-13)


def test_complete_detection():
    from pyg_lie.ops import CSRStructure
    n = 4
    full = torch.cat([torch.cartesian_prod(torch.arange(n), torch.arange(n)).t() + b * n for b in range(2)], 1)
    assert CSRStructure.build(full, 2 * n).complete
    # same in-degree, but node 0 hears node 4 of the other cloud instead of node 3
    bad = full.clone()
    bad[0, 3] = 4
    s = CSRStructure.build(bad, 2 * n)
    assert s.degree == n and not s.complete
    # all pairs but unequal clouds: no uniform degree
    uneven = torch.cat([torch.cartesian_prod(torch.arange(3), torch.arange(3)).t(),
                        torch.cartesian_prod(torch.arange(5), torch.arange(5)).t() + 3], 1)
    s = CSRStructure.build(uneven, 8)
    assert s.degree == 0 and not s.complete


@pytest.mark.parametrize("n, degree, K", [(300, 8.0, 1), (128, 4.0, 4)])
def test_benchmark_clouds_have_the_stated_mean_degree(n, degree, K):
    """The benchmark's "32-neighbourhoods" must hold 32 lifted neighbours on average, as the
    official code's 32 nearest neighbours do (not fewer, which would flatter the timing)."""
    from pyg_lie.benchmarks.lie_self_attention import _cloud
    from pyg_lie.nn.lifted_edges import lifted_edges
    pos, r = _cloud(n, 1, degree, torch.Generator().manual_seed(3))
    ei = lifted_edges(pos, None, K, r)
    assert abs(ei.size(1) / (n * K) - degree * K) < 0.02 * degree * K


def test_benchmark_compiled_model_row_and_table():
    """``bench lie-self-attention --compile --amp``: the compiled model runs in ``run_config``
    (its compilation timed apart from the repeats), so does the model under bfloat16
    autocast, and the table prints both against eager."""
    import argparse

    from pyg_lie.benchmarks.lie_self_attention import format_tables, run_config
    cfg = dict(impl="model-compiled", name="T2 32x32 d128 L4 all", group="T2", K=1, N=6, clouds=2, dim=8,
               heads=2, layers=1, degree=None, repeats=1, threads=1)
    res = run_config(cfg)
    assert res["compile_time"] > 0 and res["time"] > 0 and res["num_edges"] == 2 * 36
    amp = dict(cfg, impl="model-bf16")
    res_amp = run_config(amp)
    assert res_amp["time"] > 0 and res_amp["num_edges"] == 2 * 36
    eager = dict(cfg, impl="model", time=0.02)
    table = format_tables([eager, {**cfg, **res, "time": 0.03}, {**amp, **res_amp, "time": 0.01}],
                          argparse.Namespace(threads=1, repeats=1, dim=8, heads=2))
    assert "compiled / eager" in table and "bf16 autocast / eager" in table
    assert "| 0.030 | 1.50 | 0.010 | 0.50 |" in table
    # the host the numbers come from heads the tables: speed-ups depend on the vector units
    import os
    host = table.splitlines()[0]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert host.startswith("host: ") and f", {cpus} CPUs" in host and host.endswith(f"torch {torch.__version__}")
    try:
        with open("/proc/cpuinfo") as f:
            avx2 = " avx2 " in f" {f.read()} ".replace("\n", " ")
    except OSError:
        avx2 = False
    assert ("AVX2" in host) == avx2


def test_benchmark_model_is_the_official_architecture(monkeypatch):
    """The full-model rows build one location MLP per head, as the official code; the
    ``--shared-kernel`` rows the library's default shared MLP; ``--torch-kernels`` rows run the
    per-head MLP without the native kernel."""
    import pyg_lie.models.lie_transformer as lt
    from pyg_lie.benchmarks.lie_self_attention import run_config
    built = []
    original = lt.LieTransformer

    def record(*args, **kwargs):
        model = original(*args, **kwargs)
        built.append(type(model.blocks[0].attn.loc_mlp).__name__)
        return model
    monkeypatch.setattr(lt, "LieTransformer", record)
    cfg = dict(name="T2 32x32 d128 L4 all", group="T2", K=1, N=6, clouds=2, dim=8, heads=2, layers=1,
               degree=None, repeats=1, threads=1)
    monkeypatch.setenv("PYG_LIE_NATIVE", "1")  # restored after the test: model-torch sets it to 0
    native = {}
    for impl in ("model", "model-shared", "pointwise", "model-torch"):
        r = run_config(dict(cfg, impl=impl))
        assert r["time"] > 0
        native[impl] = r.get("native")
    assert built == ["HeadwiseMLP", "Sequential", "HeadwiseMLP", "HeadwiseMLP"]
    assert native["model"] is True and native["model-torch"] is False


def test_benchmark_dense_model_computes_the_model(monkeypatch):
    """``--dense-model`` times the official algorithm (dense pair tensors) on the same model:
    in float64 with reproducible lifts it gives the model's outputs and gradients, on complete
    clouds and on a radius graph; and ``run_config`` times it."""
    from pyg_lie.benchmarks.lie_self_attention import run_config
    from pyg_lie.testing import dense_adjacency, dense_model_forward
    from pyg_lie.models import LieTransformer
    torch.manual_seed(0)
    pos = torch.randn(12, 2, dtype=torch.float64)
    batch = torch.arange(2).repeat_interleave(6)
    x = torch.randn(12, 3, dtype=torch.float64)
    for group, K, radius in (("SE2", 2, None), ("T2", 1, None), ("SE2", 2, 1.2)):
        model = LieTransformer(group, 3, 8, 2, num_layers=2, heads=2, lift_samples=K, radius=radius,
                               kernel_dim=8, kernel_per_head=True).double().eval()
        adj = dense_adjacency(lifted_edges(pos, batch, K, radius), 2, 6 * K)
        assert bool(adj.all()) == (radius is None)
        ref = model(x, pos, batch)
        ref_grads = torch.autograd.grad(ref.sum(), list(model.parameters()), allow_unused=True)
        got = dense_model_forward(model, x, pos, batch, adj)
        grads = torch.autograd.grad(got.sum(), list(model.parameters()), allow_unused=True)
        assert torch.allclose(got, ref, rtol=1e-10, atol=1e-12)
        for a, b in zip(grads, ref_grads):
            assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, rtol=1e-8, atol=1e-10))
    cfg = dict(impl="model-dense", name="SE2 K4 32x32 d128 L4 all", group="SE2", K=2, N=6, clouds=2, dim=8,
               heads=2, layers=1, degree=None, repeats=1, threads=1)
    res = run_config(cfg)
    assert res["time"] > 0 and res["num_edges"] == 2 * 12 * 12


def test_compiled_block_dynamic_shapes_on_complete_clouds():
    """Complete clouds with a changing number of clouds under torch.compile(dynamic=True):
    the batched products and the dense softmax operator trace with symbolic sizes and give
    eager's values and gradients."""
    from pyg_lie.ops import CSRStructure
    G = get_group("SE2")
    torch.manual_seed(3)
    block = LieTransformerBlock(8, G, heads=2, kernel_dim=8).double()
    compiled = torch.compile(block, fullgraph=True, dynamic=True, backend="aot_eager")
    for clouds in (2, 3):
        pos = torch.randn(4 * clouds, 2, dtype=torch.float64)
        batch = torch.arange(clouds).repeat_interleave(4)
        lifted = Lift(G, 2, mode="finite").double()(torch.randn(4 * clouds, 8, dtype=torch.float64), pos, batch)
        ei = lifted_edges(pos, batch, 2, radius=None)
        csr = CSRStructure.build(ei, lifted.x.size(0))
        assert csr.complete
        ref = _block_grads(block, lifted.x, block, ei, lifted.g, csr=csr)
        got = _block_grads(compiled, lifted.x, block, ei, lifted.g, csr=csr)
        for a, b in zip(ref, got):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_benchmark_matmul_gflop_counts_the_dense_formulation():
    """``matmul_gflop`` (the work behind the benchmark's hard speed-up bound) equals what
    torch's FLOP counter sees in a forward + backward of the blocks computed densely on one
    complete cloud, where every pair is an edge (less the relative group elements, which the
    dense code recomputes in every layer with 3 x 3 products)."""
    from torch.utils.flop_counter import FlopCounterMode

    from pyg_lie.benchmarks.lie_self_attention import OFFICIAL_ARCH, matmul_gflop
    from pyg_lie.models.lie_transformer import LieTransformer
    G = get_group("SE2")
    K, n = 2, 5
    M = n * K
    model = LieTransformer(G, 1, 16, 1, num_layers=2, heads=4, lift_samples=K, radius=10.0,
                           **OFFICIAL_ARCH).double()
    lifted = Lift(G, K).eval()(torch.ones(n, 1, dtype=torch.float64), cloud(G, n))
    h = torch.randn(1, M, 16, dtype=torch.float64, requires_grad=True)
    adj = torch.ones(1, M, M, dtype=torch.bool)
    with FlopCounterMode(display=False) as counter:
        y = h
        for blk in model.blocks:
            y = y + dense_lie_self_attention(blk.attn, blk.norm1(y), lifted.g.unsqueeze(0), adj)
            y = y + blk.mlp(blk.norm2(y))
        y.sum().backward()
    g = lifted.g.unsqueeze(0)
    with FlopCounterMode(display=False) as group_ops:
        G.log(G.between(g.unsqueeze(2), g.unsqueeze(1)))
    dense = counter.get_total_flops() - len(model.blocks) * group_ops.get_total_flops()
    assert dense == pytest.approx(matmul_gflop(model, M, M * M) * 1e9, rel=1e-12)


def test_matrices_that_are_no_group_elements_are_refused():
    from pyg_lie.nn import LieAlgebraAttention
    torch.manual_seed(0)
    g = get_group("SE2").random(6)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    bad = g.clone()
    bad[2] = torch.randn(3, 3)
    for layer, x in ((LieSelfAttention(8, 8, "SE2", heads=2), torch.randn(6, 8)),
                     (LieAlgebraAttention(8, 4, "SE2", heads=2), torch.randn(6, 8))):
        layer(x, ei, g)
        with pytest.raises(ValueError, match=r"g\[2\] .* is no SE2 element"):
            layer(x, ei, bad)


def test_constant_and_mean_name_the_same_normalization():
    from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group as finite_group
    assert LieSelfAttention(8, 8, "SE2", heads=2, normalization="mean").normalization == "constant"
    EquivariantSelfAttention(FieldType.regular(finite_group("C4"), 1), normalization="constant")
    for make in (lambda: LieSelfAttention(8, 8, "SE2", normalization="sum"),
                 lambda: EquivariantSelfAttention(FieldType.regular(finite_group("C4"), 1), normalization="sum")):
        with pytest.raises(ValueError, match="normalization"):
            make()
