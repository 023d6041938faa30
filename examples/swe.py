#!/usr/bin/env python
"""Shallow-water one-step prediction with S^2 neighbourhood attention, pyg-lie vs torch-harmonics.

Thin wrapper around ``pyg_lie.experiments.swe`` (the same code as ``pyg-lie train swe``).
Example (a few minutes on a CPU)::

    python examples/swe.py --out runs/swe
    python examples/swe.py --nlat 64 --nlon 128 --n-train 128 --epochs 30   # longer run
"""
import argparse

from pyg_lie.experiments.swe import __doc__ as DOC
from pyg_lie.experiments.swe import add_arguments, main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=DOC, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(parser)
    raise SystemExit(main(parser.parse_args()))
