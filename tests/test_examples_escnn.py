"""examples/escnn_vit.py (escnn stem -> pyg_lie ViT -> escnn group pooling): it trains, and its
logits are invariant under the group's transforms of the input but not under a pixel shift."""
import importlib.util
import os
import re
import sys

import pytest

pytest.importorskip("escnn")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_escnn_vit_example_trains_and_is_invariant(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("escnn_vit_example", os.path.join(ROOT, "examples", "escnn_vit.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setattr(sys, "argv", ["escnn_vit.py", "--group", "D4", "--steps", "30", "--samples", "128",
                                      "--dataset", "synthetic", "--threads", "1"])
    example.main()
    out = capsys.readouterr().out
    first, last = map(float, re.search(r"training loss: (\S+) -> (\S+)", out).groups())
    assert last < first - 0.05, out
    err = float(re.search(r"largest logit change under the D4 .*?: (\S+)", out).group(1))
    shift = float(re.search(r"one-pixel shift \(not a symmetry\): (\S+)", out).group(1))
    assert err < 1e-5, out  # float32, escnn's filter basis sampled in float32
    assert shift > 1e-2 and shift > 1000 * err, out
