"""Spring-dynamics data generator and the Hamiltonian neural ODE."""
import math

import pytest
import torch
from torch import nn

from pyg_lie.datasets.springs import SpringDynamics, spring_hamiltonian, spring_potential
from pyg_lie.models.hamiltonian import HamiltonianNODE, PairwiseMLPPotential, rollout_mse


class TruePotential(nn.Module):
    """The exact spring potential in the PyG potential signature (x = [m, k])."""

    def forward(self, x, pos, batch):
        B = int(batch.max()) + 1
        return spring_potential(pos.view(B, -1, pos.shape[-1]), x[:, 1].view(B, -1)).unsqueeze(-1)


def _rot(theta, dtype=torch.float64):
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=dtype)


@pytest.fixture(scope="module")
def traj():
    return SpringDynamics(64, mode="trajectories", seed=3)


def test_energy_conservation(traj):
    E = traj.energy()
    rel = ((E - E[:, :1]).abs() / E[:, :1]).max(dim=1).values
    # RK4 with dt = 0.01 (the paper's data): tiny drift for typical systems
    assert rel.median() < 1e-4 and rel.max() < 2e-2
    # and the drift vanishes at RK4's rate when the step is refined
    fine = SpringDynamics(64, mode="trajectories", seed=3, substeps=4)
    Ef = fine.energy()
    rel_f = ((Ef - Ef[:, :1]).abs() / Ef[:, :1]).max(dim=1).values
    assert rel_f.max() < rel.max() / 100
    # total momentum is zero per system at t=0 and conserved
    P = traj.p.sum(dim=2)  # (S, T+1, d)
    assert P.abs().max() < 1e-12


def test_generator_deterministic_and_shapes(traj):
    a, b = SpringDynamics(8, seed=7), SpringDynamics(8, seed=7)
    c = SpringDynamics(8, seed=8)
    assert torch.equal(a.q, b.q) and torch.equal(a.starts, b.starts)
    assert not torch.equal(a.q, c.q)
    item = a[2]
    assert item["z"].shape == (6, 6, 4) and item["m"].shape == (6,) and item["ts"].shape == (6,)
    s = int(a.starts[2])
    assert torch.allclose(item["z"][:, :, :2].double(), a.q[2, s:s + 6], atol=1e-6)
    assert traj[0]["z"].shape == (501, 6, 4)
    assert (a.m >= 0.1).all() and (a.m <= 3.1).all() and (a.k >= 0).all() and (a.k <= 5).all()
    with pytest.raises(ValueError, match="mode"):
        SpringDynamics(4, mode="bad")
    with pytest.raises(ValueError, match="num_systems"):
        SpringDynamics(0)
    for kwargs, message in [(dict(num_particles=1), "num_particles must be >= 2"),
                            (dict(space_dim=0), "space_dim must be a positive int"),
                            (dict(t_end=float("nan")), "finite t_end > 0"),
                            (dict(dtype=torch.int64), "dtype must be a floating-point dtype")]:
        with pytest.raises(ValueError, match=message):
            SpringDynamics(2, num_steps=10, **kwargs)


def test_node_with_true_potential_reproduces_data(traj):
    model = HamiltonianNODE(TruePotential()).double()
    batch = [traj[i] for i in range(4)]
    z = torch.stack([b["z"] for b in batch]).double()
    m = torch.stack([b["m"] for b in batch]).double()
    k = torch.stack([b["k"] for b in batch]).double()
    with torch.no_grad():
        pred = model(z[:, 0], m, k, num_steps=20, dt=traj.dt)
    # same integrator, same step: agreement up to float32 rounding of the stored inputs
    assert rollout_mse(pred, z[:, :21]).max() < 1e-10
    H = model.hamiltonian(z[:, 0, :, :2], z[:, 0, :, 2:], m, k)
    assert torch.allclose(H, spring_hamiltonian(z[:, 0, :, :2], z[:, 0, :, 2:], m, k))


def _equivariance_check(model, dtype, angle, tol):
    g = torch.Generator().manual_seed(0)
    B, n = 3, 6
    q = 0.4 * torch.randn(B, n, 2, generator=g, dtype=dtype)
    p = 0.6 * torch.randn(B, n, 2, generator=g, dtype=dtype)
    m = 3 * torch.rand(B, n, generator=g, dtype=dtype) + 0.1
    k = 5 * torch.rand(B, n, generator=g, dtype=dtype)
    R, t = _rot(angle, dtype), torch.tensor([0.7, -1.3], dtype=dtype)
    q2, p2 = q @ R.T + t, p @ R.T
    H1, H2 = model.hamiltonian(q, p, m, k), model.hamiltonian(q2, p2, m, k)
    assert torch.allclose(H1, H2, atol=tol, rtol=tol), (H1 - H2).abs().max()
    with torch.no_grad():
        z1 = model(torch.cat([q, p], -1), m, k, num_steps=5, dt=0.01)
        z2 = model(torch.cat([q2, p2], -1), m, k, num_steps=5, dt=0.01)
    z1q, z1p = z1[..., :2] @ R.T + t, z1[..., 2:] @ R.T
    assert torch.allclose(z2[..., :2], z1q, atol=tol) and torch.allclose(z2[..., 2:], z1p, atol=tol)


def test_learned_hamiltonian_equivariance():
    torch.manual_seed(0)
    model = HamiltonianNODE(PairwiseMLPPotential(hidden_channels=16)).double()
    _equivariance_check(model, torch.float64, 1.1, 1e-10)


def test_double_backward_finite_and_correct():
    torch.manual_seed(0)
    model = HamiltonianNODE(PairwiseMLPPotential(hidden_channels=8)).double()
    ds = SpringDynamics(4, seed=1, dtype=torch.float64)
    z = torch.stack([ds[i]["z"] for i in range(4)])
    m = torch.stack([ds[i]["m"] for i in range(4)])
    k = torch.stack([ds[i]["k"] for i in range(4)])

    def loss_fn():
        return rollout_mse(model(z[:, 0], m, k, num_steps=5, dt=ds.dt), z).mean()

    loss = loss_fn()
    loss.backward()
    # the output bias of V is a constant energy offset: it cannot affect the dynamics
    named = dict(model.named_parameters())
    assert named.pop("potential.mlp.4.bias").grad is None
    grads = [p.grad for p in named.values()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert sum(gr.abs().sum() for gr in grads) > 0
    # the gradient (through grad_q V, i.e. second derivatives of V) matches finite differences
    w = model.potential.mlp[0].weight
    eps = 1e-6
    with torch.no_grad():
        w[0, 0] += eps
        lp = loss_fn().item()
        w[0, 0] -= 2 * eps
        lm = loss_fn().item()
        w[0, 0] += eps
    fd = (lp - lm) / (2 * eps)
    assert abs(fd - w.grad[0, 0].item()) <= 1e-5 * max(1.0, abs(fd))


def test_node_validation():
    with pytest.raises(ValueError, match="potential"):
        HamiltonianNODE(lambda *a: None)
    model = HamiltonianNODE(PairwiseMLPPotential())
    with pytest.raises(ValueError, match="z0"):
        model(torch.zeros(2, 6, 3), torch.ones(2, 6), torch.ones(2, 6), 1, 0.01)
    z, m, k = torch.zeros(2, 6, 4), torch.ones(2, 6), torch.ones(2, 6)
    for args, message in [((z, m, k, 2.5, 0.01), "num_steps must be an int >= 0"),
                          ((z, m, k, 1, float("nan")), "dt must be a finite number"),
                          ((z, 0 * m, k, 1, 0.01), "masses, which must be positive"),
                          ((z.double(), m.double(), k.double(), 1, 0.01), "z0 is torch.float64 but the model"),
                          ((z.long(), m, k, 1, 0.01), "z0 must be a floating-point tensor"),
                          ((z, m, k * float("inf"), 1, 0.01), "k contains non-finite")]:
        with pytest.raises(ValueError, match=message):
            model(*args)
    assert torch.isfinite(model(z + 1, m, k, 2, -0.01)).all()  # dt < 0 integrates backwards


def _lie_potential(group):
    pytest.importorskip("pyg_lie.models.lie_transformer")
    from pyg_lie.experiments.springs import build_potential
    return build_potential(group, hidden_channels=16, num_layers=2, heads=2)


@pytest.mark.parametrize("group,angle", [("T2", 0.0), ("SE2", math.pi)])
def test_lie_transformer_potential(group, angle):
    """T(2): translation-invariant; SE(2) with the C_2 lift: exact for T(2) x| C_2."""
    torch.manual_seed(0)
    model = HamiltonianNODE(_lie_potential(group)).double()
    _equivariance_check(model, torch.float64, angle, 1e-8)
    ds = SpringDynamics(2, seed=1, dtype=torch.float64)
    z = torch.stack([ds[i]["z"] for i in range(2)])
    m = torch.stack([ds[i]["m"] for i in range(2)])
    k = torch.stack([ds[i]["k"] for i in range(2)])
    def loss_fn():
        return rollout_mse(model(z[:, 0], m, k, num_steps=2, dt=ds.dt), z[:, :3]).mean()

    loss_fn().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) > 0 and all(torch.isfinite(gr).all() for gr in grads)
    assert sum(gr.abs().sum() for gr in grads) > 0
    # second derivatives through attention, kernel MLP and log map: check against finite differences
    w = next(p for p in model.parameters() if p.grad is not None and p.dim() == 2 and p.grad.abs().max() > 0)
    idx = tuple(int(i) for i in (w.grad.abs() == w.grad.abs().max()).nonzero()[0])
    eps = 1e-6
    with torch.no_grad():
        w[idx] += eps
        lp = loss_fn().item()
        w[idx] -= 2 * eps
        lm = loss_fn().item()
        w[idx] += eps
    fd = (lp - lm) / (2 * eps)
    assert abs(fd - w.grad[idx].item()) <= 1e-5 * max(1e-3, abs(fd)), (fd, w.grad[idx].item())


def test_smoke_cli_writes_a_result_file_and_learns(tmp_path):
    """The CI version of `pyg-lie train springs`: every field of the result file, the paper's
    numbers beside ours, a training loss that falls."""
    from pyg_lie.cli import main
    from pyg_lie.experiments.results import load_result
    res = tmp_path / "results"
    assert main(["train", "springs", "--hidden", "8", "--layers", "1", "--heads", "2", "--n-train", "16",
                 "--n-val", "4", "--n-test", "2", "--rollout-steps", "10", "--epochs", "4", "--batch-size", "8",
                 "--lr", "3e-3", "--no-progress", "--out", str(tmp_path / "run"), "--results-dir", str(res)]) == 0
    rec = load_result(res, "springs", "lie-T2-n16")
    m = rec["metrics"]
    assert rec["paper"] == {"test_gmse_5": 4.5e-7}  # the paper's 100-step number needs --rollout-steps 100
    assert "n-train 16 (paper 10000)" in rec["setting"] and "4 epochs (--epochs)" in rec["setting"]
    assert m["train_loss_last"] < m["train_loss_first"]
    assert all(math.isfinite(m[k]) for k in ("test_gmse_5", "test_mse_5", "rollout_gmse_10", "rollout_mse_10",
                                              "rollout_gmse_systems_10", "energy_drift_10"))
    # geometric means never exceed arithmetic ones; the errors grow along a rollout, so strictly below
    assert 0 < m["test_gmse_5"] < m["test_mse_5"] and 0 < m["rollout_gmse_10"] < m["rollout_mse_10"]
    assert (res / "springs" / "lie-T2-n16.rollout_error.png").is_file()


# ----------------------------------------------------------------- the paper's test loss
def test_step_geometric_mean_is_the_papers_definition():
    """Appendix I.3: per time step the loss over systems, then a geometric mean over steps."""
    from pyg_lie.experiments.springs import step_geometric_mean
    g = torch.Generator().manual_seed(0)
    e = torch.rand(7, 5, generator=g, dtype=torch.float64) * torch.logspace(-6, -2, 5, dtype=torch.float64)
    per_step = e.mean(0)
    expected = math.prod(float(v) for v in per_step) ** (1 / 5)
    assert math.isclose(step_geometric_mean(e), expected, rel_tol=1e-12)
    assert math.isclose(step_geometric_mean(per_step), expected, rel_tol=1e-12)
    # not the geometric mean over systems and steps together, and below the arithmetic mean
    assert not math.isclose(step_geometric_mean(e), float(e.log().mean().exp()), rel_tol=1e-3)
    assert step_geometric_mean(e) < float(e.mean())
    # errors that grow by 10x per step: the arithmetic mean is dominated by the last step
    growing = torch.tensor([1e-6, 1e-5, 1e-4, 1e-3, 1e-2], dtype=torch.float64)
    assert math.isclose(step_geometric_mean(growing), 1e-4, rel_tol=1e-12)
    assert step_geometric_mean(torch.zeros(3, dtype=torch.float64)) == 0.0
    for bad, err, msg in [(torch.ones(2, 3, 4), ValueError, "shape"), (torch.empty(0), ValueError, "shape"),
                          (torch.tensor([1e-3, -1e-3]), ValueError, ">= 0"),
                          (torch.tensor([1e-3, float("nan")]), ValueError, "finite"),
                          (torch.ones(3, dtype=torch.long), TypeError, "floating-point"),
                          ([1e-3, 1e-2], TypeError, "floating-point")]:
        with pytest.raises(err, match=msg):
            step_geometric_mean(bad)


def test_window_step_mse_matches_a_direct_rollout():
    """The per-step test losses of the harness against a direct computation on a random potential."""
    from pyg_lie.experiments.springs import window_mse, window_step_mse
    from pyg_lie.training import init_distributed
    torch.manual_seed(0)
    data = SpringDynamics(6, mode="chunks", chunk_len=5, seed=4)
    net = HamiltonianNODE(PairwiseMLPPotential(2, 8, 1)).double()
    env = init_distributed("cpu")
    steps = window_step_mse(net, data, data.dt, env, torch.float64, batch_size=4)  # two batches
    z = torch.stack([data[i]["z"] for i in range(6)]).double()
    m = torch.stack([data[i]["m"] for i in range(6)]).double()
    k = torch.stack([data[i]["k"] for i in range(6)]).double()
    with torch.no_grad():
        pred = net(z[:, 0], m, k, num_steps=5, dt=data.dt)
    direct = (pred[:, 1:] - z[:, 1:]).pow(2).mean(dim=(2, 3)).mean(0)
    assert steps.shape == (5,)
    torch.testing.assert_close(steps, direct, rtol=1e-10, atol=0)
    assert math.isclose(window_mse(net, data, data.dt, env, torch.float64, batch_size=4), float(direct.mean()),
                        rel_tol=1e-10)


# ----------------------------------------------------------------- the paper's FC and GN baselines
def _system(B=3, n=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B * n, 2, generator=g, dtype=dtype) + 0.1
    pos = torch.randn(B * n, 2, generator=g, dtype=dtype)
    return x, pos, torch.arange(B).repeat_interleave(n)


def _randomised(module, seed=1):
    """Weights large enough that the potential depends strongly on its inputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.7)
    return module


@pytest.mark.parametrize("kind", ["fc", "gn"])
def test_baseline_potentials_translation_invariant_not_rotation_invariant(kind):
    from pyg_lie.models.springs_baselines import FCPotential, GraphNetworkPotential
    net = _randomised((FCPotential() if kind == "fc" else GraphNetworkPotential(num_layers=2)).double())
    x, pos, batch = _system()
    V = net(x, pos, batch)
    assert V.shape == (3, 1)
    g = torch.Generator().manual_seed(5)
    shift = torch.randn(3, 2, generator=g, dtype=torch.float64)[batch] * 3  # one translation per system
    torch.testing.assert_close(net(x, pos + shift, batch), V, atol=1e-10, rtol=1e-10)
    R = _rot(0.9)
    assert (net(x, pos @ R.T, batch) - V).abs().max() > 1e-3  # no rotation invariance built in


def test_graph_network_potential_permutation_invariant_fc_not():
    from pyg_lie.models.springs_baselines import FCPotential, GraphNetworkPotential
    x, pos, batch = _system(B=2)
    perm = torch.cat([torch.randperm(6, generator=torch.Generator().manual_seed(s)) + 6 * s for s in range(2)])
    gn = _randomised(GraphNetworkPotential(num_layers=2).double())
    torch.testing.assert_close(gn(x[perm], pos[perm], batch), gn(x, pos, batch), atol=1e-10, rtol=1e-10)
    fc = _randomised(FCPotential().double())
    assert (fc(x[perm], pos[perm], batch) - fc(x, pos, batch)).abs().max() > 1e-3
    # the complete graph: every ordered pair of distinct particles of a system, none across systems
    ei = GraphNetworkPotential.complete_graph(batch)
    assert ei.shape == (2, 2 * 6 * 5)
    assert bool((batch[ei[0]] == batch[ei[1]]).all()) and bool((ei[0] != ei[1]).all())


def test_baseline_potentials_reject_bad_input():
    from pyg_lie.models.springs_baselines import FCPotential, GraphNetworkPotential
    x, pos, batch = _system(dtype=torch.float32)
    fc, gn = FCPotential(), GraphNetworkPotential()
    with pytest.raises(ValueError, match="num_particles = 6"):
        fc(x[:-1], pos[:-1], batch[:-1])
    with pytest.raises(ValueError, match="in_channels"):
        gn(x[:, :1], pos, batch)
    with pytest.raises(ValueError, match="space_dim"):
        gn(x, torch.cat([pos, pos[:, :1]], 1), batch)
    with pytest.raises(ValueError, match="batch"):
        gn(x, pos, batch.float())
    with pytest.raises(ValueError, match="hidden_channels"):
        FCPotential(hidden_channels=0)
    with pytest.raises(ValueError, match="potential must be one of"):
        from pyg_lie.experiments.springs import build_potential
        build_potential("T2", potential="mlp")


@pytest.mark.parametrize("kind", ["fc", "gn"])
def test_baseline_smoke_cli_learns_and_checkpoint_reevaluates(kind, tmp_path):
    """The CI version of `pyg-lie train springs --potential fc|gn`: the loss falls, the result
    file and its curve land in the results folder, and the comparison figure is drawn."""
    from pyg_lie.cli import main
    from pyg_lie.experiments.results import load_result
    from pyg_lie.experiments.springs import evaluate_checkpoint, read_curve_csv
    res, out = tmp_path / "results", tmp_path / "run"
    assert main(["train", "springs", "--potential", kind, "--n-train", "16", "--n-val", "4",
                 "--n-test", "2", "--rollout-steps", "10", "--epochs", "6", "--batch-size", "8", "--lr", "1e-2",
                 "--no-progress", "--out", str(out), "--results-dir", str(res)]) == 0
    rec = load_result(res, "springs", f"{kind}-n16")
    m = rec["metrics"]
    assert m["train_loss_last"] < 0.97 * m["train_loss_first"]
    assert rec["paper"] == {} and rec["config"]["potential"] == kind
    assert (rec["config"]["hidden"], rec["config"]["layers"]) == {"fc": (150, 4), "gn": (64, 1)}[kind]
    curve = read_curve_csv(str(res / "springs" / f"{kind}-n16.rollout_error.csv"))
    assert curve["step"] == [float(s) for s in range(1, 11)]
    assert (res / "springs" / "rollout_comparison.png").is_file()
    again = evaluate_checkpoint(str(out / "checkpoint.pt"))
    assert math.isclose(float(again["curves"].mean()), m["rollout_mse_10"], rel_tol=1e-6)


def test_diverged_rollout_is_a_one_line_error(tmp_path):
    """A learning rate that blows the model up ends the run with one line naming the cause
    (exit 1), not the model's input check on its own non-finite states."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "pyg_lie", "train", "springs", "--lr", "1e30", "--n-train", "20",
                        "--epochs", "1", "--no-progress", "--out", str(tmp_path / "run"),
                        "--results-dir", str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "rollout diverged" in r.stderr and "lower --lr" in r.stderr and "Traceback" not in r.stderr
