"""Real QM9 from qm9pack: PyG's fields (bonds from RDKit), units against PyG's constants, known values,
corrupt-file rebuild that never loses the old file, PyG's pre_transform convention."""
import importlib.util
import os

import pytest
import torch

pytest.importorskip("pandas")
pytest.importorskip("rdkit")
if importlib.util.find_spec("qm9pack") is None:  # the set-up installs it; CI has it
    pytest.skip("qm9pack not installed (pip install pyg-lie[qm9])", allow_module_level=True)

from pyg_lie.datasets.qm9_real import ATOMREF_EV, HAR2EV, QM9, count_molecules  # noqa: E402

N = 200


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("qm9real"))


@pytest.fixture(scope="module")
def ds(root):
    return QM9(root, max_molecules=N)


def test_full_set_size_without_processing():
    assert count_molecules() == QM9.FULL_SIZE == 130_831


def test_layout_matches_pyg(ds):
    assert len(ds) == N and ds.num_features == 11 and ds.num_edge_features == 4
    d = ds[0]
    assert set(d.keys()) == {"x", "z", "pos", "y", "charges", "idx", "name", "edge_index", "edge_attr", "smiles"}
    assert d.y.shape == (1, 19) and d.y.dtype == torch.float32
    assert d.pos.dtype == torch.float32 and d.z.dtype == torch.long and d.x.shape == (5, 11)
    assert d.charges.shape == (5,) and d.name == "gdb_1" and int(d.idx) == 0
    # idx follows the GDB numbering with the uncharacterised molecules removed (PyG's idx = GDB number - 1)
    idx = torch.tensor([int(ds[i].idx) for i in range(N)])
    assert bool((idx.diff() > 0).all())
    names = [ds[i].name for i in range(N)]
    assert all(n == f"gdb_{int(i) + 1}" for n, i in zip(names, idx))


def test_methane_known_values(ds):
    d = ds[0]
    assert d.z.tolist() == [6, 1, 1, 1, 1]
    torch.testing.assert_close(d.y[0, 2], torch.tensor(-0.3877 * 27.211386246))  # HOMO eV
    torch.testing.assert_close(d.y[0, 3], torch.tensor(0.1171 * 27.211386246))  # LUMO eV
    torch.testing.assert_close(d.y[0, 1], torch.tensor(13.21))  # alpha a0^3
    torch.testing.assert_close(d.y[0, 11], torch.tensor(6.469))  # Cv
    torch.testing.assert_close(d.y[0, 16], torch.tensor(157.7118))  # A GHz
    torch.testing.assert_close(d.charges[0], torch.tensor(-0.535689))
    torch.testing.assert_close(d.pos[0], torch.tensor([-0.0126981359, 1.0858041578, 0.0080009958]))
    # PyG's processed methane: U0 atomization -17.1722 eV (from the csv's kcal/mol times KCALMOL2EV)
    torch.testing.assert_close(d.y[0, 12], torch.tensor(-17.1722), atol=2e-3, rtol=0)
    # features: one-hot C, atomic number 6, sp3, four bonded hydrogens; H atoms bonded to no H
    assert d.x[0].tolist() == [0, 1, 0, 0, 0, 6, 0, 0, 0, 1, 4]
    assert d.x[1].tolist() == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    # four C-H single bonds, both directions, sorted by source then target
    assert d.edge_index.tolist() == [[0, 0, 0, 0, 1, 2, 3, 4], [1, 2, 3, 4, 0, 0, 0, 0]]
    assert d.edge_attr.tolist() == [[1, 0, 0, 0]] * 8 and d.smiles == "[H]C([H])([H])[H]"


def _pyg_qm9(tmp_path):
    """PyG's own QM9 class on a synthetic raw set (processed with RDKit, as PyG does)."""
    from torch_geometric.datasets import QM9 as PyGQM9

    from pyg_lie.datasets.qm9 import write_synthetic_raw
    write_synthetic_raw(str(tmp_path / "pyg"), 5, seed=0)
    return PyGQM9(str(tmp_path / "pyg"))


def test_fields_and_dtypes_equal_pygs(ds, tmp_path):
    theirs, ours = _pyg_qm9(tmp_path)[0], ds[7]
    assert set(ours.keys()) == set(theirs.keys()) | {"charges"}
    for key in theirs.keys():
        a, b = theirs[key], ours[key]
        assert type(a) is type(b), key
        if isinstance(a, torch.Tensor):  # same dtype, same sizes but along the node / edge dimension
            fixed = (lambda t: t.shape[:-1]) if key == "edge_index" else (lambda t: t.shape[1:])
            assert a.dtype == b.dtype and a.dim() == b.dim() and fixed(a) == fixed(b), (key, a.shape, b.shape)
    assert ours.num_nodes == ours.z.numel() == ours.pos.size(0) == ours.x.size(0)
    # the data set's collated storage too (what a DataLoader batches)
    batch = next(iter(__import__("torch_geometric.loader", fromlist=["DataLoader"]).DataLoader(ds, batch_size=3)))
    assert batch.edge_index.max() < batch.num_nodes and len(batch.smiles) == 3 and batch.idx.dtype == torch.long


def test_pyg_code_runs_unchanged(ds):
    import torch_geometric.transforms as T
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import NNConv, global_add_pool
    d = T.Distance()(ds[12].clone())
    i, j = ds[12].edge_index
    dist = (ds[12].pos[i] - ds[12].pos[j]).norm(dim=-1)
    assert torch.equal(d.edge_attr[:, :4], ds[12].edge_attr)  # the bond types, then the scaled length
    torch.testing.assert_close(d.edge_attr[:, 4], dist / dist.max())
    torch.manual_seed(0)
    conv = NNConv(11, 8, torch.nn.Sequential(torch.nn.Linear(5, 11 * 8)), aggr="mean")
    batch = next(iter(DataLoader(QM9(ds.root, transform=T.Distance(), max_molecules=N), batch_size=16)))
    out = global_add_pool(conv(batch.x, batch.edge_index, batch.edge_attr), batch.batch)
    assert out.shape == (16, 8) and bool(torch.isfinite(out).all())


_VALENCE = {1: 1, 6: 4, 7: 3, 8: 2, 9: 1}


def test_bonds_are_symmetric_and_chemically_right(ds):
    from pyg_lie.datasets.qm9_real import _COVALENT_RADIUS
    checked = 0
    for k in range(N):
        d = ds[k]
        n, (i, j) = d.num_nodes, d.edge_index
        assert bool((i != j).all()) and bool(((i * n + j).diff() > 0).all())  # sorted, no loops, no repeats
        pairs = {(a, b): t for a, b, t in zip(i.tolist(), j.tolist(), d.edge_attr.argmax(1).tolist())}
        assert all(pairs.get((b, a)) == t for (a, b), t in pairs.items()), d.name  # symmetric, same type
        assert bool((d.edge_attr.sum(1) == 1).all())
        radius = torch.tensor([_COVALENT_RADIUS[int(a)] for a in d.z])
        assert bool(((d.pos[i] - d.pos[j]).norm(dim=-1) < 1.3 * (radius[i] + radius[j])).all()), d.name
        hs = torch.zeros(n).index_add_(0, j, (d.z[i] == 1).float())
        assert torch.equal(d.x[:, 10], hs)  # PyG's num_hs: bonded hydrogens
        aromatic = d.edge_attr[:, 3] > 0
        assert torch.equal(d.x[:, 6] > 0, torch.zeros(n, dtype=torch.bool).index_fill_(0, i[aromatic], True))
        if not bool(aromatic.any()) and "+" not in d.smiles and "-" not in d.smiles:
            order = torch.zeros(n).index_add_(0, j, (d.edge_attr[:, :3].argmax(1) + 1).float())
            assert order.tolist() == [_VALENCE[int(a)] for a in d.z], (d.name, d.smiles)
            checked += 1
    assert checked > 100


def test_known_molecules(ds):
    acetylene, pyrrole = ds[3], ds[49]
    assert acetylene.name == "gdb_4" and acetylene.z.tolist() == [6, 6, 1, 1]
    assert acetylene.edge_attr.sum(0).tolist() == [4, 0, 2, 0]  # two C-H, one C#C (both directions)
    assert acetylene.x[:2, 7].tolist() == [1, 1]  # sp carbons
    assert pyrrole.name == "gdb_50" and pyrrole.edge_attr.sum(0).tolist() == [10, 0, 0, 10]
    ring = pyrrole.z > 1
    assert bool((pyrrole.x[ring, 6] == 1).all()) and bool((pyrrole.x[ring, 8] == 1).all())  # aromatic, sp2
    assert pyrrole.x[pyrrole.z == 7, 10].tolist() == [1]  # the N-H


def test_symmetric_bonds_take_their_orders_from_the_geometry():
    """gdb_1670 (CC(C[NH3+])C([O-])=O): the graph cannot tell the carboxylate's oxygens apart; its
    double bond goes to the shorter C-O bond (the first match of the graph alone puts it on the longer)."""
    from pyg_lie.datasets.qm9_real import _molecule, _rdkit, _read_rows, qm9pack_data_dir
    row = next(r for r in _read_rows(qm9pack_data_dir(), 1700) if int(r.Index) == 1670)
    d = _molecule(row, _rdkit())
    i, j = d.edge_index
    co = (d.z[i] == 6) & (d.z[j] == 8)
    length, kind = (d.pos[i] - d.pos[j]).norm(dim=-1)[co], d.edge_attr[co].argmax(1)
    assert sorted(kind.tolist()) == [0, 1] and bool(length[kind == 1] < length[kind == 0] - 0.01)


def test_a_stretched_bond_is_still_found():
    """A geometry whose bond is longer than the connectivity threshold (as in two QM9 molecules): the
    SMILES's bonds embed into a looser graph, with the shortest bonds."""
    import numpy as np

    from pyg_lie.datasets.qm9_real import _bonded_molecule, _rdkit
    Chem = _rdkit()
    z = np.array([1, 6, 1, 1, 6, 1, 1, 1])
    c = np.array([[0.0, 0, 0], [2.25, 0, 0]])  # C-C at 2.25 A (1.48 x the covalent sum)
    h = np.array([[-0.4, 0.9, 0.3], [-0.4, -0.9, 0.3], [-0.4, 0, -1.0]])  # C-H about 1.0 A
    pos = np.concatenate([h[:1], c[:1], h[1:], c[1:], c[1] - h])
    mol = _bonded_molecule(Chem, "CC", z, pos, "test")
    bonds = sorted(tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in mol.GetBonds())
    assert bonds == [(0, 1), (1, 2), (1, 3), (1, 4), (4, 5), (4, 6), (4, 7)]
    with pytest.raises(ValueError, match="other atoms"):
        _bonded_molecule(Chem, "CO", z, pos, "test")


def test_conversions_match_pyg_constants(ds):
    from torch_geometric.datasets import qm9 as pyg_qm9
    assert HAR2EV == pyg_qm9.HAR2EV
    # Hartree columns of PyG (2, 3, 4, 6, 7-10) carry HAR2EV; the rest factor 1 (12-15 are derived below)
    conv = pyg_qm9.conversion
    assert [i for i in range(12) if conv[i] != 1] == [2, 3, 4, 6, 7, 8, 9, 10]
    for t in range(7, 11):
        torch.testing.assert_close(ATOMREF_EV[t - 7].float(), torch.tensor(pyg_qm9.atomrefs[t]))
        torch.testing.assert_close(ds.atomref(t), pyg_qm9.QM9.atomref(None, t))
    assert ds.atomref(2) is None
    y = ds._data.y.double()
    torch.testing.assert_close(y[:, 4], y[:, 3] - y[:, 2], atol=1.05e-4 * HAR2EV, rtol=0)  # gap = LUMO - HOMO (Ha to 4 digits)
    # atomization = total - sum of the atom references, for every molecule and all four energies
    types = {1: 0, 6: 1, 7: 2, 8: 3, 9: 4}
    for i in range(0, N, 37):
        d = ds[i]
        ref = ATOMREF_EV[:, [types[int(a)] for a in d.z]].sum(1)
        torch.testing.assert_close(d.y[0, 12:16].double(), d.y[0, 7:11].double() - ref, atol=1e-3, rtol=0)
        # the Mulliken charges of a neutral molecule sum to ~0
        assert abs(float(d.charges.sum())) < 1e-3


def test_transform_and_loader(root):
    from torch_geometric.loader import DataLoader
    from pyg_lie.datasets.qm9 import QM9Transform
    ds = QM9(root, transform=QM9Transform("homo"), max_molecules=N)
    d = ds[0]
    assert d.x.shape == (5, 15)
    torch.testing.assert_close(d.y, torch.tensor([[-0.3877 * 27.211386246 * 1000]]))  # meV
    batch = next(iter(DataLoader(QM9(root, max_molecules=N), batch_size=4)))
    assert batch.charges.shape == batch.z.shape and batch.y.shape == (4, 19)


def test_corrupt_processed_file_is_rebuilt(tmp_path):
    root = str(tmp_path / "q")
    ds = QM9(root, max_molecules=30)
    path = ds.processed_paths[0]
    assert "first30" in os.path.basename(path)
    reference = ds._data.y.clone()
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # truncate
        f.truncate(size // 2)
    with pytest.warns(RuntimeWarning, match="unusable"):
        ds2 = QM9(root, max_molecules=30)
    assert len(ds2) == 30 and torch.equal(ds2._data.y, reference)
    assert os.path.getsize(path) == size
    # same size, garbage bytes
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"\0" * 64)
    with pytest.warns(RuntimeWarning, match="cannot be loaded"):
        assert len(QM9(root, max_molecules=30)) == 30
    # a valid file with the wrong molecule count (e.g. a partial build renamed into place)
    small = QM9(str(tmp_path / "small"), max_molecules=7)
    os.replace(small.processed_paths[0], path)
    meta = path[:-3] + ".json"
    import json
    with open(meta) as f:
        m = json.load(f)
    m["bytes"] = os.path.getsize(path)
    with open(meta, "w") as f:
        json.dump(m, f)
    with pytest.warns(RuntimeWarning, match="7 molecules"):
        assert len(QM9(root, max_molecules=30)) == 30
    # missing metadata
    os.remove(meta)
    assert len(QM9(root, max_molecules=30)) == 30  # PyG sees a missing file and processes again


def _block_qm9pack(monkeypatch):
    from pyg_lie.datasets import qm9_real
    real = importlib.util.find_spec
    monkeypatch.setattr(qm9_real.importlib.util, "find_spec",
                        lambda name, *a: None if name == "qm9pack" else real(name, *a))


def test_damaged_sidecar_never_costs_the_data(tmp_path, monkeypatch):
    root = str(tmp_path / "q")
    ds = QM9(root, max_molecules=12)
    path, meta = ds.processed_paths
    with open(path, "rb") as f:
        data = f.read()
    with open(meta, "w") as f:
        f.write("{not json")
    _block_qm9pack(monkeypatch)  # no way to rebuild: the error says so and both files stay
    with pytest.warns(RuntimeWarning, match="unusable"), pytest.raises(ImportError, match="left as it is"):
        QM9(root, max_molecules=12)
    with open(path, "rb") as f:
        assert f.read() == data
    monkeypatch.undo()
    # while the rebuild runs the old file is still in place; it is replaced only when the new one exists
    from pyg_lie.datasets import qm9_real
    seen = []
    real_save = qm9_real.QM9.save

    def save(data_list, target):
        seen.append((target, os.path.isfile(path)))
        real_save(data_list, target)

    monkeypatch.setattr(qm9_real.QM9, "save", staticmethod(save))
    with pytest.warns(RuntimeWarning, match="metadata unreadable"):
        again = QM9(root, max_molecules=12)
    assert seen == [(path + ".tmp", True)] and len(again) == 12 and not os.path.exists(path + ".tmp")


class _AddFlag:
    def __call__(self, data):
        data.flag = torch.ones(1)
        return data


def test_pre_transform_set_is_kept_when_reopened_without_it(tmp_path):
    root = str(tmp_path / "q")
    built = QM9(root, pre_transform=_AddFlag(), max_molecules=6)
    mtime = os.path.getmtime(built.processed_paths[0])
    assert "flag" in built[0]
    with pytest.warns(UserWarning, match="pre_transform=.*kept as it is.*force_reload=True"):
        kept = QM9(root, max_molecules=6)
    assert "flag" in kept[0] and len(kept) == 6 and os.path.getmtime(built.processed_paths[0]) == mtime
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no rebuild warning with the same pre_transform
        assert "flag" in QM9(root, pre_transform=_AddFlag(), max_molecules=6)[0]
    fresh = QM9(root, max_molecules=6, force_reload=True)
    assert "flag" not in fresh[0] and len(fresh) == 6


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="max_molecules"):
        QM9(str(tmp_path), max_molecules=0)
    with pytest.raises(ValueError, match="max_molecules"):
        QM9(str(tmp_path), max_molecules=2.5)


def test_missing_qm9pack_names_the_extra(tmp_path, monkeypatch):
    from pyg_lie.datasets import qm9_real
    real = importlib.util.find_spec
    monkeypatch.setattr(qm9_real.importlib.util, "find_spec",
                        lambda name, *a: None if name == "qm9pack" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install pyg-lie\[qm9\]"):
        QM9(str(tmp_path / "none"), max_molecules=5)
    monkeypatch.undo()
    QM9(str(tmp_path / "built"), max_molecules=5)
    monkeypatch.setattr(qm9_real.importlib.util, "find_spec",
                        lambda name, *a: None if name == "qm9pack" else real(name, *a))
    assert len(QM9(str(tmp_path / "built"), max_molecules=5)) == 5  # a processed set needs no qm9pack


def test_exported_from_package():
    import pyg_lie.datasets as d
    assert d.QM9 is QM9
