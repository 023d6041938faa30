"""escnn and pyg_lie in one network: an escnn convolution stem, the pyg_lie equivariant ViT, an
escnn group-pooling head, trained on randomly rotated images.

1. stem: ``escnn.nn.R2Conv`` from the grey image (one trivial field) to regular fields of
   ``C_4`` or ``D_4``, then escnn's ``ReLU``;
2. backbone: ``EquivariantViT(..., in_type=stem.out_type)`` reads the stem's
   ``GeometricTensor`` directly; ``features(..., as_geometric_tensor=True)`` hands its patch
   tokens back to escnn as regular fields (``vit.out_type``);
3. head: escnn's ``ReLU`` and ``GroupPooling`` (invariant fields), a mean over the patches and
   a linear classifier.

Every piece is equivariant, so the logits are invariant under the group's rotations (and, for
``D_4``, reflections) of the input: the script prints that error next to the change of the
logits under a one-pixel shift of the images, which is no symmetry of the model. Data:
Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package when it is installed (or
``--data-dir``), else synthetic polygons; each image is rotated by a random angle.

    python examples/escnn_vit.py --group D4 --steps 300
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pyg_lie.cli.types import nonnegative_int, positive_float, positive_int
from pyg_lie.experiments.vit import _find_fmnist, _read_idx, _synthetic, rotate_images
from pyg_lie.models import EquivariantViT


class EscnnViT(nn.Module):
    """escnn stem -> pyg_lie ViT -> escnn group pooling -> linear: invariant logits ``(B, classes)``."""

    def __init__(self, group: str = "D4", img_size: int = 16, patch_size: int = 4, stem_fields: int = 2,
                 channels: int = 3, depth: int = 1, heads: int = 3, num_classes: int = 10):
        super().__init__()
        from escnn import nn as enn
        from pyg_lie.interop.escnn import escnn_gspace

        gs = escnn_gspace(group)
        self.in_type = gs.type(gs.trivial_repr)
        hidden = gs.type(*[gs.regular_repr] * stem_fields)
        self.stem = enn.SequentialModule(enn.R2Conv(self.in_type, hidden, kernel_size=5, padding=2),
                                         enn.ReLU(hidden))
        self.vit = EquivariantViT(group, "square", img_size=img_size, patch_size=patch_size, num_classes=1,
                                  depth=depth, heads=heads, channels=channels, in_type=hidden)
        self.pool = enn.SequentialModule(enn.ReLU(self.vit.out_type), enn.GroupPooling(self.vit.out_type))
        self.head = nn.Linear(self.pool.out_type.size, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        from escnn.nn import GeometricTensor
        gt = images if isinstance(images, GeometricTensor) else GeometricTensor(images, self.in_type)
        tokens = self.vit.features(self.stem(gt), as_geometric_tensor=True)  # (B, V.dim, S/P, S/P)
        invariant = self.pool(tokens).tensor.mean((-2, -1))  # escnn's GroupPooling returns float32
        return self.head(invariant.to(self.head.weight.dtype))


def load_images(dataset: str, data_dir, n: int, size: int, seed: int):
    """``(x, y, classes, name)``: ``n`` images ``(n, 1, size, size)`` in ``[-1, 1]``, each rotated by a
    random angle."""
    d = _find_fmnist(data_dir) if dataset in ("auto", "fashion-mnist") else None
    if dataset == "fashion-mnist" and d is None:
        raise FileNotFoundError("--data-dir: Fashion-MNIST idx files not found (apt-get install "
                                "dataset-fashion-mnist, or pass the folder)")
    if d is not None:
        import os
        stem = os.path.join(d, "train-images-idx3-ubyte")
        images = _read_idx(stem + ".gz" if os.path.exists(stem + ".gz") else stem)
        lstem = os.path.join(d, "train-labels-idx1-ubyte")
        labels = _read_idx(lstem + ".gz" if os.path.exists(lstem + ".gz") else lstem)
        idx = torch.randperm(len(images), generator=torch.Generator().manual_seed(seed))[:n].numpy()
        x = torch.as_tensor(images[idx], dtype=torch.float32)[:, None] / 255.0
        y = torch.as_tensor(labels[idx].astype("int64"))
        x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        classes, name = 10, "fashion-mnist"
    else:
        x, y, classes = _synthetic(n, size, seed)
        name = "synthetic polygons"
    x = rotate_images(x, 2 * math.pi * torch.rand(n, generator=torch.Generator().manual_seed(seed + 1)))
    lo, hi = x.amin(dim=(1, 2, 3), keepdim=True), x.amax(dim=(1, 2, 3), keepdim=True)
    return 2 * (x - lo) / (hi - lo).clamp_min(1e-6) - 1, y, classes, name


@torch.no_grad()
def invariance_report(model: EscnnViT, x: Tensor) -> tuple[float, float]:
    """Largest logit change under the group's actions on the input (escnn's
    ``GeometricTensor.transform``) and under a one-pixel shift."""
    from escnn.nn import GeometricTensor
    model.eval()
    gt = GeometricTensor(x, model.in_type)
    y = model(gt)
    err = max(float((model(gt.transform(g)) - y).abs().max()) for g in model.in_type.fibergroup.elements)
    shift = float((model(torch.roll(x, 1, dims=-1)) - y).abs().max())
    return err, shift


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", default="D4", choices=["C4", "D4"])
    p.add_argument("--steps", type=positive_int, default=300, help="training steps (batches)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--samples", type=positive_int, default=1024, help="training images (plus a quarter for testing)")
    p.add_argument("--img-size", type=positive_int, default=16)
    p.add_argument("--patch-size", type=positive_int, default=4)
    p.add_argument("--channels", type=positive_int, default=3, help="token type: copies of the regular representation")
    p.add_argument("--depth", type=positive_int, default=1)
    p.add_argument("--lr", type=positive_float, default=1e-2)
    p.add_argument("--dataset", default="auto", choices=["auto", "fashion-mnist", "synthetic"])
    p.add_argument("--data-dir", default=None, help="folder of the Fashion-MNIST idx files")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--threads", type=nonnegative_int, default=1, help="torch threads (0: torch's default)")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    n_test = max(a.samples // 4, 1)
    x, y, classes, name = load_images(a.dataset, a.data_dir, a.samples + n_test, a.img_size, a.seed)
    xtr, ytr, xte, yte = x[:a.samples], y[:a.samples], x[a.samples:], y[a.samples:]
    t0 = time.perf_counter()
    model = EscnnViT(a.group, a.img_size, a.patch_size, channels=a.channels, depth=a.depth, num_classes=classes)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{name}: {a.samples} training / {n_test} test images {a.img_size}x{a.img_size}, randomly rotated; "
          f"group {a.group}, {n_params} parameters (built in {time.perf_counter() - t0:.1f} s)")

    @torch.no_grad()
    def train_loss() -> float:
        model.eval()
        return float(F.cross_entropy(model(xtr), ytr))

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=1e-4)
    first = train_loss()
    g = torch.Generator().manual_seed(a.seed)
    t0 = time.perf_counter()
    for step in range(a.steps):
        model.train()
        idx = torch.randint(0, a.samples, (min(a.batch_size, a.samples),), generator=g)
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % max(a.steps // 10, 1) == 0 or step == a.steps - 1:
            print(f"step {step:4d}  batch loss {loss.item():.4f}")
    last = train_loss()
    print(f"training loss: {first:.4f} -> {last:.4f} ({a.steps} steps, {time.perf_counter() - t0:.1f} s)")
    with torch.no_grad():
        model.eval()
        acc = float((model(xte).argmax(-1) == yte).float().mean())
    print(f"test accuracy: {100 * acc:.1f}% ({classes} classes)")
    err, shift = invariance_report(model, xte[:16])
    what = "rotations by 90 degrees and reflections" if a.group == "D4" else "rotations by 90 degrees"
    print(f"largest logit change under the {a.group} {what} (GeometricTensor.transform): {err:.2e}")
    print(f"largest logit change under a one-pixel shift (not a symmetry): {shift:.2e}")


if __name__ == "__main__":
    main()
