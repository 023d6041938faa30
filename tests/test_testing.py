"""pyg_lie.testing: assert_equivariant passes equivariant maps, fails the others with the
measured error, and fails maps that do not see their inputs."""
import pytest
import torch

from pyg_lie.groups import SE2, SO3, Cn
from pyg_lie.testing import (assert_equivariant, equivariance_error, representation,
                             sample_elements)


def distances(pos):
    return torch.cdist(pos, pos)


def test_invariant_function_passes_and_reports():
    res = assert_equivariant(distances, (torch.randn(6, 2),), group="SE2", actions_in="points")
    assert res.error < 1e-12 and res.scale > 0 and res.change > 1e-3 * res.scale
    assert len(res.errors) == 1


def test_not_invariant_fails_with_measured_error():
    with pytest.raises(AssertionError, match=r"not equivariant: output 0 \(action invariant\) differs .* by [0-9.e-]+"):
        assert_equivariant(lambda p: p.sum(0), (torch.randn(6, 2),), group="SE2", actions_in="points")


def test_constant_output_is_a_trivial_check():
    x = torch.randn(6, 2)
    with pytest.raises(AssertionError, match="trivial check"):
        assert_equivariant(lambda p: torch.ones(3, dtype=p.dtype), (x,), group="SE2", actions_in="points")
    assert_equivariant(lambda p: torch.ones(3, dtype=p.dtype), (x,), group="SE2", actions_in="points",
                       nontrivial=False)


def test_vectors_and_points_outputs():
    pos = torch.randn(5, 3)
    # centred positions rotate but do not translate: vectors under SE(3), points under SO(3)
    assert_equivariant(lambda p: p - p.mean(0), (pos,), group="SE3", actions_out="vectors")
    assert_equivariant(lambda p: p - p.mean(0), (pos,), group="SO3", actions_out="points")
    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(lambda p: p - p.mean(0), (pos,), group="SE3", actions_out="points")


def test_elements_left_multiplication():
    G = SE2()
    g = G.random(7, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def relative(g):  # g_0^-1 g_i: invariant under g -> u g
        return G.log(G.between(g[:1], g))

    assert_equivariant(relative, (g,), group=G, actions_in="elements")
    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(lambda g: G.log(g), (g,), group=G, actions_in="elements")


def test_representation_action():
    pytest.importorskip("e3nn")
    from e3nn import o3
    irreps = o3.Irreps("1o + 2e")
    rep = representation(lambda R: irreps.D_from_matrix(R))
    x = irreps.randn(4, -1, dtype=torch.float64)

    def f(v):  # scales each feature vector by an invariant: equivariant
        return v * (1 + v.pow(2).sum(-1, keepdim=True))

    assert_equivariant(f, (x,), group="SO3", actions_in=rep, actions_out=rep)
    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(lambda v: v.abs(), (x,), group="SO3", actions_in=rep, actions_out=rep)


def test_finite_subgroup_elements():
    def quartic(pos):  # invariant under rotations by multiples of 90 degrees only
        return pos.pow(4).sum()

    pos = torch.randn(5, 2)
    assert_equivariant(quartic, (pos,), group=Cn(4))
    assert sample_elements(Cn(4), 10).shape == (4, 2, 2)
    with pytest.raises(AssertionError, match="not equivariant"):
        assert_equivariant(quartic, (pos,), group="SO2")


def test_multiple_inputs_outputs_and_custom_perturbation():
    pos, feat = torch.randn(5, 2), torch.randn(5, 3)

    def f(pos, feat, k):
        d = torch.cdist(pos, pos)
        return d @ feat, pos + 0 * k

    res = equivariance_error(f, (pos, feat, 2), "SE2", ("points", "invariant", None), ("invariant", "points"))
    assert max(res.errors) < 1e-12
    with pytest.raises(AssertionError, match="trivial check"):  # perturbing features only changes output 0
        assert_equivariant(f, (pos, feat, 2), "SE2", ("points", "invariant", None), ("invariant", "points"),
                           perturb=lambda inp: inp, min_change=1e-3)


def test_bad_arguments_name_the_fix():
    x = torch.randn(4, 2)
    with pytest.raises(ValueError, match="unknown action 'rotate'"):
        assert_equivariant(distances, (x,), group="SE2", actions_in="rotate")
    with pytest.raises(ValueError, match="actions_in has 2 entries for 1 inputs"):
        assert_equivariant(distances, (x,), group="SE2", actions_in=("points", None))
    with pytest.raises(TypeError, match="inputs must be a tuple"):
        assert_equivariant(distances, x, group="SE2")
    with pytest.raises(ValueError, match="pass group="):
        assert_equivariant(distances, (x,))
    with pytest.raises(TypeError, match=r"module.to\(torch.float64\)"):
        assert_equivariant(torch.nn.Linear(2, 2), (x,), group="SE2", actions_out="points")
    with pytest.raises(ValueError, match="nothing to perturb by default"):
        assert_equivariant(distances, (x,), group="SE2", actions_in="invariant")


def test_float32_default_tolerance():
    res = assert_equivariant(distances, (torch.randn(6, 3),), group=SO3(), actions_in="points",
                             dtype=torch.float32)
    assert res.error < 1e-4


def test_custom_action_and_shape_change():
    G = SE2()
    gen = torch.Generator().manual_seed(3)
    g = G.random(5, generator=gen, dtype=torch.float64)
    conj = lambda h, x: h @ x @ torch.linalg.inv(h)  # noqa: E731
    # log(h g h^-1) = h log(g) h^-1 as matrices; custom actions are not perturbed by default
    with pytest.raises(ValueError, match="nothing to perturb by default"):
        assert_equivariant(lambda g: G.hat(G.log(g)), (g,), G, conj, conj)
    assert_equivariant(lambda g: G.hat(G.log(g)), (g,), G, conj, conj,
                       perturb=lambda inp: (inp[0] @ G.random(5, generator=gen, dtype=torch.float64),))
    pos = torch.randn(8, 2)
    with pytest.raises(AssertionError, match="differs from the transformed output by inf"):
        assert_equivariant(lambda p: (p[:, 0] > 0).nonzero(), (pos,), "SO2", nontrivial=False)


def test_guide_examples_run():
    """Every ```python block of docs/testing.md runs on its own, as written."""
    import pathlib
    import re
    page = pathlib.Path(__file__).resolve().parents[1] / "docs" / "testing.md"
    if not page.exists():
        pytest.skip("docs/ is not shipped here")
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert len(blocks) >= 2
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/testing.md example {i + 1}", "exec"), {"__name__": "__docs_example__"})
