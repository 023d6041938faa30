"""The native CPU kernels moved to :mod:`pyg_lie.ops._native`; this name is that module
(kept for code that imports it from here). Call the operators of :mod:`pyg_lie.ops`
instead of the kernels."""
import sys

from ...ops import _native as _impl

sys.modules[__name__] = _impl
