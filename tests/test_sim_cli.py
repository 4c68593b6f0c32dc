"""``rdk-theory simulate ...``: every sub-command runs with --json, figures are written, bad input exits 2."""
from __future__ import annotations

import json

import pytest

from rdk_theory.cli import main


def _run(capsys, *argv):
    try:
        rc = main(["simulate", *argv])
    except SystemExit as exc:  # an argparse usage error (the console script exits the same way)
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_block_json_reports_lossless_for_every_sampler(capsys):
    rc, out, _ = _run(capsys, "block", "--pair", "pruned", "--gamma", "2", "--json")
    assert rc == 0
    res = json.loads(out)["results"]
    assert {r["sampler"] for r in res} == {"vanilla", "tli", "rdk_exact", "rdk_first_order"}
    assert all(r["lossless"] and r["max_law_difference"] == 0 for r in res)
    assert all(abs(sum(r["length_law"].values()) - 1) < 1e-12 for r in res)


def test_speedup_table_and_figure(capsys, tmp_path):
    fig = tmp_path / "speedup.png"
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.8", "--c", "0.05", "--figure", str(fig))
    assert rc == 0 and fig.stat().st_size > 1000
    assert "best gamma" in out


def test_dsi_small_grid(capsys, tmp_path):
    fig = tmp_path / "dsi.png"
    rc, out, _ = _run(capsys, "dsi", "--c-points", "6", "--a-points", "6", "--k-max", "16", "--json",
                      "--figure", str(fig))
    obj = json.loads(out)
    assert rc == 0 and fig.exists()
    assert obj["max_dsi_excess_over_min_si_nonsi"] <= 1e-12
    assert obj["range_vs_si"][0] >= 1 - 1e-12


def test_disco_small(capsys):
    rc, out, _ = _run(capsys, "disco", "--tokens", "500", "--trace-length", "200", "--gamma-max", "4",
                      "--thresholds", "0.3", "--json")
    obj = json.loads(out)
    assert rc == 0 and obj["trace"]["oracle_gain"] > 0 and "threshold_0.3" in obj["toy_runs"]


def test_spectr_and_string(capsys):
    rc, out, _ = _run(capsys, "spectr", "--k-max", "3", "--trials", "3", "--json")
    assert rc == 0 and all(r["lossless_exact"] for r in json.loads(out)["rows"])
    rc, out, _ = _run(capsys, "string", "--max-length", "8", "--json")
    obj = json.loads(out)
    assert rc == 0 and all(r["slrs_lossless_exact"] and r["psi_methods_agree"] for r in obj["rows"])
    assert not any("slem_lossless_exact" in r for r in obj["rows"])  # p by construction: no check
    # each row's drafter runs after its own tokens of the row's text
    from simulators.strings import DRAFT_TOKENS, markov_string_drafter, string_step, toy_string_models

    tgt, dr = toy_string_models(0)
    for i, (row, last) in enumerate(zip(obj["rows"], ("a", "ab", "b"))):
        assert row["context"] == ("aa", "ab", "b")[i]
        want = string_step(tgt.next_probs((i,)), markov_string_drafter(
            dr, DRAFT_TOKENS, start=(DRAFT_TOKENS.index(last),)))["psi"]
        assert row["psi"] == [float(x) for x in want]


@pytest.mark.parametrize("argv", [
    ["speedup", "--mc", "-5"],
    ["speedup", "--mc", "1"],  # one draw has no confidence interval (it printed +-inf and NaN)
    ["block", "--mc", "1"],
    ["spectr", "--mc", "-3"],
    ["dsi", "--k-max", "0"],
    ["dsi", "--k-max", "1800"],  # 2.16M lookahead evaluations at the default grid: ran on
    ["dsi", "--c-points", "1000", "--a-points", "1000", "--k-max", "4"],  # and on
    ["disco", "--gamma-max", "65"],
    ["block", "--gamma", "-1"],
    ["block", "--gamma", "9"],
    ["speedup", "--alpha", "1.5"],
    ["dsi", "--servers", "0"],
    ["disco", "--c", "-1"],
    ["spectr", "--support", "20"],
    ["string", "--max-length", "0"],
    *[[sim, "--seed", "-1"] for sim in ("block", "speedup", "disco", "spectr", "string")],
    ["disco", "--thresholds", "0.3", "nan"],
    ["disco", "--thresholds", "1.5"],
    ["disco", "--c", "2"],  # slower than the target: the oracle would not bound the policies
    ["disco", "--trace-length", "1"],
    # beyond int64: refused by the parser (--tokens and --trials were loops that never ended)
    *[[sim, opt, str(2**63)] for sim, opt in (("block", "--mc"), ("disco", "--tokens"),
                                              ("spectr", "--trials"), ("spectr", "--mc"))],
    # within int64, but arrays numpy cannot index: its ValueError was a traceback
    ["speedup", "--mc", str(2**63 - 1)],
    ["disco", "--trace-length", str(2**62)],
    ["speedup", "--figure", "{tmp}/x.txt"],  # a format matplotlib cannot write
    ["speedup", "--figure", "{tmp}/a_file/x.png"],  # a folder that is a file
    ["speedup", "--figure", "{tmp}/missing/x.png"],
    ["string", "--max-length", "4", "--figure", "{tmp}/x.pgf"],  # needs LaTeX: failed at the end
    ["speedup", "--figure", "{tmp}/"],  # names a folder, not a file
    ["speedup", "--figure", "{tmp}/fig."],
    ["dsi", "--figure", "{tmp}"],  # an existing folder: was written beside it as {tmp}.png
    ["speedup", "--figure", "{tmp}/figdir"],  # figdir.png, the path written, is a folder
])
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, argv):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "figdir.png").mkdir()
    rc, out, err = _run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert rc == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert out == ""  # refused before the run: nothing computed and then lost


@pytest.mark.parametrize("module, why", [
    (None, "matplotlib is not installed (pip install 'rdk-theory[plot]')"),
    ("broken", "matplotlib could not be imported: "),
])
def test_figure_without_a_usable_matplotlib_is_refused_before_the_run(
        capsys, tmp_path, monkeypatch, module, why):
    """``--figure`` where matplotlib is absent, or present but failing to import: exit 2 before
    any computation, with the reason (the pip command only where it is the fix)."""
    import builtins
    import sys

    if module is None:  # as if not installed: Python names the package itself
        real_import = builtins.__import__

        def no_matplotlib(name, *args, **kwargs):
            if name.split(".")[0] == "matplotlib":
                raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    else:  # installed, but a submodule cannot be imported
        monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    rc, out, err = _run(capsys, "speedup", "--figure", str(tmp_path / "x.png"))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and why in err, err
    if module is not None:
        assert "not installed" not in err


def test_a_figure_path_without_suffix_is_written_as_png_and_named_so(capsys, tmp_path):
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.8", "--figure", str(tmp_path / "fig"))
    assert rc == 0 and (tmp_path / "fig.png").stat().st_size > 1000
    assert f"figure written to {tmp_path / 'fig.png'}" in out


def test_speedup_flags_a_best_gamma_at_the_search_cap(capsys):
    """At alpha 0.95, c 0.05 the best gamma is 21 (speedup 6.600), beyond the default cap of
    16: the table says >=16 and the JSON at_gamma_max, rather than passing 16 off as the
    optimum; with --gamma-max 64 the optimum is found and not flagged."""
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.6", "0.95", "--c", "0.05")
    rows = [line.split() for line in out.splitlines() if line.startswith(("  0.600", "  0.950"))]
    assert rc == 0 and rows[0][1] == "4" and rows[1][1] == ">=16"
    assert "raise it to find the optimum" in out
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.6", "0.95", "--c", "0.05",
                      "--gamma-max", "64", "--json")
    rows = json.loads(out)["rows"]
    assert [(r["best_gamma"], r["at_gamma_max"]) for r in rows] == [(4, False), (21, False)]
    assert round(rows[1]["speedup"], 3) == 6.600
    # searched exactly up to the optimum: found, not flagged
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.95", "--c", "0.05", "--gamma-max", "21")
    assert rc == 0 and ">=" not in out and "  0.950          21" in out


def test_spectr_random_pairs_do_not_depend_on_the_monte_carlo(capsys):
    """The min ratio over random pairs is one figure for a seed: the trials draw from their
    own stream, so running the Monte Carlo (--mc) does not change which pairs are tried."""
    mins = []
    for mc in ("0", "50"):
        rc, out, _ = _run(capsys, "spectr", "--k-max", "2", "--trials", "5", "--mc", mc, "--json")
        assert rc == 0
        mins.append(json.loads(out)["min_ratio_over_trials"])
    assert mins[0] == mins[1]


def test_spectr_lp_optimum_of_disjoint_supports_is_plus_zero():
    """Disjoint supports: nothing can be accepted; the LP optimum is 0.0, not -0.0 (which
    printed as '-0.0000')."""
    import math

    from rdk_theory.multidraft import optimal_acceptance_lp

    opt = optimal_acceptance_lp([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5], 2)
    assert opt == 0.0 and math.copysign(1.0, opt) == 1.0



def test_a_figure_that_fails_at_the_end_loses_the_figure_not_the_results(capsys, tmp_path,
                                                                         monkeypatch):
    """The numbers are printed before the figure is drawn: a write that fails then (a full
    disk) is exit 2 with the JSON already on stdout."""
    from simulators import plots

    def full_disk(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "speedup_figure", full_disk)
    rc, out, err = _run(capsys, "speedup", "--alpha", "0.8", "--json", "--figure",
                        str(tmp_path / "x.png"))
    assert rc == 2 and "No space left on device" in err
    assert json.loads(out)["rows"]
