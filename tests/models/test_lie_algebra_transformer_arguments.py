"""LieAlgebraTransformer: constructor arguments and the pooling's ``num_graphs`` are checked
with errors naming them; ids that ``batch`` skips still pool to the identity."""
import pytest
import torch

from pyg_lie.groups import SE2
from pyg_lie.models.lie_algebra_transformer import LieAlgebraTransformer


@pytest.mark.parametrize("kw, match", [
    (dict(dropout=1.5), "dropout"), (dict(dropout=float("nan")), "dropout"), (dict(in_channels=-1), "in_channels"),
    (dict(k=0), "k must be None"), (dict(k=1.5), "k must be None"), (dict(chart="clip"), "chart"),
    (dict(head="pool"), "head"), (dict(kernel_dim=0), "kernel_dim"),
])
def test_constructor_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        LieAlgebraTransformer("SE2", 8, 1, 2, **kw)


def test_pooling_num_graphs_is_checked():
    torch.manual_seed(0)
    model = LieAlgebraTransformer("SE2", 8, 1, 2)
    g = SE2().random(4, dtype=torch.float64).float()
    batch = torch.tensor([0, 0, 2, 2])
    with pytest.raises(ValueError, match="num_graphs=2 but batch holds graph id 2"):
        model(g, batch=batch, num_graphs=2)
    with pytest.raises(ValueError, match="num_graphs must be an int >= 0"):
        model(g, batch=batch, num_graphs=-1)
    out = model(g, batch=batch, num_graphs=4)
    assert out.prediction.shape == (4, 3, 3)
    eye = torch.eye(3).expand(2, 3, 3)
    assert torch.equal(out.prediction[[1, 3]], eye)  # sequences without tokens: the identity
    assert torch.allclose(out.prediction[[0, 2]], model(g, batch=batch).prediction[[0, 2]])
