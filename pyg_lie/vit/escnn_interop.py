"""Former home of the escnn converters, kept so that old imports work: everything lives in
:mod:`pyg_lie.interop.escnn`."""
from ..interop.escnn import *  # noqa: F401,F403
from ..interop.escnn import __all__  # noqa: F401
