"""Write docs/cli.md from the argparse parsers of the ``pyg-lie`` command.

    python scripts/cli_docs.py            # (re)write docs/cli.md
    python scripts/cli_docs.py --check    # exit 1 if docs/cli.md is not what this would write

Every command is found by walking the parser's sub-commands, so a new ``train`` task or
``bench`` name appears here without editing this script. The option tables are generated;
the short introduction at the top is written below.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts' shared helper
from _generated import write_or_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"

INTRO = """\
# Command line: `pyg-lie`

`pyg-lie` (or `python -m pyg_lie`) runs the library's demonstration, trainings and
benchmarks. `pyg-lie --help` lists the commands; `pyg-lie train TASK --help` and
`pyg-lie bench NAME --help` list the options of one of them.

Counts, numbers, lists and devices are checked when the options are parsed: a bad value
(`--epochs 0`, `--lr nan`, `--device gpu`, `--device cuda` on a machine without CUDA)
ends in a one-line `error:` naming the option, with exit status 2. Values that reach the
library's own checks (`--radius -1`) end the same way; set `PYG_LIE_TRACEBACK=1` to see
the whole traceback instead. `--device` takes `cpu`, `cuda` or `cuda:N`.

The numbers of the documented training runs are tabulated in [Results](results.md), those of
the benchmarks in [Benchmarks](benchmarks.md).

This page is generated from the argument parsers by `scripts/cli_docs.py`
(`python scripts/cli_docs.py --check` tells whether it is up to date).
"""


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _commands(parser: argparse.ArgumentParser, prefix: Tuple[str, ...] = ()) -> Iterator[Tuple[str, ...]]:
    sub = _subparsers(parser)
    if sub is None:
        yield prefix
        return
    for name, child in sub.choices.items():
        yield from _commands(child, prefix + (name,))


def _help_of(parser: argparse.ArgumentParser, path: Sequence[str]) -> str:
    """The one-line help its parent gave the command at ``path``."""
    node = parser
    text = ""
    for name in path:
        sub = _subparsers(node)
        for choice in sub._choices_actions:
            if choice.dest == name:
                text = choice.help or ""
        node = sub.choices[name]
    return text


def _descend(parser: argparse.ArgumentParser, path: Sequence[str]) -> argparse.ArgumentParser:
    for name in path:
        parser = _subparsers(parser).choices[name]
    return parser


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _prose(text: str) -> str:
    """A table cell of running text: ``<run>`` must not read as an HTML tag."""
    return _cell(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _format_action(parser: argparse.ArgumentParser, action: argparse.Action) -> Tuple[str, str, str]:
    formatter = parser._get_formatter()
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + formatter._format_args(action, action.dest.upper())
    else:
        name = formatter._format_args(action, action.dest)
    help_ = formatter._expand_help(action) if action.help else ""
    # ArgumentDefaultsHelpFormatter appends the default to the help; show it once, in its column
    suffix = " (default: %(default)s)" % {"default": action.default}
    if help_.endswith(suffix):
        help_ = help_[: -len(suffix)]
    default = ""
    if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS):
        default = "`" + (" ".join(map(str, action.default)) if isinstance(action.default, (list, tuple))
                         else str(action.default)) + "`"
    return "`" + _cell(name) + "`", _cell(default), _prose(help_)


def _build_parser_function():
    """``build_parser(argv)`` of the module behind the ``pyg-lie`` console script."""
    import importlib
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module = importlib.import_module(scripts["pyg-lie"].split(":")[0])
    return module.build_parser


def render() -> str:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT))
    build_parser = _build_parser_function()
    top = build_parser(())
    lines: List[str] = [INTRO]
    lines.append("## Commands\n")
    lines.append("| command | purpose |")
    lines.append("|---|---|")
    paths = list(_commands(top))
    for path in paths:
        anchor = "-".join(("pyg-lie",) + path)
        lines.append(f"| [`pyg-lie {' '.join(path)}`](#{anchor}) | {_prose(_help_of(top, path))} |")
    lines.append("")
    for path in paths:
        parser = _descend(build_parser(list(path)), path)
        lines.append(f"## `pyg-lie {' '.join(path)}`\n")
        description = parser.description or _help_of(top, path)
        if description:
            lines.append(_prose(description) + "\n")
        rows = [_format_action(parser, a) for a in parser._actions
                if not isinstance(a, argparse._HelpAction) and a.help is not argparse.SUPPRESS]
        if not rows:
            lines.append("No options.\n")
            continue
        lines.append("| option | default | description |")
        lines.append("|---|---|---|")
        lines.extend(f"| {n} | {d} | {h} |" for n, d, h in rows)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is out of date")
    ap.add_argument("--out", default=str(TARGET), help="file to write or check")
    args = ap.parse_args(argv)
    return write_or_check(render(), Path(args.out), args.check, "scripts/cli_docs.py")

if __name__ == "__main__":
    sys.exit(main())
