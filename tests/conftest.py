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
