"""Multi-process training: sampler partition, 2-process DDP equivalence, checkpoint resume."""
import os
import shutil
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from pyg_lie.cli import build_parser
from pyg_lie.training import DistEnv, MetricsLogger, fit, load_weights, train_loader
from pyg_lie.training.logging import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--potential", "pair", "--hidden", "8", "--n-train", "16", "--n-val", "4", "--n-test", "2",
        "--rollout-steps", "5", "--epochs", "2", "--batch-size", "8", "--no-progress", "--device", "cpu"]


@pytest.mark.parametrize("n,batch,world", [(11, 4, 2), (16, 8, 2), (20, 6, 3)])
def test_rank_batches_partition_global_batches(n, batch, world):
    ds = TensorDataset(torch.arange(n))
    single = train_loader(ds, batch, DistEnv())
    ranks = [train_loader(ds, batch, DistEnv(rank=r, world_size=world)) for r in range(world)]
    for epoch in (0, 3):
        for ld in [single] + ranks:
            ld.sampler.set_epoch(epoch)
        ref = [sorted(b[0].tolist()) for b in single]
        per_rank = [list(ld) for ld in ranks]
        assert all(len(p) == len(ref) == n // batch for p in per_rank)
        for s, want in enumerate(ref):
            got = sorted(sum((p[s][0].tolist() for p in per_rank), []))
            assert got == want
    with pytest.raises(ValueError, match="multiple"):
        train_loader(ds, 5, DistEnv(rank=0, world_size=2))


def _toy_fit(out, epochs, stop_after=None, resume=None, init_seed=0):
    torch.manual_seed(init_seed)
    model = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 3, generator=g)
    ds = TensorDataset(x, x.sum(-1, keepdim=True))
    loss_fn = lambda m, b: (m(b[0]) - b[1]).pow(2).mean()  # noqa: E731
    fit(model, opt, sched, ds, DistEnv(), loss_fn, None, epochs=epochs, batch_size=8, seed=1, out_dir=out,
        resume=resume, progress=False, stop_after=stop_after)
    return model


def test_checkpoint_resume_equivalence(tmp_path):
    """Stop after 2 of 4 epochs, disturb the RNG, resume into a differently initialised model: same result."""
    straight = _toy_fit(str(tmp_path / "a"), 4)
    _toy_fit(str(tmp_path / "b"), 4, stop_after=2)
    torch.rand(1000)  # the resumed run must not depend on the RNG state at resume time
    resumed = _toy_fit(str(tmp_path / "b"), 4, resume=str(tmp_path / "b" / "checkpoint.pt"), init_seed=9)
    for p, q in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
    a, b = read_metrics(str(tmp_path / "a" / "metrics.csv")), read_metrics(str(tmp_path / "b" / "metrics.csv"))
    assert [r["epoch"] for r in b] == [0, 1, 2, 3]
    assert [r["train_loss"] for r in a] == [r["train_loss"] for r in b]
    assert os.path.isfile(tmp_path / "b" / "learning_curves.png")


def test_load_weights_copies_weights_and_leaves_rng_alone(tmp_path):
    trained = _toy_fit(str(tmp_path / "a"), 2)
    torch.manual_seed(3)
    fresh = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 1))
    before = torch.get_rng_state()
    load_weights(str(tmp_path / "a" / "checkpoint.pt"), fresh)
    assert torch.equal(torch.get_rng_state(), before)  # unlike load_checkpoint, no saved RNG is restored
    for p, q in zip(trained.parameters(), fresh.parameters()):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match="--warm: checkpoint 'nope.pt' does not exist"):
        load_weights("nope.pt", fresh, "--warm")
    with pytest.raises(ValueError, match="different architecture; same --width"):
        load_weights(str(tmp_path / "a" / "checkpoint.pt"), nn.Linear(3, 1), hint="; same --width")


def test_metrics_logger_columns(tmp_path):
    log = MetricsLogger(str(tmp_path), DistEnv())
    log.log({"epoch": 0, "train_loss": 1.0})
    log.log({"epoch": 1, "train_loss": 0.5, "val": 0.7})
    rows = read_metrics(str(tmp_path / "metrics.csv"))
    assert rows == [{"epoch": 0.0, "train_loss": 1.0}, {"epoch": 1.0, "train_loss": 0.5, "val": 0.7}]
    MetricsLogger(str(tmp_path), DistEnv(rank=1, world_size=2)).log({"epoch": 5, "x": 1})  # no-op off rank 0
    assert len(read_metrics(str(tmp_path / "metrics.csv"))) == 2


def _run_cli(argv):
    args = build_parser(argv).parse_args(argv)
    from pyg_lie.experiments import springs
    return springs.main(args)


def _params(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "torchrun")), reason="torchrun not found")
def test_two_process_ddp_matches_single_process(tmp_path):
    """torchrun --nproc_per_node=2 (gloo) == one process for the same global batch; resume == straight."""
    single, resumed, ddp = (str(tmp_path / s) for s in ("single", "resumed", "ddp"))
    _run_cli(["train", "springs", *TINY, "--out", single])
    _run_cli(["train", "springs", *TINY, "--out", resumed, "--stop-after", "1"])
    _run_cli(["train", "springs", *TINY, "--out", resumed, "--resume", "auto"])
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "pyg_lie", "train", "springs",
                           *TINY, "--out", ddp], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b, c = _params(f"{single}/checkpoint.pt"), _params(f"{resumed}/checkpoint.pt"), _params(f"{ddp}/checkpoint.pt")
    for key in a:
        assert torch.equal(a[key], b[key]), key
        torch.testing.assert_close(c[key], a[key], rtol=1e-5, atol=1e-6)
    ra, rc = read_metrics(f"{single}/metrics.csv"), read_metrics(f"{ddp}/metrics.csv")
    assert ra[0]["train_loss"] != ra[1]["train_loss"]  # the parameters did move
    for x, y in zip(ra, rc):
        assert abs(x["train_loss"] - y["train_loss"]) <= 1e-5 * abs(x["train_loss"])
        assert abs(x["val_mse"] - y["val_mse"]) <= 1e-5 * abs(x["val_mse"])
    # rank 0 alone wrote the outputs
    assert sorted(os.listdir(ddp)) == sorted(os.listdir(single))


@pytest.mark.skipif(shutil.which("torchrun") is None and not os.path.exists(
    os.path.join(os.path.dirname(sys.executable), "torchrun")), reason="torchrun not found")
def test_two_process_constellation_matches_single_process(tmp_path):
    """``train constellation`` under torchrun wraps the model in DDP: two processes (gloo)
    end with the parameters and losses of one process on the same global batches (T(2): no
    random lift), and only rank 0 writes the outputs."""
    from pyg_lie.experiments import constellation
    tiny = ["train", "constellation", "--group", "T2", "--num-train", "32", "--num-test", "8", "--hidden", "8",
            "--layers", "1", "--heads", "2", "--kernel-dim", "4", "--batch-size", "8", "--epochs", "2",
            "--lr", "1e-2", "--invariance-lifts", "--invariance-clouds", "4", "--no-progress"]
    single, ddp = str(tmp_path / "single"), str(tmp_path / "ddp")
    assert constellation.main(build_parser(tiny).parse_args(tiny + ["--out", single])) == 0
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "pyg_lie", *tiny, "--out", ddp],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, c = _params(f"{single}/checkpoint.pt"), _params(f"{ddp}/checkpoint.pt")
    for key in a:
        torch.testing.assert_close(c[key], a[key], rtol=1e-5, atol=1e-6)
    ra, rc = read_metrics(f"{single}/metrics.csv"), read_metrics(f"{ddp}/metrics.csv")
    for x, y in zip(ra, rc):
        assert abs(x["train_loss"] - y["train_loss"]) <= 1e-5 * abs(x["train_loss"])
    assert sorted(os.listdir(ddp)) == sorted(os.listdir(single))


@pytest.mark.parametrize("command", ["vit", "swe", "lie-sequence"])
def test_single_process_commands_refuse_several_processes(monkeypatch, command):
    """Commands without data parallelism stop under torchrun with more than one process
    (each process would train on everything and write the same files), naming the ones
    that do run data-parallel."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    import importlib
    args = build_parser(["train", command]).parse_args(["train", command])
    exp = importlib.import_module("pyg_lie.experiments." + command.replace("-", "_"))
    with pytest.raises(SystemExit, match="constellation"):
        exp.main(args)


@pytest.mark.parametrize("amp", [torch.bfloat16, torch.float16])
def test_fit_mixed_precision(tmp_path, amp):
    """``fit(amp=...)``: the loss runs under autocast with that dtype (float16 through a gradient
    scaler), the model still learns, parameters stay float32, and bad dtypes are refused."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(5))
    ds = TensorDataset(x, x.sum(-1, keepdim=True))
    seen = []

    def loss_fn(m, b):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        out = m(b[0])
        seen.append(out.dtype)
        return (out.float() - b[1]).pow(2).mean()

    before = float(loss_fn(model, ds.tensors))
    seen.clear()
    rows = fit(model, opt, None, ds, DistEnv(), loss_fn, None, epochs=6, batch_size=8, seed=1,
               out_dir=str(tmp_path), progress=False, grad_clip=1.0, amp=amp)
    assert seen[0] == (True, amp) and seen[1] == amp
    assert rows[-1]["train_loss"] < 0.5 * before
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(ValueError, match="amp must be"):
        fit(model, opt, None, ds, DistEnv(), loss_fn, None, epochs=1, batch_size=8, seed=1,
            out_dir=str(tmp_path), progress=False, amp=torch.float64)
