"""Tests of pyg_lie.neighbors against an independent numpy brute-force reference."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import pyg_lie.neighbors as nb
from pyg_lie.neighbors import _search as search  # the backends' module: patched where it is read
from pyg_lie.neighbors import (geodesic_radius, geodesic_radius_graph, radius, radius_graph,
                               resolve_backend)

BACKENDS = [b for b in ("kdtree", "torch_cluster", "cdist") if b in nb.available_backends("cpu")]
HAS_TC = "torch_cluster" in BACKENDS


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The inputs are tiny; on a loaded shared CPU, intra-op threads only add contention."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --------------------------------------------------------------- reference
def ref_pairs(x, y, r2, bx=None, by=None, same=False, loop=True, k=None):
    """Brute force with numpy: full float64 squared distance matrix, mask, (i, j) order."""
    X = np.asarray(x, dtype=np.float64)
    Y = np.asarray(y, dtype=np.float64)
    bx = np.zeros(len(X), np.int64) if bx is None else np.asarray(bx)
    by = np.zeros(len(Y), np.int64) if by is None else np.asarray(by)
    d2 = ((Y[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    m = (d2 <= r2) & (by[:, None] == bx[None, :])
    if same and not loop:
        np.fill_diagonal(m, False)
    src, tgt = [], []
    for i in range(len(Y)):
        js = np.nonzero(m[i])[0]
        if k is not None:
            js = sorted(js, key=lambda j: (d2[i, j], j))[:k]
            js = sorted(js)
        src += list(js)
        tgt += [i] * len(js)
    return torch.tensor([src, tgt], dtype=torch.long).reshape(2, -1)


def random_cloud(n, d, graphs, dtype, seed, scale=4.0):
    g = torch.Generator().manual_seed(seed)
    pos = (torch.rand(n, d, generator=g, dtype=torch.float64) * scale).to(dtype)
    batch = torch.sort(torch.randint(0, graphs, (n,), generator=g)).values
    return pos, batch


def check(e, ref):
    assert e.dtype == torch.long and e.shape[0] == 2
    assert torch.equal(e, ref), (e.shape, ref.shape)


# ----------------------------------------------------------------- parity
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_radius_graph_matches_reference(backend, d, dtype):
    pos, batch = random_cloud(400, d, 5, dtype, seed=d)
    # a graph made of one point, and duplicate points in another graph
    pos = torch.cat([pos, pos[:1] + 100, pos[3:4], pos[3:4]])
    batch = torch.cat([batch, torch.tensor([7, batch[3], batch[3]])])
    for loop in (False, True):
        e = radius_graph(pos, 0.8, batch, loop=loop, backend=backend)
        check(e, ref_pairs(pos, pos, 0.8 ** 2, batch, batch, same=True, loop=loop))
    # the duplicates connect to each other (and to point 3) with loop=False
    e = radius_graph(pos, 0.0, batch, backend=backend)
    n = pos.size(0)
    assert {(int(a), int(b)) for a, b in e.t()} >= {(n - 1, n - 2), (n - 2, n - 1), (3, n - 1)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [2, 3])
def test_radius_bipartite_matches_reference(backend, d):
    x, bx = random_cloud(300, d, 3, torch.float32, seed=10 + d)
    y, by = random_cloud(200, d, 4, torch.float32, seed=20 + d)  # graph 3 has no sources
    e = radius(x, y, 0.9, bx, by, backend=backend)
    check(e, ref_pairs(x, y, 0.9 ** 2, bx, by))
    e = radius(x, y, 0.9, backend=backend)  # no batch: one graph
    check(e, ref_pairs(x, y, 0.9 ** 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsorted_and_sparse_graph_ids(backend):
    pos, batch = random_cloud(300, 3, 4, torch.float64, seed=3)
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(0))
    pos, batch = pos[perm], batch[perm] * 10 - 5  # unsorted, ids -5, 5, 15, 25
    e = radius_graph(pos, 1.0, batch, backend=backend)
    check(e, ref_pairs(pos, pos, 1.0, batch, batch, same=True, loop=False))
    y, by = pos[:50], batch[:50]
    check(radius(pos, y, 1.0, batch, by, backend=backend), ref_pairs(pos, y, 1.0, batch, by))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_boundary_is_inclusive_integer_lattice(backend, dtype):
    g = torch.arange(-6, 7)
    pos = torch.cartesian_prod(g, g).to(dtype) * 3  # 169 points, distances 3*sqrt(int)
    # r = 15 hits (9, 12) and (15, 0) exactly; just below / above as well
    for r in (15.0, 15.0 - 1e-9, 15.0 + 1e-9, 0.0, 3.0):
        e = radius_graph(pos, r, backend=backend)
        check(e, ref_pairs(pos, pos, r * r, same=True, loop=False))
    e = radius_graph(torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=dtype), 5.0, backend=backend)
    check(e, torch.tensor([[1, 0], [0, 1]]))
    e = radius_graph(torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=dtype), 4.999, backend=backend)
    assert e.shape == (2, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_truncation_above_32(backend):
    g = torch.Generator().manual_seed(5)
    pos = torch.rand(100, 3, generator=g) * 0.1  # all within 0.1 * sqrt(3) of each other
    e = radius_graph(pos, 0.5, backend=backend)
    assert e.size(1) == 100 * 99
    assert torch.equal(torch.bincount(e[1]), torch.full((100,), 99))
    assert radius(pos, pos[:3], 0.5, backend=backend).size(1) == 300


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [0, 1, 5])
def test_max_num_neighbors_keeps_nearest(backend, k):
    pos, batch = random_cloud(300, 3, 3, torch.float32, seed=7, scale=3.0)
    pos = torch.cat([pos, pos[:5], torch.tensor([[0.5, 0.5, 0.5]] * 4)])  # ties at distance 0
    batch = torch.cat([batch, batch[:5], torch.zeros(4, dtype=torch.long)])
    for loop in (False, True):
        e = radius_graph(pos, 1.0, batch, loop=loop, max_num_neighbors=k, backend=backend)
        check(e, ref_pairs(pos, pos, 1.0, batch, batch, same=True, loop=loop, k=k))
    y = pos[::3]
    e = radius(pos, y, 1.0, batch, batch[::3], max_num_neighbors=k, backend=backend)
    check(e, ref_pairs(pos, y, 1.0, batch, batch[::3], k=k))


@pytest.mark.skipif(not HAS_TC, reason="torch-cluster not installed")
def test_torch_cluster_bound_retry(monkeypatch):
    """The CUDA path starts with a small bound and retries saturated targets; force it on CPU."""
    monkeypatch.setitem(search._TC_START, "cpu", 2)
    pos, batch = random_cloud(300, 3, 3, torch.float32, seed=8, scale=2.0)
    e = radius_graph(pos, 1.0, batch, backend="torch_cluster")
    check(e, ref_pairs(pos, pos, 1.0, batch, batch, same=True, loop=False))
    assert int(torch.bincount(e[1]).max()) > 8


@pytest.mark.parametrize("group", [0, 60, 10**9])
def test_kdtree_tree_grouping(monkeypatch, group):
    """One tree per graph, small graphs sharing a tree, and everything in one tree agree."""
    monkeypatch.setattr(search, "KDTREE_GROUP", group)
    pos, batch = random_cloud(300, 3, 12, torch.float32, seed=12, scale=2.0)
    pos = torch.cat([pos, torch.rand(100, 3) * 2])
    batch = torch.cat([batch, torch.full((100,), 20)])
    check(radius_graph(pos, 0.6, batch, backend="kdtree"),
          ref_pairs(pos, pos, 0.6 ** 2, batch, batch, same=True, loop=False))
    y, by = pos[::2], torch.cat([batch[::2][:-5], torch.full((5,), 30)])  # graph 30: no sources
    check(radius(pos, y, 0.6, batch, by, backend="kdtree"), ref_pairs(pos, y, 0.6 ** 2, batch, by))


def test_cdist_small_chunks(monkeypatch):
    monkeypatch.setattr(search, "CDIST_CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(search, "CDIST_GROUP_ELEMENTS", 1000)
    pos, batch = random_cloud(300, 2, 20, torch.float32, seed=9, scale=3.0)
    pos = torch.cat([pos, torch.rand(200, 2) * 3])  # one big graph split into row chunks
    batch = torch.cat([batch, torch.full((200,), 99)])
    e = radius_graph(pos, 0.5, batch, backend="cdist")
    check(e, ref_pairs(pos, pos, 0.25, batch, batch, same=True, loop=False))


def test_far_from_origin_float32():
    """cdist's matmul form loses accuracy far from the origin; centring and the float64 check fix it."""
    pos, batch = random_cloud(300, 3, 2, torch.float32, seed=11, scale=3.0)
    pos = pos + 1e4
    ref = ref_pairs(pos, pos, 0.7 ** 2, batch, batch, same=True, loop=False)
    for backend in BACKENDS:
        check(radius_graph(pos, 0.7, batch, backend=backend), ref)


@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_scales(backend):
    pos, batch = random_cloud(60, 3, 2, torch.float32, seed=13)
    allp = ref_pairs(pos, pos, math.inf, batch, batch, same=True, loop=False)
    check(radius_graph(pos, 1e30, batch, backend=backend), allp)
    check(radius_graph(pos, 1e200, batch, backend=backend), allp)
    big = pos * 1e19  # float32 squares of r and of these differences overflow
    check(radius_graph(big, 2e19, batch, backend=backend),
          ref_pairs(big, big, 4e38, batch, batch, same=True, loop=False))
    tiny = pos * 1e-20
    check(radius_graph(tiny, 1e-20, batch, backend=backend),
          ref_pairs(tiny, tiny, 1e-40, batch, batch, same=True, loop=False))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(0, 1)),
                min_size=0, max_size=30),
       st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(0, 2)),
                min_size=0, max_size=10),
       st.sampled_from([0.0, 1.0, 2.0, 5.0]), st.integers(0, 4))
def test_hypothesis_integer_bipartite_truncated(xs, ys, r, k):
    """Integer points: many exact ties at the boundary and in the truncation order."""
    x = torch.tensor([p[:2] for p in xs], dtype=torch.float64).reshape(-1, 2)
    y = torch.tensor([p[:2] for p in ys], dtype=torch.float64).reshape(-1, 2)
    bx = torch.tensor([p[2] for p in xs], dtype=torch.long)
    by = torch.tensor([p[2] for p in ys], dtype=torch.long)
    ref = ref_pairs(x, y, r * r, bx, by, k=k)
    for backend in BACKENDS:
        check(radius(x, y, r, bx, by, max_num_neighbors=k, backend=backend), ref)


def test_works_without_torch_cluster(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "torch_cluster", None)  # import torch_cluster now fails
    search._torch_cluster_available.cache_clear()
    try:
        assert "torch_cluster" not in nb.available_backends("cpu")
        with pytest.raises(ValueError, match="pip install"):
            radius(torch.rand(5, 3), torch.rand(2, 3), 1.0, backend="torch_cluster")
        pos = torch.rand(40, 3)
        check(radius_graph(pos, 0.5, backend="auto"), ref_pairs(pos, pos, 0.25, same=True, loop=False))
    finally:
        search._torch_cluster_available.cache_clear()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-4, 4), st.integers(-4, 4), st.integers(0, 2)),
                min_size=0, max_size=40),
       st.sampled_from([0.0, 1.0, 2.0, 5.0, 2.5]), st.booleans())
def test_hypothesis_integer_points(points, r, loop):
    pos = torch.tensor([p[:2] for p in points], dtype=torch.float32).reshape(-1, 2)
    batch = torch.tensor([p[2] for p in points], dtype=torch.long)
    ref = ref_pairs(pos, pos, r * r, batch, batch, same=True, loop=loop)
    for backend in BACKENDS:
        check(radius_graph(pos, r, batch, loop=loop, backend=backend), ref)


# ------------------------------------------------------------------ empty
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs(backend):
    for d in (2, 3):
        e = radius_graph(torch.empty(0, d), 1.0, backend=backend)
        assert e.shape == (2, 0) and e.dtype == torch.long
        e = radius_graph(torch.empty(0, d), 1.0, torch.empty(0, dtype=torch.long), backend=backend)
        assert e.shape == (2, 0)
        assert radius(torch.empty(0, d), torch.rand(4, d), 1.0, backend=backend).shape == (2, 0)
        assert radius(torch.rand(4, d), torch.empty(0, d), 1.0, backend=backend).shape == (2, 0)
    one = radius_graph(torch.zeros(1, 3), 1.0, backend=backend)
    assert one.shape == (2, 0)
    assert torch.equal(radius_graph(torch.zeros(1, 3), 1.0, loop=True, backend=backend),
                       torch.tensor([[0], [0]]))


# --------------------------------------------------------------- geodesic
def sphere(n, seed):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return v / v.norm(dim=1, keepdim=True)


def geo_ref(x, y, theta, bx=None, by=None, same=False, loop=True):
    X, Y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ang = np.arccos(np.clip(Y @ X.T, -1.0, 1.0))
    bx = np.zeros(len(X), np.int64) if bx is None else np.asarray(bx)
    by = np.zeros(len(Y), np.int64) if by is None else np.asarray(by)
    m = (ang <= theta) & (by[:, None] == bx[None, :])
    if same and not loop:
        np.fill_diagonal(m, False)
    i, j = np.nonzero(m)  # row-major: sorted by (i, j)
    # the comparison is meant away from the boundary
    assert np.abs(ang - theta).min() > 1e-6
    return torch.tensor(np.stack([j, i]), dtype=torch.long).reshape(2, -1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_geodesic_matches_arccos_reference(backend, dtype):
    x = sphere(300, 1)
    batch = torch.arange(300) % 2
    for theta in (0.2, 0.5, 2.0):
        e = geodesic_radius_graph(x.to(dtype), theta, batch, backend=backend)
        check(e, geo_ref(x.to(dtype), x.to(dtype), theta, batch, batch, same=True, loop=False))
    y = sphere(120, 2)
    e = geodesic_radius(x.to(dtype), y.to(dtype), 0.3, backend=backend)
    check(e, geo_ref(x.to(dtype), y.to(dtype), 0.3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_geodesic_theta_pi_gives_all_pairs(backend):
    x = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])
    e = geodesic_radius_graph(x, math.pi, backend=backend)
    assert e.size(1) == 6
    e = geodesic_radius_graph(x, 4.0, torch.tensor([0, 0, 1]), loop=True, backend=backend)
    check(e, torch.tensor([[0, 1, 0, 1, 2], [0, 0, 1, 1, 2]]))
    e = geodesic_radius(x, x[:1], 10.0, max_num_neighbors=2, backend=backend)
    check(e, torch.tensor([[0, 2], [0, 0]]))  # nearest two: itself, then the equator point
    assert geodesic_radius(x, x, 0.0, backend=backend).size(1) == 3


def _th_grid(nlat, nlon, grid):
    from torch_harmonics.quadrature import precompute_latitudes, precompute_longitudes
    th, _ = precompute_latitudes(nlat, grid=grid)
    ph = precompute_longitudes(nlon)
    T, P = torch.meshgrid(torch.as_tensor(th, dtype=torch.float64),
                          torch.as_tensor(ph, dtype=torch.float64), indexing="ij")
    return torch.stack([T.sin() * P.cos(), T.sin() * P.sin(), T.cos()], -1).reshape(-1, 3)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shapes", [((16, 32), (16, 32), "equiangular", "equiangular"),
                                    ((16, 32), (8, 16), "equiangular", "legendre-gauss"),
                                    ((12, 24), (12, 24), "legendre-gauss", "legendre-gauss")])
def test_geodesic_matches_torch_harmonics_pattern(backend, shapes):
    """The S^2 attention's use: neighbours of the output points at longitude 0, as torch-harmonics."""
    pytest.importorskip("torch_harmonics")
    try:  # private helper of torch-harmonics 0.9.3 that builds the attention sparsity pattern
        from torch_harmonics.disco.convolution import _precompute_convolution_tensor_s2
        from torch_harmonics.filter_basis import get_filter_basis
        from torch_harmonics.quadrature import compute_theta_cutoff, effective_theta_cutoff
    except ImportError:
        pytest.skip("torch-harmonics internals changed")
    ins, outs, gi, go = shapes
    tc = compute_theta_cutoff(outs[0], grid=go)
    idx, _, _ = _precompute_convolution_tensor_s2(
        ins, outs, get_filter_basis(kernel_shape=1, basis_type="zernike"), grid_in=gi, grid_out=go,
        theta_cutoff=tc, basis_norm_mode="none", merge_quadrature=True)
    expected = {(int(j), int(i)) for i, j in zip(idx[1], idx[2])}
    x, y = _th_grid(*ins, gi), _th_grid(*outs, go)[:: outs[1]]
    for dtype in (torch.float32, torch.float64):
        e = geodesic_radius(x.to(dtype), y.to(dtype), effective_theta_cutoff(tc), backend=backend)
        assert {(int(a), int(b)) for a, b in e.t()} == expected


# ----------------------------------------------------------------- errors
def test_bad_inputs_raise():
    pos = torch.rand(10, 3)
    with pytest.raises(ValueError, match="pos"):
        radius_graph(pos[0], 1.0)
    with pytest.raises(ValueError, match="pos"):
        radius_graph(pos.long(), 1.0)
    bad = pos.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(ValueError, match="pos"):
        radius_graph(bad, 1.0)
    for r in (-1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match="r must"):
            radius_graph(pos, r)
    with pytest.raises(ValueError, match="batch"):
        radius_graph(pos, 1.0, torch.zeros(9, dtype=torch.long))
    with pytest.raises(ValueError, match="batch"):
        radius_graph(pos, 1.0, torch.zeros(10))
    with pytest.raises(ValueError, match="batch_y"):
        radius(pos, pos[:4], 1.0, torch.zeros(10, dtype=torch.long), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="y must have"):
        radius(pos, torch.rand(4, 2), 1.0)
    with pytest.raises(ValueError, match="max_num_neighbors"):
        radius_graph(pos, 1.0, max_num_neighbors=-1)
    with pytest.raises(ValueError, match="backend must be one of"):
        radius_graph(pos, 1.0, backend="ball_tree")
    with pytest.raises(ValueError, match="normalise"):
        geodesic_radius_graph(pos, 0.5)
    with pytest.raises(ValueError, match="3 columns"):
        geodesic_radius(torch.rand(4, 2), torch.rand(4, 2), 0.5)
    with pytest.raises(ValueError, match="theta"):
        geodesic_radius_graph(sphere(4, 0), -0.1)


def test_backend_resolution(monkeypatch):
    assert resolve_backend("auto", "cpu") == "kdtree"
    with pytest.raises(ValueError, match="CPU only"):
        resolve_backend("kdtree", "cuda")
    assert resolve_backend("auto", "cuda") == ("torch_cluster" if HAS_TC else "cdist")
    assert resolve_backend("auto", "meta") == "cdist"
    monkeypatch.setattr(search, "_torch_cluster_available", lambda: False)
    with pytest.raises(ValueError, match="torch-cluster"):
        radius_graph(torch.rand(5, 3), 1.0, backend="torch_cluster")
    assert resolve_backend("auto", "cuda") == "cdist"
    monkeypatch.setattr(search, "_scipy_available", lambda: False)
    assert resolve_backend("auto", "cpu") == "cdist"
    pos = torch.rand(50, 3)
    check(radius_graph(pos, 0.5), ref_pairs(pos, pos, 0.25, same=True, loop=False))


# --------------------------------------------------------------- complete graphs
def _complete_ref(batch, self_loops):
    """Every (j, i) with batch[j] == batch[i], in (i, j) order, by a double loop."""
    b = batch.tolist()
    pairs = [(j, i) for i in range(len(b)) for j in range(len(b)) if b[i] == b[j] and (self_loops or i != j)]
    return torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)


@pytest.mark.parametrize("backend", ["auto", "composite"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_complete_graph_matches_double_loop(backend, self_loops):
    import pyg_lie.ops as ops

    for batch in ([0, 0, 0, 1, 1, 3, 3, 3, 3, 7], [0], [2, 2], [0, 1, 2, 3]):
        batch = torch.tensor(batch)
        ops.reset_dispatch_counts()
        with ops.backend(backend):
            ei = nb.complete_graph(batch, self_loops=self_loops)
        if backend == "composite":
            assert ops.dispatch_counts().get(("complete_edges", "composite"), 0) == 1
        assert ei.dtype == torch.long
        assert torch.equal(ei, _complete_ref(batch, self_loops))
    assert nb.complete_graph(torch.zeros(0, dtype=torch.long)).shape == (2, 0)


def test_complete_graph_one_graph_and_the_other_builders():
    from pyg_lie.nn.lifted_edges import full_graph
    from pyg_lie.vit.attention import complete_graph as vit_complete

    assert torch.equal(nb.complete_graph(num_nodes=4), _complete_ref(torch.zeros(4, dtype=torch.long), True))
    assert nb.complete_graph(num_nodes=0).shape == (2, 0)
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    # the same edges in the same order as the builders it replaces
    assert torch.equal(nb.complete_graph(batch), full_graph(batch))
    assert torch.equal(nb.complete_graph(batch, self_loops=False), full_graph(batch, loop=False))
    assert torch.equal(nb.complete_graph(batch), vit_complete(2, 3))
    ei = nb.complete_graph(batch.int())  # narrower integer ids are widened
    assert ei.dtype == torch.long and torch.equal(ei, full_graph(batch))


def test_complete_graph_errors():
    with pytest.raises(ValueError, match="sorted"):
        nb.complete_graph(torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match=">= 0"):
        nb.complete_graph(torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="integer"):
        nb.complete_graph(torch.tensor([0.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="num_nodes"):
        nb.complete_graph()
    with pytest.raises(ValueError, match="num_nodes"):
        nb.complete_graph(num_nodes=-1)
    with pytest.raises(ValueError, match="num_nodes"):
        nb.complete_graph(torch.zeros(3, dtype=torch.long), num_nodes=4)
    with pytest.raises(ValueError, match="self_loops"):
        nb.complete_graph(torch.zeros(3, dtype=torch.long), self_loops="no")


def test_complete_graph_takes_an_edge_index_style_subclass():
    from torch_geometric import Index

    batch = torch.tensor([0, 0, 1, 1, 1])
    assert torch.equal(nb.complete_graph(Index(batch)), nb.complete_graph(batch))


# --------------------------------------------------------------- k nearest neighbours
KNN_BACKENDS = ["kdtree", "cdist"] + (["torch_cluster"] if HAS_TC else [])


@pytest.mark.parametrize("backend", KNN_BACKENDS)
@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_graph_matches_brute_force(backend, loop, dtype):
    for seed, (n, d, graphs) in enumerate([(40, 2, 3), (60, 3, 1), (25, 1, 4)]):
        pos, batch = random_cloud(n, d, graphs, dtype, seed)
        if seed == 0:  # integer grid points: many equal distances, ties by the source index
            pos = torch.randint(0, 4, (n, d), generator=torch.Generator().manual_seed(seed)).to(dtype)
        for k in (1, 3, 8, 100):
            ref = ref_pairs(pos, pos, np.inf, batch, batch, same=True, loop=loop, k=k)
            check(nb.knn_graph(pos, k, batch, loop=loop, backend=backend), ref)


def test_knn_graph_unsorted_batch_empty_and_errors():
    pos, batch = random_cloud(30, 2, 3, torch.float64, 7)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    ref = ref_pairs(pos[perm], pos[perm], np.inf, batch[perm], batch[perm], same=True, loop=False, k=4)
    for backend in KNN_BACKENDS:
        check(nb.knn_graph(pos[perm], 4, batch[perm], backend=backend), ref)
    assert nb.knn_graph(pos, 0, batch).shape == (2, 0)
    assert nb.knn_graph(pos[:0], 3).shape == (2, 0)
    assert nb.knn_graph(pos[:1], 3).shape == (2, 0)
    assert nb.knn_graph(pos[:1], 3, loop=True).tolist() == [[0], [0]]
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        nb.knn_graph(pos, -1)
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        nb.knn_graph(pos, 2.0)
    with pytest.raises(ValueError, match="floating-point"):
        nb.knn_graph(pos.long(), 2)
    with pytest.raises(ValueError, match="batch must be a 1-D tensor"):
        nb.knn_graph(pos, 2, batch[:-1])


# ----------------------------------------------- huge graph ids and numbers near the float limits
def test_builders_cost_follows_points_not_the_largest_graph_id():
    import time
    from pyg_lie.neighbors import complete_graph, knn_graph, radius, radius_graph
    pos = torch.randn(4, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    dense, huge = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 2 ** 62, 2 ** 62])
    t = time.perf_counter()
    for backend in ("auto", "kdtree", "cdist"):
        assert torch.equal(radius_graph(pos, 5.0, huge, backend=backend), radius_graph(pos, 5.0, dense, backend=backend))
        assert torch.equal(radius_graph(pos, 5.0, huge.flip(0), backend=backend),
                           radius_graph(pos, 5.0, dense.flip(0), backend=backend))
        assert torch.equal(knn_graph(pos, 1, huge, backend=backend), knn_graph(pos, 1, dense, backend=backend))
        assert torch.equal(radius(pos, pos, 5.0, huge, huge, backend=backend),
                           radius(pos, pos, 5.0, dense, dense, backend=backend))
    assert torch.equal(complete_graph(huge), complete_graph(dense))
    assert time.perf_counter() - t < 5.0


@pytest.mark.parametrize("r", [float("nan"), float("inf"), -1.0, -0.0 - 1e-300, "x", None, torch.ones(2)])
def test_radius_bad_values_name_r(r):
    from pyg_lie.neighbors import radius_graph
    with pytest.raises(ValueError, match="r must be"):
        radius_graph(torch.randn(3, 2), r)


def test_radius_near_the_float_limits_is_exact():
    from pyg_lie.neighbors import knn_graph, radius_graph
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]], dtype=torch.float64)
    every = radius_graph(pos, 1.7976931348623157e308)
    assert every.shape[1] == 6  # every ordered pair but the self pairs
    assert radius_graph(pos, 5e-324).shape[1] == 0
    assert radius_graph(pos, 0.0, loop=True).shape[1] == 3
    assert knn_graph(pos, 10 ** 18).shape[1] == 6  # k beyond the cloud: every other point
    assert knn_graph(pos, 10 ** 30).shape[1] == 6 and radius_graph(pos, 9.0, max_num_neighbors=10 ** 30).shape[1] == 6
    from pyg_lie.groups import get_group
    from pyg_lie.neighbors import log_knn_graph
    g = get_group("SE2").random(3)
    for method in ("brute", "embedding"):
        assert torch.equal(log_knn_graph("SE2", g, 10 ** 30, method=method), log_knn_graph("SE2", g, 2, method=method))
    with pytest.raises(ValueError, match="k must be an int >= 0"):
        knn_graph(pos, -1)
    with pytest.raises(ValueError, match="max_num_neighbors"):
        radius_graph(pos, 1.0, max_num_neighbors=-3)


def test_complete_graph_sizes_beyond_int64_are_refused():
    from pyg_lie.neighbors import complete_graph
    with pytest.raises(ValueError, match=r"num_nodes\^2"):
        complete_graph(num_nodes=2 ** 32)
    with pytest.raises(ValueError, match="num_nodes"):
        complete_graph(num_nodes=-1)
    assert complete_graph(num_nodes=3).shape == (2, 9)


@pytest.mark.parametrize("scale", [1e200, 1e308])
def test_kdtree_paths_on_extents_near_the_float_limits_equal_all_pairs(scale):
    """The k-d tree paths (scipy's distances overflow there) give the all-pairs result instead of
    scipy's 'data must be finite' / 'floating point overflow' errors."""
    from pyg_lie.groups import get_group
    from pyg_lie.neighbors import knn_graph, log_knn_graph, log_radius_graph
    pos = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [1e-300, 1e-300], [0.5, 0.25]], dtype=torch.float64) * scale
    pos[3] = torch.tensor([1.0, 1.0], dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1])
    for b in (None, batch):
        assert torch.equal(knn_graph(pos, 2, b), knn_graph(pos, 2, b, backend="cdist"))
        for r in (1.0, scale, 1.7976931348623157e308):
            assert torch.equal(radius_graph(pos, r, b, backend="kdtree"), radius_graph(pos, r, b, backend="cdist"))
    g = get_group("SE2").random(5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    g[:, :2, 2] = pos.clamp(-1e200, 1e200)
    assert torch.equal(log_knn_graph("SE2", g, 2, batch, method="embedding"), log_knn_graph("SE2", g, 2, batch, method="brute"))
    assert torch.equal(log_radius_graph("SE2", g, 1e300, batch, method="embedding"),
                       log_radius_graph("SE2", g, 1e300, batch, method="brute"))
