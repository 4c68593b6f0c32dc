"""The figures of a validation run (gpu_validation.figures) draw what the report holds: read back
from the matplotlib figure before it is closed (as test_report_figure_draws_the_kept_fractions_in_order
in tests/test_core_robustness.py). Synthetic report pieces, no model."""
from __future__ import annotations

import numpy as np
import pytest

plt = pytest.importorskip("matplotlib.pyplot")

from gpu_validation import figures  # noqa: E402


@pytest.fixture
def drawn(monkeypatch):
    """The figures closed during the test (plt.close replaced: they stay readable)."""
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    return figs


TIMING = {"device": "cpu", "rows": [
    {"n": n, "batch": b, "floor_s": n * 1e-6 * b, "first_order_s": 2 * n * 1e-6 * b,
     "dense_exact_s": (n * n * 1e-9 if n <= 512 else None)}
    for n in (256, 512, 1024) for b in (1, 64)],
    "slopes": {"first_order@batch1": 1.0, "first_order@batch64": 1.01, "floor@batch1": 0.5,
               "floor@batch64": 0.99, "dense_exact@batch1": 2.0, "dense_exact@batch64": 1.98}}


def test_time_vs_n_draws_each_method_per_batch_on_log_axes(tmp_path, drawn):
    figures.time_vs_n(TIMING, tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 0
    (ax,) = drawn[0].axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    got = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}
    want = {}
    for b in (1, 64):
        for name in ("first_order", "dense_exact", "floor"):
            pts = [(r["n"], r[f"{name}_s"]) for r in TIMING["rows"]
                   if r["batch"] == b and r[f"{name}_s"] is not None]
            sl = TIMING["slopes"][f"{name}@batch{b}"]
            want[f"{name} b={b} (slope {sl:.2f})"] = tuple(map(list, zip(*pts)))
    assert got == want
    assert "seconds" in ax.get_ylabel() and "cpu" in ax.get_title()


def test_time_vs_n_names_the_batch_of_a_line_without_a_slope(tmp_path, drawn):
    """One N per batch (``--timing-sizes 4096``): no slope can be fitted, and each line's
    label still says its batch (the batch-1 and batch-64 lines had the same label)."""
    one_n = {"device": "cpu", "slopes": {"first_order@batch1": None, "first_order@batch64": None},
             "rows": [{"n": 4096, "batch": b, "floor_s": 1e-3 * b, "first_order_s": 2e-3 * b}
                      for b in (1, 64)]}
    figures.time_vs_n(one_n, tmp_path / "t.png")
    (ax,) = drawn[0].axes
    assert sorted(ln.get_label() for ln in ax.get_lines()) == [
        "first_order b=1", "first_order b=64", "floor b=1", "floor b=64"]


def test_predicted_vs_measured_plots_each_position_with_the_diagonal(tmp_path, drawn):
    rng = np.random.default_rng(0)
    per = {f"{s}@{k}": {"predicted": rng.random(6).tolist(), "measured": rng.random(6).tolist()}
           for s in ("tli", "marginal") for k in (64, 8)}
    figures.predicted_vs_measured({"per_position": per, "n_steps": 321}, tmp_path / "p.png")
    (ax,) = drawn[0].axes
    pts = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    assert len(pts) == 4
    for off, d in zip(pts, per.values()):  # x: predicted, y: measured
        np.testing.assert_array_equal(off[:, 0], d["predicted"])
        np.testing.assert_array_equal(off[:, 1], d["measured"])
    assert any(list(ln.get_xdata()) == [0, 1] == list(ln.get_ydata()) for ln in ax.get_lines())
    assert "321 steps" in ax.get_ylabel() and "predicted" in ax.get_xlabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [label for label, _, _ in figures.SAMPLER_STYLE.values()]


def test_acceptance_vs_kept_uses_the_runs_sampler_labels(tmp_path, drawn):
    """The exact sampler of a run is the sparse kernel: its legend says so (the core report's
    default label, 'exact RDK (covariance kernel)', would claim the dense one)."""
    rows = [{"kept": k, "keep_fraction": k / 300, "oov_cap": 0.5 + k / 1000,
             **{s: 0.3 + k / 2000 for s in figures.SAMPLER_STYLE}} for k in (50, 200)]
    figures.acceptance_vs_kept({"rows": rows}, tmp_path / "a.png", "a title")
    (ax,) = drawn[0].axes
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    for label, _, _ in figures.SAMPLER_STYLE.values():
        assert label in legend
    assert ax.get_title() == "a title"


def test_predicted_vs_measured_points_take_their_samplers_legend_colour(tmp_path, drawn):
    """One colour per sampler for its points and its legend entry. Each scatter, one per
    (sampler, kept size), took the colour cycle's next colour and so did the legend's empty
    scatters: with two kept sizes the second size's points were C5-C9 against a legend in
    C0-C4 (the cycle wraps at 10); the committed figures (5 and 3 kept sizes) had their
    legends in C5-C9, some sizes' points in C0-C4."""
    from matplotlib.colors import to_rgb

    per = {f"{s}@{k}": {"predicted": [0.5, 0.6], "measured": [0.4, 0.7]}
           for k in (200, 50) for s in figures.SAMPLER_STYLE}
    figures.predicted_vs_measured({"per_position": per, "n_steps": 10}, tmp_path / "p.png")
    (ax,) = drawn[0].axes
    legend = ax.get_legend()
    colour = {t.get_text(): tuple(h.get_facecolor()[0][:3])
              for t, h in zip(legend.get_texts(), legend.legend_handles)}
    assert len(set(colour.values())) == len(figures.SAMPLER_STYLE)  # one colour each
    points = [c for c in ax.collections if len(c.get_offsets())]
    assert len(points) == len(per)
    for key, c in zip(per, points):
        label = figures.SAMPLER_STYLE[key.split("@")[0]][0]
        assert tuple(c.get_facecolor()[0][:3]) == colour[label], key
    # the colours acceptance_vs_kept's lines take, C0-C4 in the samplers' order
    assert [colour[label] for label, _, _ in figures.SAMPLER_STYLE.values()] == [
        to_rgb(f"C{i}") for i in range(len(figures.SAMPLER_STYLE))]


def test_redraw_draws_a_finished_runs_points_from_its_files(tmp_path, drawn):
    """figures.redraw redraws predicted_vs_measured.png from report.json and
    per_position.npz alone (no model): each (sampler, kept size) in the file's order."""
    import json

    rng = np.random.default_rng(1)
    arrays = {f"{s}@{k}:{w}": rng.random(4).astype(np.float32)
              for k in (64, 8) for s in ("vanilla", "tli") for w in ("predicted", "measured")}
    np.savez_compressed(tmp_path / "per_position.npz", **arrays)
    (tmp_path / "report.json").write_text(json.dumps({"study": {"n_steps": 77}}))
    (tmp_path / "predicted_vs_measured.png").write_text("an older figure")
    path = figures.redraw(tmp_path)
    assert path == tmp_path / "predicted_vs_measured.png" and path.read_bytes()[:4] == b"\x89PNG"
    (ax,) = drawn[-1].axes
    pts = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
    keys = list(dict.fromkeys(name.rsplit(":", 1)[0] for name in arrays))
    assert len(pts) == len(keys) == 4
    for off, key in zip(pts, keys):
        np.testing.assert_array_equal(off[:, 0], arrays[f"{key}:predicted"])
        np.testing.assert_array_equal(off[:, 1], arrays[f"{key}:measured"])
    assert "77 steps" in ax.get_ylabel()


@pytest.mark.parametrize("argv, message", [
    ([], "error: python -m gpu_validation.figures: the following arguments are required: "
         "FOLDER (see 'python -m gpu_validation.figures --help')"),
    (["{tmp}/none"], "error: {tmp}/none: no report.json (give the folder of a finished "
                     "'rdk-theory validate' run)"),
    (["{tmp}/bad"], "error: {tmp}/bad: not a finished validate run's report.json and "
                    "per_position.npz (KeyError: 'study')"),
    (["{tmp}/cut"], "error: {tmp}/cut: not a finished validate run's report.json and "
                    "per_position.npz (BadZipFile: File is not a zip file)"),
])
def test_the_redraw_command_refuses_what_is_no_finished_run(tmp_path, capsys, argv, message):
    """'--help' was read as a folder (a FileNotFoundError traceback for '--help/report.json'),
    a wrong folder gave the same traceback, and no folder at all did nothing, exit 0."""
    import json

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.json").write_text(json.dumps({"runs": []}))
    np.savez(bad / "per_position.npz", **{"tli@8:predicted": np.zeros(2)})
    cut = tmp_path / "cut"  # a copy cut short: a zipfile traceback before
    cut.mkdir()
    (cut / "report.json").write_text(json.dumps({"study": {"n_steps": 3}}))
    (cut / "per_position.npz").write_bytes((bad / "per_position.npz").read_bytes()[:20])
    argv = [a.format(tmp=tmp_path) for a in argv]
    code = None
    try:
        code = figures.main(argv)
    except SystemExit as exc:  # argparse's own exit, in the project's one-line form
        code = exc.code
    assert code == 2
    assert capsys.readouterr().err.strip() == message.format(tmp=tmp_path)
    assert not (bad / "predicted_vs_measured.png").exists()
