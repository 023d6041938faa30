"""S2NeighborhoodAttention returns its attention weights like the other attention layers."""
import torch

from pyg_lie.nn import S2NeighborhoodAttention


def test_neighborhood_attention_returns_weights():
    torch.manual_seed(0)
    layer = S2NeighborhoodAttention(4, (6, 12), (6, 12), num_heads=2).double()
    x = torch.randn(2, 4, 6, 12, dtype=torch.float64)
    y = layer(x)
    y2, (edge_index, alpha) = layer(x, return_attention_weights=True)
    torch.testing.assert_close(y, y2, atol=1e-12, rtol=0)  # the fused path and the weighted one agree
    assert edge_index.shape[0] == 2 and alpha.shape == (edge_index.shape[1], 2, 2)
    assert int(edge_index.max()) < 72 and layer._alpha is None
    per_target = torch.zeros(72, 2, 2, dtype=torch.float64).index_add_(0, edge_index[1], alpha)
    torch.testing.assert_close(per_target, torch.ones_like(per_target))  # a softmax per output point
    # the weights are the ones the output is built from: zeroing a query changes them
    _, (_, alpha2) = layer(torch.cat([x[:1], torch.zeros_like(x[1:])]), return_attention_weights=True)
    assert torch.allclose(alpha2[:, 0], alpha[:, 0]) and not torch.allclose(alpha2[:, 1], alpha[:, 1])
