"""escnn as an independent oracle: irreps, regular and quotient representations, field-type
and GeometricTensor round trips, token equivariance under escnn's own transforms."""
import numpy as np
import pytest
import torch

escnn = pytest.importorskip("escnn")

from pyg_lie.models.equivariant_vit import EquivariantViT  # noqa: E402
from pyg_lie.vit.escnn_interop import (escnn_element, escnn_group, escnn_gspace, from_escnn_type,  # noqa: E402
                                       from_geometric_tensor, to_escnn_type, to_geometric_tensor)
from pyg_lie.vit.field_type import FieldType  # noqa: E402
from pyg_lie.vit.irreps import GSet, get_group  # noqa: E402


@pytest.mark.parametrize("name", ["D4", "C4", "D6", "C3"])
def test_irreps_and_regular_agree_with_escnn(name):
    G = get_group(name)
    eG = escnn_group(G)
    reg = GSet.quotient(G, [0]).perm_matrices()
    for g in range(G.order):
        eg = escnn_element(eG, G, g)
        for rho in G.irreps:
            from pyg_lie.vit.escnn_interop import escnn_irrep_id
            np.testing.assert_allclose(rho.matrix(*G.elements[g]), eG.irrep(*escnn_irrep_id(rho))(eg), atol=1e-9)
        np.testing.assert_allclose(reg[g], eG.regular_representation(eg), atol=1e-9)
    # escnn's regular field type -> ours: multiplicities and an orthogonal intertwiner
    V, T = from_escnn_type(to_escnn_type(FieldType.trivial(G, 1)).gspace.type(*[eG.regular_representation] * 2), G)
    assert V == FieldType.regular(G, 2)
    np.testing.assert_allclose(T @ T.T, np.eye(V.dim), atol=1e-9)
    for g in range(G.order):
        big = np.kron(np.eye(2), eG.regular_representation(escnn_element(eG, G, g)))
        np.testing.assert_allclose(T @ big, V.representation(g) @ T, atol=1e-9)


def test_field_type_round_trip():
    V = FieldType("C6", {"A": 2, "B": 1, "E1": 3, "E2": 1})
    V2, T = from_escnn_type(to_escnn_type(V), "C6")
    assert V2 == V
    np.testing.assert_allclose(T, np.eye(V.dim), atol=1e-12)


def test_quotient_representations_agree_with_escnn():
    G = get_group("D4")
    eG = escnn_group(G)
    # our subgroup words -> escnn subgroup ids (axis, M) / (None, M)
    pairs = {"r2": (None, 2), "r": (None, 4), "t": (0, 1), "rt": (1, 1), "t,r2": (0, 2), "rt,r2": (1, 2)}
    for words, sid in pairs.items():
        X = GSet.quotient(G, G.closure([G.word(w) for w in words.split(",")]))
        erep = eG.quotient_representation(sid)
        ours = X.perm_matrices()
        for g in range(G.order):  # equal characters <=> isomorphic representations
            assert np.trace(ours[g]) == pytest.approx(np.trace(erep(escnn_element(eG, G, g))), abs=1e-9)
        V, T = from_escnn_type(escnn_gspace(G).type(erep), G)
        assert V.mult == {k: v.shape[0] for k, v in X.fourier_basis().items()}
        for g in range(G.order):
            np.testing.assert_allclose(T @ erep(escnn_element(eG, G, g)), V.representation(g) @ T, atol=1e-9)


@pytest.mark.parametrize("group", ["D4", "C4"])
def test_geometric_tensor_round_trip_and_token_oracle(group):
    torch.manual_seed(0)
    m = EquivariantViT(group, "square", img_size=8, patch_size=2, num_classes=3, depth=1, heads=3, channels=3).eval()
    V, G = m.field_type, m.group
    gs = escnn_gspace(G)
    x = torch.randn(2, 3, 8, 8)
    img = escnn.nn.GeometricTensor(x, gs.type(*[gs.trivial_repr] * 3))
    tok = m.tokens(x)  # (B, 16, V.dim), patches row-major on a 4x4 grid
    gt = to_geometric_tensor(tok, V, gs, grid_shape=(4, 4))
    back, V2 = from_geometric_tensor(gt, G, tokens=True)
    assert V2 == V
    torch.testing.assert_close(back, tok)
    eG = gs.fibergroup
    for g in range(G.order):
        eg = escnn_element(eG, G, g)
        with torch.no_grad():
            expected = gt.transform(eg).tensor
            got = to_geometric_tensor(m.tokens(img.transform(eg).tensor), V, gs, grid_shape=(4, 4)).tensor
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        # escnn's pixel frame is ours rotated by 90 degrees: its reflection (1, 0) is our r^2 t
        ours = G.index(G.elements[g][0], G.elements[g][1] + 2 * G.elements[g][0]) if G.dihedral else g
        torch.testing.assert_close(img.transform(eg).tensor.flatten(-2), m.grid.transform_pixels(x.flatten(-2), ours))
    with pytest.raises(ValueError, match="group"):
        to_geometric_tensor(torch.zeros(1, 4, 2, 2), FieldType.regular("D2", 1))
