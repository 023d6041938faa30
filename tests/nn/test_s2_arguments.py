"""The S^2 attention layers' constructor arguments: counts, shapes, the cutoff and the scale
are checked, with a ValueError naming the argument (no silent truncation of 2.7 to 2, no
zero-width weights, no raw torch error)."""
import math

import pytest
import torch

from pyg_lie.nn import S2AttentionConv
from pyg_lie.nn.s2_neighborhood_attention import S2NeighborhoodAttention


@pytest.mark.parametrize("kw, match", [
    (dict(in_channels=0), "in_channels"), (dict(in_channels=2.7), "in_channels"), (dict(heads=0), "heads"),
    (dict(heads=None), "heads"), (dict(k_channels=0), "k_channels"), (dict(k_channels=-4), "k_channels"),
    (dict(out_channels=0), "out_channels"), (dict(scale=math.nan), "scale"), (dict(scale=math.inf), "scale"),
    (dict(scale=torch.tensor([1.0, math.nan])), "scale"), (dict(k_channels=3, heads=2), "divisible"),
])
def test_s2_attention_conv_arguments(kw, match):
    args = dict(in_channels=4, heads=1, **{k: v for k, v in kw.items() if k not in ("in_channels", "heads")})
    args.update({k: v for k, v in kw.items() if k in ("in_channels", "heads")})
    with pytest.raises(ValueError, match=match):
        S2AttentionConv(**args)


@pytest.mark.parametrize("kw, match", [
    (dict(in_shape=(0, 8)), r"in_shape\[0\]"), (dict(in_shape=(4, -8)), r"in_shape\[1\]"),
    (dict(out_shape=(4, 2.5)), r"out_shape\[1\]"), (dict(in_shape=4), "in_shape and out_shape"),
    (dict(out_shape=(4, 8, 1)), "in_shape and out_shape"), (dict(theta_cutoff=-0.1), "theta_cutoff"),
    (dict(theta_cutoff=math.nan), "theta_cutoff"), (dict(theta_cutoff=math.inf), "theta_cutoff"),
    (dict(num_heads=0), "num_heads"), (dict(grid_in="hex"), "grid_in"),
])
def test_neighborhood_attention_s2_arguments(kw, match):
    args = dict(in_channels=4, in_shape=(4, 8), out_shape=(4, 8))
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        S2NeighborhoodAttention(**args)


def test_valid_s2_layers_build_and_run():
    torch.manual_seed(0)
    layer = S2NeighborhoodAttention(4, (4, 8), (4, 8), num_heads=2, scale=0.5)
    out = layer(torch.randn(1, 4, 4, 8))
    assert out.shape == (1, 4, 4, 8) and torch.isfinite(out).all()
    assert S2AttentionConv(4, heads=2, scale=torch.tensor(0.5)).scale == torch.tensor(0.5)
