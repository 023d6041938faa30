"""Log-norm kNN / radius graphs: embedding bounds and embedding search == brute force."""
import math
import warnings

import pytest
import torch

from pyg_lie.groups import get_group
from pyg_lie.neighbors import GRAPH_METHODS, log_knn_graph, log_radius_graph

EMBEDDED = ["SO2", "SE2", "SO3", "SE3", "T2"]
SIZES = [1, 2, 7, 60, 25]  # sequences shorter and longer than k


def _key(ei):
    return sorted(map(tuple, ei.t().tolist()))


def _data(name, dtype, sizes=SIZES, seed=0):
    G = get_group(name)
    g = G.random(sum(sizes), generator=torch.Generator().manual_seed(seed), dtype=dtype)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return G, g, batch


def _pairs(G, n, seed):
    """Random, nearby (log-spaced scales) and near-cut pairs, float64."""
    gen = torch.Generator().manual_seed(seed)
    a = G.random(n, generator=gen, dtype=torch.float64)
    scale = torch.logspace(-6, 0.6, n, dtype=torch.float64)[:, None]
    near = G.compose(a, G.exp(scale * torch.randn(n, G.dim, generator=gen, dtype=torch.float64)))
    return a.repeat(2, 1, 1), torch.cat([near, G.random(n, generator=gen, dtype=torch.float64)])


@pytest.mark.parametrize("name", EMBEDDED)
def test_embedding_brackets_log_norm(name):
    G = get_group(name)
    a, b = _pairs(G, 4000, 1)
    ea, eb = G.log_norm_embedding(a), G.log_norm_embedding(b)
    assert ea.embedding.shape == (a.shape[0], ea.embedding.shape[-1])
    x = (ea.embedding - eb.embedding).norm(dim=-1)
    d = G.log(G.between(a, b)).norm(dim=-1)
    tol = 1e-9
    assert (ea.lower * x <= d + tol).all()
    assert (d <= ea.upper_bound(x) * (1 + 1e-7) + tol).all()
    assert (ea.upper_bound(x) <= ea.upper * x + tol).all()
    if name.startswith("T"):
        assert ea.lower == ea.upper == 1.0 and torch.allclose(d, x)
    else:  # the constants are sharp: L at small angles, U near the cut
        assert (ea.lower, ea.upper) == (1.0, math.pi / 2)
        ratio = d / x
        assert ratio.min() < 1 + 1e-3 and ratio.max() > math.pi / 2 - 1e-2
    if name.startswith("SO"):  # exact: d = x asin(s) / s
        assert torch.allclose(d, ea.upper_bound(x), rtol=1e-6, atol=1e-6)


def test_groups_without_embedding_use_the_brute_force():
    G, g, batch = _data("Aff2", torch.float64, sizes=[5, 300])
    g = G.compose(g[:1], G.exp(0.1 * torch.randn(g.shape[0], G.dim, dtype=torch.float64)))
    assert G.log_norm_embedding(g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert _key(log_knn_graph(G, g, 4, batch)) == _key(log_knn_graph(G, g, 4, batch, method="brute"))
        with pytest.raises(ValueError, match="no log_norm_embedding"):
            log_knn_graph(G, g, 4, batch, method="embedding")
    with pytest.raises(ValueError, match="method must be one of"):
        log_radius_graph("SO3", get_group("SO3").random(3), 1.0, method="kdtree")
    assert GRAPH_METHODS == ("auto", "embedding", "brute")


@pytest.mark.parametrize("name", EMBEDDED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_embedding_equals_brute(name, dtype):
    G, g, batch = _data(name, dtype)
    for self_loops in (True, False):
        for k in (1, 4, 40):  # 40 > most sequences
            a = log_knn_graph(G, g, k, batch, self_loops=self_loops, method="brute")
            b = log_knn_graph(G, g, k, batch, self_loops=self_loops, method="embedding")
            assert _key(a) == _key(b), (self_loops, k)
            assert torch.equal(b[1], torch.sort(b[1], stable=True).values)  # grouped by target


@pytest.mark.parametrize("name", EMBEDDED)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_radius_embedding_equals_brute(name, dtype):
    G, g, batch = _data(name, dtype, seed=2)
    for self_loops in (True, False):
        for r in (1e-9, 0.5, 1.5, 10.0):
            a = log_radius_graph(G, g, r, batch, self_loops=self_loops, method="brute")
            b = log_radius_graph(G, g, r, batch, self_loops=self_loops, method="embedding")
            assert _key(a) == _key(b), (self_loops, r)


@pytest.mark.parametrize("name", ["SE2", "SO3", "SE3"])
def test_auto_on_long_sequences_and_clustered_data(name):
    """Long sequences take the embedding path under "auto"; clustered (random-walk) data."""
    G = get_group(name)
    gen = torch.Generator().manual_seed(3)
    steps = G.exp(0.05 * torch.randn(400, G.dim, generator=gen, dtype=torch.float64))
    g = [G.random(generator=gen, dtype=torch.float64)]
    for s in steps[1:]:
        g.append(G.compose(g[-1], s))
    g = torch.stack(g)
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([300, 100]))
    a = log_knn_graph(G, g, 16, batch, method="brute")
    assert _key(log_knn_graph(G, g, 16, batch)) == _key(a)
    assert _key(log_radius_graph(G, g, 0.2, batch)) == _key(log_radius_graph(G, g, 0.2, batch, method="brute"))


@pytest.mark.parametrize("name", ["SE2", "SE3"])
def test_knn_is_a_nearest_set_with_ties(name):
    """Equally spaced sequences (many equal distances): every kept source is at least as near
    as every dropped one, and the counts equal the brute force's."""
    G = get_group(name)
    xi = 0.3 * torch.randn(G.dim, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    g = G.exp(torch.arange(30, dtype=torch.float64)[:, None] * xi)
    for self_loops in (True, False):
        ei = log_knn_graph(G, g, 5, self_loops=self_loops, method="embedding")
        brute = log_knn_graph(G, g, 5, self_loops=self_loops, method="brute")
        assert ei.shape == brute.shape
        d = G.log(G.between(g[:, None], g[None])).norm(dim=-1)  # (i, j)
        for i in range(30):
            kept = ei[0][ei[1] == i]
            dropped = torch.ones(30, dtype=torch.bool)
            dropped[kept] = False
            if not self_loops:
                dropped[i] = False
            assert d[i, kept].max() <= d[i, dropped].min() + 1e-12


def test_empty_and_single():
    G = get_group("SE3")
    assert log_knn_graph(G, G.random(0), 3, method="embedding").shape == (2, 0)
    assert log_radius_graph(G, G.random(0), 1.0, method="embedding").shape == (2, 0)
    assert log_knn_graph(G, G.random(1), 3, method="embedding").tolist() == [[0], [0]]
    assert log_knn_graph(G, G.random(1), 3, self_loops=False, method="embedding").shape == (2, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["SO3", "SE3"])
def test_cuda_embedding_equals_brute(name):
    G, g, batch = _data(name, torch.float64, sizes=[50, 700, 3])
    g, batch = g.cuda(), batch.cuda()
    a = log_knn_graph(G, g, 8, batch, method="brute")
    b = log_knn_graph(G, g, 8, batch, method="embedding")
    assert b.device == g.device and _key(a) == _key(b)
    a = log_radius_graph(G, g, 1.0, batch, method="brute")
    b = log_radius_graph(G, g, 1.0, batch, method="embedding")
    assert b.device == g.device and _key(a) == _key(b)


# ------------------------------------------------------------- huge graph ids, bad numbers
@pytest.mark.parametrize("method", ["brute", "embedding"])
def test_log_graphs_cost_follows_tokens_not_the_largest_graph_id(method):
    import time
    g = get_group("SE2").random(4, generator=torch.Generator().manual_seed(0))
    dense = torch.tensor([0, 0, 1, 1])
    for big in (3 * 10 ** 7, 10 ** 8, 2 ** 62):
        sparse = torch.tensor([0, 0, big, big])
        t = time.perf_counter()
        knn = log_knn_graph("SE2", g, 1, sparse, method=method)
        rad = log_radius_graph("SE2", g, 10.0, sparse, method=method)
        assert time.perf_counter() - t < 2.0  # was 8-13 s and 1.5 GB at 3e7 (a bincount up to the id)
        assert torch.equal(knn, log_knn_graph("SE2", g, 1, dense, method=method))
        assert torch.equal(rad, log_radius_graph("SE2", g, 10.0, dense, method=method))


@pytest.mark.parametrize("bad, match", [
    (dict(chunk=0), "chunk must be a positive int"), (dict(chunk=-1), "chunk must be a positive int"),
    (dict(chunk=1.5), "chunk must be a positive int"), (dict(self_loops="yes"), "self_loops"),
])
def test_log_graph_bad_arguments_name_themselves(bad, match):
    g = get_group("SE2").random(5)
    with pytest.raises(ValueError, match=match):
        log_knn_graph("SE2", g, 2, **bad)
    with pytest.raises(ValueError, match=match):
        log_radius_graph("SE2", g, 1.0, **bad)


@pytest.mark.parametrize("r", [float("nan"), float("inf"), -1.0, 0.0, "one", None])
def test_log_radius_graph_bad_radius(r):
    with pytest.raises(ValueError, match="r must be a finite number > 0"):
        log_radius_graph("SE2", get_group("SE2").random(3), r)


def test_log_graph_bad_elements():
    g = get_group("SE2").random(3)
    with pytest.raises(ValueError, match=r"shape \(3, 3, 3\)"):
        log_knn_graph("SE2", g[:, :2], 1)
    with pytest.raises(ValueError, match="NaN or infinite"):
        log_knn_graph("SE2", g * float("inf"), 1)
    with pytest.raises(ValueError, match="floating-point"):
        log_knn_graph("SE2", g.long(), 1)
    with pytest.raises(ValueError, match="k must be a positive int"):
        log_knn_graph("SE2", g, 0)
