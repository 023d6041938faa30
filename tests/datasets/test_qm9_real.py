"""Real QM9 from qm9pack: layout, units against PyG's constants, known values, corrupt-file rebuild."""
import importlib.util
import os

import pytest
import torch

pytest.importorskip("pandas")
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
    assert len(ds) == N and ds.num_features == 11
    d = ds[0]
    assert set(d.keys()) == {"x", "z", "pos", "y", "charges", "idx", "name"}
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
    # features: one-hot C, atomic number 6, four bonded hydrogens; H atoms bonded to no H
    assert d.x[0].tolist() == [0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 4]
    assert d.x[1].tolist() == [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]


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
    m = json.load(open(meta))
    m["bytes"] = os.path.getsize(path)
    json.dump(m, open(meta, "w"))
    with pytest.warns(RuntimeWarning, match="7 molecules"):
        assert len(QM9(root, max_molecules=30)) == 30
    # missing metadata
    os.remove(meta)
    assert len(QM9(root, max_molecules=30)) == 30  # PyG sees a missing file and processes again


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
