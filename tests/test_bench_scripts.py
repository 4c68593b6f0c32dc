"""The study scripts under benchmarks/ (not timed): their numbers obey the laws they report."""
import importlib.util
import pathlib

import pytest

from rdk_theory import _fused
from tests.tolerances import FLOAT32_ATOL, FLOAT64_ATOL, assert_close, assert_leq

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rank_accuracy_full_rank_is_the_full_factor_and_truncation_costs_tv():
    ra = _load("rank_accuracy")
    res = ra.study(n=64, contexts=4, calibration=8, keep=(0.5,), taus=[1e-3], ranks=(1, 8, 9))
    (row,) = res["rows"]
    assert list(row["ranks"]) == [1, 8]  # ranks above min(S, N) are dropped
    full = row["ranks"][8]  # rank S = 8: the SVD reconstructs the factor exactly
    assert_leq(full["tv_to_full"], 0.0, slack=FLOAT64_ATOL)
    assert_close(full["alpha"], row["first_order_full"])
    assert row["ranks"][1]["tv_to_full"] > 1e-6  # a real truncation moves the proposal
    for d in [row["tli"], row["rdk_exact"], row["first_order_full"], row["ranks"][1]["alpha"]]:
        assert 0.0 <= d <= 1.0
    table = ra.markdown(res)
    assert table.count("\n") == 2 and "(TV " in table
    if _fused.available():  # float32 products: the same kernel up to float32 round-off
        assert_leq(row["full_f32"]["tv_to_full"], 0.0, slack=FLOAT32_ATOL)
        assert_close(row["full_f32"]["alpha"], row["first_order_full"], rtol=0, atol=FLOAT32_ATOL)
        assert "float32 products" in table and table.count("(TV ") == 3


def test_rank_accuracy_cli_refuses_bad_input(capsys):
    ra = _load("rank_accuracy")
    with pytest.raises(SystemExit) as e:
        ra.main(["--keep", "1.5"])
    assert e.value.code == 2 and "--keep" in capsys.readouterr().err
