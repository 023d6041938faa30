"""The package's layering: the core never imports the application layer, no module imports
itself back through others (no import cycles), the operator layer ``pyg_lie.ops`` imports
nothing from the groups, the layers or the graph builders, every module above it uses only its
public API (``pyg_lie.ops.__all__``), and the attention engine imports no graph builder.

Application: ``pyg_lie.experiments``, ``benchmarks``, ``training``, ``cli`` and the entry point
``pyg_lie.__main__``. Core: every other module of the package.
"""
from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys
from collections import defaultdict, deque

import pyg_lie

PACKAGE = pathlib.Path(pyg_lie.__file__).resolve().parent
APPLICATION = ("pyg_lie.experiments", "pyg_lie.benchmarks", "pyg_lie.training", "pyg_lie.cli", "pyg_lie.__main__")
_APP_NAME = re.compile(r"^pyg_lie\.(experiments|benchmarks|training|cli|__main__)(\.|$)")


def _is_app(module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in APPLICATION)


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (never executed)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                for stmt in node.body:
                    inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _from_target(node: ast.ImportFrom, pkg: str) -> str:
    """The absolute module of ``from <target> import ...`` inside package ``pkg``."""
    if not node.level:
        return node.module or ""
    base = pkg.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(mods: dict[str, pathlib.Path]):
    """Per module: ``(target, line, runtime)`` of every import statement anywhere in it (functions
    included). ``from pkg import name`` is an edge to the submodule ``pkg.name`` where that is a
    module, to ``pkg`` (its ``__init__``) otherwise; ``runtime`` is False inside
    ``if TYPE_CHECKING:``."""
    out = defaultdict(list)
    for m, p in mods.items():
        tree = ast.parse(p.read_text(), filename=str(p))
        typing_only = _type_checking_nodes(tree)
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(tree):
            runtime = id(node) not in typing_only
            if isinstance(node, ast.ImportFrom):
                target = _from_target(node, pkg)
                if not target.startswith("pyg_lie"):
                    continue
                names = [f"{target}.{a.name}" for a in node.names]
                subs = [n for n in names if n in mods]
                out[m].extend((s, node.lineno, runtime) for s in subs)
                if len(subs) < len(names):
                    out[m].append((target, node.lineno, runtime))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("pyg_lie"):
                        out[m].append((a.name, node.lineno, runtime))
    return out


def _string_references(p: pathlib.Path):
    """Module names of the application written as strings (``importlib.import_module``, lazy
    attribute tables, ``python -m``)."""
    tree = ast.parse(p.read_text(), filename=str(p))
    return [(node.value, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _APP_NAME.match(node.value)]


def test_core_never_imports_the_application_statically():
    mods = _modules()
    imports = _imports(mods)
    bad = []
    for m in sorted(mods):
        if _is_app(m):
            continue
        bad += [f"{mods[m].relative_to(PACKAGE.parent)}:{line}: {m} imports {t}"
                for t, line, _ in imports[m] if _is_app(t)]
        bad += [f"{mods[m].relative_to(PACKAGE.parent)}:{line}: {m} names {s!r}"
                for s, line in _string_references(mods[m])]
    assert not bad, ("the core imports the application layer (experiments, benchmarks, training, cli); "
                     "move the code it needs into the core:\n" + "\n".join(bad))


def test_importing_every_core_module_loads_no_application_module():
    core = sorted(m for m in _modules() if not _is_app(m))
    script = (
        "import importlib, json, sys, traceback\n"
        f"core = {core!r}\n"
        "failed = {}\n"
        "for m in core:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception as e:\n"
        "        failed[m] = f'{type(e).__name__}: {e}'\n"
        f"app = sorted(m for m in sys.modules if any(m == a or m.startswith(a + '.') for a in {APPLICATION!r}))\n"
        "print(json.dumps({'failed': failed, 'app': app}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          cwd=str(PACKAGE.parent))
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not res["failed"], "core modules that fail to import:\n" + "\n".join(
        f"{m}: {e}" for m, e in res["failed"].items())
    assert not res["app"], f"importing the core loaded application modules: {res['app']}"


def _strongly_connected(nodes, edges):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(root):  # iterative Tarjan
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def _shortest_cycle(start, edges, members):
    """A shortest path ``start -> ... -> start`` inside one strongly connected component."""
    prev = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def test_no_import_cycles():
    """Import statements anywhere in a module (functions included) are edges; imports under
    ``if TYPE_CHECKING:`` are not (they never run). Every cycle is listed."""
    mods = _modules()
    edges = defaultdict(set)
    where = {}
    for m, items in _imports(mods).items():
        for t, line, runtime in items:
            if runtime and t in mods and t != m:
                edges[m].add(t)
                where.setdefault((m, t), f"{mods[m].relative_to(PACKAGE.parent)}:{line}")
    cycles = [c for c in _strongly_connected(mods, edges) if len(c) > 1]
    report = []
    for comp in cycles:
        path = _shortest_cycle(comp[0], edges, set(comp))
        steps = "\n".join(f"    {a} -> {b}  ({where[(a, b)]})" for a, b in zip(path, path[1:]))
        report.append(f"  {len(comp)} modules: {', '.join(comp)}\n  for example:\n{steps}")
    assert not cycles, f"{len(cycles)} import cycle(s):\n" + "\n".join(report)


def _runtime_edges(mods):
    edges = defaultdict(set)
    for m, items in _imports(mods).items():
        for t, _, runtime in items:
            if runtime and t in mods and t != m:
                edges[m].add(t)
    return edges


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _reachable_violations(mods, edges, sources, forbidden):
    """``[(source, forbidden module, path)]``: for every module under ``sources``, each module
    under ``forbidden`` that its imports reach (directly or through other modules), with one
    shortest path."""
    out = []
    for start in sorted(m for m in mods if _under(m, sources)):
        prev = {start: None}
        queue = deque([start])
        while queue:
            v = queue.popleft()
            for w in sorted(edges[v]):
                if w in prev:
                    continue
                prev[w] = v
                if _under(w, forbidden):
                    path = [w]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    out.append((start, w, list(reversed(path))))
                else:
                    queue.append(w)
    return out


#: the operator layer, and what it must not import (directly or through other modules)
OPS = ("pyg_lie.ops",)
ABOVE_OPS = ("pyg_lie.groups", "pyg_lie.nn", "pyg_lie.neighbors", "pyg_lie.models", "pyg_lie.vit")
#: the attention engine (the S^2 attention step included), and the graph builders it must not import
ENGINE = ("pyg_lie.nn.attention_core", "pyg_lie.nn._s2_kernels")
GRAPH_BUILDERS = ("pyg_lie.neighbors", "pyg_lie.nn._s2_graph", "pyg_lie.nn.lifted_edges")


def test_ops_imports_no_group_layer_or_graph_builder():
    mods = _modules()
    bad = _reachable_violations(mods, _runtime_edges(mods), OPS, ABOVE_OPS)
    assert not bad, ("pyg_lie.ops must import nothing from the groups, the layers or the graph builders "
                     "(pass what it needs as arguments, or move the helper into ops):\n"
                     + "\n".join(f"  {s} reaches {t}: {' -> '.join(p)}" for s, t, p in bad))


def test_engine_imports_no_graph_builder():
    mods = _modules()
    for m in ENGINE:
        assert m in mods, f"{m} is gone: update ENGINE"
    bad = _reachable_violations(mods, _runtime_edges(mods), ENGINE, GRAPH_BUILDERS)
    assert not bad, ("the attention engine must import no graph builder (the layers build graphs and pass "
                     "them in):\n" + "\n".join(f"  {s} reaches {t}: {' -> '.join(p)}" for s, t, p in bad))


def _ops_api_violations(mods: dict[str, pathlib.Path], public: set[str]) -> list[str]:
    """Uses of ``pyg_lie.ops`` outside it that are not its public API: imports of its
    submodules (``from ..ops.sparse import ...``, ``from ..ops import graph``), names
    imported from it that are not in ``public``, and attributes ``ops.<name>`` of the
    imported package that are not."""
    bad = []
    for m, p in sorted(mods.items()):
        if _under(m, OPS):
            continue
        tree = ast.parse(p.read_text(), filename=str(p))
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        where = p.relative_to(PACKAGE.parent) if p.is_relative_to(PACKAGE.parent) else p.name
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _from_target(node, pkg)
                if target.startswith("pyg_lie.ops."):
                    bad.append(f"{where}:{node.lineno}: imports the submodule {target}")
                elif target == "pyg_lie.ops":
                    bad += [f"{where}:{node.lineno}: imports {a.name} from pyg_lie.ops, not in its __all__"
                            for a in node.names if a.name not in public]
                elif target == "pyg_lie":
                    aliases.update(a.asname or a.name for a in node.names if a.name == "ops")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("pyg_lie.ops."):
                        bad.append(f"{where}:{node.lineno}: imports the submodule {a.name}")
                    elif a.name == "pyg_lie.ops" and a.asname:
                        aliases.add(a.asname)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr not in public):
                bad.append(f"{where}:{node.lineno}: uses {node.value.id}.{node.attr}, not in pyg_lie.ops.__all__")
    return bad


def test_layers_use_only_the_public_ops_api():
    """Every module outside ``pyg_lie.ops`` (layers, models, groups, graph builders, the
    application) calls the operator layer through ``pyg_lie.ops.__all__`` only: the kernel
    choices stay inside ops."""
    import pyg_lie.ops as ops
    bad = _ops_api_violations(_modules(), set(ops.__all__))
    assert not bad, ("modules reach past the public API of pyg_lie.ops (export what they need in "
                     "pyg_lie.ops.__all__, or move the code into ops):\n" + "\n".join(bad))


def test_the_scans_can_fail(tmp_path):
    """The scanners see a deferred relative import of a submodule, a string reference, a
    type-only import and a cycle (on synthetic sources)."""
    p = tmp_path / "m.py"
    p.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import q\n"
                 "def f():\n    from ..experiments import springs\n    return 'pyg_lie.cli'\n")
    table = {"pyg_lie.nn.m": p, "pyg_lie.nn.q": p, "pyg_lie.experiments.springs": p}
    assert sorted(_imports(table)["pyg_lie.nn.m"]) == [("pyg_lie.experiments.springs", 5, True),
                                                      ("pyg_lie.nn.q", 3, False)]
    assert _string_references(p) == [("pyg_lie.cli", 6)]
    edges = defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert sorted(_strongly_connected("abcd", edges)) == [["a", "b", "c"], ["d"]]
    assert _shortest_cycle("a", edges, {"a", "b", "c"}) == ["a", "b", "c", "a"]
    deep = defaultdict(set, {"pyg_lie.ops.a": {"pyg_lie._x"}, "pyg_lie._x": {"pyg_lie.groups.b"},
                             "pyg_lie.nn.c": {"pyg_lie.ops.a"}})
    table = dict.fromkeys(["pyg_lie.ops.a", "pyg_lie._x", "pyg_lie.groups.b", "pyg_lie.nn.c"], p)
    assert _reachable_violations(table, deep, OPS, ABOVE_OPS) == [
        ("pyg_lie.ops.a", "pyg_lie.groups.b", ["pyg_lie.ops.a", "pyg_lie._x", "pyg_lie.groups.b"])]
    assert _reachable_violations(table, deep, ("pyg_lie.nn",), ("pyg_lie.groups",))[0][2][-1] == "pyg_lie.groups.b"
    q = tmp_path / "layer.py"
    q.write_text("from .. import ops\nfrom ..ops import CSRStructure, _backend\nfrom ..ops.sparse import sddmm\n"
                 "import pyg_lie.ops._native\nops.mlp(1)\nops._backend.choose()\n")
    found = _ops_api_violations({"pyg_lie.nn.layer": q}, {"CSRStructure", "mlp"})
    assert [line.split(": ", 1)[1] for line in found] == [
        "imports _backend from pyg_lie.ops, not in its __all__", "imports the submodule pyg_lie.ops.sparse",
        "imports the submodule pyg_lie.ops._native", "uses ops._backend, not in pyg_lie.ops.__all__"]
