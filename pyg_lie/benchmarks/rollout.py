"""``pyg-lie bench rollout``: the cost of training a Hamiltonian neural ODE through an RK4 rollout.

A ``T``-step RK4 rollout of :class:`~pyg_lie.models.HamiltonianNODE` evaluates the gradient of
the potential ``4 T`` times (``create_graph=True``), and its training backward differentiates
through those gradients (second derivatives of the potential). Done right, this costs a small
constant times ``4 T`` forward + backward passes of the potential, whatever ``T``; a backward
that re-entered autograd nested the work once per step instead.

For each ``T`` the table shows the median wall time of one rollout plus its training backward,
and its ratio to ``4 T`` forward + backward passes of the potential alone (``V(q)`` and its
gradients with respect to the positions and the parameters, median time of one pass). The
potential is :class:`~pyg_lie.models.LieTransformer` (T(2), all pairs of each system); the
rollouts and the potential passes are interleaved within every repetition, so that load from
other processes hits all of them alike. ``--out`` receives the configuration, seed, git
revision and the numbers as JSON.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Dict, List

import torch

from ..cli.types import nonnegative_int, positive_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=positive_int, nargs="+", default=[1, 2, 5, 10],
                        help="rollout lengths T")
    parser.add_argument("--systems", type=positive_int, default=8, help="systems per batch")
    parser.add_argument("--particles", type=positive_int, default=6, help="particles per system")
    parser.add_argument("--hidden", type=positive_int, default=16, help="hidden channels of the LieTransformer")
    parser.add_argument("--layers", type=positive_int, default=1, help="LieTransformer blocks")
    parser.add_argument("--heads", type=positive_int, default=2, help="attention heads")
    parser.add_argument("--dt", type=positive_float, default=0.01, help="RK4 step")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--repeat", type=positive_int, default=5,
                        help="timed repetitions (median), after one warm-up")
    parser.add_argument("--potential-passes", type=positive_int, default=20,
                        help="potential forward + backward passes timed per repetition")
    parser.add_argument("--threads", type=nonnegative_int, default=0, help="torch intra-op threads (0: leave default)")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--out", default="benchmarks/results/rollout.json", help="JSON file for the results")


def _model(args: argparse.Namespace, dtype: torch.dtype):
    from pyg_lie.models import LieTransformer
    from pyg_lie.models.hamiltonian import HamiltonianNODE

    torch.manual_seed(args.seed)
    potential = LieTransformer("T2", in_channels=2, hidden_channels=args.hidden, out_channels=1,
                               num_layers=args.layers, heads=args.heads)
    return HamiltonianNODE(potential).to(dtype)


def _systems(args: argparse.Namespace, dtype: torch.dtype):
    """Initial states ``(B, n, 4)``, masses and spring constants ``(B, n)`` (the ranges of the
    spring data set), and a target trajectory for every ``T``."""
    g = torch.Generator().manual_seed(args.seed)
    B, n = args.systems, args.particles
    z0 = torch.randn(B, n, 4, generator=g, dtype=dtype)
    m = 0.1 + 3 * torch.rand(B, n, generator=g, dtype=dtype)
    k = 5 * torch.rand(B, n, generator=g, dtype=dtype)
    targets = {T: torch.randn(B, T + 1, n, 4, generator=g, dtype=dtype) for T in args.steps}
    return z0, m, k, targets


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(args: argparse.Namespace) -> int:
    from ._record import write_benchmark
    from pyg_lie.models.hamiltonian import rollout_mse

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model = _model(args, dtype)
    z0, m, k, targets = _systems(args, dtype)
    q0 = z0[..., :2]

    def potential_pass() -> None:
        model.zero_grad(set_to_none=True)
        q = q0.detach().requires_grad_(True)
        model.potential_energy(q, m, k).sum().backward()

    def rollout(T: int) -> None:
        model.zero_grad(set_to_none=True)
        traj = model(z0, m, k, T, args.dt)
        rollout_mse(traj, targets[T]).mean().backward()

    potential_pass()  # warm-up: lazy imports, native kernels, first-call overheads
    for T in args.steps:
        rollout(T)
    pot: List[float] = []
    roll: Dict[int, List[float]] = {T: [] for T in args.steps}
    for _ in range(args.repeat):
        pot.append(_seconds(lambda: [potential_pass() for _ in range(args.potential_passes)])
                   / args.potential_passes)
        for T in args.steps:
            roll[T].append(_seconds(lambda: rollout(T)))
    p = statistics.median(pot)
    print(f"HamiltonianNODE(LieTransformer T2, hidden {args.hidden}, {args.layers} layer(s), {args.heads} heads), "
          f"{args.systems} systems x {args.particles} particles, {args.dtype}, torch threads={torch.get_num_threads()}, "
          f"median of {args.repeat}")
    print(f"potential forward + backward: {p * 1e3:.3f} ms per pass")
    header = f"{'T':>4} {'rollout + backward':>19} {'/ (4T potential passes)':>24}"
    print(header)
    print("-" * len(header))
    metrics: Dict[str, float] = {"potential_fb_ms": p * 1e3}
    for T in args.steps:
        r = statistics.median(roll[T])
        ratio = r / (4 * T * p)
        metrics[f"rollout_ms_T{T}"] = r * 1e3
        metrics[f"ratio_T{T}"] = ratio
        print(f"{T:>4} {r * 1e3:>16.2f} ms {ratio:>23.2f}x")
    config = {k: v for k, v in vars(args).items() if not k.startswith("_") and k not in ("command", "task", "out")}
    config.update(group="T2", potential="LieTransformer", torch_threads=torch.get_num_threads())
    shared = {k: v for k, v in config.items() if k not in ("steps", "repeat", "potential_passes", "threads")}
    records = [{"configuration": {**shared, "T": T},
                "metrics": {"rollout_backward_ms": metrics[f"rollout_ms_T{T}"], "potential_fb_ms": p * 1e3,
                            "ratio": metrics[f"ratio_T{T}"]}} for T in args.steps]
    write_benchmark(args, ["bench", "rollout"], args.out, benchmark="rollout",
                    title="Hamiltonian rollout: cost of the training backward",
                    description="Median time of a T-step RK4 rollout of HamiltonianNODE plus its training backward "
                                "(rollout_backward_ms), of one forward + backward pass of the potential "
                                "(potential_fb_ms), and ratio = rollout_backward_ms / (4 T potential_fb_ms).",
                    config=config, seed=args.seed, records=records, metrics=metrics)
    return 0
