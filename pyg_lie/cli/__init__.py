"""The ``pyg-lie`` command line: ``demo``, ``train TASK``, ``bench NAME``.

Each task or benchmark lives in its own module exposing
``add_arguments(parser)`` and ``main(args)``; modules are imported lazily so
that ``pyg-lie --help`` stays fast and optional dependencies stay optional.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import traceback
import warnings
from typing import Optional, Sequence

TRAIN = {
    "constellation": ("pyg_lie.experiments.constellation", "LieTransformer on constellation counting"),
    "lie-sequence": ("pyg_lie.experiments.lie_sequence", "Lie-algebra attention on sequence completion"),
    "lie-sequence-ablation": ("pyg_lie.experiments.lie_sequence_ablation",
                              "Lie-sequence G vs C, one factor at a time (coordinates, init, data, budget)"),
    "swe": ("pyg_lie.experiments.swe", "S^2 attention on shallow-water one-step prediction"),
    "vit": ("pyg_lie.experiments.vit", "O(2)-subgroup equivariant ViT on image classification"),
    "springs": ("pyg_lie.experiments.springs", "Hamiltonian LieTransformer on spring dynamics"),
    "qm9": ("pyg_lie.experiments.qm9", "LieTransformer on QM9"),
    "qm9-budget": ("pyg_lie.experiments.qm9_budget",
                   "QM9 models trained for the same CPU (or wall) time, with learning curves"),
}
BENCH = {
    "neighbors": ("pyg_lie.benchmarks.neighbors", "radius-graph backends side by side"),
    "lie-self-attention": ("pyg_lie.benchmarks.lie_self_attention", "LieSelfAttention vs dense and TransformerConv"),
    "s2-attention": ("pyg_lie.benchmarks.s2_attention", "S^2 attention vs torch-harmonics"),
    "vit": ("pyg_lie.benchmarks.vit", "equivariant ViT vs plain ViT"),
    "lie-algebra-attention": ("pyg_lie.benchmarks.lie_algebra_attention", "Lie-algebra attention timings"),
    "rollout": ("pyg_lie.benchmarks.rollout", "Hamiltonian RK4 rollout + training backward vs potential passes"),
    "qm9": ("pyg_lie.benchmarks.qm9", "QM9 training throughput: LieTransformer presets vs SchNet and DimeNet++"),
}
OTHER = {
    "demo": ("pyg_lie.experiments.demo", "the library's main job: a short demonstration"),
    "summary": ("pyg_lie.experiments.lie_sequence_summary", "Lie-sequence tables vs the paper"),
    "invariance": ("pyg_lie.experiments.lift_invariance",
                   "LieTransformer-SE2 invariance error vs Haar lift samples at initialisation (paper Fig. 3 left)"),
}


def _available(table: dict) -> dict:
    out = {}
    for name, (mod, help_) in table.items():
        if importlib.util.find_spec(mod) is not None:
            out[name] = (mod, help_)
    return out


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Build the parser; only the module of the selected command is imported."""
    parser = argparse.ArgumentParser(prog="pyg-lie", description="Equivariant attention over Lie groups for PyG.")
    sub = parser.add_subparsers(dest="command", required=True)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    def add(subparsers, name, mod, help_, selected):
        p = subparsers.add_parser(name, help=help_, description=help_, formatter_class=fmt)
        p.set_defaults(_module=mod)
        if selected:
            importlib.import_module(mod).add_arguments(p)

    for name, (mod, help_) in _available(OTHER).items():
        add(sub, name, mod, help_, list(argv[:1]) == [name])
    for group, table in (("train", TRAIN), ("bench", BENCH)):
        gp = sub.add_parser(group, help="train a task" if group == "train" else "run a benchmark")
        gsub = gp.add_subparsers(dest="task", required=True)
        for name, (mod, help_) in _available(table).items():
            add(gsub, name, mod, help_, list(argv[:2]) == [group, name])
    return parser


#: set this environment variable to 1 to see the whole traceback of a ``ValueError``
TRACEBACK_ENV = "PYG_LIE_TRACEBACK"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # PyG scripts some classes when imported; nothing a user of this command can act on
    warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=FutureWarning)
    args = build_parser(argv).parse_args(argv)
    try:
        result = importlib.import_module(args._module).main(args)
    except ValueError as err:
        # a bad option value reaches the library's checks, whose message names the argument
        # and the fix: print it like argparse does (exit status 2), not as a traceback
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        frames = traceback.extract_tb(err.__traceback__)
        # the caller of a shared check says more than the check
        where = next((f for f in reversed(frames) if not f.filename.endswith("_checks.py")), frames[-1])
        command = " ".join(["pyg-lie", *argv[:2 if argv[0] in ("train", "bench") else 1]])
        print(f"{command}: error: {err}\n  (raised at {where.filename}:{where.lineno}; "
              f"{TRACEBACK_ENV}=1 shows the traceback)", file=sys.stderr)
        return 2
    except FloatingPointError as err:
        # a training run that diverged (non-finite loss): the message says what to change
        if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        command = " ".join(["pyg-lie", *argv[:2 if argv[0] in ("train", "bench") else 1]])
        print(f"{command}: error: {err} ({TRACEBACK_ENV}=1 shows the traceback)", file=sys.stderr)
        return 1
    return int(result or 0)
