"""``rdk-theory simulate ...``: every sub-command runs with --json, figures are written, bad input exits 2."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from rdk_theory.cli import main
from tests.tolerances import FLOAT64_ATOL, FLOAT64_RTOL, INEQUALITY_SLACK


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
    assert all(abs(sum(r["length_law"].values()) - 1) <= FLOAT64_ATOL for r in res)


def test_speedup_table_and_figure(capsys, tmp_path):
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    fig = tmp_path / "speedup.png"
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.8", "--c", "0.05", "--figure", str(fig))
    assert rc == 0 and fig.stat().st_size > 1000
    assert "best gamma" in out


def test_dsi_small_grid(capsys, tmp_path):
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    fig = tmp_path / "dsi.png"
    rc, out, _ = _run(capsys, "dsi", "--c-points", "6", "--a-points", "6", "--k-max", "16", "--json",
                      "--figure", str(fig))
    obj = json.loads(out)
    assert rc == 0 and fig.exists()
    assert obj["max_dsi_excess_over_min_si_nonsi"] <= INEQUALITY_SLACK
    assert obj["range_vs_si"][0] >= 1 - INEQUALITY_SLACK


def test_dsi_names_the_points_whose_best_lookahead_is_the_cap(capsys):
    """'best lookahead per point' was searched over k <= --k-max without a word where the best
    sat at the cap (SI's best is 74 at c = 0.01, a = 0.98 under the default 64: DSI / SI read
    1.437 instead of 1.429). The count is SI's and DSI's points at the cap (DSI's only where
    k c <= 1 would allow more), as a direct search finds them, and the line goes away when the
    cap is large enough."""
    from simulators import dsi

    args = ["dsi", "--c-points", "3", "--a-points", "3", "--k-max", "2", "--servers", "3"]
    rc, out, _ = _run(capsys, *args, "--json")
    obj = json.loads(out)
    cs, as_ = obj["c"], obj["a"]
    want_si = sum(dsi.si_best(c, a, 2)[0] == 2 for c in cs for a in as_)
    want_dsi = sum(dsi.dsi_best(c, a, 3, 2)[0] == 2 and 1 / c >= 3 for c in cs for a in as_)
    assert obj["points_best_k_at_k_max"] == {"si": want_si, "dsi": want_dsi} and want_si > 0
    rc, out, _ = _run(capsys, *args)
    assert rc == 0 and out.splitlines()[-1] == (
        f"best lookahead at the cap --k-max 2: {want_si} SI and {want_dsi} DSI grid points, whose "
        "times are for k <= 2 only (a larger --k-max may lower them)")
    assert "c in [0.02, 0.3], a in [0.5, 0.95]" in out or "sub-grid empty" in out
    rc, out, _ = _run(capsys, "dsi", "--c-points", "3", "--a-points", "3", "--k-max", "512",
                      "--servers", "3")
    assert rc == 0 and "at the cap" not in out


def test_dsi_with_too_few_servers_reports_the_loss_to_si_and_exits_0(capsys):
    """With one server (no parallelism) DSI loses to SI on part of the grid, which the model
    allows (S < ceil(1/c)); the run exited 1 as if a check had failed. It now exits 0, counts
    those points, and every one of them is a point without the guarantee."""
    from simulators import dsi

    rc, out, _ = _run(capsys, "dsi", "--servers", "1", "--c-points", "6", "--a-points", "6", "--json")
    obj = json.loads(out)
    slower = [(c, a) for i, c in enumerate(obj["c"]) for j, a in enumerate(obj["a"])
              if obj["speedup_vs_si"][i][j] < 1 - INEQUALITY_SLACK]
    assert rc == 0 and obj["guarantee_violations"] == {"non_si": 0, "si_where_servers_cover": 0}
    assert obj["dsi_slower_than_si_points"] == len(slower) > 0
    assert all(dsi.servers_needed(c, 1) > 1 for c, _ in slower)
    rc, out, _ = _run(capsys, "dsi", "--servers", "1", "--c-points", "6", "--a-points", "6")
    assert rc == 0 and f"DSI slower than SI at {len(slower)} of 36 grid points, {len(slower)} of them" in out


@pytest.mark.parametrize("where", ["non_si", "si_where_servers_cover"])
def test_dsi_exits_1_when_a_proved_guarantee_fails(capsys, monkeypatch, where):
    """A model that broke either proved inequality (slower than non-SI anywhere, or slower than
    SI where the servers cover the drafter) makes the run fail, and says which."""
    from simulators import dsi

    real = dsi.sweep

    def broken(cs, as_, servers, k_max, progress=None):
        sw = real(cs, as_, servers, k_max, progress)
        # c = 0.215, a = 0.98: 5 servers cover it, and SI is faster than non-SI there
        assert servers >= dsi.servers_needed(cs[2], 1) and sw["si"][2, 3] < 1
        sw["dsi"][2, 3] = 1.5 if where == "non_si" else sw["si"][2, 3] * (1 + 1e-9)
        return sw

    monkeypatch.setattr(dsi, "sweep", broken)
    rc, out, _ = _run(capsys, "dsi", "--servers", "7", "--c-points", "4", "--a-points", "4", "--json")
    obj = json.loads(out)
    assert rc == 1 and obj["guarantee_violations"][where] == 1
    # 1.5 is slower than SI too, at a point the servers cover
    assert obj["guarantee_violations"] == {"non_si": int(where == "non_si"), "si_where_servers_cover": 1}
    rc, out, _ = _run(capsys, "dsi", "--servers", "7", "--c-points", "4", "--a-points", "4")
    assert rc == 1 and (f"GUARANTEE VIOLATED: DSI slower than non-SI at {int(where == 'non_si')} points, "
                        "slower than SI at 1 points") in out


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
    if "--figure" in argv:  # without matplotlib every --figure is refused as such, whatever its path
        pytest.importorskip("matplotlib")
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
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
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
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    from simulators import plots

    def full_disk(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "speedup_figure", full_disk)
    rc, out, err = _run(capsys, "speedup", "--alpha", "0.8", "--json", "--figure",
                        str(tmp_path / "x.png"))
    assert rc == 2 and "No space left on device" in err
    assert json.loads(out)["rows"]


def test_block_gamma_above_six_is_refused_before_any_enumeration(capsys, monkeypatch):
    """--gamma is 0..6: 7 is exit 2 before a toy pair is even built (toy_pair patched to fail
    loudly, so that an accepted 7 does not start an exponential enumeration)."""
    from simulators import toy_lm

    def built(*a, **k):
        raise AssertionError("--gamma 7 was accepted: the run started")

    monkeypatch.setattr(toy_lm, "toy_pair", built)
    rc, out, err = _run(capsys, "block", "--gamma", "7")
    assert rc == 2 and out == "" and err.startswith("error: --gamma must be in 0..6")


def test_block_exits_1_when_a_sampler_is_not_lossless(capsys, monkeypatch):
    """Negative control of the exit status: a lossless check that fails (is_lossless patched to
    report a difference of 1/7) is exit 1, the row says NO and the JSON lossless false."""
    from simulators import sequence

    monkeypatch.setattr(sequence, "is_lossless", lambda *a, **k: (False, Fraction(1, 7)))
    rc, out, _ = _run(capsys, "block", "--pair", "same", "--sampler", "tli", "--gamma", "1")
    assert rc == 1 and " NO " in out
    rc, out, _ = _run(capsys, "block", "--pair", "same", "--sampler", "tli", "--gamma", "1", "--json")
    row = json.loads(out)["results"][0]
    assert rc == 1 and row["lossless"] is False and row["max_law_difference"] == 1 / 7


def test_speedup_monte_carlo_speedup_divides_by_the_iteration_cost(capsys):
    """The Monte Carlo speedup and its interval are tokens per call over gamma c + 1, the cost
    of one iteration at the best gamma (the same cost as the exact speedup)."""
    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.8", "--c", "0.2", "--mc", "200", "--json")
    row = json.loads(out)["rows"][0]
    cost = row["best_gamma"] * 0.2 + 1
    assert rc == 0 and row["best_gamma"] > 0
    assert row["mc"]["speedup"] == pytest.approx(row["mc"]["tokens_per_call"] / cost, rel=FLOAT64_RTOL)
    assert row["mc"]["speedup_ci999"] == pytest.approx([x / cost for x in row["mc"]["ci999"]],
                                                       rel=FLOAT64_RTOL)
    assert row["speedup"] == pytest.approx(row["tokens_per_call"] / cost, rel=FLOAT64_RTOL)


def test_disco_best_static_gammas_are_the_argmins_gamma_zero_included(capsys):
    """c = 1 (a drafter as slow as the target): drafting never pays on a trace, so the best
    static gamma of each exact trace DP is 0, and every reported best gamma is the argmin of
    its own time-per-token list (toy runs: static_g for g = 0..gamma_max). On the toy LMs
    too the best is gamma 0 (exactly 1 per token), and the gains are measured against it: it
    was left out, and a static_1 slower than not drafting was the "best static"."""
    rc, out, _ = _run(capsys, "disco", "--c", "1", "--tokens", "300", "--trace-length", "100",
                      "--gamma-max", "3", "--thresholds", "--json")
    obj = json.loads(out)
    assert rc == 0
    for key in ("trace", "toy_trace"):
        times = obj[key]["static_time_per_token"]
        assert obj[key]["best_static_gamma"] == times.index(min(times)) == 0
    st = {g: obj["toy_runs"][f"static_{g}"]["time_per_token"] for g in (0, 1, 2, 3)}
    assert list(obj["toy_runs"])[:4] == ["static_0", "static_1", "static_2", "static_3"]
    assert st[0] == 1.0 and obj["toy_runs"]["static_0"]["tokens_per_call"] == 1.0
    assert obj["toy_best_static_gamma"] == min(st, key=st.get) == 0
    assert obj["toy_oracle_gain"] == 1.0 / obj["toy_runs"]["oracle"]["time_per_token"] - 1


def test_string_reports_psi_methods_that_disagree(capsys, monkeypatch):
    """Negative control: when psi by segmentations differs from psi by recursion
    (string_step patched), the row's psi_methods_agree is false and the table flags it."""
    from simulators import strings

    real = strings.string_step

    def off(*a, **k):
        res = real(*a, **k)
        res["psi_by_segmentations"] = res["psi"] + Fraction(1, 10)
        return res

    monkeypatch.setattr(strings, "string_step", off)
    rc, out, _ = _run(capsys, "string", "--max-length", "2", "--json")
    assert rc == 0 and not any(r["psi_methods_agree"] for r in json.loads(out)["rows"])
    rc, out, _ = _run(capsys, "string", "--max-length", "2")
    assert "(psi methods DISAGREE)" in out


def test_block_figure_bars_are_the_exact_length_law(monkeypatch, tmp_path):
    """The bars of the block figure are P(L) from the results' length_law (whose keys are the
    strings "1".."gamma+1", as in the JSON), not zeros."""
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    from simulators import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig))
    results = [{"pair": "same", "sampler": "tli", "length_law": {"1": 0.25, "2": 0.75}},
               {"pair": "same", "sampler": "vanilla", "length_law": {"1": 0.5, "2": 0.5}}]
    plots.block_figure(tmp_path / "b.png", results)
    heights = [bar.get_height() for bar in figs[0].axes[0].patches]
    plots._plt().close(figs[0])
    assert heights == [0.25, 0.5, 0.75, 0.5]  # L = 1 for both samplers, then L = 2


def test_speedup_mc_interval_uses_the_laws_standard_deviation(capsys):
    """At alpha = 0.9999 nearly every draw is gamma + 1 = 17: with the sample's standard
    deviation the '99.9 %' interval was [17.0000, 17.0000] and excluded the exact 16.9864
    printed beside it (coverage 75 % in 2,000 repeats). Its half-width is now Bernstein's with
    the law's sd and the spread gamma (tests/test_sim_block.py), the upper end cut at the
    largest L, gamma + 1."""
    from simulators.block import tokens_sd_iid
    from tests.test_sim_block import bernstein_half_width

    rc, out, _ = _run(capsys, "speedup", "--alpha", "0.9999", "--c", "0.01", "--mc", "1000",
                      "--seed", "1", "--json")
    assert rc == 0
    row = json.loads(out)["rows"][0]
    lo, hi = row["mc"]["ci999"]
    # one fixed seed (deterministic); over seeds Bernstein's interval would miss at most 1e-3
    # of the time, so this containment is not a test of the level: the width below is
    assert lo < row["tokens_per_call"] < hi
    g = row["best_gamma"]
    half, m = bernstein_half_width(tokens_sd_iid(0.9999, g), g, 1000, 0.999), row["mc"]["tokens_per_call"]
    assert abs(lo - (m - half)) <= FLOAT64_RTOL * half
    assert hi == min(m + half, g + 1.0) == g + 1.0  # cut to the range of L, [1, g + 1]


def test_disco_refuses_repeated_thresholds_and_an_overlong_trace_and_keeps_near_ones(capsys):
    """0.3 and 0.3000001 shared the key 'threshold_0.3' (the last run overwrote the other); a
    threshold given twice ran twice into one row; a trace of 100,000 positions would need tens
    of GB (its context grows without limit)."""
    rc, _, err = _run(capsys, "disco", "--thresholds", "0.3", "0.3")
    assert rc == 2 and err.strip() == "error: --thresholds lists 0.3 twice"
    rc, _, err = _run(capsys, "disco", "--trace-length", "10001")
    assert rc == 2 and "--trace-length must be at most 10,000" in err
    rc, out, _ = _run(capsys, "disco", "--tokens", "200", "--gamma-max", "2", "--trace-length",
                      "100", "--thresholds", "0.3", "0.3000001", "--json")
    assert rc == 0
    assert {"threshold_0.3", "threshold_0.3000001"} <= set(json.loads(out)["toy_runs"])


def test_spectr_exits_1_when_an_exact_output_law_is_not_p(capsys, monkeypatch):
    """A planted error of 1/100 in the enumerated K-SEQ law printed 'lossless NO' and exited
    0; block and dsi exit 1 when their check fails."""
    from fractions import Fraction

    import simulators.spectr as spectr

    real = spectr.kseq_law_by_enumeration

    def off(*args, **kwargs):
        law, acceptance = real(*args, **kwargs)
        law = law.copy()
        law[0] += Fraction(1, 100)
        law[1] -= Fraction(1, 100)
        return law, acceptance

    monkeypatch.setattr(spectr, "kseq_law_by_enumeration", off)
    rc, out, _ = _run(capsys, "spectr", "--support", "3", "--k-max", "2", "--trials", "2")
    assert rc == 1 and "NO" in out


@pytest.mark.parametrize("argv, why", [
    (["--alpha", "0.9999", "--c", "0.00001", "--gamma-max", "512"],
     "the optimum lies beyond the largest allowed, 512"),  # it said 'raise it', refused at 513
    (["--alpha", "0.9", "--c", "0", "--gamma-max", "8"], "with c = 0 every longer draft is faster"),
    (["--alpha", "0.9", "--c", "0.001", "--gamma-max", "4"], "raise it to find the optimum"),
])
def test_speedup_says_why_the_best_gamma_is_the_largest(capsys, argv, why):
    rc, out, _ = _run(capsys, "speedup", *argv)
    assert rc == 0 and why in out and ">=" in out


def test_string_says_no_when_psi_is_not_a_law(capsys, monkeypatch):
    """One verification step outputs p for any r >= 0 it is given, so 'SLRS lossless' from the
    output law alone said yes for a psi summing to 2.7 (a review planted it); it now also
    requires psi, the law of the drafted target token, to sum to 1."""
    from simulators import strings

    real = strings.string_step

    def off(p, *a, **k):
        res = real(p, *a, **k)
        res["psi"] = res["psi_by_segmentations"] = res["psi"] * 0 + Fraction(9, 10)
        res["slrs_output_law"] = strings.step_output_law(p, res["psi"], check=False)
        return res

    monkeypatch.setattr(strings, "string_step", off)
    rc, out, _ = _run(capsys, "string", "--max-length", "2", "--json")
    rows = json.loads(out)["rows"]
    assert all(r["psi_methods_agree"] and not r["slrs_lossless_exact"] for r in rows)
    assert all(r["psi_sum"] == pytest.approx(2.7) for r in rows)
    monkeypatch.setattr(strings, "string_step", real)
    rc, out, _ = _run(capsys, "string", "--max-length", "2", "--json")
    real_rows = json.loads(out)["rows"]
    assert rc == 0 and all(r["slrs_lossless_exact"] and r["psi_sum"] == 1.0 for r in real_rows)


def test_block_refuses_a_monte_carlo_size_it_cannot_hold(capsys):
    """--mc 3000000000 kept every block in a Python list: the out-of-memory killer ended it
    (exit 137), 24 GB in."""
    rc, _, err = _run(capsys, "block", "--pair", "same", "--sampler", "vanilla", "--gamma", "1",
                      "--mc", "3000000000")
    assert rc == 2 and err.strip() == ("error: --mc must be at most 10,000,000 for block (every "
                                       "block is kept, about 33 bytes each), got 3,000,000,000")


def _drawn_figures(monkeypatch):
    """The figures the simulators draw, kept (not saved): ``plots._save`` records each."""
    from simulators import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig))
    return plots, figs


def test_disco_figure_plots_each_static_gamma_from_zero_against_its_time(capsys, tmp_path,
                                                                          monkeypatch):
    """The disco figure (never drawn by the suite): both panels put static gamma 0..gamma_max
    on the x axis, the left one the trace DP's time per token, the right one the toy runs'
    static_0..static_gamma_max (static_0 included, as in the JSON), with the oracle and the
    best threshold as horizontal lines at their reported times."""
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    plots, figs = _drawn_figures(monkeypatch)
    rc, out, _ = _run(capsys, "disco", "--c", "0.1", "--tokens", "300", "--trace-length", "100",
                      "--gamma-max", "3", "--json", "--figure", str(tmp_path / "d.png"))
    assert rc == 0 and len(figs) == 1
    obj = json.loads(out)
    left, right = figs[0].axes
    lines = [[list(ln.get_xdata()), list(ln.get_ydata())] for ln in left.lines + right.lines]
    plots._plt().close(figs[0])
    runs = obj["toy_runs"]
    best_thr = runs[obj["toy_best_threshold"]]["time_per_token"]
    oracle, toy_oracle = obj["trace"]["oracle_time_per_token"], runs["oracle"]["time_per_token"]
    assert lines == [[[0, 1, 2, 3], obj["trace"]["static_time_per_token"]],
                     [[0, 1], [oracle, oracle]],
                     [[0, 1, 2, 3], [runs[f"static_{g}"]["time_per_token"] for g in range(4)]],
                     [[0, 1], [toy_oracle, toy_oracle]],
                     [[0, 1], [best_thr, best_thr]]]


def test_string_cost_figure_plots_the_segmentation_counts_and_the_enumeration_times(
        capsys, tmp_path, monkeypatch):
    """The string figure (never drawn by the suite): segmentations against every length, and
    on the twin axis the enumeration times of the lengths that were enumerated (1..7) only,
    each the value the JSON reports."""
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    plots, figs = _drawn_figures(monkeypatch)
    rc, out, _ = _run(capsys, "string", "--max-length", "9", "--json", "--figure",
                      str(tmp_path / "s.png"))
    assert rc == 0 and len(figs) == 1
    cost = json.loads(out)["cost"]
    ax, ax2 = figs[0].axes
    counts, times = ax.lines[0], ax2.lines[0]
    got = [list(counts.get_xdata()), list(counts.get_ydata()), list(times.get_xdata()),
           list(times.get_ydata()), len(ax.lines), len(ax2.lines)]
    plots._plt().close(figs[0])
    assert got == [list(range(1, 10)), [c["segmentations"] for c in cost], list(range(1, 8)),
                   [c["enumeration_seconds"] for c in cost[:7]], 1, 1]
    assert all("enumeration_seconds" not in c for c in cost[7:])


def test_disco_runs_the_hetero_pair_whose_drafter_retokenizes(capsys):
    """--pair hetero (never run by disco): its drafter is a RetokenizingLM, whose float copy
    the toy runs use; the float copy gives the exact chain's laws as floats. Every static
    gamma from 0 runs, then the oracle; static_0 drafts nothing (1 per token)."""
    from simulators.toy_lm import RetokenizingLM, toy_pair

    drafter = toy_pair("hetero", seed=0).drafter
    fl = drafter.float_copy()
    assert isinstance(fl, RetokenizingLM) and fl.draft_tokens == drafter.draft_tokens
    assert fl.target_tokens == drafter.target_tokens
    for ctx in [(), (0,), (3, 4), (4, 2, 1)]:
        assert list(fl.next_probs(ctx)) == [float(v) for v in drafter.next_probs(ctx)]
    rc, out, _ = _run(capsys, "disco", "--pair", "hetero", "--tokens", "200", "--trace-length",
                      "50", "--gamma-max", "2", "--thresholds", "--json")
    obj = json.loads(out)
    assert rc == 0 and obj["toy_trace"]["pair"] == "hetero"
    assert list(obj["toy_runs"]) == ["static_0", "static_1", "static_2", "oracle"]
    assert obj["toy_runs"]["static_0"]["time_per_token"] == 1.0


def test_python_m_simulators_runs_what_rdk_theory_simulate_runs(capsys):
    """``python -m simulators`` did not exist; it is ``rdk-theory simulate`` with the same
    output, and the same one-line errors (exit 2) for a missing or unknown simulator."""
    import subprocess
    import sys

    from simulators.__main__ import main as module_main

    args = ["speedup", "--alpha", "0.8", "--c", "0.05", "--json"]
    assert module_main(args) == 0
    via_module = json.loads(capsys.readouterr().out)
    assert main(["simulate", *args]) == 0
    assert via_module == json.loads(capsys.readouterr().out)
    assert via_module["rows"][0]["best_gamma"] == 8
    assert module_main([]) == 2
    assert capsys.readouterr().err.startswith("error: rdk-theory simulate: a SIMULATOR is required")
    # the module itself, as a user types it: same exit status and the one error line
    proc = subprocess.run([sys.executable, "-m", "simulators", "bogus"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: rdk-theory simulate: argument SIMULATOR: invalid choice: "
                                  "'bogus'") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("command, first_use", [
    (["block", "--pair", "pruned", "--sampler", "tli", "--gamma", "1", "--mc", "10"],
     ("simulators.block", "simulate_blocks", 4)),
    (["disco", "--tokens", "50", "--trace-length", "20", "--gamma-max", "1", "--thresholds"],
     ("simulators.disco", "regime_trace", 0)),
])
@pytest.mark.parametrize("seed", [0, 7])
def test_the_monte_carlo_does_not_reuse_the_toy_models_random_stream(capsys, monkeypatch, command,
                                                                      first_use, seed):
    """'block' and 'disco' seeded their Monte Carlo with default_rng(--seed), and the toy
    models with toy_pair(name, --seed), which is default_rng(seed) too: the Monte Carlo's first
    uniforms were the very words that drew the model's weights. The generator the first
    random consumer gets is now its own stream (not at the model's state), and the model is
    still toy_pair(name, --seed): the exact numbers for a seed do not change."""
    import copy
    import importlib

    import numpy as np

    from simulators import toy_lm

    module, name, rng_at = first_use
    mod = importlib.import_module(module)
    real, real_pair, seen, seeds = getattr(mod, name), toy_lm.toy_pair, [], []

    def spy(*a, **kw):
        if not seen:  # the generator as the command hands it over, before any draw
            seen.append(copy.deepcopy(a[rng_at]).random(8))
        return real(*a, **kw)

    def pair_spy(pair_name, pair_seed, **kw):
        seeds.append(pair_seed)
        return real_pair(pair_name, pair_seed, **kw)

    monkeypatch.setattr(mod, name, spy)
    monkeypatch.setattr(toy_lm, "toy_pair", pair_spy)
    rc, _, _ = _run(capsys, *command, "--seed", str(seed), "--json")
    assert rc == 0 and seen and seeds == [seed]
    model_stream = np.random.default_rng(seed).random(8)  # what toy_pair(name, seed) draws from
    assert not np.any(np.isin(seen[0], model_stream))


def test_a_figure_write_that_fails_part_way_keeps_the_earlier_figure(capsys, tmp_path, monkeypatch):
    """savefig wrote straight to --figure: a full disk left a truncated PNG in place of the
    earlier figure, and the error named no file. The figure is now written beside it and
    renamed, so the earlier one stays whole, no partial file is left, and the path is named."""
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    from matplotlib.figure import Figure

    fig = tmp_path / "speedup.png"
    fig.write_bytes(b"the earlier figure")

    def half_written(self, path, **kw):
        with open(path, "wb") as f:
            f.write(b"\x89PNG partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    rc, out, err = _run(capsys, "speedup", "--alpha", "0.8", "--figure", str(fig))
    assert rc == 2 and err == f"error: No space left on device: {fig}\n"
    assert "best gamma" in out  # the numbers were printed first
    assert fig.read_bytes() == b"the earlier figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["speedup.png"]


def test_a_postscript_figure_keeps_stderr_clean(capsys, caplog, tmp_path):
    """matplotlib's PostScript backend logs that it renders transparency opaque on every
    .eps figure: a warning on the stderr of a successful run (pytest takes log records into
    caplog, not stderr: no record may reach it)."""
    pytest.importorskip("matplotlib")  # the figure (extra 'plot')
    caplog.set_level("WARNING")
    rc, _, err = _run(capsys, "speedup", "--alpha", "0.8", "--figure", str(tmp_path / "s.eps"))
    assert rc == 0 and err == "" and (tmp_path / "s.eps").read_bytes().startswith(b"%!PS")
    assert not caplog.records


@pytest.mark.parametrize("name", [".svg", ".png"])
def test_a_figure_name_that_is_only_a_suffix_is_refused(capsys, tmp_path, name):
    """'.svg' has no suffix to Python (a hidden name): it wrote a PNG named '.svg.png'."""
    pytest.importorskip("matplotlib")
    rc, _, err = _run(capsys, "speedup", "--figure", str(tmp_path / name))
    assert rc == 2 and "names no file" in err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, limit", [
    (["speedup", "--mc", "10000001"], "--mc must be at most 10,000,000"),
    (["spectr", "--mc", "10000001"], "--mc at most 10,000,000"),
    (["spectr", "--trials", "10001"], "--trials must be at most 10,000"),
    (["disco", "--tokens", "200001"], "--tokens must be at most 200,000"),
    (["dsi", "--c-points", "401"], "--c-points must be in 2..400"),
    (["dsi", "--a-points", "2001"], "--a-points in 2..2000"),
])
def test_sizes_that_would_run_for_hours_or_exhaust_memory_are_refused(capsys, monkeypatch, argv, limit):
    """speedup's and spectr's --mc, spectr's --trials and disco's --tokens had no upper bound
    (speedup --mc 3e7 was killed for memory without a word; disco --tokens 1e8 runs a day),
    and dsi's rounded grid repeated values beyond some 460 c points. Refused before any work
    (the toy pair and the samplers patched to fail loudly)."""
    from simulators import block, dsi, spectr, toy_lm

    def started(*a, **k):
        raise AssertionError("the run started")

    for mod, name in ((toy_lm, "toy_pair"), (block, "optimal_gamma"), (spectr, "compare_with_lp"),
                      (dsi, "sweep")):
        monkeypatch.setattr(mod, name, started)
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert limit in err


def test_speedup_checks_every_alpha_before_any_monte_carlo(capsys, monkeypatch):
    """'--alpha 0.9 1.5 --mc 2e7' ran the first alpha's Monte Carlo (13 s, 4.3 GB) before
    naming the second."""
    from simulators import block

    def started(*a, **k):
        raise AssertionError("a Monte Carlo ran")

    monkeypatch.setattr(block, "mc_tokens_iid", started)
    rc, out, err = _run(capsys, "speedup", "--alpha", "0.9", "1.5", "--mc", "1000")
    assert rc == 2 and out == "" and err == "error: --alpha values must be in [0, 1], got 1.5\n"


def test_monte_carlo_blocks_draw_what_one_array_draws(monkeypatch):
    """mc_tokens_iid draws in row blocks (memory stays flat): the very uniforms, hence the very
    tokens, of one (n, gamma) array, for a block that does not divide n."""
    from simulators import block

    alphas = [0.9, 0.5, 0.7]
    want = 1 + np.cumprod(np.random.default_rng(3).random((1000, 3)) < alphas, axis=1).sum(axis=1)
    monkeypatch.setattr(block, "MC_BLOCK_ELEMENTS", 3 * 7)  # blocks of 7 rows
    assert np.array_equal(block.mc_tokens_iid(alphas, 1000, np.random.default_rng(3)), want)


def test_kseq_sample_in_blocks_is_each_block_drawn_in_turn(monkeypatch):
    """kseq_sample draws in blocks of KSEQ_BLOCK steps (1e7 at once took 2.2 GB): n above a
    block gives the blocks' draws one after another from the same generator."""
    from simulators import spectr

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    rho = 1.3
    rng = np.random.default_rng(5)
    parts = [spectr.kseq_sample(p, q, rho, 2, m, rng) for m in (7, 7, 6)]
    monkeypatch.setattr(spectr, "KSEQ_BLOCK", 7)
    tokens, ok = spectr.kseq_sample(p, q, rho, 2, 20, np.random.default_rng(5))
    assert np.array_equal(tokens, np.concatenate([t for t, _ in parts]))
    assert np.array_equal(ok, np.concatenate([a for _, a in parts]))


def test_disco_without_thresholds_says_nothing_of_a_threshold(capsys):
    rc, out, _ = _run(capsys, "disco", "--tokens", "300", "--trace-length", "100", "--gamma-max", "2",
                      "--thresholds")
    assert rc == 0 and "threshold" not in out
