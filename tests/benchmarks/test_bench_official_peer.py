"""``bench lie-self-attention --official-src``: the official code as a same-run peer.

The official packages are not on the registry, so these tests give the adapter stand-ins with
the official constructor's signature and check what it passes and feeds, the errors for a
wrong folder, and that ``run_config`` times the peer and the table prints the ratio.
"""
import argparse
import sys
import textwrap

import pytest

EQV = '''
import torch
BUILT = []

class EquivariantTransformer(torch.nn.Module):
    def __init__(self, dim_input, dim_output, dim_hidden, num_layers, num_heads, global_pool=True,
                 global_pool_mean=True, group=None, liftsamples=1, block_norm="layer_pre",
                 output_norm="none", kernel_norm="none", kernel_type="mlp", kernel_dim=16,
                 kernel_act="swish", mc_samples=0, fill=1.0, architecture="model_1",
                 attention_fn="softmax", feature_embed_dim=None, max_sample_norm=None):
        super().__init__()
        BUILT.append(dict(locals()))
        self.lin = torch.nn.Linear(dim_input, dim_output)

    def forward(self, data):
        pos, feats, mask = data
        assert pos.dim() == 3 and pos.shape[-1] == 2 and feats.shape == (*pos.shape[:2], 1)
        assert mask.dtype == torch.bool and bool(mask.all()) and bool((feats == 1).all())
        return self.lin(feats).mean(1) + pos.sum()
'''

GROUPS = '''
class T:
    lie_dim = 2

    def __init__(self, k):
        self.k = k

class SE2:
    def __init__(self, alpha=0.2):
        self.alpha = alpha
'''


def _stand_ins(root, eqv_text, groups_text, init=""):
    for pkg, mod, text in (("eqv_transformer", "eqv_attention", eqv_text), ("lie_conv", "lieGroups", groups_text)):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text(init)
        (root / pkg / f"{mod}.py").write_text(textwrap.dedent(text))
    return root


def _forget(path):
    """A fresh import state: ``sys.path`` as given, no official package imported."""
    sys.path[:] = path
    for name in [m for m in sys.modules if m.split(".")[0] in ("eqv_transformer", "lie_conv")]:
        del sys.modules[name]


@pytest.fixture
def official_src(tmp_path):
    """A folder with stand-in ``eqv_transformer`` and ``lie_conv`` packages; ``sys.path`` and
    the imported modules are restored afterwards."""
    path = list(sys.path)
    yield _stand_ins(tmp_path / "official", EQV, GROUPS)
    _forget(path)


CFG = dict(name="SE2 K4 32x32 d128 L4 all", group="SE2", K=2, N=6, clouds=2, dim=8, heads=2, layers=1,
           degree=None, repeats=1, threads=1, impl="official-code")


def test_official_peer_is_built_and_timed_on_the_same_clouds(official_src):
    from pyg_lie.benchmarks.lie_self_attention import format_tables, run_config
    res = run_config(dict(CFG, official_src=str(official_src)))
    assert res["time"] > 0 and res["params"] == 2 and res["num_edges"] == 2 * 12 * 12
    nbhd = run_config(dict(CFG, official_src=str(official_src), group="T2", K=1, N=40, degree=8.0))
    assert nbhd["time"] > 0
    from eqv_transformer.eqv_attention import BUILT
    from lie_conv.lieGroups import SE2, T
    se2, t2 = BUILT
    assert isinstance(se2["group"], SE2) and se2["group"].alpha == 0.2 and se2["liftsamples"] == 2
    assert se2["mc_samples"] == 0 and se2["num_heads"] == 2 and se2["dim_hidden"] == 8
    assert se2["kernel_type"] == "mlp" and se2["kernel_dim"] == 16 and se2["attention_fn"] == "softmax"
    assert isinstance(t2["group"], T) and t2["group"].k == 2 and t2["mc_samples"] == 8  # degree * K
    model = dict(CFG, impl="model", time=0.5)
    table = format_tables([model, {**CFG, **res, "time": 6.0}],
                          argparse.Namespace(threads=1, repeats=1, dim=8, heads=2))
    assert "official code here / eager" in table and "| 6.000 | 12.00 | %.0f | - |" % res["mem_mb"] in table
    # with the per-node floor measured: 3 GFLOP at 60 GFLOP/s take 0.05 s, a bound of 6 / 0.05
    floor = dict(CFG, impl="pointwise", time=0.2, gflop=3.0, peak_gflops=60.0)
    table = format_tables([model, floor, {**CFG, **res, "time": 6.0}],
                          argparse.Namespace(threads=1, repeats=1, dim=8, heads=2))
    assert "official code here / at peak" in table
    assert "| 3.00 | 0.0500 | 84.0-88.0x | 6.000 | 12.00 | %.0f | 120.0x |" % res["mem_mb"] in table


def test_official_source_errors_name_the_folder_and_the_fix(tmp_path, official_src):
    from pyg_lie.benchmarks.official_lie_transformer import check_source, official_model
    path = list(sys.path)
    with pytest.raises(ValueError, match=r"no eqv_transformer or lie_conv package.*oxcsml/lie-transformer"):
        check_source(str(tmp_path / "missing"))
    broken = _stand_ins(tmp_path / "broken", "", "", init="import not_installed_dependency\n")
    with pytest.raises(ValueError, match="importing the official code failed.*einops"):
        check_source(str(broken))
    _forget(path)
    old = _stand_ins(tmp_path / "old", "", "class T:\n    pass\n")
    with pytest.raises(ValueError, match="no LieGroup.lie_dim.*MJHutchinson/LieConv"):
        check_source(str(old))
    _forget(path)
    with pytest.raises(ValueError, match="T2 and SE2 only"):
        official_model(dict(CFG, group="SE3"), str(official_src))


def test_bench_cli_rejects_a_wrong_official_source(tmp_path):
    from pyg_lie.benchmarks.lie_self_attention import add_arguments, main
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--skip-sweep", "--official-src", str(tmp_path), "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match="--official-src"):
        main(args)


@pytest.mark.parametrize("argv, match", [
    (["--skip-official", "--configs", "T2 32x32 d128 L4 all"], "--configs select.*drop one or the other"),
    (["--skip-official", "--compile", "--shared-kernel"], "--compile, --shared-kernel select"),
    (["--skip-official", "--skip-sweep"], "nothing to run"),
])
def test_bench_cli_rejects_options_that_would_be_ignored(tmp_path, argv, match):
    from pyg_lie.benchmarks.lie_self_attention import add_arguments, main
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(SystemExit, match=match):
        main(p.parse_args(argv + ["--out", str(tmp_path / "out")]))
    assert not (tmp_path / "out").exists()
