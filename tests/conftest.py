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


def _process_state():
    """name -> (read, restore) of every process-wide torch / pyg_lie setting a test might change."""
    from pyg_lie import ops
    return {"default dtype": (torch.get_default_dtype, torch.set_default_dtype),
            "torch threads": (torch.get_num_threads, torch.set_num_threads),
            "ops backend": (ops.get_backend, ops.set_backend),
            "grad mode": (torch.is_grad_enabled, torch.set_grad_enabled),
            "deterministic algorithms": (torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms),
            "anomaly detection": (torch.is_anomaly_enabled, torch.autograd.set_detect_anomaly),
            "CPU autocast": (lambda: torch.is_autocast_enabled("cpu"), lambda on: torch.set_autocast_enabled("cpu", on))}


@pytest.fixture(autouse=True)
def _no_leaked_global_state():
    """A test that changes process-wide torch or pyg_lie settings fails here (and the settings are
    restored), so a later test in the same worker never trains under another test's state."""
    state = _process_state()
    before = {name: read() for name, (read, _) in state.items()}
    yield
    after = {name: read() for name, (read, _) in state.items()}
    changed = {name: (before[name], after[name]) for name in state if after[name] != before[name]}
    for name in changed:
        state[name][1](before[name])  # restore
    if changed:
        pytest.fail(f"the test left process-wide state changed (before, after): {changed}")
