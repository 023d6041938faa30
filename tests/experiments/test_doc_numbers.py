"""Every number in the experiment pages is in a committed result file or a generated table,
or in the allow-list below with its reason (see ``doc_numbers.py`` for what counts as a number
and when it is backed)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_numbers import PAGES, ROOT, Sources, numbers_in, unbacked  # noqa: E402

#: (page, number as written, reason); page "*" for every page
ALLOWED = [
    ("*", "2021", "the year of a cited paper"),
    ("s2_attention.md", "2025", "the year of a cited paper"),
    ("lie_algebra_attention.md", "2606.20547", "the arXiv identifier of the paper"),
    ("lie_algebra_attention.md", "1164", "score parameters of model C on SO(2), no run: computed by the code, "
     "tests/nn/test_lie_algebra_attention.py::test_score_parameter_counts_match_paper"),
    ("lie_algebra_attention.md", "5388", "score parameters of model C on Aff(3), no run: "
     "test_score_parameter_counts_of_groups_without_runs below"),
    ("lie_algebra_attention.md", "4096", "a threshold of log_knn_graph(method='auto') in the code"),
    ("lie_algebra_attention.md", "10000", "the default of the benchmark's --max-brute option"),
    ("lie_transformer.md", "120", "the official constellation generator's orientation range (+-59 degrees), a "
     "property of the data set"),
    ("springs_qm9_ddp.md", "139k", "the paper's small-model parameter count, quoted from its Appendix I.3"),
    ("springs_qm9_ddp.md", "842k", "the paper's model's parameter count, quoted from its Appendix I.3"),
    ("springs_qm9_ddp.md", "22k", "the paper's epoch rule 400 sqrt(3000 / n) at n = 10^4 times 100 batches, "
     "arithmetic on the paper's setting"),
    ("springs_qm9_ddp.md", "12000", "the paper's epoch rule at n = 3000 (400 epochs) times 30 batches"),
    ("springs_qm9_ddp.md", "17,748", "the size of Cormorant's QM9 validation split"),
    ("vit.md", "4.3", "a section number of the paper"),
    ("s2_attention.md", "1e-7", "float32 rounding level of the message-passing path, asserted by "
     "tests/nn/test_s2_attention.py"),
    ("s2_attention.md", "1e-12", "the float64 tolerance of tests/nn/test_s2_attention.py's rotation test"),
    ("qm9.md", "1000", "the default of pyg-lie train qm9's --sensitivity-molecules (an option's default)"),
    ("qm9.md", "130,831", "the number of molecules PyG's QM9 holds, a property of the data set"),
    ("qm9.md", "17,748", "the size of Cormorant's QM9 validation split"),
    ("qm9.md", "5.2", "a section number of the paper"),
    ("qm9.md", "27.211386246", "PyG's Hartree-to-eV constant"),
]


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_number_of_an_experiment_page_is_backed(page):
    text = (ROOT / "docs" / page).read_text()
    missing = unbacked(page, text, Sources.committed(page), ALLOWED)
    assert not missing, ("numbers with neither a committed result file nor a generated table nor an "
                         "allow-list entry behind them:\n  " + "\n  ".join(missing))


def test_allow_list_entries_are_used_and_explained():
    """No stale entries: each one names a number its page still has, with a reason."""
    pages = sorted(PAGES)
    written = {p: {n.text for n in numbers_in((ROOT / "docs" / p).read_text())} for p in pages}
    for page, number, reason in ALLOWED:
        assert len(reason) > 15, (page, number)
        where = pages if page == "*" else [page]
        assert any(number in written[p] for p in where), f"{page}: {number} is no longer written there"


def test_the_check_flags_made_up_and_altered_numbers():
    page = "lie_transformer.md"
    sources = Sources.committed(page)
    text = (ROOT / "docs" / page).read_text()
    assert not unbacked(page, text, sources, ALLOWED)
    made_up = text + "\nThe model reaches 3.14159e-5 after 1234 steps, and 0.8312 on D_test.\n"
    assert unbacked(page, made_up, sources, ALLOWED) == [f"{page}:{len(text.splitlines()) + 2}: {n}"
                                                         for n in ("3.14159e-5", "1234", "0.8312")]
    # a committed number changed in its last digit is no longer backed; within rounding it is
    assert "0.684" in text and unbacked(page, text.replace("0.684", "0.689"), sources, ALLOWED)
    assert not unbacked(page, text.replace("0.684", "0.68"), sources, ALLOWED)
    # a mean ± std over seed repeats is backed by the repeats' files, and only at its value
    assert "0.647 ± 0.0653" in text and unbacked(page, text.replace("0.0653", "0.0673"), sources, ALLOWED)


def test_what_counts_as_a_number():
    text = "\n".join([
        "LieTransformer-SE2 on lie-T2-n1000 (App. I.3, Fig. 4, 10^4, 8 heads) reached 0.825,",
        "7e-6 and 1.4e-3, 170k and 1.03M parameters, a drift of 0.55% and about 2200 steps.",
        "Inline `--lr 3e-3` code and a span `that runs",
        "over 0.123 lines` are commands, and so are",
        "",
        "    pyg-lie train springs --epoch-scale 400",
        "",
        "```bash",
        "pyg-lie train springs --lr 1e-3",
        "```",
        "<!-- docs-test: skip (3.5) --> 100,000 molecules, the [page](results.md#x-2.5).",
    ])
    found = [(n.text, n.value, n.tolerance) for n in numbers_in(text)]
    assert [f[0] for f in found] == ["0.825", "7e-6", "1.4e-3", "170k", "1.03M", "0.55%", "2200", "100,000"]
    value = {t: (v, tol) for t, v, tol in found}
    assert value["170k"] == (170000.0, 500.0) and value["1.03M"] == pytest.approx((1.03e6, 5e3))
    assert value["0.55%"] == pytest.approx((0.0055, 5e-5)) and value["7e-6"] == pytest.approx((7e-6, 5e-7))
    assert value["2200"] == (2200.0, 50.0)  # "about": written to the hundreds
    assert value["100,000"] == (100000.0, 0.5)  # exact


def test_paper_constellation_architecture_has_the_documented_parameter_count():
    """docs/lie_transformer.md: the paper's App. I.1 command builds a 1.03M-parameter model."""
    import argparse

    from pyg_lie.experiments import constellation
    p = argparse.ArgumentParser()
    constellation.add_arguments(p)
    args = p.parse_args("--group SE2 --data official --lift haar --lift-samples 1 --hidden 128 --layers 10 "
                        "--heads 8 --kernel-dim 12 --mlp-ratio 1".split())
    n = sum(t.numel() for t in constellation.build_model(args).parameters())
    assert round(n / 1e6, 2) == 1.03


@pytest.mark.parametrize("name,closed,mlp", [("SE3", 36, 3084), ("Aff3", 60, 5388)])
def test_score_parameter_counts_of_groups_without_runs(name, closed, mlp):
    """docs/lie_algebra_attention.md's table for the groups the paper did not run."""
    from pyg_lie.groups import get_group
    from pyg_lie.models import LieAlgebraTransformer
    G = get_group(name)
    assert LieAlgebraTransformer(G, score="closed_form").num_score_parameters() == closed
    assert LieAlgebraTransformer(G, score="mlp").num_score_parameters() == mlp
