"""Quick start: LieSelfAttention inside your own PyG model, trained on batches from a PyG DataLoader.

The model below is written out layer by layer instead of using ``pyg_lie.models.LieTransformer``,
to show the pieces a user composes (Hutchinson et al., 2021, "LieTransformer"):

1. ``Lift``: each point becomes ``K`` group elements (here SE(2) with the finite lift ``C_4``);
2. ``lifted_edges``: a radius graph on the base positions, expanded to all pairs of lifts;
3. ``LieSelfAttention`` layers in ``torch_geometric.nn.Sequential`` (content attention plus an
   MLP on ``log(g_i^-1 g_j)``). The constellation points carry no features (``x = 1``), and a
   softmax over identical values returns that value whatever the weights, so the model would
   not see the geometry: each point instead gets invariant features, its distances to the
   ``k`` nearest points of its cloud (``distance_features``);
4. ``GroupPool``: mean over each graph's lifted nodes (PyG ``batch`` vectors, no padding).

It trains for a few steps on the constellation data (is each of the four shapes in the cloud?)
and then measures, in float64, the exact invariance the finite lift gives: rotating every
cloud by a multiple of 90 degrees and translating it changes the logits only at rounding
level, while moving the points (a change that is not a symmetry) changes them by far more.

    python examples/quickstart.py --steps 100
"""
from __future__ import annotations

import argparse
import copy
import math

import torch
from torch import Tensor, nn
from torch_geometric.loader import DataLoader
from torch_geometric.nn import Sequential
from torch_geometric.utils import to_dense_batch
from tqdm import tqdm

from pyg_lie.cli.types import nonnegative_int, positive_float, positive_int
from pyg_lie.datasets import Constellation
from pyg_lie.groups import get_group
from pyg_lie.nn import GroupPool, LieSelfAttention, Lift
from pyg_lie.nn.lifted_edges import lifted_edges


def distance_features(pos: Tensor, batch: Tensor, k: int = 4) -> Tensor:
    """``(N, k)`` distances from each point to the ``k`` nearest other points of its cloud
    (0 where the cloud has fewer): invariant under rotations, reflections and translations."""
    dense, mask = to_dense_batch(pos, batch)  # (B, n, d)
    # differences, not torch.cdist: its matrix-product form loses the invariance to rounding
    d = (dense[:, :, None] - dense[:, None]).norm(dim=-1).masked_fill(~mask[:, None, :], math.inf)
    d = d + torch.diag_embed(torch.full(d.shape[:-1], math.inf, dtype=d.dtype))  # not the point itself
    d = d.sort(-1).values[..., :k]
    d = torch.where(torch.isinf(d), torch.zeros_like(d), d)
    return nn.functional.pad(d, (0, k - d.shape[-1]))[mask]


class CountingModel(nn.Module):
    """Invariant logits ``(B, 4, 3)``: how many triangles, squares, pentagons and L shapes (0-2)."""

    def __init__(self, hidden: int = 32, heads: int = 4, lifts: int = 4, radius: float = 3.0, k: int = 4):
        super().__init__()
        self.group = get_group("SE2")
        self.lift = Lift(self.group, lifts, mode="finite")
        self.lifts, self.radius = lifts, radius
        self.k = k
        self.embed = nn.Linear(k, hidden)
        self.attention = Sequential("x, edge_index, g", [
            (LieSelfAttention(hidden, hidden, self.group, heads), "x, edge_index, g -> x"),
            nn.SiLU(),
            (LieSelfAttention(hidden, hidden, self.group, heads), "x, edge_index, g -> x"),
        ])
        self.pool = GroupPool("mean")
        self.head = nn.Linear(hidden, 4 * 3)

    def forward(self, x: Tensor, pos: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
        lifted = self.lift(distance_features(pos, batch, self.k), pos, batch)  # x (all ones) carries nothing
        edge_index = lifted_edges(pos, batch, self.lifts, self.radius)
        h = self.attention(self.embed(lifted.x), edge_index, lifted.g)
        return self.head(self.pool(h, lifted.batch, size=num_graphs)).view(-1, 4, 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=positive_int, default=100, help="training steps (batches)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--samples", type=positive_int, default=512, help="training clouds")
    p.add_argument("--lr", type=positive_float, default=3e-3, help="Adam learning rate")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--no-progress", action="store_true", help="disable the tqdm bar")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    # is each shape there (up to one of each)? a task the short training below can learn
    train = Constellation(args.samples, seed=args.seed, max_instances=1)
    test = Constellation(256, seed=args.seed + 1, max_instances=1)  # a different seed from the training set
    model = CountingModel()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    model.train()
    step, bar = 0, tqdm(total=args.steps, desc="training", disable=args.no_progress)
    while step < args.steps:
        for data in DataLoader(train, batch_size=args.batch_size, shuffle=True):
            logits = model(data.x, data.pos, data.batch, data.num_graphs)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 3), data.y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            bar.update()
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if step == args.steps:
                break
    bar.close()

    model.eval()
    data = next(iter(DataLoader(test, batch_size=len(test))))
    with torch.no_grad():
        logits = model(data.x, data.pos, data.batch, data.num_graphs)
        right = logits.argmax(-1) == data.y  # (B, 4)
        accuracy, per_count = right.all(-1).float().mean().item(), right.float().mean().item()
        # the symmetry check in float64, where rounding does not hide a broken invariance
        model64, x64, pos64 = copy.deepcopy(model).double(), data.x.double(), data.pos.double()
        base = model64(x64, pos64, data.batch, data.num_graphs)
        # a rotation by k * 90 degrees (an element of C_4) and a translation, per cloud
        k = torch.randint(0, 4, (data.num_graphs,))[data.batch].double() * (math.pi / 2)
        rot = torch.stack([torch.cos(k), -torch.sin(k), torch.sin(k), torch.cos(k)], -1).view(-1, 2, 2)
        shift = 10 * torch.randn(data.num_graphs, 2, dtype=torch.float64)[data.batch]
        moved = torch.einsum("nij,nj->ni", rot, pos64) + shift
        change = (model64(x64, moved, data.batch, data.num_graphs) - base).abs().max().item()
        jitter = pos64 + 0.3 * torch.randn_like(pos64)  # not a symmetry
        moved_change = (model64(x64, jitter, data.batch, data.num_graphs) - base).abs().max().item()
    # chance: the most frequent answer for each shape in the training set, predicted for every cloud
    train_y = torch.stack([d.y.view(-1) for d in train])  # (samples, 4)
    majority = torch.stack([torch.bincount(c, minlength=3).argmax() for c in train_y.t()])
    chance = (data.y.view(-1, 4) == majority).float().mean().item()
    print(f"after {args.steps} steps: test accuracy {accuracy:.3f} (all four shapes right), "
          f"{per_count:.3f} per shape (chance: {chance:.3f})")
    print(f"largest logit change under C_4 rotations and translations: {change:.2e} (float64 rounding)")
    print(f"largest logit change when the points move (not a symmetry): {moved_change:.2e}")


if __name__ == "__main__":
    main()
