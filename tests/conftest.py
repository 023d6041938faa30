import warnings

import pytest
import torch

# The tests run many tiny batched ops (4x4 LAPACK calls, small graphs) for which
# intra-op threading costs far more than it saves on a 2-core machine.
torch.set_num_threads(1)

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning, module="torch")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
