"""Results as data: every experiment run writes one JSON file under ``<results dir>/<experiment>/``.

The results dir is ``--results-dir``, else ``$PYG_LIE_RESULTS_DIR``, else :data:`RESULTS_DIR`
(``runs/results``, ignored by git): the committed ``results/`` folder is written only when
asked for (``--results-dir results``).

A result file holds what is needed to trace a number back to the run that produced it:

``experiment``, ``run``, ``command`` (the command line), ``config`` (the options),
``seed``, ``git_revision`` (bare 40-hex SHA, or ``null`` outside a checkout), ``git_dirty``
(uncommitted changes at run time), ``host_class`` (CPU/GPU kind and core count, no host
name), ``wall_time_s``, ``metrics`` (name -> number), ``paper`` (name -> the paper's number,
where it has one) and ``setting`` (``"paper"`` or a short text saying how the run was scaled
down). ``scripts/results_table.py`` turns the folder into ``docs/results.md``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

__all__ = ["RESULTS_DIR", "RESULTS_DIR_ENV", "REQUIRED_FIELDS", "load_result", "write_result", "read_results", "git_revision", "host_class",
           "add_result_arguments", "record_run", "setting_text", "command_line", "run_name"]

#: default folder, relative to the working directory: under ``runs/`` (ignored by git), so that
#: a run from the repository root never overwrites the committed ``results/`` (pass
#: ``--results-dir results`` to write there)
RESULTS_DIR = os.path.join("runs", "results")
#: environment variable that replaces the default of ``--results-dir`` (the test suite points it at a
#: temporary folder so that no test run overwrites the committed results)
RESULTS_DIR_ENV = "PYG_LIE_RESULTS_DIR"
#: the fields every result file has
REQUIRED_FIELDS = ("experiment", "run", "command", "config", "seed", "git_revision", "git_dirty", "host_class",
                   "wall_time_s", "setting", "metrics", "paper")
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


def write_result(experiment: str, run: str, *, config: Mapping[str, Any],
                 seed: Union[int, Sequence[int], None],
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
        "seed": list(seed) if isinstance(seed, (list, tuple)) else seed,
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


def run_name(text: str) -> str:
    """``--run-name``: a plain file name (letters, digits, ``_ . + -``)."""
    if not _RUN_NAME.match(text):
        raise argparse.ArgumentTypeError(f"must be a plain file name (letters, digits, _ . + -), got {text!r}")
    return text


def add_result_arguments(p: argparse.ArgumentParser, default_run: str) -> None:
    """``--results-dir`` and ``--run-name`` of an experiment command."""
    p.add_argument("--results-dir", default=None,
                   help=f"the run's result file goes to RESULTS_DIR/<experiment>/<run>.json, its plots "
                        f"beside it as <run>.<plot>.png (default: ${RESULTS_DIR_ENV} when set, else "
                        f"{RESULTS_DIR}; the committed results live in results/, written only when "
                        f"asked for: --results-dir results)")
    p.add_argument("--run-name", type=run_name, default=None, help=f"<run> (default: {default_run})")


def setting_text(config: Mapping[str, Any], paper: Mapping[str, Any], extra: Iterable[str] = ()) -> str:
    """``"paper"`` when ``config`` has every value of the paper's setting ``paper`` (option ->
    value) and nothing is in ``extra``; otherwise ``"scaled down: <option> <ours> (paper
    <theirs>), ..."`` followed by the ``extra`` remarks."""
    def same(a, b) -> bool:
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return math.isclose(float(a), float(b), rel_tol=1e-12)
        return a == b

    def show(v) -> str:
        return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    diffs = [f"{k.replace('_', '-')} {show(config.get(k))} (paper {show(v)})" for k, v in paper.items()
             if not same(config.get(k), v)]
    notes = list(extra)
    if not diffs and not notes:
        return "paper"
    return "; ".join((["scaled down: " + ", ".join(diffs)] if diffs else []) + notes)


_NOT_CONFIG = ("results_dir", "run_name", "no_progress", "out")


def _option_item(v: Any) -> str:
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):  # NAME=VALUE items
        return f"{v[0]}={v[1]}"
    return str(v)


def _format_option(action: argparse.Action, value: Any) -> List[str]:
    opt = max(action.option_strings, key=len)
    if isinstance(action, argparse._StoreTrueAction):
        return [opt] if value else []
    if isinstance(value, (list, tuple)):
        items = [_option_item(v) for v in value]
        return [opt, *items] if action.nargs is not None else [opt, ",".join(items)]
    return [opt, str(value)]


def command_line(args: argparse.Namespace, prefix: Sequence[str]) -> List[str]:
    """The command that ran: ``pyg-lie`` and its arguments when it ran from the command line,
    otherwise (a library call, a test) ``pyg-lie <prefix>`` with every option that differs
    from its default."""
    exe = Path(sys.argv[0]).name if sys.argv else ""
    if exe in ("pyg-lie", "__main__.py") and list(sys.argv[1:1 + len(prefix)]) == list(prefix):
        return ["pyg-lie", *sys.argv[1:]]
    from ..cli import build_parser
    parser = build_parser(list(prefix))
    for name in prefix:  # descend to the sub-command's parser
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    out = ["pyg-lie", *prefix]
    for action in parser._actions:
        if not action.option_strings or action.dest in ("help",) or not hasattr(args, action.dest):
            continue
        value = getattr(args, action.dest)
        if value != action.default and not (isinstance(value, (list, tuple)) and isinstance(action.default, (list, tuple))
                                            and list(value) == list(action.default)):
            out += _format_option(action, value)
    return out


def record_run(args: argparse.Namespace, experiment: str, default_run: str, prefix: Sequence[str], *,
               metrics: Mapping[str, Any], paper: Optional[Mapping[str, Any]], setting: str,
               wall_time_s: float, seed: Union[int, Sequence[int], None],
               plots: Sequence[str] = (), extra: Optional[Mapping[str, Any]] = None) -> Path:
    """Write the result file of a command's run (``--results-dir``, ``--run-name``) and copy
    its plots beside it; returns the JSON path."""
    run = getattr(args, "run_name", None) or default_run
    config = {k: v for k, v in vars(args).items() if not k.startswith("_") and k not in _NOT_CONFIG}
    path = write_result(experiment, run, config=config, seed=seed, metrics=metrics, wall_time_s=wall_time_s,
                        paper=paper, setting=setting, command=command_line(args, prefix),
                        out_dir=getattr(args, "results_dir", None) or os.environ.get(RESULTS_DIR_ENV)
                        or RESULTS_DIR, extra=extra)
    for plot in plots:
        if os.path.isfile(plot):
            _small_png(plot, path.parent / f"{run}.{Path(plot).name}")
    print(f"result: {path}")
    return path


def _small_png(src: str, dst: Path) -> None:
    """Copy a plot as a 64-colour palette PNG (a third of the size; the files are committed)."""
    try:
        from PIL import Image
        with Image.open(src) as im:
            im.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(dst, "PNG", optimize=True)
    except (ImportError, OSError, ValueError):
        shutil.copyfile(src, dst)


def load_result(root: Union[str, Path], experiment: str, run: Optional[str] = None) -> Dict[str, Any]:
    """The record of ``<root>/<experiment>/<run>.json`` (the only run when ``run`` is None);
    raises ``ValueError`` when a required field is missing."""
    folder = Path(root) / experiment
    paths = [folder / f"{run}.json"] if run else sorted(folder.glob("*.json"))
    if len(paths) != 1 or not paths[0].is_file():
        raise ValueError(f"expected one result file {folder}/{run or '*'}.json, found {[p.name for p in paths]}")
    record = json.loads(paths[0].read_text())
    missing = [k for k in REQUIRED_FIELDS if k not in record]
    if missing:
        raise ValueError(f"{paths[0]}: result file lacks {missing}")
    return record
