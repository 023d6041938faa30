"""The ViT's attention and block take PyG's ``return_attention_weights`` (``(out, (edge_index,
alpha))``, ``_alpha`` cleared, an ``EdgeIndex`` returned as given) and ``explain_mode``."""

import pytest
import torch
from torch_geometric import EdgeIndex

from pyg_lie.groups.finite import o2_group
from pyg_lie.models.equivariant_vit import EquivariantViTBlock
from pyg_lie.vit.attention import EquivariantSelfAttention, complete_graph, radius_patch_graph
from pyg_lie.vit.field_type import FieldType
from pyg_lie.vit.nonlinearity import gset_family
from pyg_lie.testing import explainer_mask as masked

f64 = torch.float64


def _block(fused, **kw):
    torch.manual_seed(0)
    G = o2_group("C4")
    V = FieldType.regular(G, 2)
    block = EquivariantViTBlock(V, gset_family(G, "regular", 2), 2, "coupled", **kw).double()
    block.attn.fused = fused
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return block, V


def _patch_graph():
    pos = torch.tensor([[float(i), float(j)] for i in range(3) for j in range(3)])
    return radius_patch_graph(pos, 1.0, 2)  # 2 images of 10 tokens, local attention


@pytest.mark.parametrize("fused", [True, False])
def test_block_returns_attention_weights(fused):
    block, V = _block(fused)
    ei = _patch_graph()
    x = torch.randn(20, V.dim, dtype=f64)
    sub = EdgeIndex(ei, sparse_size=(20, 20))
    out, (ei_out, alpha) = block(x, sub, 2, return_attention_weights=True)
    assert ei_out is sub and alpha.shape == (ei.shape[1], block.attn.heads)
    assert block.attn._alpha is None
    assert torch.equal(out, block(x, ei, 2))
    assert torch.equal(out, block(x, ei, 2, return_attention_weights=False))
    _, (_, want) = block.attn(block.norm1(x), ei, return_attention_weights=True)
    assert torch.allclose(alpha, want, atol=1e-14)
    sums = torch.zeros(20, block.attn.heads, dtype=f64).index_add(0, ei[1], alpha)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-12)
    # the weights are those of the message-passing reference, in edge_index's order
    perm = torch.randperm(ei.shape[1])
    block.attn.fused = not fused
    _, (_, other) = block(x, ei[:, perm], 2, return_attention_weights=True)
    assert torch.allclose(other, alpha[perm], atol=1e-12)


def test_attention_clears_alpha_and_defaults_to_none():
    block, V = _block(False)
    att = block.attn
    ei = complete_graph(2, 5)
    x = torch.randn(10, V.dim, dtype=f64)
    y = att(x, ei)
    assert isinstance(y, torch.Tensor) and att._alpha is None
    y2, (e, alpha) = att(x, ei, return_attention_weights=True)
    assert torch.equal(y, y2) and e is ei and att._alpha is None and alpha.shape == (ei.shape[1], att.heads)


def _lone_edge_graph(N=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ei = torch.cat([torch.randint(1, N, (2, 50), generator=gen), torch.tensor([[5], [0]])], dim=1)
    return ei


@pytest.mark.parametrize("fused", [True, False])
def test_explain_modes(fused):
    ei = _lone_edge_graph()
    lone = ei.shape[1] - 1
    grads = {}
    for mode in ("score", "message"):
        block, V = _block(fused, explain_mode=mode)
        assert block.attn.explain_mode == mode
        x = torch.randn(12, V.dim, dtype=f64, generator=torch.Generator().manual_seed(1))
        mask = torch.full((ei.shape[1],), 0.6, dtype=f64, requires_grad=True)
        with masked(block, mask, ei):
            block(x, ei)[0].square().sum().backward()
        grads[mode] = mask.grad
    assert grads["score"][lone] == 0  # its softmax weight is 1 for every mask value > 0
    assert grads["message"][lone].abs() > 1e-6
    # message mode: a 0/1 mask scales the messages, an all-ones mask changes nothing
    att = block.attn
    keep = torch.ones(ei.shape[1], dtype=f64)
    keep[:12] = 0
    plain = att(x, ei)
    with masked(att, torch.ones_like(keep), ei):
        assert torch.allclose(att(x, ei), plain, atol=1e-12)
    removed = att(x, ei[:, 12:])
    with masked(att, keep, ei):
        scaled = att(x, ei)
    assert not torch.allclose(scaled, removed, atol=1e-6)
    att.explain_mode = "score"
    with masked(att, keep, ei):
        assert torch.allclose(att(x, ei), removed, atol=1e-12)
    with pytest.raises(ValueError, match="explain_mode"):
        EquivariantSelfAttention(att.field_type, explain_mode="messages")
