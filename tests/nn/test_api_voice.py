"""One API voice across sibling layers (issue 42.2): the new spellings work, and each old
spelling still works for one release with a DeprecationWarning.

* precomputed relative logs are ``rel_log`` in LieSelfAttention and LieAlgebraAttention
  (``w`` deprecated in the latter);
* ``group`` is given to every attention layer (LieSelfAttention's and LieTransformerBlock's
  ``"SE2"`` default is deprecated);
* S2NeighborhoodAttention takes PyG's ``heads`` beside torch-harmonics' ``num_heads``;
* EquivariantViT takes a public ``head_ids`` (``_head_ids`` deprecated);
* ``invariants`` and ``edge_attr`` are keyword arguments of both Lie attention layers (their
  fourth positional argument differs and stays as it is).
"""
import warnings

import pytest
import torch

from pyg_lie.groups import SE2
from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention, LieTransformerBlock, S2NeighborhoodAttention
from pyg_lie.nn.lie_algebra_attention import relative_log

f64 = torch.float64


def _graph(N=10, E=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, N, (2, E), generator=gen)
    g = SE2().random(N, generator=gen, dtype=f64)
    x = torch.randn(N, 8, generator=gen, dtype=f64)
    return x, ei, g


@pytest.fixture
def no_deprecation():
    """The new spellings warn nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield


# ------------------------------------------------------------------ rel_log (was w)
def test_lie_algebra_attention_rel_log(no_deprecation):
    torch.manual_seed(0)
    x, ei, g = _graph()
    layer = LieAlgebraAttention(8, 8, "SE2", heads=2, score="mlp").double()
    w, valid = relative_log(layer.group, g, ei)
    want = layer(x, ei, g)
    assert torch.allclose(layer(x, ei, g, rel_log=w, valid=valid), want, atol=1e-12)
    # rel_log is read instead of g: a different rel_log changes the output
    assert not torch.allclose(layer(x, ei, g, rel_log=w.flip(0)), want, atol=1e-6)
    with pytest.raises(ValueError, match="rel_log must have shape"):
        layer(x, ei, g, rel_log=w[:3])


def test_lie_algebra_attention_w_is_deprecated():
    torch.manual_seed(0)
    x, ei, g = _graph()
    layer = LieAlgebraAttention(8, 8, "SE2", heads=2, score="mlp").double()
    w, _ = relative_log(layer.group, g, ei)
    want = layer(x, ei, g, rel_log=w)
    with pytest.warns(DeprecationWarning, match=r"w= is deprecated.*rel_log="):
        got = layer(x, ei, g, w=w)
    assert torch.equal(got, want)
    with pytest.warns(DeprecationWarning, match="w= is deprecated"):  # its positional slot too
        got = layer(x, ei, g, None, None, w)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="pass rel_log only"):
        layer(x, ei, g, w=w, rel_log=w)


def test_lie_self_attention_and_algebra_attention_share_rel_log(no_deprecation):
    torch.manual_seed(1)
    x, ei, g = _graph()
    layer = LieSelfAttention(8, 8, "SE2", heads=2).double()
    rel = layer.group.relative_log(g, ei, one_sided_cut=True)
    assert torch.allclose(layer(x, ei, g, rel_log=rel), layer(x, ei, g), atol=1e-12)


def test_lie_algebra_transformer_warns_nothing(no_deprecation):
    from pyg_lie.models import LieAlgebraTransformer
    torch.manual_seed(0)
    G = SE2()
    model = LieAlgebraTransformer("SE2", 8, num_layers=2, heads=2).double()
    g = G.random(6, dtype=f64)
    assert torch.isfinite(model(g, batch=torch.tensor([0, 0, 0, 1, 1, 1])).prediction).all()


# ------------------------------------------------------------------ group always given
def test_group_default_is_deprecated():
    torch.manual_seed(2)
    x, ei, g = _graph()
    with pytest.warns(DeprecationWarning, match="LieSelfAttention: leaving out group"):
        old = LieSelfAttention(8, 8, heads=2)
    assert old.group.name == "SE2"
    torch.manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = LieSelfAttention(8, 8, "SE2", heads=2)
    assert torch.equal(old.double()(x, ei, g), new.double()(x, ei, g))
    with pytest.warns(DeprecationWarning, match="LieTransformerBlock: leaving out group"):
        block = LieTransformerBlock(8, heads=2)
    assert block.attn.group.name == "SE2"
    with pytest.warns(DeprecationWarning) as record:
        LieSelfAttention(8)
    assert record[0].filename == __file__  # the warning points at the caller's line


def test_group_given_warns_nothing(no_deprecation):
    LieSelfAttention(8, group="SE2")
    LieSelfAttention(8, 8, "SE3", heads=2)
    LieTransformerBlock(8, "SE2", heads=2)
    LieTransformerBlock(8, group=SE2(), heads=2)
    LieAlgebraAttention(8, 8, "SE2")
    LieAlgebraAttention(8, 8, group="SE2")


# ------------------------------------------------------------------ heads / num_heads
def test_s2_neighborhood_attention_heads(no_deprecation):
    torch.manual_seed(3)
    a = S2NeighborhoodAttention(4, (6, 12), (6, 12), num_heads=2)
    torch.manual_seed(3)
    b = S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=2)
    assert a.heads == a.num_heads == b.heads == b.num_heads == 2
    q = torch.randn(1, 4, 6, 12)
    assert torch.equal(a(q), b(q))
    assert S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=2, num_heads=2).heads == 2
    assert S2NeighborhoodAttention(4, (6, 12), (6, 12)).heads == 1  # torch-harmonics' default
    assert S2NeighborhoodAttention(4, (6, 12), (6, 12), "equiangular", "equiangular", 4).heads == 4  # positional
    with pytest.raises(ValueError, match=r"heads \(2\) and num_heads \(4\)"):
        S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=2, num_heads=4)
    with pytest.raises(ValueError, match="heads must be an int"):
        S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=1.5, num_heads=2)
    with pytest.raises(ValueError, match="heads"):
        S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=0)


def test_s2_neighborhood_attention_heads_state_dict_matches_torch_harmonics():
    th = pytest.importorskip("torch_harmonics")
    ours = S2NeighborhoodAttention(4, (6, 12), (6, 12), heads=2)
    theirs = th.NeighborhoodAttentionS2(4, (6, 12), (6, 12), num_heads=2)
    theirs.load_state_dict(ours.state_dict())


# ------------------------------------------------------------------ EquivariantViT head_ids
def _vit(**kw):
    from pyg_lie.models import EquivariantViT
    torch.manual_seed(4)
    return EquivariantViT("C4", "square", img_size=8, patch_size=2, num_classes=3, depth=2, heads=2, channels=2, **kw)


def test_vit_head_ids(no_deprecation):
    # one head for the trivial channels, the other for the rest (C4's regular rep: A, B, E)
    base = _vit()
    V = base.field_type
    ids = [[0] * C if i == 0 else [1] * C for i, (r, C, _) in enumerate(V.blocks)]
    model = _vit(head_ids=ids)
    assert all(blk.attn.head_ids == ids for blk in model.blocks)
    assert [blk.attn.head_ids for blk in base.blocks] != [ids, ids]
    images = torch.randn(2, 3, 8, 8)
    assert torch.isfinite(model(images)).all()
    small = model.restrict("C2")  # restrict passes the heads on as head_ids
    assert torch.allclose(small(images), model(images), atol=1e-5)
    with pytest.raises(ValueError, match="head_ids must hold one list of head ids per irrep"):
        _vit(head_ids=ids[:-1])
    with pytest.raises(ValueError, match="head_ids: one head id per channel"):
        _vit(head_ids=[ids[0][:-1]] + ids[1:])
    with pytest.raises(ValueError, match="head_ids entries"):
        _vit(head_ids=[[-1] * len(ids[0])] + ids[1:])


def test_vit_private_head_ids_is_deprecated():
    base = _vit()
    V = base.field_type
    ids = [[0] * C if i == 0 else [1] * C for i, (r, C, _) in enumerate(V.blocks)]
    with pytest.warns(DeprecationWarning, match=r"_head_ids= is deprecated.*head_ids="):
        old = _vit(_head_ids=ids)
    new = _vit(head_ids=ids)
    images = torch.randn(2, 3, 8, 8)
    assert torch.equal(old(images), new(images))
    with pytest.raises(ValueError, match="pass head_ids only"):
        _vit(_head_ids=ids, head_ids=ids)


# ------------------------------------------------------------------ invariants / edge_attr by keyword
def test_invariants_and_edge_attr_by_keyword(no_deprecation):
    """The fourth positional argument differs (LieSelfAttention: invariants; LieAlgebraAttention:
    edge_attr); by keyword both layers take the same call."""
    torch.manual_seed(5)
    x, ei, g = _graph()
    ea = torch.randn(ei.shape[1], 3, dtype=f64)
    inv = torch.randn(x.shape[0], 2, dtype=f64)
    lsa = LieSelfAttention(8, 8, "SE2", heads=2, edge_dim=3, invariant_dim=2).double()
    laa = LieAlgebraAttention(8, 8, "SE2", heads=2, edge_dim=3).double()
    assert torch.equal(lsa(x, ei, g, invariants=inv, edge_attr=ea), lsa(x, ei, g, inv, ea))
    assert torch.equal(laa(x, ei, g, edge_attr=ea), laa(x, ei, g, ea))
    # positional: the fourth argument is each layer's own
    assert not torch.allclose(lsa(x, ei, g, inv, ea), lsa(x, ei, g, inv, torch.zeros_like(ea)))
    assert not torch.allclose(laa(x, ei, g, ea), laa(x, ei, g, torch.zeros_like(ea)))
    for layer in (lsa, laa):
        assert "fourth positional argument" in type(layer).forward.__doc__
        assert "fourth positional argument" in type(layer).__doc__


def test_lie_algebra_attention_checks_through_the_shared_helpers():
    """Issue 42.3: the constructor's checks are _checks' (one message for one mistake)."""
    for kw, name in ((dict(dropout="a"), "dropout"), (dict(dropout=float("nan")), "dropout"),
                     (dict(dropout=1.0), "dropout"), (dict(heads=True), "heads"), (dict(kernel_dim=2.5), "kernel_dim")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            LieAlgebraAttention(8, 8, "SE2", **{"heads": 1, **kw})
    layer = LieAlgebraAttention(8, 8, "SE2", heads=2, dropout=0.25)
    assert type(layer.heads) is int and layer.dropout == 0.25
