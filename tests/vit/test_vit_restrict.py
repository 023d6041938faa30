"""Theorem 2: model.restrict(H) computes the same function with H-equivariant layers."""
import numpy as np
import pytest
import torch

from pyg_lie.groups.finite import o2_group as get_group
from pyg_lie.models.equivariant_vit import EquivariantViT
from pyg_lie.testing import assert_equivariant
from pyg_lie.vit.field_type import FieldType, restriction_matrix
from pyg_lie.vit.patch_embed import rot_flip_image


def _perturbed(*args, **kw):
    torch.manual_seed(0)
    m = EquivariantViT(*args, **kw).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("G,H", [("D4", "C4"), ("D4", "D2"), ("C4", "C2"), ("D6", "D3"), ("D6", "C6"), ("D3", "C3")])
def test_restriction_matrix_is_equivariant_isometry(G, H):
    V = FieldType.regular(G, 2)
    Hg = get_group(H)
    emb = V.group.subgroup_embedding(Hg)
    W, R, _ = restriction_matrix(V, Hg, emb)
    assert W.dim == V.dim
    np.testing.assert_allclose(R @ R.T, np.eye(V.dim), atol=1e-12)
    for h in range(Hg.order):
        np.testing.assert_allclose(R @ V.representation(emb[h]), W.representation(h) @ R, atol=1e-12)
    # the regular representation of G restricts to [G:H] copies of the regular representation of H
    assert W == FieldType.regular(Hg, 2 * V.group.order // Hg.order)


@pytest.mark.parametrize("H", ["C4", "D2", "C2", "C1"])
def test_square_restrict_identical_outputs(H):
    m = _perturbed("D4", "square", img_size=8, patch_size=2, num_classes=4, depth=2, heads=3, channels=3,
                   mlp_gset="quotients")
    x = torch.randn(3, 3, 8, 8)
    mh = m.restrict(H)
    assert mh.group.name == H and not mh.training
    assert (mh(x) - m(x)).abs().max() < 1e-5
    # the restricted model is an ordinary H-model: perturbing it breaks G- but not H-invariance
    with torch.no_grad():
        for p in mh.parameters():
            p.add_(0.1 * torch.randn_like(p))
    mh = mh.double()
    Hg = mh.group
    # H's elements as matrices act on images through their index (one model of the group)
    rotate = lambda g, img: rot_flip_image(img, Hg, int(Hg.index_of(g)))  # noqa: E731
    assert_equivariant(mh, (x,), elements=Hg.elements(torch.float64), actions_in=rotate,
                       perturb=lambda inp: (inp[0].roll(1, -1),))
    if H in ("C4", "C2"):  # a reflection is no longer a symmetry
        y = mh(x.double())
        assert (mh(x.double().flip(-2)) - y).abs().max() > 1e-4


@pytest.mark.parametrize("H", ["D3", "C6", "C1"])
def test_hex_restrict_identical_outputs(H):
    m = _perturbed("D6", "hex", img_size=12, patch_size=3, patches_side=2, num_classes=3, depth=1, heads=3, channels=3,
                   mlp_gset="regular+trivial", mlp_ratio=0.34).double()
    p = m.grid.to_pixels(torch.randn(2, 3, 12, 12, dtype=torch.float64))
    torch.testing.assert_close(m.restrict(H)(p), m(p), atol=1e-10, rtol=0)


def test_restrict_irrepwise_and_bad_subgroup():
    m = _perturbed("C4", "square", img_size=8, patch_size=4, num_classes=2, depth=1, heads=4, channels=4,
                   attention="irrepwise", irrep_heads={"A": 1, "B": 1, "E1": 2})
    x = torch.randn(2, 3, 8, 8)
    assert (m.restrict("C2")(x) - m(x)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="subgroup"):
        m.restrict("D2")


def test_restrict_leaves_the_model_alone_and_the_old_function_warns():
    from pyg_lie.vit.restrict import restrict_model

    m = _perturbed("D4", "square", img_size=8, patch_size=4, num_classes=2, depth=1, heads=3, channels=3)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    x = torch.randn(2, 3, 8, 8)
    mh = m.restrict("C4")
    assert m.group.name == "D4" and all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())
    with pytest.warns(DeprecationWarning, match="model.restrict"):
        old = restrict_model(m, "C4")
    torch.testing.assert_close(old(x), mh(x))
    with pytest.raises(ValueError, match="cyclic or dihedral"):
        m.restrict("Octahedral")
