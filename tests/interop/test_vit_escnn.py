"""escnn as an independent oracle: irreps, regular and quotient representations, field-type
and GeometricTensor round trips, token equivariance under escnn's own transforms."""
import numpy as np
import pytest
import torch

escnn = pytest.importorskip("escnn")

from pyg_lie.models.equivariant_vit import EquivariantViT  # noqa: E402
from pyg_lie.interop.escnn import (escnn_element, escnn_group, escnn_gspace, from_escnn_type,  # noqa: E402
                                  from_geometric_tensor, to_escnn_type, to_geometric_tensor)
from pyg_lie.vit.field_type import FieldType  # noqa: E402
from pyg_lie.groups.finite import o2_group as get_group  # noqa: E402
from pyg_lie.groups.finite_reps import GSet  # noqa: E402


@pytest.mark.parametrize("name", ["D4", "C4", "D6", "C3"])
def test_irreps_and_regular_agree_with_escnn(name):
    G = get_group(name)
    eG = escnn_group(G)
    reg = GSet.quotient(G, [0]).perm_matrices()
    for g in range(G.order):
        eg = escnn_element(eG, G, g)
        for rho in G.irreps:
            from pyg_lie.interop.escnn import escnn_irrep_id
            np.testing.assert_allclose(rho.matrix(*G.pairs[g]), eG.irrep(*escnn_irrep_id(rho))(eg), atol=1e-9)
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
        ours = G.pair_index(G.pairs[g][0], G.pairs[g][1] + 2 * G.pairs[g][0]) if G.dihedral else g
        torch.testing.assert_close(img.transform(eg).tensor.flatten(-2), m.grid.transform_pixels(x.flatten(-2), ours))
    with pytest.raises(ValueError, match="group"):
        to_geometric_tensor(torch.zeros(1, 4, 2, 2), FieldType.regular("D2", 1))


# ------------------------------------------------------------------ escnn end to end
from escnn import gspaces, nn as enn  # noqa: E402

from pyg_lie.groups.finite_reps import invariant_subspace  # noqa: E402
from pyg_lie.vit.patch_embed import EquivariantPatchEmbed, SquareGrid, pixel_type_basis  # noqa: E402


def _perturb(module, scale=0.3):
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module.eval()


@pytest.fixture(scope="module", params=["C4", "D4"])
def stem_and_vit(request):
    """An escnn stem (R2Conv trivial -> regular fields, ReLU) feeding the ViT, float64, random
    non-trivial weights (built once per group: escnn's dihedral layers are slow to build)."""
    torch.manual_seed(0)
    gs = escnn_gspace(request.param)
    tin = gs.type(gs.trivial_repr)
    stem = enn.SequentialModule(enn.R2Conv(tin, gs.type(*[gs.regular_repr] * 2), kernel_size=3, padding=1),
                                enn.ReLU(gs.type(*[gs.regular_repr] * 2)))
    stem = _perturb(stem.to(torch.float64))
    vit = EquivariantViT(request.param, img_size=8, patch_size=2, num_classes=3, depth=1, heads=3, channels=3,
                         in_type=stem.out_type)
    vit = _perturb(vit.to(torch.float64))
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    return gs, stem, vit, enn.GeometricTensor(x, tin)


def test_escnn_stem_into_vit_is_invariant(stem_and_vit):
    gs, stem, vit, img = stem_and_vit
    with torch.no_grad():
        fields = stem(img)
        y = vit(fields)
        assert y.abs().max() > 0.1
        worst_vit, worst_all = 0.0, 0.0
        for g in gs.fibergroup.elements:
            # the ViT on escnn fields: exact in float64
            worst_vit = max(worst_vit, float((vit(fields.transform(g)) - y).abs().max()))
            # stem + ViT on the transformed image: escnn samples its filter basis in float32
            worst_all = max(worst_all, float((vit(stem(img.transform(g))) - y).abs().max()))
        assert worst_vit < 1e-12
        assert worst_all < 1e-5
        # the checks can fail: a one-pixel shift of a blob changes the output, and so does
        # rotating the field array without acting on the fibres (not the group action)
        bump = img.tensor.clone()
        bump[..., 1, 2] += 1.0
        assert float((vit(stem(enn.GeometricTensor(bump, img.type))) - y).abs().max()) > 1e-3
        rot = enn.GeometricTensor(torch.rot90(fields.tensor, 1, dims=(-2, -1)), fields.type)
        assert float((vit(rot) - vit(fields.transform(gs.fibergroup.element((0, 1) if gs.fibergroup.order() == 8
                                                                               else 1)))).abs().max()) > 1e-3


def test_features_as_geometric_tensor_transform_and_group_pooling(stem_and_vit):
    gs, stem, vit, img = stem_and_vit
    pool = enn.GroupPooling(vit.out_type)
    with torch.no_grad():
        fields = stem(img)
        f = vit.features(fields, as_geometric_tensor=True)
        assert f.type == vit.out_type and f.type == gs.type(*[gs.regular_repr] * 3)
        assert f.tensor.shape == (2, vit.field_type.dim, 4, 4)
        # the class token is set apart: the patch tokens in the image's layout
        tokens = vit.features(fields)[:, 1:]
        back, V = from_geometric_tensor(f, vit.group, tokens=True)
        assert V == vit.field_type
        torch.testing.assert_close(back, tokens, atol=1e-12, rtol=0)
        inv = pool(f).tensor.mean((-2, -1))
        for g in gs.fibergroup.elements:
            fg = vit.features(fields.transform(g), as_geometric_tensor=True)
            torch.testing.assert_close(fg.tensor, f.transform(g).tensor, atol=1e-12, rtol=0)
            # escnn's GroupPooling returns float32
            torch.testing.assert_close(pool(fg).tensor.mean((-2, -1)), inv, atol=1e-6, rtol=0)
        assert float((f.transform(gs.fibergroup.elements[1]).tensor - f.tensor).abs().max()) > 1e-3
        every = vit.features(fields, return_all=True, as_geometric_tensor=True)
        assert len(every) == 2 and all(isinstance(e, enn.GeometricTensor) for e in every)


def test_features_as_geometric_tensor_without_in_type():
    """Image input, escnn output: tokens transform under escnn's transform of the image."""
    torch.manual_seed(1)
    vit = _perturb(EquivariantViT("C4", img_size=8, patch_size=2, in_channels=1, num_classes=2, depth=1,
                                  channels=3).double())
    gs = escnn_gspace("C4")
    img = enn.GeometricTensor(torch.randn(2, 1, 8, 8, dtype=torch.float64), gs.type(gs.trivial_repr))
    with torch.no_grad():
        f = vit.features(img.tensor, as_geometric_tensor=True)
        for g in gs.fibergroup.elements:
            torch.testing.assert_close(vit.features(img.transform(g).tensor, as_geometric_tensor=True).tensor,
                                       f.transform(g).tensor, atol=1e-12, rtol=0)


def test_trivial_in_type_equals_the_image_model():
    """escnn's image type (trivial fields) needs no change of basis: same weights, same logits."""
    gs = escnn_gspace("D4")
    kw = dict(img_size=8, patch_size=2, num_classes=3, depth=1, heads=3, channels=3)
    torch.manual_seed(3)
    plain = _perturb(EquivariantViT("D4", in_channels=2, **kw).double())
    torch.manual_seed(3)
    typed = _perturb(EquivariantViT("D4", in_type=gs.type(gs.trivial_repr, gs.trivial_repr), **kw).double())
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(typed(enn.GeometricTensor(x, typed.in_type)), plain(x))


@pytest.mark.parametrize("group", ["C4", "D4"])
def test_pixel_type_patch_embedding_spans_full_hom_space(group):
    """For pixels carrying fields W (regular + a 2-d irrep), the number of patch weights
    equals dim Hom_G(C(U, W), V) from the numerical null space, and the change of basis is
    an orthogonal intertwiner."""
    grid = SquareGrid(group, 4, 2)
    G = grid.group
    W = FieldType.regular(G, 1) + FieldType(G, {"E1": 1})
    V = FieldType.regular(G, 1)
    T, Q = pixel_type_basis(grid, W)
    np.testing.assert_allclose(Q @ Q.T, np.eye(len(Q)), atol=1e-10)
    P = np.zeros((G.order, grid.patch_pixels, grid.patch_pixels))
    for g in range(G.order):
        P[g, grid.U_perms[g], np.arange(grid.patch_pixels)] = 1.0
        np.testing.assert_allclose(T.representation(g) @ Q, Q @ np.kron(W.representation(g), P[g]), atol=1e-10)
    pe = EquivariantPatchEmbed(grid, W.dim, V, pixel_type=W)
    mats = [np.kron(V.representation(g), np.kron(W.representation(g), P[g])) for g in G.generator_indices]
    assert invariant_subspace(np.stack(mats)).shape[0] == sum(p.numel() for p in pe.linear.weights.values())
    with pytest.raises(ValueError, match="in_channels"):
        EquivariantPatchEmbed(grid, 3, V, pixel_type=W)


def test_in_type_bad_inputs(stem_and_vit):
    gs, stem, vit, img = stem_and_vit
    G = vit.group.name
    fields = stem(img)
    with pytest.raises(TypeError, match="GeometricTensor"):
        vit(fields.tensor)  # a plain tensor: the fibres' representation would be lost
    with pytest.raises(ValueError, match="in_type"):
        vit(enn.GeometricTensor(torch.randn(1, fields.type.size, 8, 8, dtype=torch.float64),
                                gs.type(*[gs.trivial_repr] * fields.type.size)))
    with pytest.raises(ValueError, match="shape"):
        vit(enn.GeometricTensor(torch.randn(1, fields.type.size, 6, 6, dtype=torch.float64), fields.type))
    with pytest.raises(ValueError, match="torch.float32 but the model.s parameters are torch.float64"):
        vit(enn.GeometricTensor(torch.randn(1, fields.type.size, 8, 8), fields.type))
    with pytest.raises(ValueError, match="restrict"):
        vit.restrict("C2")
    plain = EquivariantViT(G, img_size=8, patch_size=2, in_channels=fields.type.size, depth=0, channels=3)
    with pytest.raises(TypeError, match="in_type"):
        plain(fields)
    other = gspaces.rot2dOnR2(4) if G == "D4" else gspaces.flipRot2dOnR2(4)
    for bad in [other.type(*[other.regular_repr] * 2), gspaces.rot2dOnR2(8).type(gspaces.rot2dOnR2(8).trivial_repr),
                gspaces.flipRot2dOnR2(4, axis=0.0).type(gspaces.flipRot2dOnR2(4, axis=0.0).regular_repr)]:
        with pytest.raises(ValueError, match=r"in_type: .*(gspaces\.rot2dOnR2|gspaces\.flipRot2dOnR2)"):
            EquivariantViT(G, img_size=8, patch_size=2, depth=0, channels=3, in_type=bad)
    with pytest.raises(TypeError, match="in_type"):
        EquivariantViT(G, img_size=8, patch_size=2, depth=0, channels=3, in_type=FieldType.regular(G, 1))
    with pytest.raises(ValueError, match="in_channels"):
        EquivariantViT(G, img_size=8, patch_size=2, depth=0, channels=3, in_type=stem.out_type, in_channels=3)
    with pytest.raises(ValueError, match="grid"):
        EquivariantViT(G, "hex", img_size=8, patch_size=2, depth=0, channels=3, in_type=stem.out_type)
    with pytest.raises(ValueError, match="as_geometric_tensor"):
        EquivariantViT("C6", "hex", img_size=8, patch_size=2, patches_side=1, in_channels=1, depth=0,
                       channels=3).features(torch.randn(1, 1, 8, 8), as_geometric_tensor=True)


def test_d2_in_type_is_refused():
    gs = gspaces.flipRot2dOnR2(2)
    with pytest.raises(ValueError, match="in_type"):
        EquivariantViT("D2", img_size=8, patch_size=2, depth=0, channels=3, in_type=gs.type(gs.regular_repr))


def test_to_geometric_tensor_regular_type_and_old_import_path():
    import pyg_lie.vit.escnn_interop as old
    import pyg_lie.interop.escnn as new
    assert old.to_geometric_tensor is new.to_geometric_tensor and old.from_escnn_type is new.from_escnn_type
    V = FieldType.regular("D4", 2)
    ftype = to_escnn_type(V, regular=True)
    assert ftype == escnn_gspace("D4").type(*[escnn_gspace("D4").regular_repr] * 2)
    x = torch.randn(3, V.dim, 4, 4, dtype=torch.float64)
    gt = to_geometric_tensor(x, V, field_type=ftype)
    assert gt.type == ftype
    back, V2 = from_geometric_tensor(gt, "D4")
    assert V2 == V
    torch.testing.assert_close(back, x)
    with pytest.raises(ValueError, match="regular"):
        to_escnn_type(FieldType("D4", {"A1": 1, "E1": 1}), regular=True)
    with pytest.raises(ValueError, match="field_type"):
        to_geometric_tensor(x, V, field_type=to_escnn_type(FieldType.regular("D4", 1), regular=True))
    c4 = escnn_gspace("C4")
    with pytest.raises(ValueError, match=r"field_type: .*gspaces\.flipRot2dOnR2\(N=4\)"):
        to_geometric_tensor(x, V, field_type=c4.type(*[c4.regular_repr] * 4))
