"""Nothing lost, nothing mislabelled: a resume never reports fewer epochs than its model was
trained for, the files a run needs to resume are written atomically, and a run writes its
result files under ``runs/`` unless ``--results-dir`` asks for another folder."""
import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from pyg_lie.training import DistEnv, MetricsLogger, fit, save_checkpoint
from pyg_lie.training._atomic import atomic_open, atomic_write_text
from pyg_lie.training.logging import read_metrics

ROOT = Path(__file__).resolve().parents[2]
SPRINGS = ["train", "springs", "--hidden", "8", "--layers", "1", "--heads", "2", "--n-train", "8", "--n-val", "4",
           "--n-test", "2", "--rollout-steps", "6", "--batch-size", "8", "--no-progress"]


def _fit(tmp_path, epochs, resume=None):
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))

    def loss_fn(m, batch):
        x, y = batch
        return (m(x) - y).square().mean()

    rows = fit(model, opt, None, data, DistEnv(), loss_fn, epochs=epochs, batch_size=4, seed=0,
               out_dir=str(tmp_path), resume=resume, progress=False)
    return model, rows


def test_fit_refuses_to_resume_a_longer_trained_checkpoint(tmp_path):
    _fit(tmp_path, 2)
    ckpt = tmp_path / "checkpoint.pt"
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match=r"trained for 2 epochs, more than the 1 asked for \(--epochs 1\)"):
        _fit(tmp_path, 1, resume=str(ckpt))
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before  # nothing rewritten
    # resuming with as many epochs as were trained runs nothing and keeps the history
    _, rows = _fit(tmp_path, 2, resume=str(ckpt))
    assert [r["epoch"] for r in rows] == [0.0, 1.0]


def test_cli_resume_auto_with_fewer_epochs_is_a_usage_error(tmp_path, capsys):
    from pyg_lie.cli import main
    out, res = tmp_path / "run", tmp_path / "res"
    assert main(SPRINGS + ["--epochs", "2", "--out", str(out), "--results-dir", str(res)]) == 0
    record = res / "springs" / "lie-T2-n8.json"
    first = record.read_bytes()
    capsys.readouterr()
    rc = main(SPRINGS + ["--epochs", "1", "--resume", "auto", "--out", str(out), "--results-dir", str(res)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert "error: --resume" in err and "trained for 2 epochs" in err and "--epochs 2" in err
    assert record.read_bytes() == first  # the result file still says (and holds) 2 epochs
    assert json.loads(first)["config"]["epochs"] == 2


def test_atomic_open_keeps_the_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError, match="killed"):
        with atomic_open(str(path)) as f:
            f.write("half a")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]  # no temporary file left behind
    atomic_write_text(str(path), "new\n")
    assert path.read_text() == "new\n" and sorted(os.listdir(tmp_path)) == ["f.txt"]
    with pytest.raises(ValueError, match="mode"):
        with atomic_open(str(path), "a"):
            pass


def test_metrics_csv_survives_a_failing_write(tmp_path, monkeypatch):
    logger = MetricsLogger(str(tmp_path), DistEnv(), tensorboard=False)
    logger.log({"epoch": 0, "loss": 1.0})
    logger.log({"epoch": 1, "loss": 0.5})
    before = (tmp_path / "metrics.csv").read_text()

    def dying_writerow(self, row):
        raise KeyboardInterrupt  # the process is killed in the middle of the rewrite

    monkeypatch.setattr(csv.DictWriter, "writerow", dying_writerow)
    with pytest.raises(KeyboardInterrupt):
        logger.log({"epoch": 2, "loss": 0.25, "new_column": 3.0})
    monkeypatch.undo()
    assert (tmp_path / "metrics.csv").read_text() == before
    assert read_metrics(str(tmp_path / "metrics.csv")) == [{"epoch": 0.0, "loss": 1.0}, {"epoch": 1.0, "loss": 0.5}]
    assert sorted(os.listdir(tmp_path)) == ["metrics.csv"]


def test_checkpoint_save_is_atomic(tmp_path, monkeypatch):
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(str(path), model, opt, None, 0, DistEnv())
    before = path.read_bytes()

    def dying_save(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(str(path), model, opt, None, 1, DistEnv())
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]


def test_default_results_dir_is_under_runs_and_ignored(tmp_path, monkeypatch, capsys):
    from pyg_lie.cli import main
    from pyg_lie.experiments.results import RESULTS_DIR, RESULTS_DIR_ENV
    assert Path(RESULTS_DIR).parts[0] == "runs"
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/results/springs/x.json"], cwd=ROOT)
    if ignored.returncode != 128:  # 128: not a git checkout
        assert ignored.returncode == 0, "runs/ must be ignored by .gitignore"
    monkeypatch.delenv(RESULTS_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(SPRINGS + ["--epochs", "1", "--out", "runs/springs"]) == 0
    assert (tmp_path / "runs" / "results" / "springs" / "lie-T2-n8.json").is_file()
    assert (tmp_path / "runs" / "results" / "springs" / "rollout_comparison.png").is_file()
    assert not (tmp_path / "results").exists()  # the committed folder is written only when asked
    assert main(SPRINGS + ["--epochs", "1", "--out", "runs/springs2", "--results-dir", "results"]) == 0
    assert (tmp_path / "results" / "springs" / "lie-T2-n8.json").is_file()


def test_a_damaged_metrics_file_is_named(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,train_loss\n0,1.5\n1,0.7e\n")
    with pytest.raises(ValueError, match="metrics.csv.*is not a metrics file"):
        read_metrics(str(path))


def test_fit_stops_on_non_finite_parameters(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(2, 1).double()
    opt = torch.optim.SGD(model.parameters(), lr=1e200)  # a finite loss (~1e200), then weights beyond float64
    data = TensorDataset(torch.randn(8, 2, dtype=torch.float64) * 1e100, torch.randn(8, 1, dtype=torch.float64))

    def loss_fn(m, batch):
        x, y = batch
        return (m(x) - y).square().mean()

    with pytest.raises(FloatingPointError, match="non-finite model parameters after epoch 0"):
        fit(model, opt, None, data, DistEnv(), loss_fn, epochs=2, batch_size=8, seed=0, out_dir=str(tmp_path),
            progress=False)
