"""PyG layers of pyg_lie (imported lazily; each layer lives in its own module)."""
from .._lazy import lazy_getattr

_LAZY = {
    "edge_attention": "pyg_lie.nn.attention_core",
    "Lift": "pyg_lie.nn.lift",
    "LieSelfAttention": "pyg_lie.nn.lie_self_attention",
    "LieTransformerBlock": "pyg_lie.nn.lie_transformer_block",
    "GroupPool": "pyg_lie.nn.group_pool",
    "LieAlgebraAttention": "pyg_lie.nn.lie_algebra_attention",
    "VectorTokenAttention": "pyg_lie.nn.vector_token_attention",
    "S2AttentionConv": "pyg_lie.nn.s2_attention_conv",
    "S2NeighborhoodAttention": "pyg_lie.nn.s2_neighborhood_attention",
}
__all__ = list(_LAZY)
__getattr__ = lazy_getattr(__name__, _LAZY)
