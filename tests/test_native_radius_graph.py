"""The native cell-list radius graph (``_native/radius_graph.c``) against the k-d tree backend."""
import math

import pytest
import torch

from pyg_lie.neighbors import radius_graphs
from pyg_lie.neighbors import radius_graph
from pyg_lie.ops import _native


def _calls(monkeypatch):
    calls = []
    real = _native.radius_graph
    monkeypatch.setattr(_native, "radius_graph", lambda *a: calls.append(1) or real(*a))
    return calls


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("loop", [True, False])
def test_matches_kdtree(monkeypatch, d, dtype, loop):
    gen = torch.Generator().manual_seed(d)
    calls = _calls(monkeypatch)
    n = 700
    pos = (torch.rand(n, d, generator=gen, dtype=torch.float64) * 10 - 5).to(dtype)
    sizes = [0, 1, 300, 2, 0, 397]  # empty and one-point graphs among them
    batch = torch.repeat_interleave(torch.arange(len(sizes)) * 3 - 4, torch.tensor(sizes))  # any sorted ids
    for r in (0.0, 0.7, 2.5, 30.0):
        for b in (None, batch):
            out = radius_graph(pos, r, b, loop=loop)
            ref = radius_graph(pos, r, b, loop=loop, backend="kdtree")
            assert torch.equal(out, ref), (r, b is None)
    assert len(calls) == 8


def test_boundary_is_inclusive_on_a_lattice():
    """Integer coordinates: distances 1 and 2 are exact, and every pair at exactly r is kept."""
    g = torch.stack(torch.meshgrid(torch.arange(12.0), torch.arange(9.0), indexing="ij"), -1).reshape(-1, 2)
    g = g[torch.randperm(g.shape[0], generator=torch.Generator().manual_seed(0))]
    for r in (1.0, 2.0):
        out = radius_graph(g, r)
        d2 = ((g[out[0]] - g[out[1]]) ** 2).sum(1)
        assert d2.max() == r * r
        ref = radius_graph(g, r, backend="cdist")
        assert torch.equal(out, ref)
        # every lattice pair at exactly r on an axis: both neighbours along each axis where present
        on_axis = ((d2 == r * r) & ((g[out[0]] - g[out[1]]).abs().max(1).values == r)).sum()
        inner = int(((g[:, 0] >= r) & (g[:, 0] <= 11 - r)).sum() * 2 + ((g[:, 1] >= r) & (g[:, 1] <= 8 - r)).sum() * 2)
        border = 2 * (int(r) * 9 + int(r) * 12)  # one-sided neighbours of the border rows and columns
        assert on_axis == inner + border


def test_far_apart_points_and_duplicates():
    """A cloud of duplicates with a far point: the grid is coarsened to its cell limit and the
    duplicates (distance 0) still connect; r = 0 keeps only them."""
    pos = torch.cat([torch.zeros(50, 3), torch.rand(200, 3, generator=torch.Generator().manual_seed(1)),
                     torch.tensor([[1e9, -1e9, 3e8]])])
    for r in (0.0, 0.05, 1.0):
        out = radius_graph(pos, r, loop=False)
        assert torch.equal(out, radius_graph(pos, r, loop=False, backend="kdtree"))
    assert radius_graph(pos, 0.0, loop=False).shape[1] >= 50 * 49


def test_many_small_graphs_and_threads_agree():
    gen = torch.Generator().manual_seed(2)
    sizes = torch.randint(1, 30, (400,), generator=gen)
    batch = torch.repeat_interleave(torch.arange(400), sizes)
    pos = torch.randn(int(sizes.sum()), 3, generator=gen) * 2
    n = torch.get_num_threads()
    outs = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            outs.append(radius_graph(pos, 1.5, batch, loop=True))
    finally:
        torch.set_num_threads(n)
    assert torch.equal(outs[0], outs[1])
    assert torch.equal(outs[0], radius_graph(pos, 1.5, batch, loop=True, backend="kdtree"))


def test_where_the_native_path_does_not_apply(monkeypatch):
    calls = _calls(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    pos = torch.rand(60, 2, generator=gen)
    radius_graph(pos, 0.3, torch.randint(0, 3, (60,), generator=gen))  # unsorted batch
    radius_graph(pos, 0.3, max_num_neighbors=4)                          # truncation
    radius_graph(pos, 0.3, backend="kdtree")                             # an explicit backend
    radius_graph(torch.rand(60, 4, generator=gen), 0.3)                  # four dimensions
    assert calls == []
    monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    radius_graph(pos, 0.3)
    assert calls == []


def test_compiled_graph_matches(monkeypatch):
    """Under torch.compile the native path steps aside (its sizes depend on the data)."""
    monkeypatch.setattr(radius_graphs, "tracing", lambda: True)
    calls = _calls(monkeypatch)
    pos = torch.rand(80, 2, generator=torch.Generator().manual_seed(4))
    out = radius_graph(pos, 0.2)
    assert calls == [] and torch.equal(out, radius_graph(pos, 0.2, backend="kdtree"))
    assert math.isfinite(float(out.float().sum()))


def test_clustered_cloud_falls_back_to_the_kdtree(monkeypatch):
    """A tight cluster and one far point: the capped grid puts the cluster in one cell, with
    n^2 candidates; the kernel declines before deciding them and the k-d tree answers."""
    results = []
    real = _native.radius_graph
    monkeypatch.setattr(_native, "radius_graph", lambda *a: results.append(real(*a)) or results[-1])
    gen = torch.Generator().manual_seed(5)
    pos = torch.cat([torch.rand(9000, 2, generator=gen, dtype=torch.float64) * 1e-3,
                     torch.tensor([[1e9, 1e9]], dtype=torch.float64)])
    out = radius_graph(pos, 1e-5)
    assert len(results) == 1 and results[0] is None
    assert torch.equal(out, radius_graph(pos, 1e-5, backend="kdtree"))
