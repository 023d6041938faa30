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
* ``edge_index (2, E)`` the bonds, both directions, sorted by source then target, and
  ``edge_attr (E, 4)`` their types one-hot as PyG's: single, double, triple, aromatic.
  The bonds and bond orders are those of the molecule's SMILES (``qm9pack``'s, parsed and
  sanitized by RDKit, so aromatic rings have aromatic bonds), put on the atoms of the XYZ
  file by matching the SMILES's graph onto the geometry's connectivity (atoms closer than
  1.3 times the sum of their covalent radii; tighter or, for the two molecules whose
  relaxed geometry stretches a bond, looser when the graphs differ). Where a symmetry of the
  graph leaves the orders open (a carboxylate's two C-O bonds), the shorter bond gets the
  higher order;
* ``x (N, 11)`` PyG's atom-feature layout: one-hot ``H C N O F``, atomic
  number, aromatic, sp, sp2, sp3 (RDKit's perception of the SMILES's molecule) and the
  number of bonded hydrogens;
* ``smiles``: RDKit's SMILES of that molecule with its hydrogens (as PyG's ``smiles``);
* ``charges (N,)`` Mulliken charges (e), atom by atom in XYZ order: an extra
  attribute PyG's class does not have (their sum with ``pos`` gives the charge
  dipole, a vector in the coordinates' frame);
* ``idx`` (0-based GDB index, as PyG's ``idx``) and ``name`` (``"gdb_<n>"``).

A user can replace ``torch_geometric.datasets.QM9(root)`` by ``QM9(root)`` and
keep the model (``T.Distance()``, ``NNConv`` on ``edge_attr``, SchNet on ``z, pos``).
Processing needs RDKit (``pip install pyg-lie[qm9]`` installs it) and happens once (with a
progress bar) into ``root/processed``; a file that fails to load, lacks the expected keys
or holds the wrong number of molecules is reported and rebuilt, never loaded silently, and
the old file stays in place until its replacement is written. As in PyG, a set built with
a ``pre_transform`` or ``pre_filter`` is kept when reopened with another one (a warning
says so); pass ``force_reload=True`` to rebuild it.
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
from torch_geometric.data.dataset import _repr

__all__ = ["QM9", "qm9pack_data_dir", "count_molecules", "HAR2EV", "ATOMREF_EV", "TARGET_NAMES", "BOND_TYPES"]

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
_KEYS = {"x", "z", "pos", "y", "charges", "idx", "name", "edge_index", "edge_attr", "smiles"}
_FORMAT = 2  # bump when the stored layout changes
_INSTALL_HINT = "QM9 needs the qm9pack package: pip install pyg-lie[qm9]"
#: PyG's bond-type columns of ``edge_attr``
BOND_TYPES = ("SINGLE", "DOUBLE", "TRIPLE", "AROMATIC")
# connectivity thresholds (times the sum of covalent radii): the graph must equal the SMILES's;
# then looser ones, where the SMILES's graph only has to embed (a bond stretched in the geometry)
_FACTORS = (1.3, 1.2, 1.15, 1.1)
_LOOSE_FACTORS = (1.4, 1.5, 1.6, 1.8)


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


def _rdkit():
    try:
        from rdkit import Chem, RDLogger
    except ImportError as e:
        raise ImportError("QM9's bonds and atom features need RDKit: pip install pyg-lie[qm9]") from e
    RDLogger.DisableLog("rdApp.*")
    return Chem


def _skeleton(Chem, z: np.ndarray, bonded: np.ndarray):
    """A molecule of the atoms ``z`` with a single bond for every ``bonded`` pair, and its bond count."""
    mol = Chem.RWMol()
    for a in z.tolist():
        mol.AddAtom(Chem.Atom(a))
    rows, cols = np.nonzero(np.triu(bonded, 1))
    for a, b in zip(rows.tolist(), cols.tolist()):
        mol.AddBond(a, b, Chem.BondType.SINGLE)
    mol = mol.GetMol()
    mol.UpdatePropertyCache(strict=False)
    return mol, len(rows)


def _orders_ambiguous(Chem, query, bonds) -> bool:
    """Whether a symmetry of the bond graph maps a bond onto one of another order (then the
    geometry decides which is which)."""
    query.UpdatePropertyCache(strict=False)
    rank = list(Chem.CanonicalRankAtoms(query, breakTies=False))
    kinds = {}
    for b in bonds:
        key = tuple(sorted((rank[b.GetBeginAtomIdx()], rank[b.GetEndAtomIdx()])))
        if kinds.setdefault(key, b.GetBondType()) != b.GetBondType():
            return True
    return False


def _bonded_molecule(Chem, smiles: str, z: np.ndarray, pos: np.ndarray, name: str):
    """The RDKit molecule of ``smiles`` (with hydrogens) renumbered to the atoms of the geometry."""
    mol = Chem.MolFromSmiles(smiles)
    if mol is None:
        raise ValueError(f"QM9 {name}: RDKit cannot parse the SMILES {smiles!r}")
    mol = Chem.AddHs(mol)
    n, num_bonds = mol.GetNumAtoms(), mol.GetNumBonds()  # index loops: RDKit's sequences are slow
    if sorted(mol.GetAtomWithIdx(i).GetAtomicNum() for i in range(n)) != sorted(z.tolist()):
        raise ValueError(f"QM9 {name}: the SMILES {smiles!r} has other atoms than the geometry")
    query = Chem.RWMol(mol)  # the bond graph alone: orders, aromaticity and charges left out
    for k in range(num_bonds):
        bond = query.GetBondWithIdx(k)
        bond.SetBondType(Chem.BondType.SINGLE)
        bond.SetIsAromatic(False)
    for i in range(n):
        atom = query.GetAtomWithIdx(i)
        atom.SetFormalCharge(0)
        atom.SetIsAromatic(False)
        atom.SetNoImplicit(True)
    r = _RADIUS[z]
    ratio = np.sqrt(((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1)) / (r[:, None] + r[None, :])
    np.fill_diagonal(ratio, np.inf)
    bonds = [mol.GetBondWithIdx(k) for k in range(num_bonds)]
    pairs = np.array([(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in bonds], dtype=np.int64).reshape(-1, 2)
    orders = np.array([b.GetBondTypeAsDouble() for b in bonds])

    def shortest(matches):  # the embedding whose bonds, weighted by their order, are shortest
        m = np.array(matches)
        return matches[int((orders * ratio[m[:, pairs[:, 0]], m[:, pairs[:, 1]]]).sum(1).argmin())]

    match = ()
    for factor in _FACTORS:
        bonded = ratio < factor
        if int(np.triu(bonded, 1).sum()) == len(bonds):
            skeleton = _skeleton(Chem, z, bonded)[0]
            match = skeleton.GetSubstructMatch(query)
            if match:
                if _orders_ambiguous(Chem, query, bonds):  # e.g. a carboxylate's two C-O bonds
                    match = shortest(skeleton.GetSubstructMatches(query, uniquify=False, maxMatches=100_000))
                break
    if not match:  # the geometry stretches a bond: embed into a looser graph
        for factor in _LOOSE_FACTORS:
            matches = _skeleton(Chem, z, ratio < factor)[0].GetSubstructMatches(query, uniquify=False,
                                                                                maxMatches=100_000)
            if matches:
                match = shortest(matches)
                break
    if not match:
        raise ValueError(f"QM9 {name}: the bonds of the SMILES {smiles!r} do not fit the geometry")
    order = [0] * len(match)
    for atom, target in enumerate(match):
        order[target] = atom
    return Chem.RenumberAtoms(mol, order)


def _bonds_and_features(Chem, mol, x: np.ndarray, name: str):
    """Fill the aromatic / hybridization / hydrogen-count columns of ``x``; return
    ``edge_index (2, E)``, ``edge_attr (E, 4)`` and the SMILES, laid out as PyG's QM9."""
    n = x.shape[0]
    bond_index = {getattr(Chem.BondType, t): i for i, t in enumerate(BOND_TYPES)}
    hybrid = {Chem.HybridizationType.SP: 7, Chem.HybridizationType.SP2: 8, Chem.HybridizationType.SP3: 9}
    for i in range(n):  # index loops: RDKit's atom and bond sequences are slow to iterate
        atom = mol.GetAtomWithIdx(i)
        x[i, 6] = float(atom.GetIsAromatic())
        column = hybrid.get(atom.GetHybridization())
        if column is not None:
            x[i, column] = 1.0
    ends, types = [], []
    for k in range(mol.GetNumBonds()):
        bond = mol.GetBondWithIdx(k)
        kind = bond_index.get(bond.GetBondType())
        if kind is None:
            raise ValueError(f"QM9 {name}: bond type {bond.GetBondType()} is none of {BOND_TYPES}")
        ends.append((bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()))
        types.append(kind)
    ends = np.array(ends, dtype=np.int64).reshape(-1, 2)
    src = np.concatenate([ends[:, 0], ends[:, 1]])
    dst = np.concatenate([ends[:, 1], ends[:, 0]])
    kind = np.concatenate([types, types]).astype(np.int64)
    perm = np.argsort(src * n + dst, kind="stable")
    src, dst, kind = src[perm], dst[perm], kind[perm]
    x[:, 10] = np.bincount(dst, weights=(x[src, 0] == 1.0), minlength=n)  # bonded hydrogens
    edge_attr = np.zeros((kind.size, len(BOND_TYPES)), dtype=np.float32)
    edge_attr[np.arange(kind.size), kind] = 1.0
    return np.stack([src, dst]), edge_attr, Chem.MolToSmiles(mol, isomericSmiles=True)


def _molecule(row, Chem) -> Data:
    z = np.array(_elements(row.Elements), dtype=np.int64)
    n = int(row.N_atoms)
    pos = _floats(row.XYZ_Ang).reshape(-1, 3)
    charges = _floats(row.Mulliken_pop)
    if len(z) != n or pos.shape[0] != n or charges.shape[0] != n:
        raise ValueError(f"qm9pack row {row.XYZ_file}: {n} atoms but {len(z)} elements, {pos.shape[0]} "
                         f"positions, {charges.shape[0]} charges")
    index = int(row.Index)
    name = f"gdb_{index}"
    types = _TYPE_NP[z]
    y = np.empty(19)
    y[:12] = [float(getattr(row, col)) * factor for col, factor in _COLUMNS]
    y[12:16] = y[7:11] - _ATOMREF_NP[:, types].sum(1)
    y[16:19] = [float(getattr(row, c)) for c in _ROT]
    x = np.zeros((n, 11), dtype=np.float32)
    x[np.arange(n), types] = 1.0
    x[:, 5] = z
    mol = _bonded_molecule(Chem, str(row.SMILES), z, pos, name)
    edge_index, edge_attr, smiles = _bonds_and_features(Chem, mol, x, name)
    return Data(x=torch.from_numpy(x), z=torch.from_numpy(z), pos=torch.from_numpy(pos.astype(np.float32)),
                edge_index=torch.from_numpy(edge_index), edge_attr=torch.from_numpy(edge_attr),
                y=torch.from_numpy(y.astype(np.float32)).unsqueeze(0),
                charges=torch.from_numpy(charges.astype(np.float32)), idx=index - 1, name=name, smiles=smiles)


def _read_rows(folder: str, max_molecules: Optional[int]):
    import pandas as pd

    cols = ["XYZ_file", "Index", "SMILES", "N_atoms", "Elements", "XYZ_Ang", "Mulliken_pop", *_ROT,
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
        ImportError: ``qm9pack`` or RDKit is not installed (``pip install pyg-lie[qm9]``)
            and no usable processed file is present.

    Example::

        from pyg_lie.datasets import QM9, QM9Transform
        ds = QM9("data/qm9", transform=QM9Transform("homo"))  # first call: a few minutes
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
        if problem is not None:  # the old file stays until process() replaces it (temp file + rename)
            warnings.warn(f"QM9: processed file {self.processed_paths[0]} is unusable ({problem}); rebuilding it",
                          RuntimeWarning, stacklevel=2)
            try:
                self.process()
            except ImportError as e:
                raise ImportError(f"QM9: processed file {self.processed_paths[0]} is unusable ({problem}) and "
                                  f"cannot be rebuilt ({e}); it is left as it is") from e
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
        Chem = _rdkit()
        total = self.FULL_SIZE if self.max_molecules is None else min(self.max_molecules, self.FULL_SIZE)
        data_list = []
        for row in tqdm(_read_rows(folder, self.max_molecules), total=total, desc="QM9 (qm9pack)",
                        unit="mol", mininterval=1.0):
            data = _molecule(row, Chem)
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
                "pre_transform": _repr(self.pre_transform), "pre_filter": _repr(self.pre_filter)}
        with open(meta_path + ".tmp", "w") as f:
            json.dump(meta, f)
        os.replace(meta_path + ".tmp", meta_path)

    # -- validation ----------------------------------------------------------------------------
    def _expected_count(self, meta: Dict) -> Optional[int]:
        if meta.get("filtered"):
            return None  # a filter decided the count; the metadata's number is checked instead
        return self.FULL_SIZE if self.max_molecules is None else min(self.max_molecules, self.FULL_SIZE)

    def _check_processed(self) -> Optional[str]:
        """``None`` if the processed file is complete, else what is wrong with it (and it is not loaded).

        A file built with another ``pre_transform`` / ``pre_filter`` than the ones passed now is
        kept as built, with a warning (PyG's convention; ``force_reload=True`` rebuilds it)."""
        path, meta_path = self.processed_paths
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            return f"metadata unreadable: {e}"
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
            return f"format {meta.get('format') if isinstance(meta, dict) else meta!r} != {_FORMAT}"
        size = os.path.getsize(path) if osp.exists(path) else -1
        if size != meta.get("bytes"):
            return f"{size} bytes on disk, {meta.get('bytes')} written (truncated or replaced)"
        try:
            self.load(path)
        except Exception as e:  # a damaged zip / pickle raises many kinds of errors
            return f"cannot be loaded: {type(e).__name__}: {e}"
        keys = set(self._data.keys())
        if meta.get("pre_transform") == "None" and keys != _KEYS:
            return f"keys {sorted(keys)} != {sorted(_KEYS)}"
        n = len(self)
        expected = self._expected_count(meta)
        if n != meta.get("num_molecules") or (expected is not None and n != expected):
            return f"{n} molecules, expected {expected if expected is not None else meta.get('num_molecules')}"
        for arg, value in (("pre_transform", self.pre_transform), ("pre_filter", self.pre_filter)):
            if meta.get(arg) != _repr(value):
                warnings.warn(f"QM9: {path} was built with {arg}={meta.get(arg)} and is kept as it is, "
                              f"although {arg}={_repr(value)} was passed now; pass force_reload=True to "
                              "rebuild it", UserWarning, stacklevel=3)
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
