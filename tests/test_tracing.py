"""pyg_lie._tracing: the one test of whether tensor values can be read, and the names that
forward to it."""
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from pyg_lie import _checks, _tracing


def test_eager_fake_and_compiled():
    assert not _tracing.tracing() and not _tracing.compiling() and not _tracing.fake_mode()
    with FakeTensorMode():
        assert _tracing.tracing() and _tracing.fake_mode() and not _tracing.compiling()

    @torch.compile(backend="eager", fullgraph=True)
    def f(x):
        return x + 1 if _tracing.tracing() and _tracing.compiling() else x - 1

    assert torch.equal(f(torch.zeros(2)), torch.ones(2))


def test_one_function_under_every_name():
    assert _checks.tracing is _tracing.tracing


def test_no_module_asks_torch_itself():
    """Every module tests for tracing through pyg_lie._tracing, none calls
    torch.compiler.is_compiling() or keeps an alias of its own."""
    import pathlib
    import pyg_lie
    root = pathlib.Path(pyg_lie.__file__).parent
    bad = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "_tracing.py"
           and ("is_compiling()" in p.read_text() or "_is_compiling" in p.read_text())]
    assert not bad, bad
