"""The command line's option types and its parsers."""
import argparse

import pytest

from pyg_lie.cli import BENCH, OTHER, TRAIN, _available, build_parser
from pyg_lie.cli.types import device_name, nonnegative_float, nonnegative_int, positive_float, positive_int


def test_count_types():
    assert positive_int("3") == 3 and nonnegative_int("0") == 0
    for f, bad in ((positive_int, "0"), (positive_int, "-2"), (nonnegative_int, "-1"),
                   (positive_int, "1.5"), (nonnegative_int, "x")):
        with pytest.raises(argparse.ArgumentTypeError, match="must be"):
            f(bad)


def test_number_types():
    assert positive_float("2.5e-3") == 2.5e-3 and nonnegative_float("0") == 0.0
    for f, bad in ((positive_float, "0"), (positive_float, "-1e-3"), (positive_float, "nan"),
                   (positive_float, "inf"), (nonnegative_float, "-0.1"), (nonnegative_float, "nan"),
                   (nonnegative_float, "x")):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
            f(bad)


@pytest.mark.parametrize("command, option, value, message", [
    (["train", "swe"], "--dt-hours", "0", "must be a finite number > 0, got '0'"),
    (["train", "vit"], "--lr", "nan", "must be a finite number >= 0, got 'nan'"),
    (["train", "springs"], "--grad-clip", "-1", "must be a finite number > 0, got '-1'"),
    (["train", "constellation"], "--time-limit", "inf", "must be a finite number > 0, got 'inf'"),
    (["bench", "neighbors"], "--degree", "0", "must be a finite number > 0, got '0'"),
    (["train", "lie-sequence"], "--step-std", "foo", "expects BLOCK=STD"),
    (["train", "lie-sequence"], "--step-std", "rotation=-1", "expects BLOCK=STD"),
    (["train", "vit"], "--ratios", "0,1", "must be comma-separated fractions in (0, 1]"),
    (["train", "vit"], "--ratios", "0.5,2", "must be comma-separated fractions in (0, 1]"),
    *[(["train", "swe"], "--backends", v, "must be one or both of pyg-lie, torch-harmonics")
      for v in ("foo", ",", "pyg-lie,pyg-lie", "pyg-lie,bar")],
    *[(["bench", "s2-attention"], "--sizes", v, "must be comma-separated NLATxNLON grids")
      for v in ("8x", "0x16", "8x16,4", "8x16x2", "axb")],
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_bad_values_are_usage_errors(command, option, value, message, capsys):
    argv = command + [option, value]
    with pytest.raises(SystemExit) as err:
        build_parser(argv).parse_args(argv)
    assert err.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err


def test_lists_parse_to_values():
    argv = ["train", "lie-sequence", "--step-std", "translation=0.5", "rotation=0"]
    assert build_parser(argv).parse_args(argv).step_std == [("translation", 0.5), ("rotation", 0.0)]
    argv = ["train", "vit", "--ratios", "0.1,0.4,1"]
    assert build_parser(argv).parse_args(argv).ratios == [0.1, 0.4, 1.0]


def test_device_type(monkeypatch):
    import torch
    assert device_name("cpu") == "cpu"
    for bad in ("gpu", "cpu:0", "cuda:x", "cuda:", "CUDA", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="must be 'cpu', 'cuda' or 'cuda:N'"):
            device_name(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(argparse.ArgumentTypeError, match="CUDA is not available on this machine; use cpu"):
        device_name("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device_name("cuda") == "cuda" and device_name("cuda:1") == "cuda:1"
    with pytest.raises(argparse.ArgumentTypeError, match="2 CUDA device.*cuda:0 .. cuda:1"):
        device_name("cuda:2")


@pytest.mark.parametrize("command", [["train", "swe"], ["train", "vit"], ["train", "lie-sequence"], ["summary"],
                                     ["bench", "neighbors"], ["bench", "vit"], ["bench", "lie-algebra-attention"]],
                         ids=" ".join)
def test_unknown_devices_are_usage_errors(command, capsys):
    argv = command + ["--device", "gpu"]
    with pytest.raises(SystemExit) as err:
        build_parser(argv).parse_args(argv)
    assert err.value.code == 2
    assert "argument --device: must be 'cpu', 'cuda' or 'cuda:N', got 'gpu'" in capsys.readouterr().err


def _commands():
    out = [[name] for name in _available(OTHER)]
    for group, table in (("train", TRAIN), ("bench", BENCH)):
        out += [[group, name] for name in _available(table)]
    return out


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_every_command_parses_its_defaults(command):
    args = build_parser(command).parse_args(command)
    assert args._module


@pytest.mark.parametrize("command, option", [
    (["train", "constellation"], "--epochs"), (["train", "springs"], "--batch-size"),
    (["bench", "lie-self-attention"], "--repeats"), (["bench", "neighbors"], "--sizes"),
])
def test_zero_counts_are_usage_errors(command, option, capsys):
    argv = command + [option, "0"]
    with pytest.raises(SystemExit) as err:
        build_parser(argv).parse_args(argv)
    assert err.value.code == 2
    assert f"argument {option}: must be a positive integer, got '0'" in capsys.readouterr().err
