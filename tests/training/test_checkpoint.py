"""``--resume`` / ``--init-from`` of missing, truncated or foreign checkpoints: one usage error
naming the file and what is wrong, nothing loaded and nothing overwritten."""
import os

import pytest
import torch
from torch import nn

from pyg_lie.cli import main as cli_main
from pyg_lie.training import DistEnv, load_checkpoint, load_weights, save_checkpoint

TINY = ["train", "constellation", "--group", "T2", "--num-train", "8", "--num-test", "4", "--hidden", "8",
        "--layers", "1", "--heads", "2", "--kernel-dim", "4", "--batch-size", "8", "--epochs", "1",
        "--no-progress"]


def _model(width=4):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, width), nn.Tanh(), nn.Linear(width, 1))


def _valid(path, width=4):
    model = _model(width)
    opt = torch.optim.Adam(model.parameters())
    save_checkpoint(str(path), model, opt, None, 3, DistEnv())
    return model, opt


def _bad_files(tmp_path):
    """name -> (path, words the message must contain)."""
    rnd = tmp_path / "random.pt"
    rnd.write_bytes(os.urandom(4096))
    good = tmp_path / "good.pt"
    _valid(good)
    trunc = tmp_path / "truncated.pt"
    trunc.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    other = tmp_path / "other_model.pt"
    _valid(other, width=7)
    bare = tmp_path / "state_dict.pt"
    torch.save(_model().state_dict(), bare)
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor)
    return {
        "random": (rnd, "not a readable checkpoint"),
        "truncated": (trunc, "not a readable checkpoint"),
        "empty": (empty, "not a readable checkpoint"),
        "other_model": (other, "different architecture"),
        "state_dict": (bare, "not a pyg-lie training checkpoint"),
        "tensor": (tensor, "not a pyg-lie training checkpoint"),
        "missing": (tmp_path / "nope.pt", "does not exist"),
    }


def test_load_checkpoint_rejects_bad_files_and_loads_nothing(tmp_path):
    for name, (path, words) in _bad_files(tmp_path).items():
        model = _model()
        opt = torch.optim.Adam(model.parameters())
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(ValueError) as info:
            load_checkpoint(str(path), model, opt, None, DistEnv())
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith("--resume: ") and repr(str(path)) in msg, (name, msg)
        assert words in msg, (name, msg)
        for k, v in model.state_dict().items():
            assert torch.equal(v, before[k]), (name, k)
        assert opt.state_dict()["state"] == {}, name


def test_a_file_whose_load_exhausts_memory_is_a_usage_error(tmp_path, monkeypatch):
    """Random bytes read as a legacy pickle can claim a huge allocation (a MemoryError inside
    torch.load, as seen with os.urandom contents): one ValueError naming the file, as for any
    unreadable checkpoint."""
    path = tmp_path / "huge_claim.pt"
    path.write_bytes(b"\x80\x02" + bytes(100))

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(torch, "load", exhausted)
    with pytest.raises(ValueError, match=r"^--resume: .*huge_claim\.pt.* \(102 bytes\) is not a readable checkpoint: "
                                         r"loading it asks for more memory"):
        load_checkpoint(str(path), _model(), None, None, DistEnv())


def test_load_checkpoint_same_keys_other_shapes_leaves_model_unchanged(tmp_path):
    _valid(tmp_path / "w7.pt", width=7)
    model = _model(4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"--resume: .*w7\.pt.* different architecture: 3 tensor\(s\) of another shape \(e.g. .0.weight.: saved \(7, 3\), this model \(4, 3\)\)"):
        load_checkpoint(str(tmp_path / "w7.pt"), model, None, None, DistEnv())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_optimizer_of_another_model_is_named(tmp_path):
    model, _ = _valid(tmp_path / "a.pt")
    ck = torch.load(tmp_path / "a.pt", weights_only=False)
    ck["optimizer"] = torch.optim.Adam([torch.zeros(1)]).state_dict()
    torch.save(ck, tmp_path / "b.pt")
    with pytest.raises(ValueError, match="optimiser state for parameter groups of sizes"):
        load_checkpoint(str(tmp_path / "b.pt"), model, torch.optim.Adam(model.parameters()), None, DistEnv())


def test_valid_checkpoint_still_loads(tmp_path):
    ref, _ = _valid(tmp_path / "a.pt")
    model = _model(4)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert load_checkpoint(str(tmp_path / "a.pt"), model, None, None, DistEnv())["epoch"] == 3
    assert torch.equal(model[0].weight, ref[0].weight)
    for path, words in _bad_files(tmp_path).values():
        with pytest.raises(ValueError, match=words):
            load_weights(str(path), _model(), "--init-from")


@pytest.mark.parametrize("kind", ["random", "truncated", "other_model", "state_dict"])
def test_cli_resume_bad_checkpoint_is_a_usage_error(tmp_path, capsys, kind):
    path, words = _bad_files(tmp_path)[kind]
    out = tmp_path / "run"
    out.mkdir()
    # an earlier run's outputs must survive a failed resume byte for byte
    sentinels = {"metrics.csv": b"epoch,train_loss\n0.0,1.5\n", "checkpoint.pt": b"earlier checkpoint"}
    for name, data in sentinels.items():
        (out / name).write_bytes(data)
    rc = cli_main(TINY + ["--out", str(out), "--resume", str(path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    first = err.strip().splitlines()[0]
    assert first.startswith("pyg-lie train constellation: error: --resume: "), err
    assert str(path) in first and words in first, err
    for name, data in sentinels.items():
        assert (out / name).read_bytes() == data, name
