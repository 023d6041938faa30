"""Constructor checks of pyg_lie.models.hamiltonian: ValueError naming the argument, through
pyg_lie._checks (floats and bools are no sizes)."""
import pytest
import torch

from pyg_lie.models.hamiltonian import HamiltonianNODE, PairwiseMLPPotential


@pytest.mark.parametrize("kwargs, name", [
    (dict(in_channels=-1), "in_channels must be an int >= 0"),
    (dict(in_channels=2.5), "in_channels must be an int >= 0"),
    (dict(hidden_channels=0), "hidden_channels must be a positive int"),
    (dict(hidden_channels=True), "hidden_channels must be a positive int"),
    (dict(num_layers=1.0), "num_layers must be a positive int"),
])
def test_potential_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PairwiseMLPPotential(**kwargs)


@pytest.mark.parametrize("bad", [0, 2.5, True])
def test_space_dim(bad):
    with pytest.raises(ValueError, match="space_dim must be a positive int"):
        HamiltonianNODE(PairwiseMLPPotential(), space_dim=bad)


def test_valid_arguments_build_the_same_model():
    torch.manual_seed(0)
    a = PairwiseMLPPotential(2, 8, 2)
    torch.manual_seed(0)
    b = PairwiseMLPPotential(torch.tensor(2).item(), 8, 2)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert HamiltonianNODE(a, space_dim=2).space_dim == 2
