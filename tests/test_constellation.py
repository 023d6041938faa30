"""Constellation data set statistics, determinism and the transformed test sets."""
import pytest
import torch

from pyg_lie.datasets.constellation import SHAPES, Constellation, templates


def test_statistics():
    ds = Constellation(600, seed=3)
    y = ds._data.y
    assert y.shape == (600, 4) and y.min() == 0 and y.max() == 2
    for s in range(4):  # counts uniform on {0, 1, 2} (up to the "not all zero" rejection)
        freq = torch.bincount(y[:, s], minlength=3).double() / 600
        assert (freq - 1 / 3).abs().max() < 0.08, freq
    assert (y.sum(1) > 0).all()
    sizes = {name: len(t) for name, t in templates().items()}
    for i in range(0, 600, 37):
        d = ds[i]
        assert d.pos.size(0) == sum(int(d.y[0, s]) * sizes[n] for s, n in enumerate(SHAPES))
        assert torch.equal(torch.bincount(d.part, minlength=4), d.y[0] * torch.tensor([3, 4, 5, 4]))
        assert torch.equal(d.x, torch.ones(d.pos.size(0), 1))


def test_deterministic_and_seeds_differ():
    a, b, c = Constellation(20, seed=1), Constellation(20, seed=1), Constellation(20, seed=2)
    assert torch.equal(a._data.pos, b._data.pos) and torch.equal(a._data.y, b._data.y)
    assert not torch.equal(a._data.y, c._data.y)
    sp = Constellation.splits(30, 10, seed=0)
    assert sp["train"].seed != sp["test"].seed


def test_transformed_test_sets():
    sp = Constellation.splits(5, 25, seed=0)
    for name in ("test_T2", "test_SE2"):
        assert torch.equal(sp[name]._data.y, sp["test"]._data.y)
        for i in range(25):
            p, q = sp["test"][i].pos.double(), sp[name][i].pos.double()
            assert torch.allclose(torch.cdist(p, p), torch.cdist(q, q), atol=1e-4)
            if name == "test_T2":
                assert torch.allclose(q - p, (q - p)[:1].expand_as(p), atol=1e-4)
    assert not torch.allclose(sp["test_SE2"][0].pos, sp["test"][0].pos)


def test_bad_arguments():
    with pytest.raises(ValueError, match="augment"):
        Constellation(3, augment="SO3")
    with pytest.raises(ValueError, match="num_samples"):
        Constellation(0)
