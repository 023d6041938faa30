"""``pyg_lie._sort``: the numpy-backed key sorts must equal torch's stable sort exactly."""
import pytest
import torch

from pyg_lie._sort import NUMPY_ARGSORT_MAX, argsort_keys, sort_keys


@pytest.mark.parametrize("n", [0, 1, 2, 1000, NUMPY_ARGSORT_MAX, NUMPY_ARGSORT_MAX + 1])
@pytest.mark.parametrize("high", [5, 1 << 40])  # many duplicates / unique keys
def test_matches_torch_stable_sort(n, high):
    key = torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(n))
    ref_v, ref_i = torch.sort(key, stable=True)
    v, i = argsort_keys(key)
    assert v.dtype == i.dtype == torch.int64
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)  # stable: equal keys keep their order
    assert torch.equal(sort_keys(key), ref_v)


def test_fallbacks_for_negative_and_huge_keys():
    for key in (torch.tensor([3, -1, 2, -1, 0]), torch.tensor([2 ** 62, 5, 2 ** 61, 5])):
        ref_v, ref_i = torch.sort(key, stable=True)
        v, i = argsort_keys(key)
        assert torch.equal(v, ref_v) and torch.equal(i, ref_i)
        assert torch.equal(sort_keys(key), ref_v)


def test_non_contiguous_input():
    key = torch.randint(0, 100, (2, 500), generator=torch.Generator().manual_seed(0))[1]
    v, i = argsort_keys(key[::3])
    ref_v, ref_i = torch.sort(key[::3], stable=True)
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)
