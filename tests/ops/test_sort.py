"""``pyg_lie.ops.sort_keys`` / ``argsort_keys``: the native radix sort and the numpy fallbacks must equal torch's
stable sort exactly."""
import pytest
import torch

from pyg_lie.ops import argsort_keys, sort_keys
from pyg_lie.ops.graph import NUMPY_ARGSORT_MAX
from pyg_lie.ops import _native

native = pytest.mark.skipif(not _native.available(), reason="native kernels not built (no C compiler)")


@pytest.fixture(params=["native", "numpy"])
def path(request, monkeypatch):
    """Both paths of the sorts: the radix sort, and numpy/torch with the native kernels disabled."""
    if request.param == "native" and not _native.available():
        pytest.skip("native kernels not built (no C compiler)")
    if request.param == "numpy":
        monkeypatch.setenv("PYG_LIE_NATIVE", "0")
    return request.param


@pytest.mark.parametrize("n", [0, 1, 2, 1000, NUMPY_ARGSORT_MAX, NUMPY_ARGSORT_MAX + 1])
@pytest.mark.parametrize("high", [5, 1 << 40])  # many duplicates / unique keys
def test_matches_torch_stable_sort(n, high, path):
    key = torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(n))
    ref_v, ref_i = torch.sort(key, stable=True)
    v, i = argsort_keys(key)
    assert v.dtype == i.dtype == torch.int64
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)  # stable: equal keys keep their order
    assert torch.equal(sort_keys(key), ref_v)


def test_fallbacks_for_negative_and_huge_keys(path):
    for key in (torch.tensor([3, -1, 2, -1, 0]), torch.tensor([2 ** 62, 5, 2 ** 61, 5])):
        ref_v, ref_i = torch.sort(key, stable=True)
        v, i = argsort_keys(key)
        assert torch.equal(v, ref_v) and torch.equal(i, ref_i)
        assert torch.equal(sort_keys(key), ref_v)


def test_non_contiguous_input(path):
    key = torch.randint(0, 100, (2, 500), generator=torch.Generator().manual_seed(0))[1]
    v, i = argsort_keys(key[::3])
    ref_v, ref_i = torch.sort(key[::3], stable=True)
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)


@native
@pytest.mark.parametrize("case", ["sorted", "reversed", "equal", "high digits only", "one pass", "63 bits"])
def test_radix_sort_cases(case):
    """Inputs that take the radix sort's shortcuts (sorted input, passes skipped because a digit
    is the same for every key) and its widest keys."""
    g = torch.Generator().manual_seed(1)
    key = {
        "sorted": torch.arange(5000) * 3,
        "reversed": torch.arange(5000).flip(0),
        "equal": torch.full((3000,), 7, dtype=torch.long),
        "high digits only": torch.randint(0, 50, (4000,), generator=g) << 30,  # low digits all zero
        "one pass": torch.randint(0, 200, (4000,), generator=g),
        "63 bits": torch.randint(0, 1 << 40, (8,), generator=g) << 20,  # 60-bit keys, 3 position bits
    }[case]
    before = key.clone()
    ref_v, ref_i = torch.sort(key, stable=True)
    v, i = _native.radix_sort(key)
    assert torch.equal(v, ref_v) and torch.equal(i, ref_i)
    v2, none = _native.radix_sort(key, perm=False)
    assert none is None and torch.equal(v2, ref_v)
    assert torch.equal(key, before)  # input untouched


@native
def test_radix_sort_declines_what_does_not_fit():
    """Negative keys, and keys whose bits plus the position bits exceed 63: None, so that the
    callers sort otherwise (and the sorts stay exact, see the fallback test)."""
    assert _native.radix_sort(torch.tensor([3, -1, 2])) is None
    assert _native.radix_sort(torch.tensor([2 ** 62, 5, 2 ** 61, 5])) is None
    with pytest.raises(ValueError, match="1-D int64 CPU tensor"):
        _native.radix_sort(torch.tensor([1.0, 2.0]))
