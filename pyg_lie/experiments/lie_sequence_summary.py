r"""``pyg-lie summary``: Lie-sequence completion tables next to the paper's.

Reproduces tables 2-4 of Musialski (arXiv 2606.20547) -- SE(2), SO(3), Aff(2),
models G (closed-form score), C (MLP kernel), A (vector tokens) -- and adds the
groups the paper did not test (SO(2), SE(3), Aff(3)). For every group x model it
reuses ``<out>/<group>_<score>.json`` written by ``pyg-lie train lie-sequence``
(same ``--out``) or trains the missing ones (``--collect-only`` skips training),
prints one table per group with the paper's numbers side by side, writes
``summary.md`` and ``pose_error.png`` (pose error per group and model, log scale,
paper values as black markers).

Full reproduction (hours on a small CPU; see docs/lie_algebra_attention.md)::

    pyg-lie summary --seeds 0 1 2 --steps 4000

``--from-results results/lie-sequence`` builds the tables from the committed result files of
``pyg-lie train lie-sequence`` instead (the ones whose options match the command's), so a
committed table is rebuilt from a clone without training and without ``--out``'s run files.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from types import SimpleNamespace

from ..cli.types import device_name, nonnegative_float, nonnegative_int, positive_float, positive_int
from ..training._atomic import atomic_open
from . import lie_sequence
from .lie_sequence import GROUP_CHOICES, MODEL_LETTER, PAPER, SCORE_CHOICES, aggregate

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--groups", nargs="+", default=list(GROUP_CHOICES), choices=GROUP_CHOICES)
    parser.add_argument("--scores", nargs="+", default=list(SCORE_CHOICES), choices=SCORE_CHOICES)
    parser.add_argument("--seeds", type=nonnegative_int, nargs="+", default=[0, 1, 2])
    d = _experiment_defaults()  # one source for the training defaults
    parser.add_argument("--steps", type=positive_int, default=d.steps)
    parser.add_argument("--batch-size", type=positive_int, default=d.batch_size)
    parser.add_argument("--lr", type=nonnegative_float, default=d.lr)
    parser.add_argument("--head", default=d.head, choices=["midpoint", "pair", "token"],
                        help="completion head (see pyg-lie train lie-sequence --help)")
    parser.add_argument("--score-init", type=positive_float, default=d.score_init,
                        help="model G's initial lambda / tau (see pyg-lie train lie-sequence --help)")
    parser.add_argument("--train-size", type=positive_int, default=d.train_size)
    parser.add_argument("--test-size", type=positive_int, default=d.test_size)
    parser.add_argument("--threads", type=nonnegative_int, default=1)
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--out", default=os.path.join("runs", "lie_sequence"))
    parser.add_argument("--collect-only", action="store_true", help="only read existing results under --out")
    parser.add_argument("--from-results", metavar="DIR", default=None,
                        help="build the tables from the result files DIR/*.json of 'pyg-lie train lie-sequence' "
                             "(e.g. results/lie-sequence) whose options match this command's (head, --score-init, "
                             "--steps, --seeds, batch, lr, data sizes; the paper's model otherwise); trains nothing")
    parser.add_argument("--rerun", action="store_true", help="retrain even if results exist")
    parser.add_argument("--no-progress", action="store_true")
    from .results import add_result_arguments
    add_result_arguments(parser, "HEAD, e.g. token")


def _fmt(v, std=None) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    s = f"{v:.2e}" if (v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e3)) else f"{v:.3f}"
    if std is not None and std > 0:
        s += f" ± {std:.1e}"
    return s


def _paper(v) -> str:
    return "-" if v is None else v if isinstance(v, str) else f"{v:g}"


def _experiment_defaults() -> argparse.Namespace:
    """The defaults of ``pyg-lie train lie-sequence`` (the paper's 3 layers x 4 heads x 32)."""
    parser = argparse.ArgumentParser(add_help=False)
    lie_sequence.add_arguments(parser)
    return parser.parse_args([])


def _train_args(args) -> SimpleNamespace:
    cfg = vars(_experiment_defaults())
    cfg.update(steps=args.steps, batch_size=args.batch_size, lr=args.lr, head=args.head, train_size=args.train_size,
               test_size=args.test_size, device=args.device, score_init=args.score_init)
    return SimpleNamespace(**cfg)


def collect(args) -> dict:
    """``{group: {score: summary dict}}`` from disk, training what is missing."""
    from ..groups import GROUPS
    from .lie_sequence import run_one
    os.makedirs(args.out, exist_ok=True)
    table: dict = {}
    targs = _train_args(args)
    for group in args.groups:
        if group not in GROUPS:
            print(f"skipping {group}: not available in pyg_lie.groups")
            continue
        for score in args.scores:
            path = os.path.join(args.out, f"{group}_{score}.json")
            if os.path.exists(path) and not args.rerun:
                with open(path) as f:
                    table.setdefault(group, {})[score] = json.load(f)["summary"]
                continue
            if args.collect_only:
                continue
            runs = [run_one(group, score, s, targs, progress=not args.no_progress) for s in args.seeds]
            agg = aggregate(runs)
            with atomic_open(path, "w") as f:  # read back by the next run: never half written
                json.dump({"summary": agg, "runs": runs, "args": vars(targs)}, f)
            table.setdefault(group, {})[score] = agg
    return table


#: options of a ``pyg-lie train lie-sequence`` result file that must equal the summary's own (or the
#: experiment's defaults) for its models to enter the table; ``None`` in old files means the default
_MATCHED = ("head", "score_init", "steps", "seeds", "batch_size", "lr", "train_size", "test_size", "length",
            "hidden", "layers", "heads", "score_coords", "step_std", "aux_weight", "dtype", "pair_logit_bound",
            "pair_logit_ramp")
#: options that result files written before they existed lack: the value those runs had
_BEFORE_OPTION = {"score_init": 1.0, "score_coords": "algebra"}


def from_result_files(args) -> dict:
    """``{group: {score: summary dict}}`` from the ``pyg-lie train lie-sequence`` result files in
    ``args.from_results`` whose options match ``args`` (see :data:`_MATCHED`); each summary names its
    file under ``"source"``. Two files with the same group and model are an error."""
    from pathlib import Path
    folder = Path(args.from_results)
    if not folder.is_dir():
        raise ValueError(f"--from-results: {str(folder)!r} is not a folder of result files "
                         f"(e.g. results/lie-sequence)")
    want = vars(_train_args(args))
    want["seeds"] = list(args.seeds)
    defaults = vars(_experiment_defaults())
    found: dict = {}
    for path in sorted(folder.glob("*.json")):
        record = json.loads(path.read_text())
        config, metrics = record.get("config") or {}, record.get("metrics") or {}
        if record.get("experiment") != "lie-sequence" or config.get("group") not in args.groups:
            continue
        if any((_BEFORE_OPTION.get(k, defaults.get(k)) if config.get(k) is None else config[k]) != want[k]
               for k in _MATCHED):
            continue
        for score in config.get("score") or []:
            if score not in args.scores:
                continue
            letter = MODEL_LETTER[score]
            key = (config["group"], score)
            if key in found:
                raise ValueError(f"--from-results: both {found[key]['source']} and {path.name} hold "
                                 f"{config['group']} model {letter} with these options; move one away")
            agg = {k: metrics.get(f"{letter}.{k}") for k in ("pose_error", "pose_error_std", "relative_pose_error",
                                                            "equivariance_error", "final_loss")}
            agg.update(score_params=int(metrics[f"{letter}.score_params"]),
                       total_params=int(metrics[f"{letter}.total_params"]), seeds=list(config["seeds"]),
                       steps=config["steps"], head=config["head"], source=path.name)
            found[key] = agg
    table: dict = {}
    for group in args.groups:
        for score in SCORE_CHOICES:
            if (group, score) in found:
                table.setdefault(group, {})[score] = found[(group, score)]
    return table


def render(table: dict) -> str:
    lines = []
    for group, by_score in table.items():
        paper = PAPER.get(group)
        title = f"### {group}" + ("" if paper else " (not in the paper)")
        lines += [title, "",
                  "| model | pose error | paper | pose error / norm(xi) | equivariance error | paper "
                  "| score params | paper | total params | head | seeds | steps |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for score in SCORE_CHOICES:
            if score not in by_score:
                continue
            r = by_score[score]
            letter = MODEL_LETTER[score]
            p = (paper or {}).get(letter, (None, None, None))
            steps = r.get("steps", "")
            lines.append(
                f"| {letter} ({score}) | {_fmt(r['pose_error'], r.get('pose_error_std'))} | {_paper(p[0])} "
                f"| {_fmt(r.get('relative_pose_error'), r.get('relative_pose_error_std'))} "
                f"| {_fmt(r['equivariance_error'], r.get('equivariance_error_std'))} | {_paper(p[1])} "
                f"| {r['score_params']} | {_paper(p[2])} | {r['total_params']} | {r.get('head', 'token')} "
                f"| {len(r['seeds'])} | {steps} |")
        lines.append("")
    return "\n".join(lines)


def plot(table: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    groups = list(table)
    fig, ax = plt.subplots(figsize=(1.6 * max(3, len(groups)) + 1, 4))
    width = 0.26
    colors = {"closed_form": "C0", "mlp": "C1", "vector": "C3"}
    for k, score in enumerate(SCORE_CHOICES):
        xs, ys, es = [], [], []
        for gi, group in enumerate(groups):
            r = table[group].get(score)
            if r is None:
                continue
            xs.append(gi + (k - 1) * width); ys.append(r["pose_error"]); es.append(r.get("pose_error_std", 0))
            p = PAPER.get(group, {}).get(MODEL_LETTER[score])
            if p is not None:
                pv = p[0] if not isinstance(p[0], str) else float(p[0].strip("~"))
                ax.plot(gi + (k - 1) * width, pv, "k_", markersize=14, mew=2)
        if xs:
            ax.bar(xs, ys, width, yerr=es, color=colors[score], label=f"{MODEL_LETTER[score]} ({score})")
    ax.plot([], [], "k_", markersize=14, mew=2, label="paper")
    ax.set_xticks(range(len(groups))); ax.set_xticklabels(groups)
    ax.set_yscale("log"); ax.set_ylabel("pose error  ||log(g_true^-1 g_pred)||")
    ax.set_title("Sequence completion: pose error (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def main(args: argparse.Namespace) -> int:
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    from_results = getattr(args, "from_results", None)
    table = from_result_files(args) if from_results else collect(args)
    if not table:
        print(f"no results with these options in {from_results}" if from_results else
              f"no results under {args.out}; run without --collect-only, or build the tables from committed "
              f"result files with --from-results results/lie-sequence")
        return 1
    os.makedirs(args.out, exist_ok=True)
    text = render(table)
    print(text)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    path = os.path.join(args.out, "pose_error.png")
    plot(table, path)
    print(f"wrote {os.path.join(args.out, 'summary.md')} and pose_error.png")
    _record(args, table, path, time.time() - t0)
    return 0


def _record(args, table: dict, plot_path: str, seconds: float) -> None:
    """``results/lie-sequence-tables/<head>.json``: every group x model of the table."""
    from .lie_sequence import model_metrics, paper_numbers, setting_for
    from .results import record_run
    metrics, paper = {}, {}
    for group, by_score in table.items():
        for score, agg in by_score.items():
            prefix = f"{group}.{MODEL_LETTER[score]}."
            metrics.update(model_metrics(agg, [], prefix))
            paper.update(paper_numbers(group, MODEL_LETTER[score], prefix))
    targs = _train_args(args)
    targs.seeds = args.seeds
    sources = sorted({agg["source"] for by_score in table.values() for agg in by_score.values() if "source" in agg})
    if sources:
        extra = [f"built from the result files {', '.join(sources)} (--from-results)"]
    elif args.collect_only:
        extra = ["read from existing run files (--collect-only); their budget may differ"]
    else:
        extra = []
    record_run(args, "lie-sequence-tables", args.head, ["summary"], metrics=metrics, paper=paper,
               setting=setting_for(targs, extra), wall_time_s=seconds, seed=list(args.seeds), plots=[plot_path])
