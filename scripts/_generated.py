"""The step every page generator shares: write the generated text, or with ``--check`` say
whether the committed file is up to date (a diff and exit status 1 when it is not)."""
from __future__ import annotations

import difflib
import sys
from pathlib import Path


def write_or_check(text: str, out: Path, check: bool, script: str) -> int:
    if check:
        have = out.read_text() if out.is_file() else ""
        if have != text:
            diff = difflib.unified_diff(have.splitlines(), text.splitlines(), str(out), "generated", lineterm="")
            print("\n".join(list(diff)[:60]))
            print(f"{out} is out of date: run python {script}", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}")
    return 0
