import os
import random
import tempfile
import warnings

import pytest
import torch

# The tests run many tiny batched ops (4x4 LAPACK calls, small graphs) for which
# intra-op threading costs far more than it saves on a 2-core machine.
torch.set_num_threads(1)
# experiment commands write result files to --results-dir (default results/): never into the checkout
os.environ.setdefault("PYG_LIE_RESULTS_DIR", tempfile.mkdtemp(prefix="pyg_lie_results_"))

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning, module="torch")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    # torch_geometric.nn.Sequential names its generated module with Python's `random`;
    # after code that calls random.seed(s), two Sequentials built from the same state
    # share a name and one silently gets the other's forward. Fresh entropy per test.
    random.seed()
    yield


def _global_state():
    from pyg_lie import ops
    return {"default dtype": torch.get_default_dtype(), "torch threads": torch.get_num_threads(),
            "ops backend": ops.get_backend(), "grad mode": torch.is_grad_enabled(),
            "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
            "anomaly detection": torch.is_anomaly_enabled(),
            "CPU autocast": torch.is_autocast_enabled("cpu")}


@pytest.fixture(autouse=True)
def _no_leaked_global_state():
    """A test that changes process-wide torch or pyg_lie settings fails here (and the settings are
    restored), so a later test in the same worker never trains under another test's state."""
    before = _global_state()
    yield
    after = _global_state()
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    if changed:
        from pyg_lie import ops
        torch.set_default_dtype(before["default dtype"])
        torch.set_num_threads(before["torch threads"])
        ops.set_backend(before["ops backend"])
        torch.set_grad_enabled(before["grad mode"])
        torch.use_deterministic_algorithms(before["deterministic algorithms"])
        torch.autograd.set_detect_anomaly(before["anomaly detection"])
        pytest.fail(f"the test left process-wide state changed (before, after): {changed}")
