"""`pyg-lie summary --from-results`: the committed Lie-algebra tables rebuild from committed files."""
import json
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = ROOT / "results" / "lie-sequence-tables"


@pytest.mark.parametrize("run", ["token-default", "token", "midpoint"])
def test_committed_table_rebuilds_from_committed_result_files(run, tmp_path, monkeypatch):
    """The command stored in each committed table file runs from a clone (it reads results/, not the
    ignored runs/ folder) and gives the same numbers, model by model."""
    from pyg_lie.cli import main
    committed = json.loads((TABLES / f"{run}.json").read_text())
    argv = shlex.split(committed["command"])
    assert argv[:2] == ["pyg-lie", "summary"] and "--from-results" in argv and "--collect-only" not in argv
    argv = argv[1:]
    for flag, value in (("--results-dir", str(tmp_path / "results")), ("--out", str(tmp_path / "out"))):
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    monkeypatch.chdir(ROOT)  # the stored command is relative to the repository root
    assert main(argv) == 0
    rebuilt = json.loads((tmp_path / "results" / "lie-sequence-tables" / f"{run}.json").read_text())
    assert rebuilt["metrics"] == committed["metrics"] and len(committed["metrics"]) >= 20
    assert rebuilt["paper"] == committed["paper"] and rebuilt["setting"] == committed["setting"]


def test_from_results_matches_options_and_refuses_ambiguity(tmp_path, monkeypatch, capsys):
    from pyg_lie.cli import main
    monkeypatch.chdir(ROOT)
    base = ["summary", "--from-results", "results/lie-sequence", "--groups", "SE2", "--head", "token",
            "--seeds", "0", "1", "2", "--steps", "1000", "--results-dir", str(tmp_path / "r"),
            "--out", str(tmp_path / "o"), "--no-progress"]
    # a budget no committed run has: nothing matches, nothing is trained
    assert main([a if a != "1000" else "999" for a in base]) == 1
    assert "no results with these options" in capsys.readouterr().out
    # the same group and model in two files with the same options is an error naming both
    folder = tmp_path / "dup"
    folder.mkdir()
    src = ROOT / "results" / "lie-sequence" / "SE2-G-token-default.json"
    (folder / "a.json").write_text(src.read_text())
    (folder / "b.json").write_text(src.read_text())
    for where, message in ((folder, "both a.json and b.json hold SE2 model G"),
                           (tmp_path / "missing", "is not a folder of result files")):
        assert main([a if a != "results/lie-sequence" else str(where) for a in base]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("group", ["SE2", "SO3", "Aff2"])
def test_committed_ablation_rebuilds_from_its_own_runs(group, tmp_path, monkeypatch):
    """Each committed ablation file's command trains (no --collect-only from the ignored runs/
    folder), and the same command with --from-results of the file rebuilds its numbers from its
    stored per-seed runs, without training."""
    from pyg_lie.cli import main
    path = ROOT / "results" / "lie-sequence-ablation" / f"{group}.json"
    committed = json.loads(path.read_text())
    argv = shlex.split(committed["command"])
    assert argv[:3] == ["pyg-lie", "train", "lie-sequence-ablation"] and "--collect-only" not in argv
    assert committed["git_dirty"] is False and committed["runs"]
    argv = argv[1:]
    argv[argv.index("--results-dir") + 1] = str(tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    assert main(argv + ["--from-results", str(path), "--out", str(tmp_path / "runs")]) == 0
    rebuilt = json.loads((tmp_path / "results" / "lie-sequence-ablation" / f"{group}.json").read_text())
    assert rebuilt["metrics"] == committed["metrics"] and rebuilt["runs"] == committed["runs"]
