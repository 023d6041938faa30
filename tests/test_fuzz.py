"""Fuzzing the public entry points' index, pointer, dtype and shape arguments: every call ends
in a Python exception or in a finite output of the documented shape, never in a crash or a
hang. The examples run in a subprocess with a time limit, so that a segmentation fault or an
endless loop fails this test instead of the test run."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("hypothesis")

SCRIPT = r'''
import math, sys
import torch
from hypothesis import given, settings, strategies as st, HealthCheck

from pyg_lie.groups import SE2, get_group
from pyg_lie.neighbors import radius_graph
from pyg_lie.nn.attention_core import edge_attention
from pyg_lie.nn.lie_self_attention import LieSelfAttention
from pyg_lie.nn.lifted_edges import expand_edges
from pyg_lie._sort import argsort_keys, sort_keys
from pyg_lie.vit import EquivariantSelfAttention, FieldType, get_group as vit_group

EXAMPLES = int(sys.argv[1])
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
INT_DTYPES = st.sampled_from([torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
torch.manual_seed(0)
LAYERS = {(name, fused): LieSelfAttention(8, 8, name, heads=2, fused=fused)
          for name in ("SE2", "SO3") for fused in (True, False)}
VIT = EquivariantSelfAttention(FieldType.regular(vit_group("C4"), 2), heads=2)


def outcome(fn):
    """The call's result, or None when it raised an ordinary Python exception."""
    try:
        return fn()
    except (ValueError, TypeError, IndexError, RuntimeError, OverflowError):
        return None


def finite(t):
    return t is None or bool(torch.isfinite(t.float()).all())


def index_tensor(data, num_nodes, dtype, rows=2):
    E = data.draw(st.integers(0, 24))
    lo, hi = -num_nodes - 2, num_nodes + 2
    values = data.draw(st.lists(st.one_of(st.integers(0, max(num_nodes - 1, 0)), st.integers(lo, hi),
                                          st.sampled_from([10 ** 9, -10 ** 9, 2 ** 31, 2 ** 62])),
                                min_size=rows * E, max_size=rows * E))
    t = torch.tensor(values, dtype=torch.int64).view(rows, E)
    if dtype != torch.int64:
        t = t.clamp(torch.iinfo(dtype).min, torch.iinfo(dtype).max).to(dtype)
    shape = data.draw(st.sampled_from(["ok", "ok", "ok", "1d", "3d", "float"]))
    if shape == "1d":
        t = t.reshape(-1)
    elif shape == "3d":
        t = t.unsqueeze(-1)
    elif shape == "float":
        t = t.double()
    return t


@SETTINGS
@given(st.data())
def fuzz_radius_graph(data):
    n = data.draw(st.integers(0, 12))
    d = data.draw(st.integers(1, 4))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float64, torch.float32, torch.float16]))
    big = st.sampled_from([1e308, -1e308, 1.5e308, -1.5e308, 1e300, -1e300, 0.0, 1e-300])
    element = big if data.draw(st.booleans()) else st.one_of(st.floats(-10, 10), big)  # extreme clouds too
    vals = data.draw(st.lists(element, min_size=n * d, max_size=n * d))
    if n and data.draw(st.integers(0, 9)) == 0:  # now and then a NaN or an infinity
        vals[data.draw(st.integers(0, n * d - 1))] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    pos = torch.tensor(vals, dtype=torch.float64).view(n, d).to(dtype)
    r = data.draw(st.one_of(st.floats(0, 5), st.floats(0, 5),
                            st.sampled_from([-1.0, 0.0, 1e-300, 1e308, float("nan"), float("inf")])))
    batch = None
    if data.draw(st.booleans()):
        m = data.draw(st.sampled_from([n, n, n, max(n - 1, 0)]))
        batch = torch.tensor(data.draw(st.lists(st.integers(-1, 3), min_size=m, max_size=m)), dtype=torch.int64)
        batch = batch.to(data.draw(st.sampled_from([torch.int64, torch.int32, torch.float32])))
    loop = data.draw(st.booleans())
    out = outcome(lambda: radius_graph(pos, r, batch, loop=loop))
    if out is not None:
        assert out.dtype == torch.int64 and out.dim() == 2 and out.shape[0] == 2
        assert out.numel() == 0 or (int(out.min()) >= 0 and int(out.max()) < n)


@SETTINGS
@given(st.data())
def fuzz_edge_attention(data):
    E, H, N = data.draw(st.integers(0, 12)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64]))
    score = torch.randn(H, E, dtype=dtype).t() if data.draw(st.booleans()) else torch.randn(E, H, dtype=dtype)
    index = torch.tensor(data.draw(st.lists(st.integers(-2, N + 1), min_size=E, max_size=E)), dtype=torch.int64)
    ptr = None
    if data.draw(st.booleans()):
        cuts = sorted(data.draw(st.lists(st.integers(0, E), min_size=N - 1, max_size=N - 1)))
        ptr = torch.tensor([0, *cuts, E])
        if data.draw(st.booleans()):  # one entry off: out of range, negative or out of order
            ptr[data.draw(st.integers(0, N))] = data.draw(st.sampled_from([10 ** 9, -10 ** 9, -1, E + 1, E // 2]))
        if data.draw(st.integers(0, 4)) == 0:
            ptr = torch.tensor(data.draw(st.lists(st.integers(-3, E + 3), min_size=1, max_size=N + 2)))
        index = torch.repeat_interleave(torch.arange(N), (ptr[1:] - ptr[:-1]).clamp(min=0)) if (
            ptr.numel() == N + 1 and data.draw(st.booleans())) else index
    norm = data.draw(st.sampled_from(["softmax", "mean"]))
    out = outcome(lambda: edge_attention(score, index, N, normalization=norm, ptr=ptr))
    assert finite(out)


@SETTINGS
@given(st.data())
def fuzz_lie_self_attention(data):
    name, fused = data.draw(st.sampled_from(sorted(LAYERS)))
    N = data.draw(st.integers(1, 8))
    G = get_group(name)
    g = G.random(N)
    x = torch.randn(N, 8)
    ei = index_tensor(data, N, data.draw(INT_DTYPES))
    out = outcome(lambda: LAYERS[name, fused](x, ei, g))
    assert finite(out)
    if out is not None:
        assert out.shape == (N, 8)


@SETTINGS
@given(st.data())
def fuzz_graph_helpers(data):
    N = data.draw(st.integers(0, 6))
    ei = index_tensor(data, N, data.draw(INT_DTYPES))
    K = data.draw(st.sampled_from([1, 2, 3, 0, -1]))
    out = outcome(lambda: expand_edges(ei, N, K))
    if out is not None:
        assert out.numel() == 0 or (int(out.min()) >= 0 and int(out.max()) < N * max(K, 1))
    g = SE2().random(max(N, 1))
    out = outcome(lambda: SE2().relative_log(g, ei))
    assert finite(out)
    out = outcome(lambda: get_group("SO3").relative_log(get_group("SO3").random(max(N, 1)), ei))
    assert finite(out)
    key = ei.reshape(-1)
    out = outcome(lambda: argsort_keys(key))
    if out is not None:
        assert torch.equal(out[0], key.long()[out[1]])
    out = outcome(lambda: sort_keys(key))


@SETTINGS
@given(st.data())
def fuzz_vit_attention(data):
    N = data.draw(st.integers(1, 8))
    x = torch.randn(N, VIT.field_type.dim)
    ei = index_tensor(data, N, data.draw(INT_DTYPES))
    out = outcome(lambda: VIT(x, ei))
    assert finite(out)


for fuzz in (fuzz_radius_graph, fuzz_edge_attention, fuzz_lie_self_attention, fuzz_graph_helpers,
             fuzz_vit_attention):
    fuzz()
print("FUZZ-DONE")
'''


def test_fuzz_public_entry_points():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    try:
        r = subprocess.run([sys.executable, "-c", SCRIPT, "25"], capture_output=True, text=True, timeout=240, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the fuzzed calls hung (no end within 240 s)")
    assert r.returncode == 0 and "FUZZ-DONE" in r.stdout, (
        f"exit status {r.returncode} (negative: killed by a signal)\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
