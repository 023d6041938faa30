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
    for kwargs, message in [(dict(max_instances=0), "max_instances must be a positive int"),  # used to hang
                            (dict(noise=-0.1), "noise must be a finite number >= 0"),
                            (dict(extent=0.0), "extent must be > 0"),
                            (dict(translation_scale=float("nan")), "translation_scale"),
                            (dict(size_range=(0.0, 1.0)), "size_range")]:
        with pytest.raises(ValueError, match=message):
            Constellation(3, **kwargs)


def test_official_variant_statistics():
    """variant="official": counts Binomial(2, 1/2), five-point L, clouds scaled into [-1, 1],
    orientations within +-0.33 pi of the template's."""
    from pyg_lie.datasets.constellation import official_templates
    n = 800
    ds = Constellation(n, seed=5, variant="official")
    y = ds._data.y
    for s in range(4):
        freq = torch.bincount(y[:, s], minlength=3).double() / n
        assert (freq - torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)).abs().max() < 0.06, freq
    assert (y.sum(1) > 0).all()
    sizes = {name: len(t) for name, t in official_templates().items()}
    assert sizes == {"triangle": 3, "square": 4, "pentagon": 5, "L": 5}
    assert ds._data.pos.min() >= -1 - 1e-6 and ds._data.pos.max() <= 1 + 1e-6
    angles = []
    for i in range(n):
        d = ds[i]
        if i % 23 == 0:
            assert torch.equal(torch.bincount(d.part, minlength=4), d.y[0] * torch.tensor([3, 4, 5, 5]))
        if int(d.y[0, 3]) == 1:  # one L: its arm ends are the farthest pair; template direction 135 deg
            p = d.pos[d.part == 3].double()
            dist = torch.cdist(p, p)
            a, b = divmod(int(dist.argmax()), 5)
            v = (p[a] + p[b]) / 2 - p.mean(0)
            angles.append(torch.rad2deg(torch.atan2(v[1], v[0])) % 360)
    angles = torch.stack(angles)
    assert len(angles) > 100
    # rotations within +-0.33 pi = +-59.4 deg, plus the corner noise (sigma 0.1 on an L of size 2 moves
    # this direction by ~10 deg); Haar orientations fill 0..360 (measured 0.3..358 on the SE2 copy)
    assert angles.min() > 135 - 59.4 - 25 and angles.max() < 135 + 59.4 + 25, (angles.min(), angles.max())
    assert angles.max() - angles.min() > 90
    with pytest.raises(ValueError, match="variant"):
        Constellation(3, variant="paper")


def test_official_variant_splits():
    sp = Constellation.splits(5, 6, seed=1, variant="official")
    assert all(d.variant == "official" for d in sp.values())
    for name in ("test_T2", "test_SE2"):
        assert torch.equal(sp[name]._data.y, sp["test"]._data.y)
        for i in range(6):
            p, q = sp["test"][i].pos.double(), sp[name][i].pos.double()
            assert torch.allclose(torch.cdist(p, p), torch.cdist(q, q), atol=1e-4)
