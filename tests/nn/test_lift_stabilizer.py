"""A fixed ``stabilizer`` handed to a Lift (and so to ``LieTransformer(..., stabilizer=h)``)
must hold elements of the stabiliser of the origin, checked with a tolerance relative to its
dtype, as LieSelfAttention checks its group elements: random matrices are refused."""
import pytest
import torch

from pyg_lie.groups import get_group
from pyg_lie.nn.lift import Lift, check_stabilizer

GROUPS = ["SE2", "SE3", "SO3", "Aff2"]


def _points(G, n=3):
    pos = torch.randn(n, G.space_dim, dtype=torch.float64)
    return pos / pos.norm(dim=-1, keepdim=True) if G.name == "SO3" else pos


@pytest.mark.parametrize("name", GROUPS)
def test_random_matrices_and_other_group_elements_are_refused(name):
    torch.manual_seed(0)
    G = get_group(name)
    lift = Lift(G, 2)
    pos, m = _points(G), G.matrix_size
    with pytest.raises(ValueError, match=r"stabilizer\[0, 0\] is no element of the group"):
        lift(None, pos, stabilizer=torch.randn(3, 2, m, m, dtype=torch.float64))
    with pytest.raises(ValueError, match="does not fix the origin"):
        lift(None, pos, stabilizer=G.random(6, dtype=torch.float64).view(3, 2, m, m))
    with pytest.raises(ValueError, match="shape"):
        lift(None, pos, stabilizer=G.stabilizer_random(3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="floating-point"):
        lift(None, pos, stabilizer=torch.eye(m, dtype=torch.long).expand(3, 2, m, m))


@pytest.mark.parametrize("name", GROUPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_valid_stabilizers_pass_and_lift_exactly(name, dtype):
    torch.manual_seed(1)
    G = get_group(name)
    lift = Lift(G, 2)
    pos = _points(G).to(dtype)
    h = G.stabilizer_random(3, 2, dtype=dtype)
    out = lift(None, pos, stabilizer=h)
    assert torch.equal(out.g, (G.section(pos).unsqueeze(1) @ h).reshape(6, G.matrix_size, G.matrix_size))


def test_tolerance_follows_the_dtype():
    G = get_group("SE2")
    h = G.stabilizer_random(2, 1, dtype=torch.float64)
    off = h.clone()
    off[..., 0, 2] += 1e-4  # a translation of 1e-4: within float32's tolerance, not float64's
    check_stabilizer(G, off.float(), 2, 1)
    with pytest.raises(ValueError, match="does not fix the origin"):
        check_stabilizer(G, off, 2, 1)


def test_lie_transformer_refuses_random_stabilizers():
    from pyg_lie.models import LieTransformer
    torch.manual_seed(0)
    model = LieTransformer("SE2", 2, 8, 4, num_layers=1, heads=2, lift_samples=2)
    pos, x = torch.randn(3, 2), torch.randn(3, 2)
    with pytest.raises(ValueError, match="stabilizer"):
        model(x, pos, stabilizer=torch.randn(3, 2, 3, 3))
    out = model(x, pos, stabilizer=get_group("SE2").stabilizer_random(3, 2))
    assert torch.isfinite(out).all()
