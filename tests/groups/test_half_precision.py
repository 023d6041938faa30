"""Half-precision inputs to the group functions: the closed-form groups compute in the input's
dtype to a few of its eps (against a float64 reference); the affine groups, whose maps need
``torch.linalg`` (no float16/bfloat16 kernels), raise a ValueError naming the argument instead
of torch's NotImplementedError."""
import pytest
import torch

from pyg_lie.groups import get_group

HALF = [torch.float16, torch.bfloat16]
CLOSED_FORM = ["SO2", "SE2", "SO3", "SE3", "T2", "T3"]


@pytest.mark.parametrize("name", CLOSED_FORM)
@pytest.mark.parametrize("dtype", HALF)
def test_closed_form_groups_are_accurate_in_half_precision(name, dtype):
    torch.manual_seed(0)
    G = get_group(name)
    g = G.random(64, dtype=torch.float64)
    h = G.random(64, dtype=torch.float64)
    xi = G.log(g)
    eps = torch.finfo(dtype).eps
    scale = 1.0 + float(g.abs().max())
    ei = torch.stack([torch.arange(64), torch.arange(64).flip(0)])
    pairs = {
        "exp": (G.exp(xi.to(dtype)), G.exp(xi)),
        "log": (G.log(g.to(dtype)), xi),
        "compose": (G.compose(g.to(dtype), h.to(dtype)), G.compose(g, h)),
        "inv": (G.inv(g.to(dtype)), G.inv(g)),
        "between": (G.between(g.to(dtype), h.to(dtype)), G.between(g, h)),
        "relative_log": (G.relative_log(g.to(dtype), ei), G.relative_log(g, ei)),
    }
    for what, (ours, ref) in pairs.items():
        assert ours.dtype == dtype, what
        assert torch.isfinite(ours).all(), what
        ours = ours.double()
        if what in ("log", "relative_log"):  # the log jumps at angle pi: compare the elements it names
            ours, ref = G.exp(ours), G.exp(ref)
        tol = 16 * eps * scale ** 2
        assert (ours - ref).abs().max() <= tol, (what, float((ours - ref).abs().max()) / eps)
    assert bool(G.contains(g.to(dtype)).all())
    assert not bool(G.contains(torch.randn(8, G.matrix_size, G.matrix_size).to(dtype) * 3).all())


@pytest.mark.parametrize("name", ["Aff2", "Aff3"])
@pytest.mark.parametrize("dtype", HALF)
def test_affine_groups_refuse_half_precision_by_name(name, dtype):
    G = get_group(name)
    g = G.random_in_chart(4, dtype=torch.float64)
    xi = G.log(g)
    ei = torch.tensor([[0, 1], [1, 2]])
    calls = {"xi": lambda: G.exp(xi.to(dtype)), "g": lambda: G.log(g.to(dtype))}
    for arg, fn in calls.items():
        with pytest.raises(ValueError, match=rf"{arg} is torch\.{str(dtype).split('.')[-1]}.*\.float\(\)"):
            fn()
    for fn in (lambda: G.inv(g.to(dtype)), lambda: G.between(g.to(dtype), g.to(dtype)),
               lambda: G.relative_log(g.to(dtype), ei), lambda: G.in_chart(g.to(dtype))):
        with pytest.raises(ValueError, match="float16/bfloat16"):
            fn()
    # membership is decided in float32
    assert bool(G.contains(g.to(dtype)).all())
    # and float32 gives the float64 result to float32 accuracy
    assert torch.allclose(G.log(g.float()).double(), xi, atol=1e-4)
