"""Option values that cannot give a meaningful run end at parsing: a one-line usage error
naming the option, exit status 2, no traceback."""
import pytest

from pyg_lie.cli import main


def _usage_error(argv, capsys):
    with pytest.raises(SystemExit) as err:
        main(argv)
    out = capsys.readouterr()
    assert err.value.code == 2
    assert "Traceback" not in out.err
    errors = [line for line in out.err.splitlines() if "error:" in line]
    assert len(errors) == 1, out.err
    return errors[0]


def test_springs_zero_layers_is_a_usage_error(capsys):
    line = _usage_error(["train", "springs", "--layers", "0", "--epochs", "1"], capsys)
    assert "argument --layers: must be a positive integer, got '0'" in line


@pytest.mark.parametrize("option, value", [("--layers", "-1"), ("--layers", "1.5"), ("--hidden", "0"),
                                           ("--heads", "nan"), ("--epochs", "0")])
def test_springs_bad_counts_are_usage_errors(option, value, capsys):
    line = _usage_error(["train", "springs", option, value], capsys)
    assert f"argument {option}:" in line



def test_a_diverging_run_ends_in_one_line(capsys, monkeypatch):
    import pyg_lie.experiments.springs as springs
    from pyg_lie.cli import TRACEBACK_ENV
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)

    def diverges(args):
        raise FloatingPointError("non-finite training loss nan at epoch 3; lower --lr or enable --grad-clip")

    monkeypatch.setattr(springs, "main", diverges)
    rc = main(["train", "springs", "--epochs", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert err.strip().splitlines()[0].startswith("pyg-lie train springs: error: non-finite training loss")
