"""Bridges to the equivariant ecosystem: e3nn irreps (:mod:`pyg_lie.interop.e3nn`) and escnn
field types (:mod:`pyg_lie.interop.escnn`). Each submodule imports its library on first use,
so importing :mod:`pyg_lie.interop` costs nothing."""
