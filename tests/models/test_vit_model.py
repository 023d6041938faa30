"""End-to-end invariance and layer-by-layer equivariance of the equivariant ViT."""
import numpy as np
import pytest
import torch

from pyg_lie.groups.finite import o2_group as get_group
from pyg_lie.models.equivariant_vit import EquivariantViT
from pyg_lie.vit.attention import EquivariantSelfAttention, complete_graph
from pyg_lie.vit.field_type import FieldType
from pyg_lie.vit.nonlinearity import FourierNonlinearity, gset_family, gset_from_spec
from pyg_lie.vit.patch_embed import EquivariantPatchEmbed, rot_flip_image, HexGrid, SquareGrid, patch_fourier_basis
from pyg_lie.vit.positional import InvariantPositionalEncoding


def square_image_action(x, G, g):
    """rot90 / flips: g = r^k t^f acts as flip of the y-axis (rows) then k turns of 360/n degrees."""
    return rot_flip_image(x, G, g)


def _perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.mark.parametrize("group", ["D4", "C4", "D2", "C2", "C1"])
def test_square_end_to_end_invariance(group):
    torch.manual_seed(0)
    m = _perturb(EquivariantViT(group, "square", img_size=8, patch_size=2, num_classes=4, depth=2, heads=3, channels=3))
    x = torch.randn(2, 3, 8, 8)
    y = m(x)
    assert torch.isfinite(y).all()
    G = m.group
    for g in range(G.order):
        xg = square_image_action(x, G, g)
        torch.testing.assert_close(xg.flatten(-2), m.grid.transform_pixels(x.flatten(-2), g))
        assert (m(xg) - y).abs().max() < 1e-5
    if G.order > 1:  # the non-trivial part is really non-invariant for C1 models, sanity check of the test
        m1 = _perturb(EquivariantViT("C1", "square", img_size=8, patch_size=2, num_classes=4, depth=1, heads=3, channels=3))
        assert (m1(square_image_action(x, G, 1)) - m1(x)).abs().max() > 1e-3


@pytest.mark.parametrize("group", ["D6", "C6", "D3", "C3", "C1"])
def test_hex_end_to_end_invariance(group):
    torch.manual_seed(1)
    m = _perturb(EquivariantViT(group, "hex", img_size=12, patch_size=3, patches_side=2, num_classes=3, depth=1,
                                heads=3, channels=3))
    assert m.grid.patch_pixels == 19 and m.grid.num_patches == 7
    p = m.grid.to_pixels(torch.randn(2, 3, 12, 12))
    y = m(p)
    for g in range(m.group.order):
        assert (m(m.grid.transform_pixels(p, g)) - y).abs().max() < 1e-5


def test_hex_grid_paper_size_and_resampling():
    grid = HexGrid("D6", 64, 9, 9)
    assert (grid.patch_pixels, grid.num_patches, grid.num_pixels) == (217, 217, 42073)
    # exact square symmetries of the image that are also in D6 (rot180, x-axis flip) commute with resampling
    g2 = HexGrid("D2", 10, 3, 2)
    img = torch.randn(1, 2, 10, 10, dtype=torch.float64)
    G = g2.group
    for g in range(G.order):
        torch.testing.assert_close(g2.to_pixels(square_image_action(img, get_group("D4"), {0: 0, 1: 2, 2: 4, 3: 6}[g])),
                                   g2.transform_pixels(g2.to_pixels(img), g))


def test_bad_inputs():
    with pytest.raises(ValueError, match="img_size"):
        EquivariantViT("D4", "square", img_size=10, patch_size=4)
    with pytest.raises(ValueError, match="group"):
        EquivariantViT("D6", "square", img_size=8, patch_size=2)
    with pytest.raises(ValueError, match="group"):
        EquivariantViT("D4", "hex", img_size=8, patch_size=2)
    with pytest.raises(ValueError, match="grid"):
        EquivariantViT("D4", "triangle", img_size=8, patch_size=2)
    with pytest.raises(ValueError, match="heads"):
        EquivariantViT("D4", "square", img_size=8, patch_size=2, channels=2, heads=3)
    with pytest.raises(ValueError, match="mlp_gset"):
        EquivariantViT("C4", "square", img_size=8, patch_size=2, mlp_gset="quotients")
    m = EquivariantViT("D4", "square", img_size=8, patch_size=2, depth=1)
    with pytest.raises(ValueError, match="images"):
        m(torch.randn(1, 3, 9, 9))
    for images, message in [(torch.randn(1, 1, 8, 8), "images must have 3 channels"),
                            (torch.ones(1, 3, 8, 8, dtype=torch.uint8), "images must be a floating-point tensor, got torch.uint8; use images.float()"),
                            (torch.randn(1, 3, 8, 8, dtype=torch.float64), "model's parameters are torch.float32"),
                            (torch.randn(0, 3, 8, 8), "batch size 0"), (torch.randn(3, 8), "images must have shape")]:
        with pytest.raises(ValueError, match=message):
            m(images)


@pytest.mark.parametrize("group,grid", [("D4", "square"), ("C4", "square"), ("D6", "hex"), ("C3", "hex")])
def test_patch_embedding_and_positional_equivariance(group, grid):
    torch.manual_seed(0)
    gr = SquareGrid(group, 8, 4) if grid == "square" else HexGrid(group, 12, 3, 2)
    E = patch_fourier_basis(gr)
    full = np.concatenate([e.reshape(-1, gr.patch_pixels) for e in E.values()])
    np.testing.assert_allclose(full @ full.T, np.eye(gr.patch_pixels), atol=1e-10)  # complete, orthonormal
    V = FieldType.regular(group, 2)
    pe = EquivariantPatchEmbed(gr, 3, V).double()
    # Hom_G(C(U, R^3), V) has dimension sum_rho 3 nu_rho C_rho dimEnd: check against the numerical null space
    n_w = sum(p.numel() for p in pe.linear.weights.values())
    assert n_w == sum(3 * E[r.name].shape[0] * V.mult[r.name] * r.end_dim for r in V.group.irreps)
    pos = InvariantPositionalEncoding(gr.patch_perms, V).double()
    x = torch.randn(2, 3, gr.num_pixels, dtype=torch.float64)
    y = pos(pe(x))
    for g in range(V.group.order):
        torch.testing.assert_close(pos(pe(gr.transform_pixels(x, g))), gr.transform_tokens(y, V, g))
        torch.testing.assert_close(pos.encoding(), gr.transform_tokens(pos.encoding()[None], V, g)[0])


@pytest.mark.parametrize("group,family", [("D4", "regular"), ("D4", "regular+trivial"), ("D4", "quotients"),
                                          ("C4", "regular"), ("D6", "quotients"), ("D3", "quotients")])
def test_fourier_nonlinearity(group, family):
    G = get_group(group)
    act = FourierNonlinearity(gset_family(G, family, 2)).double()
    if (group, family) == ("D4", "regular+trivial"):
        assert act.field_type.mult["A1"] * 16 == 9 * act.field_type.dim  # 9/16 trivial (paper Sec. 5.3)
    if (group, family) == ("D4", "quotients"):
        assert act.field_type.mult["A1"] * 8 == 3 * act.field_type.dim
    assert all(v > 0 for v in act.field_type.mult.values())
    V = act.field_type
    x = torch.randn(5, V.dim, dtype=torch.float64)
    for g in range(G.order):
        torch.testing.assert_close(act(V.transform(x, g)), V.transform(act(x), g))
    # identity activation: FT^-1 then FT is the identity (orthogonal transform)
    ident = FourierNonlinearity(act.gset, activation=lambda t: t).double()
    torch.testing.assert_close(ident(x), x)


def test_gset_spec_d3_example():
    # D3/{e} = A1 + A2 + 2 E1 and D3/<t> = A1 + E1 (paper Sec. 4.3.1)
    G = get_group("D3")
    act = FourierNonlinearity(gset_from_spec(G, {"e": 1, "t": 2}))
    assert act.field_type.mult == {"A1": 3, "A2": 1, "E1": 4}


@pytest.mark.parametrize("mode", ["coupled", "irrepwise"])
@pytest.mark.parametrize("group", ["D4", "C4"])
def test_attention_equivariance(mode, group):
    torch.manual_seed(0)
    V = FieldType.regular(group, 4)
    kw = dict(irrep_heads={"E1": 2}) if mode == "irrepwise" else {}
    att = EquivariantSelfAttention(V, heads=2 if mode == "coupled" else 4, attention=mode, **kw).double()
    with torch.no_grad():
        for p in att.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(2 * 5, V.dim, dtype=torch.float64)
    ei = complete_graph(2, 5)
    y, (ei2, alpha) = att(x, ei, return_attention_weights=True)
    assert alpha.shape == (ei.shape[1], att.heads) and torch.isfinite(y).all()
    torch.testing.assert_close(alpha.view(2, 5, 5, -1).sum(2), torch.ones(2, 5, att.heads, dtype=torch.float64))
    for g in range(V.group.order):
        torch.testing.assert_close(att(V.transform(x, g), ei), V.transform(y, g))
    perm = torch.randperm(5)  # permutation equivariance over tokens
    xp = x.view(2, 5, -1)[:, perm].reshape(10, -1)
    torch.testing.assert_close(att(xp, ei).view(2, 5, -1), y.view(2, 5, -1)[:, perm])
    assert "heads=" in repr(att)
    att.reset_parameters()


@pytest.mark.parametrize("group,grid", [("D4", "square"), ("C4", "square"), ("D6", "hex")])
def test_layer_by_layer_equivariance_and_local_attention(group, grid):
    torch.manual_seed(0)
    kw = dict(img_size=8, patch_size=2) if grid == "square" else dict(img_size=12, patch_size=3, patches_side=2)
    for radius in (None, 2.5 if grid == "square" else 3.5):  # nearest neighbours (hex spacing 2 sqrt 3)
        m = _perturb(EquivariantViT(group, grid, num_classes=3, depth=2, heads=3, channels=3, attn_radius=radius,
                                    mlp_gset="quotients" if group.startswith("D") else "regular", **kw)).double()
        x = m.grid.to_pixels(torch.randn(2, 3, kw["img_size"], kw["img_size"], dtype=torch.float64))
        if grid == "square":
            x = x.view(2, 3, 8, 8)
        feats = m.features(x, return_all=True)
        V = m.field_type
        for g in range(m.group.order):
            if grid == "square":
                xg = square_image_action(x, m.group, g)
            else:
                xg = m.grid.transform_pixels(x, g)
            fg = m.features(xg, return_all=True)
            for a, b in zip(feats, fg):
                expect = torch.cat([V.transform(a[:, :1], g), m.grid.transform_tokens(a[:, 1:], V, g)], 1)
                torch.testing.assert_close(b, expect)
        if radius is not None:
            assert m.edge_index(2, x.device).shape[1] < 2 * m.num_tokens ** 2


def test_irrepwise_model_and_dtype_device():
    m = EquivariantViT("C4", "square", img_size=8, patch_size=4, num_classes=2, depth=1, heads=4, channels=4,
                       attention="irrepwise", irrep_heads={"A": 1, "B": 1, "E1": 2})
    x = torch.randn(3, 3, 8, 8)
    y = m.double()(x.double())
    assert y.dtype == torch.float64 and y.shape == (3, 2)
    y.sum().backward()
    assert all(p.grad is not None for p in m.parameters() if p.requires_grad)


@pytest.mark.parametrize("group,grid,P", [("D4", "square", 2), ("C4", "square", 3), ("D6", "hex", 2), ("D3", "hex", 2)])
def test_patch_embedding_spans_full_hom_space(group, grid, P):
    """dim Hom_G(C(U), V) from the numerical null space equals the number of patch weights."""
    from pyg_lie.groups.finite_reps import invariant_subspace
    gr = SquareGrid(group, 2 * P, P) if grid == "square" else HexGrid(group, 8, P, 1)
    V = FieldType.regular(group, 1)
    pe = EquivariantPatchEmbed(gr, 1, V)
    G = V.group
    mats = []
    for g in G.generator_indices:
        pi = np.zeros((gr.patch_pixels, gr.patch_pixels))
        pi[gr.U_perms[g], np.arange(gr.patch_pixels)] = 1.0
        mats.append(np.kron(V.representation(g), pi))
    assert invariant_subspace(np.stack(mats)).shape[0] == sum(p.numel() for p in pe.linear.weights.values())


@pytest.mark.parametrize("group,grid", [("D4", "square"), ("C6", "hex")])
def test_blockwise_patch_embedding_equals_dense(group, grid):
    gr = SquareGrid(group, 8, 4) if grid == "square" else HexGrid(group, 12, 3, 2)
    pe = EquivariantPatchEmbed(gr, 3, FieldType.regular(group, 2)).double()
    with torch.no_grad():
        pe.linear.bias.normal_()
    x = torch.randn(2, 3, gr.num_pixels, dtype=torch.float64)
    y = pe(x)
    pe.blockwise = False
    torch.testing.assert_close(y, pe(x))


@pytest.mark.parametrize("mode", ["coupled", "irrepwise"])
@pytest.mark.parametrize("graph", ["complete", "radius"])
def test_fused_attention_equals_message_passing(mode, graph):
    """The fused path (batched products on the complete patch graph, CSR kernels on a local
    one, edges in any order) equals ``propagate``: outputs, attention weights in edge order,
    and gradients of input and parameters, in float64. Unequal head sizes fall back."""
    from pyg_lie.vit.attention import radius_patch_graph
    torch.manual_seed(0)
    V = FieldType.regular("D4", 4)
    kw = dict(irrep_heads={"E1": 2}) if mode == "irrepwise" else {}
    att = EquivariantSelfAttention(V, heads=2 if mode == "coupled" else 4, attention=mode, **kw).double()
    assert att.equal_heads == (mode == "coupled")  # irrepwise: E1 heads are twice as wide
    # one 4-feature head per 1-d irrep, four on E1 (8 channels x dim 2): all heads equal
    equal = EquivariantSelfAttention(V, heads=1, attention="irrepwise", irrep_heads={"E1": 4}).double()
    assert equal.equal_heads and equal.heads == 8
    pos = torch.tensor([[float(i), float(j)] for i in range(3) for j in range(3)])
    ei = complete_graph(2, 10) if graph == "complete" else radius_patch_graph(pos, 1.0, 2)
    ei = ei[:, torch.randperm(ei.shape[1])]
    x0 = torch.randn(20, V.dim, dtype=torch.float64)
    for layer in (att, equal):
        res = []
        for fused in (True, False):
            layer.fused = fused
            layer.zero_grad()
            x = x0.clone().requires_grad_()
            y, (e, alpha) = layer(x, ei, return_attention_weights=True)
            y.pow(2).sum().backward()
            assert torch.equal(e, ei)
            res.append([y.detach(), alpha.detach(), x.grad] + [p.grad.clone() for p in layer.parameters()])
        for a, b in zip(*res):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_fused_attention_compiles_without_graph_breaks():
    """The fused path under torch.compile (AOT autograd, fullgraph): as eager, with and
    without a structure built outside."""
    from pyg_lie.ops import CSRStructure
    torch.manual_seed(1)
    V = FieldType.regular("C4", 2)
    att = EquivariantSelfAttention(V, heads=2).double()
    ei = complete_graph(3, 4)
    x = torch.randn(12, V.dim, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(att, backend="aot_eager", fullgraph=True)
    for csr in (None, CSRStructure.build(ei, 12)):
        ref = torch.autograd.grad(att(x, ei, csr=csr).pow(2).sum(), x)[0]
        got = torch.autograd.grad(compiled(x, ei, csr=csr).pow(2).sum(), x)[0]
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_model_fused_and_message_passing_agree():
    """A whole model with the fused attention (cached patch-graph structure), eager and
    compiled, equals the same weights on the message-passing path."""
    torch.manual_seed(2)
    m = _perturb(EquivariantViT("D4", "square", img_size=8, patch_size=2, num_classes=3, depth=2, heads=3,
                                channels=3)).double()
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    y = m(x)
    assert m._structure(2, x.device).complete
    compiled = torch.compile(m, backend="aot_eager")  # the structure is built eagerly
    torch.testing.assert_close(compiled(x), y, rtol=1e-12, atol=1e-12)
    for blk in m.blocks:
        blk.attn.fused = False
    torch.testing.assert_close(m(x), y, rtol=1e-12, atol=1e-12)
