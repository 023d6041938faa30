"""The result file every benchmark command writes (the page generator reads these fields)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence


def write_benchmark(args: argparse.Namespace, prefix: Sequence[str], out: str, *, benchmark: str, title: str,
                    description: str, config: Mapping[str, Any], seed: Any, records: List[Dict[str, Any]],
                    **extra: Any) -> Path:
    """Write ``out`` (atomically): what ran (command, configuration, seed), where (git revision,
    whether the tree was dirty, the class of machine, torch's version), ``extra`` fields (units,
    shared metrics) and one record per measured case; prints and returns the path."""
    import torch

    from ..experiments.results import command_line, git_revision, host_class
    from ..training._atomic import atomic_write_text
    sha, dirty = git_revision()
    result = {"benchmark": benchmark, "title": title, "description": description,
              "command": " ".join(command_line(args, list(prefix))), "config": dict(config), "seed": seed,
              "git_revision": sha, "git_dirty": dirty, "host_class": host_class(), "torch": torch.__version__,
              **extra, "records": records}
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(str(path), json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {path}")
    return path
