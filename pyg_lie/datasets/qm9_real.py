r"""Real QM9, built offline from the ``qm9pack`` package, laid out like :class:`torch_geometric.datasets.QM9`.

``qm9pack`` (``pip install pyg-lie[qm9]``) ships the 130,831 molecules of PyG's
QM9 (GDB-9 without the 3,054 molecules that failed the consistency check) as
CSV files: coordinates in Angstrom, elements, Mulliken charges and the
standard targets in Hartree atomic units.  :class:`QM9` reads those files (it
locates the package's data folder and never imports the package, whose
``__init__`` needs the removed ``pkg_resources``) and stores one
:class:`~torch_geometric.data.Data` per molecule:

* ``z (N,)`` atomic numbers, ``pos (N, 3)`` Angstrom, in the order of the XYZ file;
* ``y (1, 19)`` in PyG's target order and units (see :data:`TARGET_NAMES`):
  Hartree energies times :data:`HAR2EV`; the atomization energies (12-15) are the
  totals minus the per-atom reference energies PyG uses (:data:`ATOMREF_EV`);
* ``x (N, 11)`` PyG's atom-feature layout: one-hot ``H C N O F``, atomic
  number, aromatic, sp, sp2, sp3, number of bonded hydrogens.  Aromaticity and
  hybridization need rdkit's chemical perception and are **zero** here (PyG's
  own processing reads the SDF with ``sanitize=False``, which leaves many of
  them unspecified too); ``num_hs`` counts the hydrogens within bonding
  distance (1.3 times the sum of covalent radii).  Bonds (``edge_index``,
  ``edge_attr``) are not stored: the QM9 models here and PyG's SchNet /
  DimeNet build their graphs from ``pos``;
* ``charges (N,)`` Mulliken charges (e), atom by atom in XYZ order: an extra
  attribute PyG's class does not have (their sum with ``pos`` gives the charge
  dipole, a vector in the coordinates' frame);
* ``idx`` (0-based GDB index, as PyG's ``idx``) and ``name`` (``"gdb_<n>"``).

A user can replace ``torch_geometric.datasets.QM9(root)`` by ``QM9(root)`` and
keep the model.  Processing happens once (with a progress bar) into
``root/processed``; a file that fails to load, lacks the expected keys or holds
the wrong number of molecules is reported and rebuilt, never loaded silently.
"""
from __future__ import annotations

import importlib.util
import json
import os
import os.path as osp
import warnings
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

__all__ = ["QM9", "qm9pack_data_dir", "count_molecules", "HAR2EV", "ATOMREF_EV", "TARGET_NAMES"]

HAR2EV = 27.211386246  # Hartree -> eV (the constant PyG's QM9 uses)
#: per-atom reference energies in eV for H, C, N, O, F; rows U0, U, H, G (PyG's ``atomrefs[7..10]``)
ATOMREF_EV = torch.tensor([
    [-13.61312172, -1029.86312267, -1485.30251237, -2042.61123593, -2713.48485589],
    [-13.5745904, -1029.82456413, -1485.26398105, -2042.5727046, -2713.44632457],
    [-13.54887564, -1029.79887659, -1485.2382935, -2042.54701705, -2713.42063702],
    [-13.90303183, -1030.25891228, -1485.71166277, -2043.01812778, -2713.88796536],
], dtype=torch.float64)
#: PyG's 19 target columns (name, unit)
TARGET_NAMES = [("mu", "D"), ("alpha", "a0^3"), ("homo", "eV"), ("lumo", "eV"), ("gap", "eV"), ("r2", "a0^2"),
                ("zpve", "eV"), ("U0", "eV"), ("U", "eV"), ("H", "eV"), ("G", "eV"), ("Cv", "cal/mol/K"),
                ("U0_atom", "eV"), ("U_atom", "eV"), ("H_atom", "eV"), ("G_atom", "eV"),
                ("A", "GHz"), ("B", "GHz"), ("C", "GHz")]
# qm9pack column and factor for PyG columns 0-11 and 16-18
_COLUMNS = [("Dipole_debye", 1.0), ("Polarizability_bohr3", 1.0), ("HOMO_au", HAR2EV), ("LUMO_au", HAR2EV),
            ("HOMO_LUMO_gap_au", HAR2EV), ("R2_bohr2", 1.0), ("ZPVE_au", HAR2EV),
            ("InternalEnergy_0K_au", HAR2EV), ("InternalEnergy_298K_au", HAR2EV), ("Enthalphy_298K_au", HAR2EV),
            ("GibbsFreeEnergy_298K_au", HAR2EV), ("Heatcapacity_Cv_cal_mol_K", 1.0)]
_ROT = ["RotA_GHz", "RotB_GHz", "RotC_GHz"]
_PARTS = ("qm9_part1.csv", "qm9_part2.csv", "qm9_part3.csv")
_SYMBOLS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}
_TYPE = {1: 0, 6: 1, 7: 2, 8: 3, 9: 4}
_COVALENT_RADIUS = {1: 0.31, 6: 0.76, 7: 0.71, 8: 0.66, 9: 0.57}  # Angstrom (Cordero et al. 2008)
_RADIUS = np.zeros(10)
for _z, _r in _COVALENT_RADIUS.items():
    _RADIUS[_z] = _r
_ATOMREF_NP = ATOMREF_EV.numpy()
_TYPE_NP = np.full(10, -1)
for _z, _t in _TYPE.items():
    _TYPE_NP[_z] = _t
_KEYS = {"x", "z", "pos", "y", "charges", "idx", "name"}
_FORMAT = 1  # bump when the stored layout changes
_INSTALL_HINT = "QM9 needs the qm9pack package: pip install pyg-lie[qm9]"


def qm9pack_data_dir() -> str:
    """The folder holding ``qm9pack``'s CSV files (``ImportError`` naming the install command if absent)."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(_INSTALL_HINT)
    folder = osp.join(list(spec.submodule_search_locations)[0], "data")
    missing = [p for p in _PARTS if not osp.isfile(osp.join(folder, p))]
    if missing:
        raise ImportError(f"qm9pack is installed but lacks {missing} in {folder}; reinstall it: "
                          "pip install --force-reinstall pyg-lie[qm9]")
    return folder


def count_molecules(data_dir: Optional[str] = None) -> int:
    """Number of molecules in ``qm9pack`` (counts CSV rows; no parsing)."""
    folder = data_dir or qm9pack_data_dir()
    n = 0
    for part in _PARTS:
        with open(osp.join(folder, part), "rb") as f:
            n += sum(1 for _ in f) - 1
    return n


def _floats(text: str) -> np.ndarray:
    s = text.replace("[", " ").replace("]", " ").strip()
    return np.array(s.split(","), dtype=np.float64) if s else np.zeros(0)


def _elements(text: str) -> List[int]:
    return [_SYMBOLS[s.strip().strip("'\"")] for s in text.strip("[]").split(",")]


def _num_hs(z: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Hydrogens within 1.3 x (sum of covalent radii) of each atom."""
    r = _RADIUS[z]
    d = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1))
    bonded = d < 1.3 * (r[:, None] + r[None, :])
    np.fill_diagonal(bonded, False)
    return (bonded & (z == 1)[None, :]).sum(1)


def _molecule(row) -> Data:
    z = np.array(_elements(row.Elements), dtype=np.int64)
    n = int(row.N_atoms)
    pos = _floats(row.XYZ_Ang).reshape(-1, 3)
    charges = _floats(row.Mulliken_pop)
    if len(z) != n or pos.shape[0] != n or charges.shape[0] != n:
        raise ValueError(f"qm9pack row {row.XYZ_file}: {n} atoms but {len(z)} elements, {pos.shape[0]} "
                         f"positions, {charges.shape[0]} charges")
    types = _TYPE_NP[z]
    y = np.empty(19)
    y[:12] = [float(getattr(row, col)) * factor for col, factor in _COLUMNS]
    y[12:16] = y[7:11] - _ATOMREF_NP[:, types].sum(1)
    y[16:19] = [float(getattr(row, c)) for c in _ROT]
    x = np.zeros((n, 11), dtype=np.float32)
    x[np.arange(n), types] = 1.0
    x[:, 5] = z
    x[:, 10] = _num_hs(z, pos)
    index = int(row.Index)
    return Data(x=torch.from_numpy(x), z=torch.from_numpy(z), pos=torch.from_numpy(pos.astype(np.float32)),
                y=torch.from_numpy(y.astype(np.float32)).unsqueeze(0),
                charges=torch.from_numpy(charges.astype(np.float32)), idx=index - 1, name=f"gdb_{index}")


def _read_rows(folder: str, max_molecules: Optional[int]):
    import pandas as pd

    cols = ["XYZ_file", "Index", "N_atoms", "Elements", "XYZ_Ang", "Mulliken_pop", *_ROT,
            *[c for c, _ in _COLUMNS]]
    left = max_molecules
    for part in _PARTS:
        if left is not None and left <= 0:
            break
        df = pd.read_csv(osp.join(folder, part), usecols=cols, nrows=left)
        if left is not None:
            left -= len(df)
        yield from df.itertuples(index=False)


class QM9(InMemoryDataset):
    r"""QM9 from the installed ``qm9pack`` CSVs, in :class:`torch_geometric.datasets.QM9`'s layout.

    Args:
        root: folder; the processed file goes to ``root/processed``.
        transform, pre_transform, pre_filter: as in every PyG data set.
        max_molecules: keep only the first ``N`` molecules (GDB order; tests and
            smoke runs).  Part of the processed file's name.
        force_reload: rebuild the processed file.

    Raises:
        ImportError: ``qm9pack`` is not installed (``pip install pyg-lie[qm9]``)
            and no processed file is present.

    Example::

        from pyg_lie.datasets import QM9, QM9Transform
        ds = QM9("data/qm9", transform=QM9Transform("homo"))  # first call: about a minute
    """

    #: molecules in the full set
    FULL_SIZE = 130_831

    def __init__(self, root: str, transform: Optional[Callable] = None, pre_transform: Optional[Callable] = None,
                 pre_filter: Optional[Callable] = None, max_molecules: Optional[int] = None,
                 force_reload: bool = False) -> None:
        if max_molecules is not None and (isinstance(max_molecules, bool) or not isinstance(max_molecules, int)
                                          or max_molecules < 1):
            raise ValueError(f"max_molecules must be a positive int or None, got {max_molecules!r}")
        if not isinstance(root, (str, os.PathLike)):
            raise TypeError(f"root must be a path (str), got {type(root).__name__}")
        self.max_molecules = max_molecules
        super().__init__(str(root), transform, pre_transform, pre_filter, force_reload=force_reload)
        problem = self._check_processed()
        if problem is not None:
            warnings.warn(f"QM9: processed file {self.processed_paths[0]} is unusable ({problem}); rebuilding it",
                          RuntimeWarning, stacklevel=2)
            for p in self.processed_paths:
                if osp.exists(p):
                    os.remove(p)
            self.process()
            problem = self._check_processed()
            if problem is not None:  # pragma: no cover - a fresh build is always valid
                raise RuntimeError(f"QM9: rebuilt processed file is unusable: {problem}")

    # -- PyG's Dataset hooks -------------------------------------------------------------------
    @property
    def raw_dir(self) -> str:
        spec = importlib.util.find_spec("qm9pack")
        if spec is not None and spec.submodule_search_locations:
            return osp.join(list(spec.submodule_search_locations)[0], "data")
        return osp.join(self.root, "raw")

    @property
    def raw_file_names(self) -> List[str]:
        return list(_PARTS)

    @property
    def processed_file_names(self) -> List[str]:
        tag = "all" if self.max_molecules is None else f"first{self.max_molecules}"
        return [f"qm9pack_{tag}_v{_FORMAT}.pt", f"qm9pack_{tag}_v{_FORMAT}.json"]

    def download(self) -> None:
        if all(osp.isfile(p) for p in self.processed_paths) and not self.force_reload:
            return  # processed already; the CSVs are not needed
        qm9pack_data_dir()  # raises the ImportError with the install command

    def process(self) -> None:
        from tqdm import tqdm

        folder = qm9pack_data_dir()
        total = self.FULL_SIZE if self.max_molecules is None else min(self.max_molecules, self.FULL_SIZE)
        data_list = []
        for row in tqdm(_read_rows(folder, self.max_molecules), total=total, desc="QM9 (qm9pack)",
                        unit="mol", mininterval=1.0):
            data = _molecule(row)
            if self.pre_filter is not None and not self.pre_filter(data):
                continue
            if self.pre_transform is not None:
                data = self.pre_transform(data)
            data_list.append(data)
        path, meta_path = self.processed_paths
        os.makedirs(self.processed_dir, exist_ok=True)
        tmp = path + ".tmp"
        self.save(data_list, tmp)
        os.replace(tmp, path)
        meta = {"format": _FORMAT, "num_molecules": len(data_list), "bytes": os.path.getsize(path),
                "max_molecules": self.max_molecules, "filtered": self.pre_filter is not None,
                "pre_transform": repr(self.pre_transform)}
        with open(meta_path + ".tmp", "w") as f:
            json.dump(meta, f)
        os.replace(meta_path + ".tmp", meta_path)

    # -- validation ----------------------------------------------------------------------------
    def _expected_count(self, meta: Dict) -> Optional[int]:
        if self.pre_filter is not None or meta.get("filtered"):
            return None  # a filter decides the count; the metadata's number is checked instead
        return self.FULL_SIZE if self.max_molecules is None else min(self.max_molecules, self.FULL_SIZE)

    def _check_processed(self) -> Optional[str]:
        """``None`` if the processed file is complete, else what is wrong with it (and it is not loaded)."""
        path, meta_path = self.processed_paths
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            return f"metadata unreadable: {e}"
        if meta.get("format") != _FORMAT:
            return f"format {meta.get('format')} != {_FORMAT}"
        size = os.path.getsize(path) if osp.exists(path) else -1
        if size != meta.get("bytes"):
            return f"{size} bytes on disk, {meta.get('bytes')} written (truncated or replaced)"
        try:
            self.load(path)
        except Exception as e:  # a damaged zip / pickle raises many kinds of errors
            return f"cannot be loaded: {type(e).__name__}: {e}"
        keys = set(self._data.keys())
        if self.pre_transform is None and keys != _KEYS:
            return f"keys {sorted(keys)} != {sorted(_KEYS)}"
        n = len(self)
        expected = self._expected_count(meta)
        if n != meta.get("num_molecules") or (expected is not None and n != expected):
            return f"{n} molecules, expected {expected if expected is not None else meta.get('num_molecules')}"
        return None

    def atomref(self, target: int) -> Optional[torch.Tensor]:
        """Per-element reference energies ``(100, 1)`` in eV for targets 7-10 (as PyG's ``QM9.atomref``)."""
        if 7 <= target <= 10:
            out = torch.zeros(100)
            out[torch.tensor([1, 6, 7, 8, 9])] = ATOMREF_EV[target - 7].to(torch.float32)
            return out.view(-1, 1)
        return None

    def __repr__(self) -> str:
        return f"QM9({len(self)})"
