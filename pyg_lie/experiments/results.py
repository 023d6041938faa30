"""Results as data: every experiment run writes one JSON file under ``results/<experiment>/``.

A result file holds what is needed to trace a number back to the run that produced it:

``experiment``, ``run``, ``command`` (the command line), ``config`` (the options),
``seed``, ``git_revision`` (bare 40-hex SHA, or ``null`` outside a checkout), ``git_dirty``
(uncommitted changes at run time), ``host_class`` (CPU/GPU kind and core count, no host
name), ``wall_time_s``, ``metrics`` (name -> number), ``paper`` (name -> the paper's number,
where it has one) and ``setting`` (``"paper"`` or a short text saying how the run was scaled
down). ``scripts/results_table.py`` turns the folder into ``docs/results.md``.
"""
from __future__ import annotations

import json
import math
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

__all__ = ["RESULTS_DIR", "write_result", "read_results", "git_revision", "host_class"]

#: default folder, relative to the working directory (the repository root for the documented commands)
RESULTS_DIR = "results"
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def git_revision(cwd: Optional[str] = None) -> "tuple[Optional[str], Optional[bool]]":
    """``(sha, dirty)`` of the checkout that holds this package, ``(None, None)`` outside one."""
    where = cwd or str(Path(__file__).resolve().parents[2])
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                capture_output=True, text=True, timeout=10).stdout
        return sha, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


def host_class() -> str:
    """The kind of machine, not the machine: CPU model family, core count, GPU name if any."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    out = f"{cpu}, {os.cpu_count()} cores"
    try:
        import torch
        if torch.cuda.is_available():
            out += f", {torch.cuda.get_device_name(0)}"
    except Exception:  # pragma: no cover - torch always imports here; be safe in tooling
        pass
    return out


def _number(name: str, value: Any) -> Optional[float]:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"metric {name!r} must be a number or None, got {value!r}") from None
    return v if math.isfinite(v) else None


def write_result(experiment: str, run: str, *, config: Mapping[str, Any], seed: Optional[int],
                 metrics: Mapping[str, Any], wall_time_s: float, paper: Optional[Mapping[str, Any]] = None,
                 setting: str = "paper", command: Optional[Sequence[str]] = None,
                 out_dir: Optional[str] = None, extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write ``<out_dir>/<experiment>/<run>.json`` and return its path.

    ``metrics`` and ``paper`` map names to numbers (non-finite numbers are stored as ``null``);
    ``config`` must be JSON-serialisable (paths and other objects are stored as strings);
    ``extra`` adds further top-level fields (curves, per-seed values).
    """
    for what, name in (("experiment", experiment), ("run", run)):
        if not _RUN_NAME.match(name):
            raise ValueError(f"{what} must be a plain file name (letters, digits, _ . + -), got {name!r}")
    sha, dirty = git_revision()
    record: Dict[str, Any] = {
        "experiment": experiment,
        "run": run,
        "command": " ".join(command if command is not None else ["pyg-lie", *sys.argv[1:]]),
        "config": json.loads(json.dumps(dict(config), default=str)),
        "seed": seed,
        "git_revision": sha,
        "git_dirty": dirty,
        "host_class": host_class(),
        "wall_time_s": round(float(wall_time_s), 3),
        "setting": setting,
        "metrics": {k: _number(k, v) for k, v in metrics.items()},
        "paper": {k: _number(k, v) for k, v in (paper or {}).items()},
    }
    if extra:
        record.update(json.loads(json.dumps(dict(extra), default=str)))
    folder = Path(out_dir or RESULTS_DIR) / experiment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{run}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def read_results(root: Optional[str] = None) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """``{experiment: {run: record}}`` of every JSON file under ``root`` (sorted)."""
    base = Path(root or RESULTS_DIR)
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for path in sorted(base.glob("*/*.json")):
        out.setdefault(path.parent.name, {})[path.stem] = json.loads(path.read_text())
    return out
