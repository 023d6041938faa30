"""Numbers in the experiment pages, and where each one comes from.

A *number* is a decimal (``0.825``), a number in scientific notation (``3.0e-6``, ``1.4e-3``), a
percentage, an integer of 100 or more, with an optional ``k`` / ``M`` multiplier (``170k``,
``1.03M``). Left out: integers below 100 (counts of layers, heads, seeds, figure numbers), digits
that are part of a name (``SE2``, ``lie-T2-n1000``, ``App. I.3``), inline code spans and code
blocks (commands and option values, which the commands' result files record).

A number is *backed* when a value within half a unit of its last written digit (``0.825``:
0.8245 .. 0.8255; ``7e-6``: 6.5e-6 .. 7.5e-6; ``2200``: 2150 .. 2250) is stored in a committed
result file of the page's experiments (:data:`PAGES`; every number, also those in commands and
setting texts), is the mean or sample standard deviation of a metric over a run's seed repeats
(``<run>``, ``<run>-seed<k>``: what ``docs/results.md`` prints as mean ± std), or is printed in a
generated table (``docs/benchmarks.md``; ``docs/results.md``
prints the same files). This is a necessary check, not a sufficient one: a number written to
one significant digit has a wide interval, and any stored value inside it backs it.
"""
from __future__ import annotations

import bisect
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, List, Sequence

ROOT = Path(__file__).resolve().parents[2]

#: page -> (folders under results/, files under benchmarks/results/) that back its numbers
PAGES = {
    "lie_transformer.md": (["constellation", "lift-invariance"],
                           ["lie_self_attention_official.json", "lie_transformer_before_after.json"]),
    "lie_algebra_attention.md": (["lie-sequence", "lie-sequence-tables", "lie-sequence-ablation"], []),
    "springs_qm9_ddp.md": (["springs", "qm9"], ["rollout.json"]),
    "vit.md": (["vit"], ["vit.json"]),
    "s2_attention.md": (["swe"], ["s2_attention.json"]),
    "qm9.md": (["qm9", "qm9-budget"], ["qm9.json"]),
}

_NUMBER = re.compile(r"(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?P<suffix>[kM%]?)")


@dataclass(frozen=True)
class DocNumber:
    text: str        # as written
    value: float     # the number it stands for
    tolerance: float  # half a unit of the last written digit
    line: int


def _unit(num: str, approximate: bool) -> float:
    """One unit of the last written digit of ``num`` (no multiplier); trailing zeros of an
    integer count only when it is marked as approximate (``about 2200`` is written to the hundreds,
    ``200 systems`` is exact)."""
    mantissa, _, exponent = num.lower().partition("e")
    scale = 10.0 ** int(exponent) if exponent else 1.0
    if "." in mantissa:
        return scale * 10.0 ** -len(mantissa.split(".")[1])
    stripped = mantissa.rstrip("0")
    return scale * 10.0 ** (len(mantissa) - len(stripped) if stripped and approximate else 0)


_APPROXIMATE = re.compile(r"(~|\babout |\baround |\broughly |\bapproximately )\s*$")


def _prose(text: str) -> Iterator[tuple]:
    """``(line number, text)`` of the prose: no fenced or indented code blocks, no inline code,
    no HTML comments, no link targets."""
    fenced = False
    indented = False
    previous_blank = True
    in_code = False  # an inline code span can run over a line break
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            previous_blank = False
            continue
        if fenced:
            continue
        blank = not line.strip()
        if line.startswith("    ") and not blank and (previous_blank or indented):
            indented = True
            continue
        if not blank:
            indented = False
        previous_blank = blank
        if blank:
            in_code = False
        parts = line.split("`")
        kept = []
        for k, part in enumerate(parts):
            if k:
                in_code = not in_code
            kept.append(" " if in_code else part)
        line = " ".join(kept)
        line = re.sub(r"<!--.*?-->", " ", line)
        line = re.sub(r"\]\([^)]*\)", "] ", line)
        yield i, line


def numbers_in(text: str) -> List[DocNumber]:
    """The numbers of a Markdown page's prose (see the module docstring)."""
    out = []
    for lineno, line in _prose(text):
        for m in _NUMBER.finditer(line):
            start, end = m.span()
            before = line[max(0, start - 2):start]
            after = line[end:end + 1]
            # part of a name or a longer token: SE2, n1000, I.3, v2.1, 10^4, x_1, 3.0.1
            if before[-1:] and (before[-1].isalnum() or before[-1] in "_^./\\"):
                continue
            if before[-1:] == "-" and before[:1].isalnum():
                continue
            if after and (after.isalnum() or after == "_" or (after == "." and line[end + 1:end + 2].isdigit())):
                continue
            num, suffix = m.group("num").replace(",", ""), m.group("suffix")
            decimal = "." in num or "e" in num.lower()
            value = float(num)
            if not decimal and not suffix and value < 100:
                continue
            factor = {"k": 1e3, "M": 1e6, "%": 1e-2, "": 1.0}[suffix]
            approximate = bool(_APPROXIMATE.search(line[max(0, start - 16):start]))
            out.append(DocNumber(m.group(), value * factor, _unit(num, approximate) * factor / 2, lineno))
    return out


#: result-file fields whose digits are no measurement (a commit id, a CPU model)
_NOT_NUMBERS = ("git_revision", "host_class")


def _values_of(obj, where: str) -> Iterator[tuple]:
    """``(value, where)`` of every number in a JSON object (also in its strings)."""
    if isinstance(obj, bool) or obj is None:
        return
    if isinstance(obj, (int, float)):
        if math.isfinite(obj):
            yield abs(float(obj)), where
    elif isinstance(obj, str):
        yield from _values_in_text(obj, where)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if k not in _NOT_NUMBERS:
                yield from _values_of(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _values_of(v, f"{where}[{i}]")


def _values_in_text(text: str, where: str) -> Iterator[tuple]:
    for m in re.finditer(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text):
        yield float(m.group()), where


@functools.lru_cache(maxsize=None)
def _results_table():
    """``scripts/results_table.py``, whose seed grouping and mean ± std the results page prints."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _seed_aggregates(json_files: Sequence[Path]) -> Iterator[tuple]:
    """``(value, where)`` of the mean and sample standard deviation of every metric over the repeats
    of a run (``<run>`` and ``<run>-seed<k>`` in one folder), computed as ``scripts/results_table.py``
    computes the ``mean ± std`` it prints."""
    table = _results_table()
    groups = {}
    for path in json_files:
        groups.setdefault((path.parent, table.seed_base(path.stem)), []).append(path)
    for (folder, run), paths in groups.items():
        if len(paths) < 2:
            continue
        metrics = [json.loads(p.read_text()).get("metrics") or {} for p in paths]
        for key in set.intersection(*(set(m) for m in metrics)):
            values = [m[key] for m in metrics]
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
                continue
            mean, std = table.mean_std(values)
            where = f"{folder.relative_to(ROOT).as_posix()}/{run} (+seeds).{key}"
            yield abs(mean), where + " mean"
            yield std, where + " std"


class Sources:
    """Every number of the committed result files and generated tables, searchable by interval
    (with the means and spreads over the seed repeats of a run)."""

    def __init__(self, json_files: Iterable[Path], tables: Iterable[Path]):
        pairs = []
        json_files = list(json_files)
        for path in json_files:
            pairs.extend(_values_of(json.loads(path.read_text()), path.relative_to(ROOT).as_posix()))
        pairs.extend(_seed_aggregates([p for p in json_files if p.is_relative_to(ROOT / "results")]))
        for path in tables:
            pairs.extend(_values_in_text(path.read_text(), path.relative_to(ROOT).as_posix()))
        pairs.sort()
        self.values = [v for v, _ in pairs]
        self.where = [w for _, w in pairs]

    @classmethod
    def committed(cls, page: str) -> "Sources":
        """The result files of ``page``'s experiments (:data:`PAGES`) and the generated tables
        (``docs/benchmarks.md`` where the page has benchmarks; ``docs/results.md`` prints the same
        files' numbers and their means over seeds)."""
        folders, benchmarks = PAGES[page]
        files = [p for f in folders for p in sorted((ROOT / "results" / f).glob("*.json"))]
        files += [ROOT / "benchmarks" / "results" / b for b in benchmarks]
        return cls(files, [ROOT / "docs" / "benchmarks.md"] if benchmarks else [])

    def backing(self, number: DocNumber) -> List[tuple]:
        """``(value, where)`` of the stored values that back ``number``."""
        lo, hi = number.value - number.tolerance, number.value + number.tolerance
        slack = 1e-9 * max(abs(lo), abs(hi))  # 0.8255 stored as 0.82549999...
        i = j = bisect.bisect_left(self.values, lo - slack)
        while j < len(self.values) and self.values[j] <= hi + slack:
            j += 1
        return list(zip(self.values[i:j], self.where[i:j]))

    def backs(self, number: DocNumber) -> bool:
        return bool(self.backing(number))


def unbacked(page: str, text: str, sources: Sources, allowed: Sequence[tuple]) -> List[str]:
    """``page:line: number`` for each number of ``text`` neither backed by ``sources`` nor allowed.

    ``allowed`` holds ``(page, number as written, reason)``; an entry with page ``"*"`` holds on
    every page."""
    ok = {(p, n) for p, n, _ in allowed}
    return [f"{page}:{n.line}: {n.text}" for n in numbers_in(text)
            if (page, n.text) not in ok and ("*", n.text) not in ok and not sources.backs(n)]
