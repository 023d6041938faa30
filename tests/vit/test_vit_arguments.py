"""Constructor arguments of the equivariant ViT and its layers: a bad value is a ValueError
naming the argument (not a numpy IndexError later, nor silently accepted); stochastic depth
with rate 1 drops the branches instead of dividing by zero."""
import math

import pytest
import torch

from pyg_lie.models.equivariant_vit import EquivariantViT
from pyg_lie.vit import EquivariantSelfAttention, FieldType
from pyg_lie.vit.attention import complete_graph, radius_patch_graph
from pyg_lie.vit.linear import EquivariantLinear, EquivariantRMSNorm
from pyg_lie.vit.patch_embed import EquivariantPatchEmbed, make_grid
from pyg_lie.vit.positional import InvariantPositionalEncoding

SMALL = dict(group="C4", img_size=8, patch_size=4, depth=2, heads=1, channels=1, num_classes=3)


@pytest.mark.parametrize("name, value", [
    ("img_size", 0), ("img_size", -8), ("img_size", 8.5), ("patch_size", 0), ("num_classes", -1),
    ("num_classes", 0), ("depth", -1), ("heads", 0), ("channels", 0), ("in_channels", 0),
    ("mlp_ratio", 0.0), ("mlp_ratio", math.nan), ("patches_side", 0), ("attn_radius", -5),
    ("attn_radius", math.nan), ("attn_radius", math.inf), ("attn_dropout", -0.5), ("attn_dropout", 1.0),
    ("drop_path", -0.1), ("drop_path", 1.5), ("drop_path", math.nan), ("head_dropout", 2.0),
    ("attention", "dense"), ("img_size", 10 ** 30), ("depth", 10 ** 30), ("channels", 10 ** 30),
    ("num_classes", 10 ** 30), ("mlp_ratio", 1e30), ("patches_side", 10 ** 30),
])
def test_equivariant_vit_bad_argument_names_itself(name, value):
    with pytest.raises(ValueError, match=name):
        EquivariantViT(**{**SMALL, name: value})


def test_drop_path_one_drops_every_branch_and_stays_finite():
    torch.manual_seed(0)
    model = EquivariantViT(**SMALL, drop_path=1.0).train()
    x = torch.randn(2, 3, 8, 8)
    logits = model(x)
    assert torch.isfinite(logits).all()
    # the last block's branches are always dropped: its output is its input
    block = model.blocks[-1]
    assert block.drop_path == 1.0
    y = torch.randn(2 * 5, block.norm1.field_type.dim)
    assert torch.equal(block._dp(y, 2), torch.zeros_like(y))
    logits.sum().backward()  # and the gradient is finite too
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_drop_path_rate_keeps_the_expectation():
    torch.manual_seed(0)
    model = EquivariantViT(**SMALL, drop_path=0.5).train()
    block = model.blocks[-1]
    y = torch.ones(4000, 1, block.norm1.field_type.dim).view(4000, -1)
    out = block._dp(y, 4000)
    assert set(out[:, 0].unique().tolist()) <= {0.0, 2.0}
    assert abs(float(out.mean()) - 1.0) < 0.1


def test_vit_layers_bad_arguments_name_themselves():
    V = FieldType.regular("C4", 1)
    with pytest.raises(ValueError, match="heads"):
        EquivariantSelfAttention(V, heads=0)
    with pytest.raises(ValueError, match="dropout"):
        EquivariantSelfAttention(V, heads=1, dropout=-0.5)
    with pytest.raises(ValueError, match="field_type"):
        EquivariantSelfAttention(4, heads=1)
    with pytest.raises(ValueError, match="copies"):
        FieldType.regular("C4", -1)
    with pytest.raises(ValueError, match="channels"):
        FieldType.trivial("C4", 1.5)
    with pytest.raises(ValueError, match="multiplicities"):
        FieldType("C4", {"A0": -1})
    with pytest.raises(ValueError, match="multiplicities"):
        FieldType("C4", {"A0": 0.5})
    with pytest.raises(ValueError, match="eps"):
        EquivariantRMSNorm(V, eps=0.0)
    with pytest.raises(ValueError, match="in_type and out_type"):
        EquivariantLinear(V, "regular")
    with pytest.raises(ValueError, match="img_size"):
        make_grid("C4", "square", 0, 4)
    with pytest.raises(ValueError, match="patch_size"):
        make_grid("C6", "hex", 8, 0)
    grid = make_grid("C4", "square", 8, 4)
    with pytest.raises(ValueError, match="in_channels"):
        EquivariantPatchEmbed(grid, 0, V)
    with pytest.raises(ValueError, match="init_std"):
        InvariantPositionalEncoding(grid.patch_perms, V, init_std=-1.0)
    with pytest.raises(ValueError, match="radius"):
        radius_patch_graph(torch.zeros(4, 2), math.nan, 1)
    with pytest.raises(ValueError, match="batch"):
        complete_graph(-1, 3)
    assert complete_graph(2, 2).shape == (2, 8)


def test_fourier_nonlinearity_arguments():
    from pyg_lie.vit.nonlinearity import FourierNonlinearity, gset_family
    with pytest.raises(ValueError, match="gset must be a GSet"):
        FourierNonlinearity("regular")
    with pytest.raises(ValueError, match="activation must be a callable"):
        FourierNonlinearity(gset_family(FieldType.regular("C4", 1).group, "regular", 1), activation="gelu")
    with pytest.raises(ValueError, match="activation"):
        EquivariantViT(**SMALL, activation=3)
