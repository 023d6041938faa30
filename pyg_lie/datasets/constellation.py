r"""Constellations: count the shapes in a 2-D point cloud (Kosiorek et al., 2019;
used by the LieTransformer, Hutchinson et al., 2021, Sec. 5.1 and Appendix I.1).

Every example holds ``c_s in {0, 1, 2}`` instances (uniform, independently) of
each of four patterns (``triangle``, ``square``, ``pentagon``, ``L``; at least
one instance in total). An instance is its template (regular polygons with
circumradius 1; the ``L`` is three points on a vertical bar of length 2 plus a
foot of length 1, centred) scaled by ``s ~ U(size_range)``, rotated by
``theta ~ U[0, 2 pi)``, translated by ``c ~ U[-extent, extent]^2`` and every
corner jittered by ``N(0, noise^2 I)``. Point features are ``x_i = 1``; the
targets ``y (1, 4)`` are the four counts (classes 0/1/2 of four heads). The
point order is shuffled. Also stored: ``part (N,)``, the pattern of each point.

``variant="official"`` draws from the distribution of the official LieTransformer
code's generator instead (its ``configs/constellation/constellation.py`` defaults, used
for the paper's Table 1; reimplemented from those settings): two copies of each
pattern, each present with probability 1/2 (so every count is Binomial(2, 1/2):
0/1/2 with probability 1/4, 1/2, 1/4, and predicting 1 everywhere scores 0.5);
regular polygons with circumradius 1 around ``(2, 2)`` and a five-point ``L``
``(1,1) (2,1) (3,1) (3,2) (3,3)``; no scaling; every instance rotated about the
template origin by ``U(-0.33 pi, 0.33 pi)`` (not Haar: orientations stay within
+-60 degrees) and translated by ``U[0, 24]^2``; corner noise ``N(0, 0.1^2)``; then the
cloud, absent corners included, scaled into ``[-1, 1]`` by its scalar min and max.
Clouds whose eight instances are all absent (probability 1/256; the official data
keeps them as empty clouds) are redrawn.

Everything is generated with ``numpy.random.default_rng(seed)``: the same seed
gives the same data on every machine, and :meth:`Constellation.splits` uses
different seeds for train and test (the original code reused one). The
transformed test sets ``D_test^{T2}`` and ``D_test^{SE2}`` apply one random
element per example (translation ``N(0, translation_scale^2 I)``, Haar
rotation) to a copy of ``D_test``.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

from .._checks import nonnegative_float, positive_int

__all__ = ["Constellation", "SHAPES", "VARIANTS", "templates", "official_templates"]

SHAPES = ("triangle", "square", "pentagon", "L")
VARIANTS = ("uniform", "official")


def _polygon(k: int, phase: float = np.pi / 2) -> np.ndarray:
    """``(k, 2)`` vertices of the regular ``k``-gon with circumradius 1, the first at angle ``phase``."""
    a = 2 * np.pi * np.arange(k) / k + phase
    return np.stack([np.cos(a), np.sin(a)], -1)


def _rotation(th: float) -> np.ndarray:
    """``(2, 2)`` counter-clockwise rotation by ``th``."""
    return np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])


def templates() -> Dict[str, np.ndarray]:
    """Unit templates of the four patterns, ``(k, 2)`` each, centred at 0."""
    L = np.array([[-0.5, 1.0], [-0.5, 0.0], [-0.5, -1.0], [0.5, -1.0]])
    L = L - L.mean(0)
    return {"triangle": _polygon(3), "square": _polygon(4), "pentagon": _polygon(5), "L": L}


def official_templates() -> Dict[str, np.ndarray]:
    """Templates of ``variant="official"``: polygons with circumradius 1 (first vertex at
    angle 0) centred at ``(2, 2)`` and a five-point ``L``, in the template frame that the
    random rotation acts on."""
    L = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [3.0, 2.0], [3.0, 3.0]])
    return {"triangle": _polygon(3, 0.0) + 2.0, "square": _polygon(4, 0.0) + 2.0,
            "pentagon": _polygon(5, 0.0) + 2.0, "L": L}


class Constellation(InMemoryDataset):
    """Constellation counting data set (in memory, generated on construction).

    Args:
        num_samples: number of point clouds.
        seed: generator seed (train and test must use different seeds).
        max_instances: instances per pattern are uniform in ``0..max_instances``
            (``variant="official"``: the number of copies, each present w.p. 1/2).
        size_range: range of the template scale.
        extent: instance centres are uniform in ``[-extent, extent]^2``.
        noise: standard deviation of the corner jitter.
        augment: ``None``, ``"T2"`` or ``"SE2"``: apply one random element of
            that group to every example (the transformed test sets).
        augment_seed: seed of those elements.
        translation_scale: standard deviation of the augmenting translations.
        transform: PyG transform applied on access.
        variant: ``"uniform"`` (the generator above) or ``"official"`` (the official
            code's distribution; ``size_range``, ``extent`` and ``noise`` are then unused).

    Each item is ``Data(x (N, 1), pos (N, 2), y (1, 4), part (N,))``.
    """

    num_classes = 3
    num_heads = 4

    def __init__(self, num_samples: int = 10000, seed: int = 0, *, max_instances: int = 2,
                 size_range: Tuple[float, float] = (1.0, 2.0), extent: float = 4.0, noise: float = 0.05,
                 augment: Optional[str] = None, augment_seed: Optional[int] = None,
                 translation_scale: float = 10.0, transform: Optional[Callable] = None,
                 variant: str = "uniform"):
        positive_int("num_samples", num_samples)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if augment not in (None, "T2", "SE2"):
            raise ValueError(f"augment must be None, 'T2' or 'SE2', got {augment!r}")
        if not (0 < size_range[0] <= size_range[1] < math.inf):
            raise ValueError(f"size_range must satisfy 0 < low <= high < inf, got {size_range}")
        positive_int("max_instances", max_instances)  # 0 would redraw empty scenes forever
        if not nonnegative_float("extent", extent) > 0:
            raise ValueError(f"extent must be > 0, got {extent!r}")
        nonnegative_float("noise", noise, " (a standard deviation)")
        nonnegative_float("translation_scale", translation_scale, " (a standard deviation)")
        self.seed, self.augment, self.variant = seed, augment, variant
        self.params = dict(num_samples=num_samples, seed=seed, max_instances=max_instances,
                           size_range=tuple(size_range), extent=extent, noise=noise, augment=augment,
                           augment_seed=augment_seed, translation_scale=translation_scale, variant=variant)
        super().__init__(None, transform)
        data_list = self._generate(**self.params)
        self._data, self.slices = self.collate(data_list)

    @staticmethod
    def _generate(num_samples, seed, max_instances, size_range, extent, noise, augment, augment_seed,
                  translation_scale, variant="uniform") -> List[Data]:
        rng = np.random.default_rng(seed)
        aug = np.random.default_rng(seed + 7919 if augment_seed is None else augment_seed)
        draw = Constellation._draw_official if variant == "official" else Constellation._draw_uniform
        out = []
        for _ in range(num_samples):
            pos, part, counts = draw(rng, max_instances, size_range, extent, noise)
            perm = rng.permutation(len(pos))
            pos, part = pos[perm], part[perm]
            if augment is not None:
                t = translation_scale * aug.standard_normal(2)
                th = aug.uniform(0, 2 * np.pi) if augment == "SE2" else 0.0
                pos = pos @ _rotation(th).T + t
            pos_t = torch.tensor(pos, dtype=torch.float32)
            out.append(Data(x=torch.ones(len(pos), 1), pos=pos_t,
                            y=torch.tensor(counts, dtype=torch.long).view(1, 4),
                            part=torch.tensor(part, dtype=torch.long)))
        return out

    @staticmethod
    def _draw_uniform(rng, max_instances, size_range, extent, noise):
        temps = templates()
        counts = rng.integers(0, max_instances + 1, size=4)
        while counts.sum() == 0:
            counts = rng.integers(0, max_instances + 1, size=4)
        pts, part = [], []
        for s, name in enumerate(SHAPES):
            for _ in range(int(counts[s])):
                scale = rng.uniform(*size_range)
                th = rng.uniform(0, 2 * np.pi)
                centre = rng.uniform(-extent, extent, size=2)
                p = scale * temps[name] @ _rotation(th).T + centre
                p = p + noise * rng.standard_normal(p.shape)
                pts.append(p)
                part += [s] * len(p)
        return np.concatenate(pts), np.array(part), counts

    @staticmethod
    def _draw_official(rng, max_instances, *unused):
        temps = official_templates()
        present = rng.random((max_instances, 4)) < 0.5
        while not present.any():
            present = rng.random((max_instances, 4)) < 0.5
        pts, part, keep = [], [], []
        for r in range(max_instances):
            for s, name in enumerate(SHAPES):
                th = rng.uniform(-0.33 * np.pi, 0.33 * np.pi)
                p = temps[name] @ _rotation(th).T + rng.uniform(0.0, 24.0, size=2)
                pts.append(p + 0.1 * rng.standard_normal(p.shape))
                part += [s] * len(p)
                keep += [bool(present[r, s])] * len(p)
        pos = np.concatenate(pts)
        lo, hi = pos.min(), pos.max()  # absent corners included, as in the official data
        pos = (pos - lo) / (hi - lo + 1e-8) * 2 - 1
        keep = np.array(keep)
        return pos[keep], np.array(part)[keep], present.sum(0)

    @classmethod
    def splits(cls, num_train: int = 10000, num_test: int = 1000, seed: int = 0,
               **kwargs) -> Dict[str, "Constellation"]:
        """``train`` (seed ``seed``), ``test`` (seed ``seed + 1``) and its ``test_T2`` /
        ``test_SE2`` copies (augment seeds ``seed + 2`` / ``seed + 3``)."""
        return {
            "train": cls(num_train, seed, **kwargs),
            "test": cls(num_test, seed + 1, **kwargs),
            "test_T2": cls(num_test, seed + 1, augment="T2", augment_seed=seed + 2, **kwargs),
            "test_SE2": cls(num_test, seed + 1, augment="SE2", augment_seed=seed + 3, **kwargs),
        }

    def __repr__(self) -> str:
        aug = f", augment={self.augment!r}" if self.augment else ""
        var = f", variant={self.variant!r}" if self.variant != "uniform" else ""
        return f"{self.__class__.__name__}({len(self)}, seed={self.seed}{aug}{var})"
