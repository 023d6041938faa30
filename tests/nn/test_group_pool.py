"""GroupPool: per-graph mean / sum / max of lifted-node features, invariance, bad input."""
import pytest
import torch

from pyg_lie.nn import GroupPool


@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
def test_per_graph_reduction_and_permutation_invariance(reduce):
    torch.manual_seed(0)
    x = torch.randn(9, 4, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    pool = GroupPool(reduce)
    out = pool(x, batch)
    for b in range(3):
        rows = x[batch == b]
        want = {"mean": rows.mean(0), "sum": rows.sum(0), "max": rows.max(0).values}[reduce]
        assert torch.allclose(out[b], want, atol=1e-15)
    perm = torch.randperm(9)  # any reordering of the lifted nodes, e.g. g -> u g on them
    assert torch.allclose(pool(x[perm], batch[perm], size=3), out, atol=1e-15)
    assert torch.allclose(pool(x), pool(x, torch.zeros(9, dtype=torch.long)), atol=1e-15)


def test_size_keeps_empty_trailing_graphs_and_bad_input():
    x = torch.ones(4, 2)
    out = GroupPool()(x, torch.tensor([0, 0, 1, 1]), size=3)
    assert out.shape == (3, 2) and torch.equal(out[2], torch.zeros(2))
    with pytest.raises(ValueError, match="batch must be a 1-D tensor with one graph id per row of x"):
        GroupPool()(x, torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="batch must hold graph ids >= 0, got -1"):
        GroupPool()(x, torch.tensor([-1, 0, 1, 1]))
    with pytest.raises(ValueError, match="batch must hold integer graph ids, got torch.float32"):
        GroupPool()(x, torch.tensor([0.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="reduce"):
        GroupPool("median")
    assert repr(GroupPool("max")) == "GroupPool(reduce='max')"


def test_too_small_num_graphs_is_an_error():
    from pyg_lie.nn import GroupPool
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        GroupPool()(torch.randn(5, 3), torch.tensor([0, 0, 1, 2, 2]), size=2)
    assert GroupPool()(torch.randn(5, 3), torch.tensor([0, 0, 1, 2, 2]), size=4).shape == (4, 3)


@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
def test_shapes_and_empty_graphs_as_documented(reduce):
    """GroupPool.forward's docstring: (M, C) and batch (M,) -> (B, C) with B = size, a graph
    without nodes pools to 0; batch=None -> (1, C)."""
    x = torch.randn(5, 3, dtype=torch.float64) - 4.0  # all negative: max of nothing is not max(0, ...)
    batch = torch.tensor([2, 0, 2, 0, 3])
    out = GroupPool(reduce)(x, batch, size=5)
    assert out.shape == (5, 3)
    assert torch.equal(out[[1, 4]], torch.zeros(2, 3, dtype=torch.float64))
    assert GroupPool(reduce)(x, batch).shape == (4, 3)
    assert GroupPool(reduce)(x).shape == (1, 3)
