r"""QM9 with the LieTransformer's inputs, on :class:`pyg_lie.datasets.QM9` or PyG's class.

:class:`~pyg_lie.datasets.QM9` (real data built offline from ``qm9pack``) and
:class:`torch_geometric.datasets.QM9` store the same fields, so
:class:`QM9Transform` and the splits below work on either.

Inputs (Hutchinson et al. 2021, Appendix I.2, following Cormorant, Anderson et
al. 2019): per atom of type ``t`` in ``(H, C, N, O, F)`` with nuclear charge
``c`` the vector ``[1, c/9, (c/9)^2]`` placed in the block of its type,

.. math::

    x_i = \mathrm{onehot}(t_i) \otimes [1, \tilde c_i, \tilde c_i^2] \in R^{15},
    \qquad \tilde c_i = c_i / 9,

so that a linear layer ``R^15 -> R^d`` (the first layer of the model) is exactly
"a learnable linear embedding of ``[1, c, c^2]`` with a different linear map for
each atom type".  Positions are ``pos`` (Angstrom); bonds are dropped (the
paper ignores the bonding structure).

Targets are selected by name and converted to the paper's units (Table 2):
energies in meV, ``mu`` in D, ``alpha`` in bohr^3, ``r2`` in bohr^2, ``Cv`` in
cal/(mol K).  As in Cormorant / LieConv / LieTransformer, ``U0``, ``U``, ``H``,
``G`` are *atomization* energies (PyG targets 12-15); the totals are available as
``U0_total`` etc. (PyG targets 7-10).

Splits: :func:`cormorant_split` (100,000 / 17,748 / 13,083 of PyG's 130,831
molecules from a fixed seed-0 NumPy permutation, the Cormorant recipe) and
:func:`pyg_split` (PyG's examples: seeded shuffle, 10,000 test, 10,000 valid, the
rest train).  On smaller (e.g. offline test) data sets the sizes scale by
``N / 130,831``.

Offline use: :func:`write_synthetic_raw` writes a tiny synthetic set in both raw
formats of PyG's ``QM9.process``: ``raw/qm9_v3.pt`` (read when RDKit is absent: a
list of dicts with ``x, edge_index, edge_attr, y[1, 19], pos, z, name, idx``) and
``raw/gdb9.sdf``, ``raw/gdb9.sdf.csv``, ``raw/uncharacterized.txt`` (read with
RDKit), so the real ``QM9`` class processes it either way.
"""
from __future__ import annotations

import os
from typing import Dict, Tuple, Union

import numpy as np
import torch
from torch import Tensor

__all__ = ["QM9Transform", "TARGETS", "PAPER_MAE", "cormorant_split", "pyg_split", "split_indices",
           "write_synthetic_raw", "QM9_SIZE"]

QM9_SIZE = 130_831  # molecules in PyG's QM9 (Cormorant's count after removing the 3,054 uncharacterized)
_MEV = 1000.0  # PyG energies are in eV

#: name -> (PyG target column, factor from PyG units to the paper's units, unit)
TARGETS: Dict[str, Tuple[int, float, str]] = {
    "mu": (0, 1.0, "D"),
    "alpha": (1, 1.0, "bohr^3"),
    "homo": (2, _MEV, "meV"),
    "lumo": (3, _MEV, "meV"),
    "gap": (4, _MEV, "meV"),
    "r2": (5, 1.0, "bohr^2"),
    "zpve": (6, _MEV, "meV"),
    "U0": (12, _MEV, "meV"),
    "U": (13, _MEV, "meV"),
    "H": (14, _MEV, "meV"),
    "G": (15, _MEV, "meV"),
    "Cv": (11, 1.0, "cal/mol/K"),
    "U0_total": (7, _MEV, "meV"),
    "U_total": (8, _MEV, "meV"),
    "H_total": (9, _MEV, "meV"),
    "G_total": (10, _MEV, "meV"),
    "A": (16, 1.0, "GHz"),
    "B": (17, 1.0, "GHz"),
    "C": (18, 1.0, "GHz"),
}

#: the paper's Table 2 test MAE (LieTransformer-SE3 without augmentation; T3 + SO(3) augmentation)
PAPER_MAE: Dict[str, Dict[str, float]] = {
    "SE3": {"alpha": 0.104, "gap": 52, "homo": 33, "lumo": 29, "mu": 0.061, "Cv": 0.041, "G": 23, "H": 27,
            "r2": 2.29, "U": 26, "U0": 26, "zpve": 3.55},
    "T3+aug": {"homo": 33, "lumo": 27, "gap": 51, "U0": 17},
}

_ATOMIC_NUMBERS = (1, 6, 7, 8, 9)  # H, C, N, O, F


def _target(target: Union[str, int]) -> Tuple[str, int, float, str]:
    if isinstance(target, str):
        key = {k.lower(): k for k in TARGETS}.get(target.lower())
        if key is None:
            raise ValueError(f"unknown QM9 target {target!r}; choose one of {sorted(TARGETS)}")
        col, factor, unit = TARGETS[key]
        return key, col, factor, unit
    if isinstance(target, int) and 0 <= target < 19:
        for k, (col, factor, unit) in TARGETS.items():
            if col == target:
                return k, col, factor, unit
    raise ValueError(f"target must be a name in {sorted(TARGETS)} or a PyG column 0..18, got {target!r}")


class QM9Transform:
    r"""Build the paper's inputs and select one target (a PyG transform).

    Args:
        target: name (``"homo"``, ``"U0"``, ... see :data:`TARGETS`) or PyG column.
        charge_scale: ``c`` is divided by this (9, the largest charge, F).
        charge_power: highest power of the charge (2 gives ``[1, c, c^2]``).
        keep_bonds: keep ``edge_index``/``edge_attr`` (dropped by default).

    Output ``Data``: ``x (N, 5 (charge_power + 1))`` float, ``pos (N, 3)``,
    ``z (N,)``, ``y (1, 1)`` in :attr:`unit`.
    """

    def __init__(self, target: Union[str, int] = "homo", charge_scale: float = 9.0, charge_power: int = 2,
                 keep_bonds: bool = False) -> None:
        self.name, self.column, self.factor, self.unit = _target(target)
        if charge_scale <= 0:
            raise ValueError(f"charge_scale must be > 0, got {charge_scale}")
        if charge_power < 0:
            raise ValueError(f"charge_power must be >= 0, got {charge_power}")
        self.charge_scale, self.charge_power, self.keep_bonds = charge_scale, charge_power, keep_bonds
        table = torch.full((max(_ATOMIC_NUMBERS) + 1,), -1, dtype=torch.long)
        table[list(_ATOMIC_NUMBERS)] = torch.arange(len(_ATOMIC_NUMBERS))
        self._type_of = table

    @property
    def num_features(self) -> int:
        return len(_ATOMIC_NUMBERS) * (self.charge_power + 1)

    def features(self, z: Tensor) -> Tensor:
        """``(N,)`` atomic numbers -> ``(N, 5 (p + 1))`` one-hot-by-type charge powers."""
        if z.numel() and (int(z.min()) < 1 or int(z.max()) > max(_ATOMIC_NUMBERS)
                          or bool((self._type_of[z] < 0).any())):
            raise ValueError(f"atomic numbers must be among {_ATOMIC_NUMBERS} (H, C, N, O, F), got {z.unique().tolist()}")
        t = self._type_of[z]
        c = z.to(torch.float32) / self.charge_scale
        powers = torch.stack([c ** i for i in range(self.charge_power + 1)], dim=-1)  # (N, p+1)
        onehot = torch.nn.functional.one_hot(t, len(_ATOMIC_NUMBERS)).to(torch.float32)  # (N, 5)
        return (onehot.unsqueeze(-1) * powers.unsqueeze(1)).reshape(z.shape[0], -1)

    def __call__(self, data):
        data = data.clone()
        data.x = self.features(data.z)
        data.y = (data.y[:, self.column:self.column + 1] * self.factor).to(torch.float32)
        if not self.keep_bonds:
            for key in ("edge_index", "edge_attr"):
                if key in data:
                    del data[key]
        for key in ("smiles", "name"):
            if key in data:
                del data[key]
        return data

    def __repr__(self) -> str:
        return f"QM9Transform(target={self.name!r}, unit={self.unit!r}, charge_power={self.charge_power})"


def split_indices(n: int, sizes: Tuple[int, int, int], seed: int) -> Dict[str, Tensor]:
    """``train, valid, test`` index tensors from ``np.random.RandomState(seed).permutation(n)``."""
    if sum(sizes) > n:
        raise ValueError(f"split sizes {sizes} exceed the data set size {n}")
    perm = torch.from_numpy(np.random.RandomState(seed).permutation(n))
    a, b, c = sizes
    return {"train": perm[:a], "valid": perm[a:a + b], "test": perm[a + b:a + b + c]}


def cormorant_split(n: int = QM9_SIZE, seed: int = 0) -> Dict[str, Tensor]:
    """Cormorant's split: 100k train, 10% test, the rest valid (130,831 -> 100,000 / 17,748 / 13,083).

    Indices refer to PyG's ``QM9`` order (GDB order without the uncharacterized
    molecules, the same molecule set Cormorant uses).  Smaller ``n`` scale the
    train size by ``n / 130,831``.
    """
    if n < 3:
        raise ValueError(f"need at least 3 molecules to split, got {n}")
    test = int(0.1 * n)
    train = 100_000 if n == QM9_SIZE else max(1, int(round(n * 100_000 / QM9_SIZE)))
    valid = n - train - test
    if valid < 1:
        train, valid = train - 1, 1
    return split_indices(n, (train, valid, test), seed)


def pyg_split(n: int = QM9_SIZE, seed: int = 0) -> Dict[str, Tensor]:
    """PyG's example split: seeded shuffle, 10,000 test, 10,000 valid, the rest train (scaled for small ``n``)."""
    if n < 3:
        raise ValueError(f"need at least 3 molecules to split, got {n}")
    k = 10_000 if n >= 30_000 else max(1, int(round(n * 10_000 / QM9_SIZE)))
    return split_indices(n, (n - 2 * k, k, k), seed)


def write_synthetic_raw(root: str, num_molecules: int = 64, seed: int = 0) -> str:
    """Write a tiny ``root/raw/qm9_v3.pt`` in PyG's pre-processed format and the same molecules as
    PyG's raw SDF / CSV files (for offline tests and demos; PyG reads the latter when RDKit is
    installed).

    Molecules have 3-12 atoms (H, C, N, O, F) at random positions (multiples of 1e-4 Angstrom, so
    that the SDF holds them exactly) bonded in a chain; the 19 targets are smooth functions of
    composition and geometry (plus noise) so that a model can fit them.  Returns the path of
    ``qm9_v3.pt``.
    """
    if num_molecules < 1:
        raise ValueError(f"num_molecules must be >= 1, got {num_molecules}")
    g = torch.Generator().manual_seed(seed)
    zs = torch.tensor(_ATOMIC_NUMBERS)
    mix = torch.randn(5 + 2, 19, generator=g, dtype=torch.float64)
    out = []
    for i in range(num_molecules):
        n = int(torch.randint(3, 13, (1,), generator=g))
        t = torch.randint(0, 5, (n,), generator=g)
        z = zs[t]
        pos = torch.cumsum(torch.randn(n, 3, generator=g, dtype=torch.float64) * 0.9, 0)
        pos = (torch.round((pos - pos.mean(0)) * 1e4) / 1e4).to(torch.float32)
        # bonds: a chain through the atoms, both directions, sorted like PyG
        src = torch.arange(n - 1)
        ei = torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])])
        ei = ei[:, (ei[0] * n + ei[1]).argsort()]
        edge_attr = torch.nn.functional.one_hot(torch.zeros(ei.shape[1], dtype=torch.long), 4).float()
        onehot = torch.nn.functional.one_hot(t, 5).to(torch.float32)
        num_hs = torch.zeros(n)
        x = torch.cat([onehot, torch.stack([z.float(), torch.zeros(n), torch.zeros(n), torch.zeros(n),
                                            torch.zeros(n), num_hs], dim=-1)], dim=-1)
        d = torch.cdist(pos.double(), pos.double())
        desc = torch.cat([onehot.double().sum(0), torch.stack([(1 / (d + torch.eye(n))).triu(1).sum(),
                                                              d.max()])])
        y = (desc @ mix + 0.01 * torch.randn(19, generator=g, dtype=torch.float64)).to(torch.float32)
        out.append({"x": x, "edge_index": ei, "edge_attr": edge_attr, "y": y.unsqueeze(0), "pos": pos,
                    "z": z, "name": f"gdb_{i + 1}", "idx": i})
    raw = os.path.join(root, "raw")
    os.makedirs(raw, exist_ok=True)
    path = os.path.join(raw, "qm9_v3.pt")
    torch.save(out, path)
    _write_sdf_raw(raw, out)
    return path


def _write_sdf_raw(raw: str, molecules) -> None:
    """``gdb9.sdf`` (V2000 mol blocks), ``gdb9.sdf.csv`` (PyG's raw target columns and units) and
    an empty ``uncharacterized.txt``, as PyG's ``QM9.process`` reads them with RDKit."""
    from torch_geometric.datasets.qm9 import conversion

    symbols = {1: "H", 6: "C", 7: "N", 8: "O", 9: "F"}
    blocks, rows = [], []
    for i, m in enumerate(molecules):
        pos, z, ei = m["pos"].double().tolist(), m["z"].tolist(), m["edge_index"]
        bonds = ei[:, ei[0] < ei[1]].t().tolist()
        lines = [m["name"], "     pyg_lie          3D", "",
                 f"{len(z):3d}{len(bonds):3d}  0  0  0  0  0  0  0  0999 V2000"]
        lines += [f"{x:10.4f}{y:10.4f}{w:10.4f} {symbols[a]:<3} 0  0  0  0  0  0  0  0  0  0  0  0"
                  for (x, y, w), a in zip(pos, z)]
        lines += [f"{a + 1:3d}{b + 1:3d}  1  0" for a, b in bonds]
        blocks.append("\n".join(lines + ["M  END", "$$$$"]))
        y = m["y"][0].double() / conversion.double()
        values = torch.cat([y[16:19], y[:16]]).tolist()  # PyG moves the raw A, B, C to the end
        rows.append(",".join([m["name"]] + [repr(v) for v in values]))
    with open(os.path.join(raw, "gdb9.sdf"), "w") as f:
        f.write("\n".join(blocks) + "\n")
    header = "mol_id,A,B,C,mu,alpha,homo,lumo,gap,r2,zpve,u0,u298,h298,g298,cv,u0_atom,u298_atom,h298_atom,g298_atom"
    with open(os.path.join(raw, "gdb9.sdf.csv"), "w") as f:
        f.write("\n".join([header] + rows) + "\n")
    with open(os.path.join(raw, "uncharacterized.txt"), "w") as f:  # PyG skips 9 header and 2 footer lines
        f.write("synthetic QM9: no uncharacterized molecules\n" + "\n" * 8 + "end\n")
