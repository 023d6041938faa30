"""The user documentation: a short README whose examples run, no dates, session history or
paths outside the repository in the README, docs/ or docstrings, generated pages up to date,
and a strict mkdocs build."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable

# dates (2026-12-01, 30 Nov 2026), clock times of a session, run folders of a session and
# files or folders outside the repository
FORBIDDEN = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b"
    r"|\b\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4}\b"
    r"|\bUTC\b"
    r"|\.\./shared|(?<![\w./-])shared/(?:papers|wheels)"
    r"|FIELD_NOTES"
    r"|runs/s\d+"
)

# files that still break the rule (none now); xfail(strict=False) entries would name their reason
KNOWN = {}


def _doc_files():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p.relative_to(ROOT).as_posix() for p in files if p.exists()]


def _py_files():
    return [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "pyg_lie").rglob("*.py"))]


def _param(path):
    if path in KNOWN:
        return pytest.param(path, marks=pytest.mark.xfail(reason=KNOWN[path], strict=False))
    return path


def _hits(text: str, first_line: int = 1):
    return [f"line {first_line + text[:m.start()].count(chr(10))}: {m.group()!r}" for m in FORBIDDEN.finditer(text)]


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines; move details to docs/ (at most 160)"


def test_forbidden_pattern_is_not_blind():
    for bad in ("on 2026-12-01", "30 Nov 2026", "06:17 UTC", "../shared/x", "shared/papers/a.txt",
                "see FIELD_NOTES", "runs/s27/bench"):
        assert FORBIDDEN.search(bad), bad
    for ok in ("version 2.8.1", "N = 1024", "runs/demo", "the shared location MLP", "shared/ folder"):
        assert not FORBIDDEN.search(ok), ok


@pytest.mark.parametrize("path", [_param(p) for p in _doc_files()])
def test_docs_have_no_dates_or_outside_paths(path):
    hits = _hits((ROOT / path).read_text())
    assert not hits, f"{path}: " + "; ".join(hits)


@pytest.mark.parametrize("path", [_param(p) for p in _py_files()])
def test_docstrings_have_no_dates_or_outside_paths(path):
    tree = ast.parse((ROOT / path).read_text())
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                start = 1 if isinstance(node, ast.Module) else node.body[0].lineno
                hits += _hits(doc, start)
    assert not hits, f"{path}: " + "; ".join(hits)


def _run(args, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", ["scripts/cli_docs.py", "scripts/benchmarks_table.py", "scripts/qm9_tables.py"])
def test_generated_pages_are_up_to_date(script):
    r = _run([PYTHON, script, "--check"], timeout=300)
    assert r.returncode == 0, f"run `python {script}` and commit the page:\n{r.stdout[-3000:]}{r.stderr[-2000:]}"


def test_benchmarks_table_reads_any_record_shape(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import benchmarks_table
    finally:
        sys.path.pop(0)
    (tmp_path / "sub").mkdir()
    (tmp_path / "rollout.json").write_text(
        '{"configuration": {"group": "SE2", "N": 512}, "metrics": {"ms": 12.3456, "mem": {"peak_mb": 3.5}},'
        ' "command": "pyg-lie bench x", "host_class": "Some CPU, 2 cores", "date": "2026-12-05",'
        ' "hostname": "box17"}')
    (tmp_path / "sub" / "list.json").write_text(
        '{"title": "Backends", "records": [{"configuration": {"backend": "a", "d": 3}, "metrics": {"t": 1.0}},'
        ' {"configuration": {"backend": "b", "d": 3}, "metrics": {"t": 2.5, "ok": true}}]}')
    (tmp_path / "empty.json").write_text("[]")
    text = benchmarks_table.render(tmp_path)
    assert "| group | N | ms | mem.peak_mb |" in text and "| SE2 | 512 | 12.35 | 3.5 |" in text
    assert "Machine class: Some CPU, 2 cores." in text and "Common settings: d = 3." in text
    assert "## Backends" in text and "| b | 2.5 | yes |" in text
    assert "2026" not in text and "box17" not in text
    assert benchmarks_table.render(tmp_path / "missing").count("No benchmark results") == 1


# dotted names of the package (not torch.ops.pyg_lie.*) and files of the repository that
# the pages mention; both go stale when code moves
_NAME = re.compile(r"(?<![\w.])pyg_lie(?:\.[A-Za-z_]\w*)+")
_FILE = re.compile(r"(?<![\w/.-])((?:pyg_lie|tests|scripts|examples)/[\w/.-]*\.(?:py|c|h|md|sh|toml|yml))\b")


def _resolves(name: str) -> bool:
    import importlib
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("path", _doc_files())
def test_docs_name_what_exists(path):
    text = (ROOT / path).read_text()
    missing = sorted({n for n in _NAME.findall(text) if not _resolves(n)})
    missing += sorted({f for f in _FILE.findall(text) if not (ROOT / f).exists()})
    assert not missing, f"{path} names what does not exist (moved or renamed?): {missing}"


def _nav_pages(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from _nav_pages(value)


def test_every_docs_page_is_in_the_nav():
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):  # mkdocs.yml may hold !!python tags; only the nav is needed
        pass

    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    nav = set(_nav_pages(config["nav"]))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert not pages - nav, f"add these pages to the nav of mkdocs.yml: {sorted(pages - nav)}"
    assert not nav - pages, f"the nav of mkdocs.yml names missing pages: {sorted(nav - pages)}"


def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(PYTHON).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed (extra 'docs')")
    start = time.perf_counter()
    r = _run([mkdocs, "build", "--strict", "-d", str(tmp_path / "site")], timeout=300)
    elapsed = time.perf_counter() - start
    assert r.returncode == 0, f"mkdocs build --strict failed ({elapsed:.0f} s):\n{r.stdout[-4000:]}{r.stderr[-4000:]}"


# ---------------------------------------------------------------- the pages' code blocks run
# Every ```python block of README.md and docs/ runs: a page's blocks in order, in one namespace (as a
# reader runs them), in a fresh process of its own with a time limit, in a temporary folder that
# links the repository's top-level entries (files the blocks read resolve; files they write stay
# there). The pages' processes are forked from one interpreter that has imported torch, PyG and
# pyg_lie (importing pyg_lie changes nothing in PyG, tests/interop/test_pyg_tooling.py), so each page
# starts clean without paying the imports again. A block that must not run (GPU, a long run, the
# network) has this line directly above its fence:
SKIP_MARKER = re.compile(r"<!-- docs-test: skip \((?P<reason>[^)]+)\) -->")
PAGE_TIMEOUT = 120  # seconds per page


def _code_blocks(text: str):
    """``(line of the fence, code, skip reason or None)`` for every ```python block."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        fence = lines[i]
        if fence.lstrip().startswith("```python"):
            indent = len(fence) - len(fence.lstrip())
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            code = "\n".join(line[indent:] for line in lines[i + 1:j]) + "\n"
            marker = SKIP_MARKER.fullmatch(lines[i - 1].strip()) if i else None
            out.append((i + 1, code, marker.group("reason") if marker else None))
            i = j
        i += 1
    return out


def _pages_with_code():
    return [p for p in _doc_files() if _code_blocks((ROOT / p).read_text())]


_RUNNER = r"""
import json, os, signal, sys, time, traceback, warnings
import torch, torch_geometric, torch_geometric.nn, pyg_lie, pyg_lie.nn, pyg_lie.models  # shared, read-only
spec = json.load(open(sys.argv[1]))
results = {}
for page in spec["pages"]:
    work, log = page["cwd"], page["log"]
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the page's own process
        os.chdir(work)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        namespace = {"__name__": "__main__"}
        for block in page["blocks"]:
            t = time.perf_counter()
            code = "\n" * block["line"] + block["code"]  # tracebacks name the page's own lines
            try:
                exec(compile(code, page["page"], "exec"), namespace)
            except BaseException:
                sys.stdout.flush()
                print(f"{page['page']}: the block at line {block['line']} failed:", file=sys.stderr)
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            print(f"[docs-test] {page['page']}:{block['line']} {time.perf_counter() - t:.1f} s", flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    status = None
    while time.perf_counter() - start < spec["timeout"]:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = "timeout"
    code = status if status == "timeout" else os.waitstatus_to_exitcode(status)
    results[page["page"]] = {"code": code, "seconds": round(time.perf_counter() - start, 1)}
json.dump(results, open(spec["out"], "w"))
"""


def test_code_block_parser_and_skip_marker():
    text = ("intro\n```python\nprint(1)\n```\n<!-- docs-test: skip (needs a GPU) -->\n```python\nboom()\n```\n"
            "- item\n\n  ```python\n  x = 2\n  ```\n```bash\nls\n```\n")
    assert _code_blocks(text) == [(2, "print(1)\n", None), (6, "boom()\n", "needs a GPU"), (11, "x = 2\n", None)]
    for bad in ("<!-- docs-test: skip -->", "<!-- docs-test: skip() -->", "<!-- docs-test skip (x) -->",
                "text <!-- docs-test: skip (x) -->"):
        assert not SKIP_MARKER.fullmatch(bad), bad


@pytest.mark.parametrize("path", _doc_files())
def test_skip_markers_sit_on_a_python_fence(path):
    lines = (ROOT / path).read_text().splitlines()
    for k, line in enumerate(lines):
        if line.lstrip().startswith("<!--") and "docs-test" in line:
            assert SKIP_MARKER.fullmatch(line.strip()), f"{path}:{k + 1}: write <!-- docs-test: skip (reason) -->"
            assert k + 1 < len(lines) and lines[k + 1].lstrip().startswith("```python"), \
                f"{path}:{k + 1}: the skip marker must be the line directly above a ```python fence"


@pytest.fixture(scope="module")
def code_block_runs(request, tmp_path_factory):
    """Run the pages that this session selected (all of them in a full run) and return
    ``{page: (exit code or "timeout", seconds, log)}``."""
    import json
    selected = [item.callspec.params["page"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_code_blocks_run"]
    base = tmp_path_factory.mktemp("docs_code")
    pages = []
    for k, page in enumerate(selected):
        blocks = [{"line": line, "code": code} for line, code, reason in _code_blocks((ROOT / page).read_text())
                  if reason is None]
        work = base / f"cwd{k}"
        work.mkdir()
        for entry in ROOT.iterdir():
            if entry.name != ".git":
                (work / entry.name).symlink_to(entry)
        pages.append({"page": page, "blocks": blocks, "cwd": str(work), "log": str(base / f"log{k}.txt")})
    (base / "spec.json").write_text(json.dumps({"pages": pages, "timeout": PAGE_TIMEOUT,
                                                "out": str(base / "results.json")}))
    (base / "runner.py").write_text(_RUNNER)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg", PYTHONPATH=str(ROOT),
               PYTHONHASHSEED="0")
    r = subprocess.run([PYTHON, str(base / "runner.py"), str(base / "spec.json")], cwd=base, env=env,
                       capture_output=True, text=True, timeout=PAGE_TIMEOUT * len(pages) + 120)
    assert r.returncode == 0, f"the docs runner failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    results = json.loads((base / "results.json").read_text())
    return {p["page"]: (results[p["page"]]["code"], results[p["page"]]["seconds"], Path(p["log"]).read_text())
            for p in pages}


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with_code())
def test_code_blocks_run(page, code_block_runs):
    code, seconds, log = code_block_runs[page]
    print(f"{page}: {seconds} s")
    if code == "timeout":
        pytest.fail(f"{page}: its python blocks ran past {PAGE_TIMEOUT} s; shorten them or mark long ones "
                    f"<!-- docs-test: skip (reason) -->\n{log[-3000:]}")
    assert code == 0, f"{page} ({seconds} s):\n{log[-6000:]}"
