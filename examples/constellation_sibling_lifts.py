"""Does the trained-weights invariance curve depend on the edges between a point's own lifts?

A LieTransformer-SE2 trained with one Haar lift sample and evaluated with ``K > 1`` sees,
in every neighbourhood, the other ``K - 1`` lifts of the query's own point (zero
translation, non-zero rotation): location-kernel inputs that never occur in training.
This script evaluates a ``pyg-lie train constellation`` checkpoint's SE(2) invariance
error and its accuracy against ``K`` (Haar and finite ``C_K`` lifts) twice: with all lifted
edges, and with those sibling edges removed (self-loops kept). See docs/lie_transformer.md.

    python examples/constellation_sibling_lifts.py --run runs/constellation_SE2_official
"""
from __future__ import annotations

import argparse
import contextlib
from unittest import mock

import torch

import pyg_lie.models.lie_transformer as lt
from pyg_lie.cli.types import positive_int
from pyg_lie.datasets.constellation import Constellation
from pyg_lie.experiments import constellation as exp


@contextlib.contextmanager
def without_sibling_edges():
    """Patch the model's edge builder to drop edges between different lifts of one point."""
    full = lt.lifted_edges

    def edges(pos, batch, num_lifts, *args, **kwargs):
        ei = full(pos, batch, num_lifts, *args, **kwargs)
        keep = (ei[0] // num_lifts != ei[1] // num_lifts) | (ei[0] == ei[1])
        return ei[:, keep]

    with mock.patch.object(lt, "lifted_edges", edges):
        yield


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="runs/constellation_SE2_official",
                   help="output folder of an SE2 'pyg-lie train constellation' run (holds checkpoint.pt)")
    p.add_argument("--lifts", type=positive_int, nargs="+", default=[1, 2, 3, 4, 8])
    p.add_argument("--clouds", type=positive_int, default=100, help="test clouds")
    p.add_argument("--threads", type=positive_int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    ck = torch.load(f"{args.run}/checkpoint.pt", map_location="cpu", weights_only=False)
    train_args = argparse.Namespace(**ck["extra"]["args"])
    if train_args.group != "SE2":
        raise SystemExit(f"--run must hold an SE2 model, got {train_args.group}")
    model = exp.build_model(train_args)
    model.load_state_dict(ck["model"])
    test = Constellation.splits(1, args.clouds, seed=train_args.data_seed,
                                variant=getattr(train_args, "data", "uniform"))["test"]
    print(f"{args.run}: SE(2) invariance error and accuracy (Haar / C_K lifts) on {args.clouds} test clouds")
    print("| edges | | " + " | ".join(f"K={k}" for k in args.lifts) + " |")
    print("|---|---|" + "---|" * len(args.lifts))
    for name, ctx in (("all lifted edges", contextlib.nullcontext), ("without sibling lifts", without_sibling_edges)):
        with ctx():
            c = exp.invariance_curve(model, test, args.lifts, args.clouds)
        print(f"| {name} | invariance error | "
              + " | ".join(f"{h:.3f} / {f:.3f}" for h, f in zip(c["haar"], c["finite"])) + " |")
        print(f"| {name} | accuracy | "
              + " | ".join(f"{h:.3f} / {f:.3f}" for h, f in zip(c["haar_acc"], c["finite_acc"])) + " |")


if __name__ == "__main__":
    main()
