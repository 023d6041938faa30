"""The example scripts run end to end (tiny settings) and print what their docstrings promise."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_trains_and_is_c4_invariant():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), "--steps", "3",
                          "--samples", "32", "--batch-size", "16", "--no-progress"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    assert "test accuracy" in out
    change = float(re.search(r"largest logit change under C_4 rotations and translations: (\S+)", out).group(1))
    assert change < 1e-5  # exact invariance up to float32 rounding (the 1e-5)


def test_examples_have_help():
    for script in sorted((ROOT / "examples").glob("*.py")):
        out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        assert out.startswith("usage:"), script.name
