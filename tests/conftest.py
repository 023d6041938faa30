import warnings

import pytest
import torch

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", category=FutureWarning, module="torch")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
