"""Every public attention layer's class docstring carries a runnable ``>>>`` example, and the
examples give the output they show (run with :mod:`doctest`)."""
import doctest
import importlib

import pytest

#: (module, class) of the public layers whose docstring must hold an example
LAYERS = [
    ("pyg_lie.nn.lie_self_attention", "LieSelfAttention"),
    ("pyg_lie.nn.lie_transformer_block", "LieTransformerBlock"),
    ("pyg_lie.nn.lie_algebra_attention", "LieAlgebraAttention"),
    ("pyg_lie.nn.vector_token_attention", "VectorTokenAttention"),
    ("pyg_lie.nn.s2_attention_conv", "S2AttentionConv"),
    ("pyg_lie.nn.s2_neighborhood_attention", "S2NeighborhoodAttention"),
    ("pyg_lie.vit.attention", "EquivariantSelfAttention"),
    ("pyg_lie.models.equivariant_vit", "EquivariantViT"),
    ("pyg_lie.models.equivariant_vit", "EquivariantViTBlock"),
]


@pytest.mark.parametrize("module,name", LAYERS, ids=[n for _, n in LAYERS])
def test_class_docstring_example_runs(module, name):
    if name == "S2NeighborhoodAttention":
        pytest.importorskip("torch_harmonics")
    cls = getattr(importlib.import_module(module), name)
    finder = doctest.DocTestFinder(recurse=False)
    tests = [t for t in finder.find(cls, name, globs={}) if t.examples]
    assert tests, f"{module}.{name}: the class docstring has no >>> example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{module}.{name}: {result.failed} failing example(s)"


def test_every_public_nn_attention_layer_is_listed():
    """A public layer of pyg_lie.nn with attention in its name or forward gets an example here."""
    import pyg_lie.nn as nn
    listed = {name for _, name in LAYERS}
    attention = {n for n in nn.__all__ if n[0].isupper() and ("Attention" in n or n == "LieTransformerBlock")}
    assert attention <= listed, sorted(attention - listed)
