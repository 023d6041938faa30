"""PyG tooling on pyg_lie: ``torch_geometric.nn.summary`` of every model family, and PyG's radius
search (``T.RadiusGraph``, ``nn.radius_graph``, ``nn.radius``) through ``pyg_lie.interop.pyg``, which
only an explicit call turns on (importing pyg_lie leaves PyG as it is)."""
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Batch, Data
from torch_geometric.nn import radius as pyg_radius
from torch_geometric.nn import radius_graph as pyg_radius_graph
from torch_geometric.nn import summary

from pyg_lie import neighbors
from pyg_lie.groups import SE2
from pyg_lie.interop.pyg import enable_pyg_radius

pytest.importorskip("tabulate")


def _check_summary(model, *inputs, layers=()):
    text = summary(model, *inputs)
    rows = [r for r in text.splitlines() if r.startswith("|")]
    total = sum(p.numel() for p in model.parameters())
    assert type(model).__name__ in rows[2] and f"{total:,}" in rows[2], rows[2]
    for name in layers:
        assert any(name in r for r in rows), (name, text)
    return text


def test_summary_lie_transformer():
    from pyg_lie.models import LieTransformer
    model = LieTransformer("SE2", 1, 16, 4, num_layers=2, heads=2, lift_samples=2)
    pos, batch = torch.randn(20, 2), torch.arange(2).repeat_interleave(10)
    text = _check_summary(model, torch.randn(20, 1), pos, batch, layers=("LieTransformerBlock", "LieSelfAttention"))
    assert "[2, 4]" in text  # the per-graph output


def test_summary_lie_algebra_transformer():
    from pyg_lie.models import LieAlgebraTransformer
    model = LieAlgebraTransformer("SE2", 16, 2, 2)
    _check_summary(model, SE2().random(12), None, torch.arange(2).repeat_interleave(6),
                   layers=("LieAlgebraAttention",))


def test_summary_equivariant_vit():
    from pyg_lie.models import EquivariantViT
    model = EquivariantViT("C4", img_size=8, patch_size=4, num_classes=3, depth=1, heads=1, channels=1)
    _check_summary(model, torch.randn(2, 3, 8, 8), layers=("EquivariantSelfAttention",))


class _S2Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from pyg_lie.nn import S2AttentionConv
        self.conv1 = S2AttentionConv(4, 8, heads=2)
        self.conv2 = S2AttentionConv(8, 8, heads=2)
        self.out = torch.nn.Linear(8, 1)

    def forward(self, x, edge_index, quad_weights):
        x = self.conv1(x, edge_index, quad_weights).relu()
        return self.out(self.conv2(x, edge_index, quad_weights))


def test_summary_s2_attention_model():
    torch.manual_seed(0)
    pos = torch.nn.functional.normalize(torch.randn(40, 3), dim=-1)
    edge_index = neighbors.geodesic_radius_graph(pos, 1.0, loop=True)
    w = torch.full((40,), 4 * math.pi / 40)
    _check_summary(_S2Net(), torch.randn(40, 4), edge_index, w, layers=("S2AttentionConv",))


# ----------------------------------------------------------------- radius search
def _brute(x, y, r, bx, by, k, drop_same):
    """``[source; target]`` sorted by (target, source): each target's k nearest within r."""
    d2 = (x.double()[:, None] - y.double()[None]).pow(2).sum(-1)  # (Nx, Ny)
    src, tgt = [], []
    for i in range(y.size(0)):
        cand = [j for j in range(x.size(0)) if bx[j] == by[i] and d2[j, i] <= r * r and not (drop_same and i == j)]
        cand = sorted(cand, key=lambda j: (float(d2[j, i]), j))[:k]
        for j in sorted(cand):
            src.append(j)
            tgt.append(i)
    return torch.tensor([src, tgt], dtype=torch.long).view(2, -1)


ROOT = Path(__file__).resolve().parents[2]


def _run_python(code: str, timeout: float = 240) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_importing_pyg_lie_leaves_pyg_unpatched():
    out = _run_python("""
        import importlib, pkgutil, warnings
        import torch, torch_geometric.typing as tt
        def state():
            return tt.WITH_RADIUS, sorted(dir(torch.ops.pyg)), hasattr(torch.ops.pyg, "radius")
        before = state()
        assert before[0] is False and before[2] is False, before  # no pyg-lib here
        import pyg_lie
        names = [m.name for m in pkgutil.walk_packages(pyg_lie.__path__, "pyg_lie.")
                 if not m.name.endswith("__main__")]
        imported = 0
        for name in names:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    importlib.import_module(name)
                    imported += 1
                except ImportError:  # an optional dependency that is absent
                    pass
            assert state() == before, (name, state())
        for name in ("enable_pyg_radius", "pyg_radius", "register_graphgym"):
            getattr(pyg_lie, name)
        assert state() == before
        try:
            import yacs  # noqa: F401  (GraphGym's config)
        except ImportError:
            pass
        else:  # registering the GraphGym layers leaves PyG alone; a config with a radius graph enables it
            from pyg_lie.graphgym import lift_transform
            pyg_lie.register_graphgym()
            assert state() == before
            from torch_geometric.graphgym.config import cfg
            lift_transform(cfg)
            assert state() == before  # radius 0: the dataset's edges
            cfg.pyg_lie.radius = 1.0
            lift_transform(cfg)
            assert tt.WITH_RADIUS and hasattr(torch.ops.pyg, "radius")
        print(imported, len(names))
    """)
    imported, total = map(int, out.split())
    assert imported >= total - 3 and total > 50, out


def test_enable_call_and_context_manager():
    _run_python("""
        import torch, torch_geometric.typing as tt
        from torch_geometric.nn import radius_graph
        import pyg_lie
        from pyg_lie import neighbors
        pos = torch.rand(40, 3, generator=torch.Generator().manual_seed(0))
        try:
            radius_graph(pos, 0.4)
            raise AssertionError("PyG's radius_graph ran without pyg-lib or the explicit call")
        except ImportError as e:
            assert "pyg-lib" in str(e)
        with pyg_lie.pyg_radius() as ours:
            assert ours and tt.WITH_RADIUS and hasattr(torch.ops.pyg, "radius")
            with pyg_lie.pyg_radius():  # nested: the outer block's state is kept on exit
                pass
            assert torch.equal(radius_graph(pos, 0.4), neighbors.radius_graph(pos, 0.4))
        assert tt.WITH_RADIUS is False and not hasattr(torch.ops.pyg, "radius")
        try:
            radius_graph(pos, 0.4)
            raise AssertionError("the context manager did not restore PyG")
        except ImportError:
            pass
        assert pyg_lie.enable_pyg_radius() and pyg_lie.enable_pyg_radius()
        want = neighbors.radius_graph(pos, 0.4)
        assert torch.equal(radius_graph(pos, 0.4), want)
        with pyg_lie.pyg_radius():  # already enabled: the block leaves it enabled
            pass
        assert tt.WITH_RADIUS and torch.equal(radius_graph(pos, 0.4), want)
    """)


@pytest.fixture(scope="module", autouse=True)
def _installed():
    assert enable_pyg_radius()


def _cloud_batch(seed, sizes=(30, 1, 45, 12), d=3):
    g = torch.Generator().manual_seed(seed)
    return Batch.from_data_list([Data(pos=torch.rand(n, d, generator=g)) for n in sizes])


@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("k", [32, 4, 1, 0])
def test_radius_graph_transform_equals_pyg_lie(loop, k):
    for seed in range(3):
        data = _cloud_batch(seed)
        got = T.RadiusGraph(0.35, loop=loop, max_num_neighbors=k)(data.clone()).edge_index
        want = neighbors.radius_graph(data.pos, 0.35, data.batch, loop=loop, max_num_neighbors=k)
        assert torch.equal(got, want)
        assert torch.equal(got, _brute(data.pos, data.pos, 0.35, data.batch, data.batch, k, not loop))
        counts = torch.bincount(got[1], minlength=data.num_nodes)
        assert int(counts.max()) <= k
        if loop and k > 0:
            assert bool((got[0] == got[1]).sum() == data.num_nodes)  # the self loop is always nearest


def test_truncation_bites_and_flow():
    data = _cloud_batch(7, sizes=(200,), d=2)
    full = pyg_radius_graph(data.pos, 0.3, data.batch, max_num_neighbors=10 ** 6)
    cut = pyg_radius_graph(data.pos, 0.3, data.batch, max_num_neighbors=32)
    assert int(torch.bincount(full[1]).max()) > 32 >= int(torch.bincount(cut[1]).max())
    back = pyg_radius_graph(data.pos, 0.3, data.batch, max_num_neighbors=32, flow="target_to_source")
    assert torch.equal(back, cut.flip(0))
    # an unbatched cloud: one graph
    assert torch.equal(T.RadiusGraph(0.3, max_num_neighbors=10 ** 6)(Data(pos=data.pos)).edge_index, full)


def test_bipartite_radius_and_ignore_same_index():
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(60, 3, generator=g), torch.rand(25, 3, generator=g)
    bx, by = torch.arange(60) // 20, torch.arange(25) // 9
    for k in (32, 3):
        got = pyg_radius(x, y, 0.4, bx, by, max_num_neighbors=k)  # row 0 indexes y
        assert torch.equal(got.flip(0), _brute(x, y, 0.4, bx, by, k, False))
    # a different y of the same size: ignore_same_index drops i == j before the truncation
    y2 = torch.rand(60, 3, generator=g)
    got = torch.ops.pyg.radius(x, y2, None, None, 0.5, 3, 1, True)
    assert torch.equal(got.flip(0), _brute(x, y2, 0.5, [0] * 60, [0] * 60, 3, True))


def test_bad_ptr_is_named():
    x = torch.rand(5, 2)
    with pytest.raises(ValueError, match="ptr_x must rise from 0"):
        torch.ops.pyg.radius(x, x, torch.tensor([0, 3]), torch.tensor([0, 5]), 0.5, 4, 1, True)


def test_install_is_idempotent_and_yields_to_an_existing_op(monkeypatch):
    import torch_geometric.typing

    import pyg_lie.interop.pyg as interop
    assert enable_pyg_radius() and enable_pyg_radius()
    assert torch_geometric.typing.WITH_RADIUS and interop._pyg_radius_exists()
    # another pyg::radius in place before the first call (as pyg-lib's would be) is left alone
    monkeypatch.setattr(interop, "_OP", None)
    monkeypatch.setattr(interop, "_pyg_radius_exists", lambda: True)
    monkeypatch.setattr(torch_geometric.typing, "WITH_RADIUS", False)
    assert enable_pyg_radius() is False and torch_geometric.typing.WITH_RADIUS is False


# ----------------------------------------------------------------- torch.compile graph breaks
def _compile_table():
    """``{(call, mode): graph breaks}`` from the table of docs/pyg_tooling.md's ``torch.compile`` section."""
    section = (ROOT / "docs" / "pyg_tooling.md").read_text().split("## `torch.compile`", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows[(cells[0], cells[1])] = int(cells[2])
    return rows


def _points(n=12):
    return torch.randn(n, 8), torch.randint(0, n, (2, 40)), SE2().random(n)


def _lie_transformer(**kw):
    from pyg_lie.models import LieTransformer
    model = LieTransformer("SE2", 1, 16, 4, num_layers=2, heads=2, lift_samples=4, **kw)
    return model, (torch.randn(20, 1), torch.randn(20, 2), torch.arange(2).repeat_interleave(10))


def _case(call):
    """The module and inputs of one row of the table (small sizes)."""
    from pyg_lie import nn
    if call == "`LieSelfAttention(x, edge_index, g)`":
        return nn.LieSelfAttention(8, 8, "SE2", heads=2), _points(), {}
    if call == "`LieTransformerBlock(x, edge_index, g)`":
        return nn.LieTransformerBlock(8, "SE2", heads=2), _points(), {}
    if call == "`LieAlgebraAttention(x, edge_index, g)`":
        return nn.LieAlgebraAttention(8, 8, "SE2", heads=2), _points(), {}
    if call == "`VectorTokenAttention(x, edge_index)`":
        return nn.VectorTokenAttention(8, 8, heads=2), _points()[:2], {}
    if call == "`S2AttentionConv(x, edge_index, quad_weights=w)`":
        pos = torch.nn.functional.normalize(torch.randn(60, 3), dim=-1)
        return (nn.S2AttentionConv(8, 8, heads=2), (torch.randn(60, 8), neighbors.geodesic_radius_graph(pos, 0.6)),
                {"quad_weights": torch.full((60,), 4 * math.pi / 60)})
    if call == "`S2NeighborhoodAttention(x)`":
        return nn.S2NeighborhoodAttention(4, (8, 16), (8, 16), num_heads=2), (torch.randn(1, 4, 8, 16),), {}
    if call == "`EquivariantSelfAttention(x, edge_index)`":
        from pyg_lie.vit import EquivariantSelfAttention
        from pyg_lie.vit.field_type import FieldType
        V = FieldType.regular("C4", 2)
        return EquivariantSelfAttention(V, heads=1), (torch.randn(12, V.dim), torch.randint(0, 12, (2, 40))), {}
    if call == "`LieTransformer(x, pos, batch)`":
        return (*_lie_transformer(), {})
    if call == "`LieTransformer(x, pos, batch, num_graphs=2)`":
        return (*_lie_transformer(), {"num_graphs": 2})
    if call == '`LieTransformer(x, pos, batch)`, `lift="finite"`':
        return (*_lie_transformer(lift="finite"), {})
    if call.startswith("`LieAlgebraTransformer("):
        from pyg_lie.models import LieAlgebraTransformer
        from pyg_lie.neighbors import complete_graph
        g, batch = SE2().random(12), torch.arange(2).repeat_interleave(6)
        model = LieAlgebraTransformer("SE2", 16, 2, 2)
        if call == "`LieAlgebraTransformer(g, edge_index, batch, num_graphs=2)`":
            return model, (g, complete_graph(batch), batch), {"num_graphs": 2}
        if call == "`LieAlgebraTransformer(g, batch=batch)`":
            return model, (g,), {"batch": batch}
    if call == "`EquivariantViT(images)`":
        from pyg_lie.models import EquivariantViT
        model = EquivariantViT("C4", img_size=8, patch_size=4, num_classes=3, depth=1, heads=1, in_channels=1)
        return model, (torch.randn(2, 1, 8, 8),), {}
    raise KeyError(f"docs/pyg_tooling.md's torch.compile table has a row this test does not know: {call}")


def test_compile_table_is_complete():
    rows = _compile_table()
    assert len(rows) >= 15 and {mode.split(",")[0] for _, mode in rows} == {"train", "eval"}
    assert {mode.partition(", ")[2] for _, mode in rows} == {"", "after a call"}
    for call, _ in rows:
        _case(call)  # every row is one this test measures
    for name in ("LieSelfAttention", "LieTransformerBlock", "LieAlgebraAttention", "VectorTokenAttention",
                 "S2AttentionConv", "S2NeighborhoodAttention", "EquivariantSelfAttention", "LieTransformer",
                 "LieAlgebraTransformer", "EquivariantViT"):
        assert any(call.startswith(f"`{name}(") for call, _ in rows), f"no row for {name}"


@pytest.mark.slow
@pytest.mark.parametrize("call, mode", sorted(_compile_table()))
def test_graph_breaks_are_as_documented(call, mode):
    torch.manual_seed(0)
    model, args, kwargs = _case(call)
    model.train(mode.split(",")[0] == "train")
    if mode.endswith("after a call"):
        with torch.no_grad():
            model(*args, **kwargs)
    torch._dynamo.reset()
    try:
        explained = torch._dynamo.explain(model)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    reasons = [r.reason.strip().splitlines()[0] for r in explained.break_reasons]
    assert explained.graph_break_count == _compile_table()[(call, mode)], (
        f"{call} ({mode}): {explained.graph_break_count} graph breaks, docs/pyg_tooling.md says "
        f"{_compile_table()[(call, mode)]}; update the table if the change is meant: {reasons}")


def test_torchscript_is_not_supported():
    """The support table says no (PyG deprecated TorchScript); if scripting starts to work, update it."""
    import warnings
    from pyg_lie.models import LieTransformer
    from pyg_lie.nn import LieAlgebraAttention, LieSelfAttention, S2AttentionConv
    for model in (LieSelfAttention(8, 8, "SE2", heads=2), LieAlgebraAttention(8, 8, "SE2", heads=2),
                  S2AttentionConv(8, 8, heads=2), LieTransformer("SE2", 1, 8, 2, num_layers=1, heads=2)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(Exception):
                torch.jit.script(model)
    assert "| TorchScript (`torch.jit.script`) | no:" in (ROOT / "docs" / "pyg_tooling.md").read_text()
