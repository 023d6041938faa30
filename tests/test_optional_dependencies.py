"""The core imports and works with escnn and torch-cluster unavailable."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["escnn"] = None          # import escnn -> ImportError
    sys.modules["torch_cluster"] = None  # import torch_cluster -> ImportError
    import torch
    import pyg_lie
    from pyg_lie.groups import SE3, get_group
    from pyg_lie.neighbors import radius_graph
    from pyg_lie.models import LieTransformer, LieAlgebraTransformer, EquivariantViT

    pos = torch.randn(12, 2)
    ei = radius_graph(pos, 1.0)          # auto backend without torch-cluster
    assert ei.shape[0] == 2
    model = LieTransformer("SE2", 1, 16, 3, num_layers=1, heads=2, lift_samples=2, radius=1.5)
    out = model(torch.ones(12, 1), pos)
    assert out.shape == (1, 3) and torch.isfinite(out).all()
    g = get_group("SO3").random(5)
    assert LieAlgebraTransformer("SO3", hidden_channels=8, num_layers=1, heads=2)(g).g.shape == (5, 3, 3)
    vit = EquivariantViT(group="C4", grid="square", img_size=8, patch_size=4, in_channels=1,
                         num_classes=2, depth=1, heads=1, channels=1)
    assert vit(torch.randn(1, 1, 8, 8)).shape == (1, 2)
    assert "escnn" not in [m for m in sys.modules if sys.modules[m] is not None]
    print("ok")
""")


def test_core_works_without_escnn_and_torch_cluster():
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
