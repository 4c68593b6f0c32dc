"""What a validation run's folder and verdict can be trusted for (gpu_validation.harness,
gpu_validation.study): the measured counts in bounded memory with the same draws, the
deterministic checks in the verdict (a planted TLI bug fails the run), one run's files per
folder, and the report's command, top-k and summary lines. Tiny random Llama models
(tests/tiny_models.py) where a run is needed; no timing, no Monte Carlo assertion (each
assertion here is deterministic)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from gpu_validation import harness, study
from rdk_theory.sampling import sample_counts, sample_steps
from rdk_theory.validation import InputError
from tests.test_gpu_validation_data import _study_case


def _quiet(*a):
    pass


def _tiny_cfg(tiny, out, **kw):
    base = dict(target=tiny["narrow"], drafter=tiny["narrow"], dtype="float32", kept=(50,),
                e2e_kept=(50,), e2e_samplers=("tli",), max_positions=5, n_steps=10,
                e2e_tokens=2, timing=False, progress=False, out=str(out))
    base.update(kw)
    return harness.RunConfig(**base)


# ------------------------------------------------ the measured counts: bounded, same draws


def _old_count(p, r, n, rng):
    """The study's count before the chunking: every step held at once."""
    return int(sample_steps(p, r, n, rng, check=False)[1].sum())


def test_study_counts_at_the_default_steps_are_those_of_one_sample_steps_call(monkeypatch):
    """At the default --steps (2,000, below the chunk) the study draws exactly what it drew
    with one sample_steps call per position and sampler: every measured count, and so the
    committed results and their seeds, are unchanged."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    steps = harness.RunConfig().n_steps
    assert steps <= study.STEP_CHUNK
    _, case = _study_case(c=6)
    new = study.acceptance_study(**case, kept_sizes=(30, 10), n_steps=steps,
                                 rng=np.random.default_rng(5))
    monkeypatch.setattr(study, "accepted_count", _old_count)
    old = study.acceptance_study(**case, kept_sizes=(30, 10), n_steps=steps,
                                 rng=np.random.default_rng(5))
    assert new["per_position"].keys() == old["per_position"].keys()
    for key, d in new["per_position"].items():
        assert d["measured"] == old["per_position"][key]["measured"], key


def test_study_draws_its_steps_a_chunk_at_a_time(monkeypatch):
    """No sample_steps call of the study holds more than STEP_CHUNK steps (--steps 2e7 held
    all 2e7 at once, 1.7 GB); a count over several chunks is sample_counts' count on the same
    generator, and at most the steps made."""
    pytest.importorskip("torch")
    sizes = []

    def spy(p, r, n, rng, **kw):
        sizes.append(n)
        return sample_steps(p, r, n, rng, **kw)

    monkeypatch.setattr(study, "STEP_CHUNK", 7, raising=False)
    monkeypatch.setattr(study, "sample_steps", spy)
    _, case = _study_case(c=3)
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=20,
                                 rng=np.random.default_rng(2))
    assert sizes and max(sizes) == 7 and sum(sizes) == 20 * 3 * len(study.SAMPLERS)
    for d in out["per_position"].values():
        k = np.asarray(d["measured"]) * 20
        assert np.all((k >= 0) & (k <= 20))
    rng = np.random.default_rng(9)
    p, r = rng.dirichlet(np.ones(12)), 0.8 * rng.dirichlet(np.ones(12))
    sizes.clear()
    got = study.accepted_count(p, r, 20, np.random.default_rng(4))
    assert sizes == [7, 7, 6]
    assert got == sample_counts(p, r, 20, np.random.default_rng(4), chunk=7)[1]


# ------------------------------------------------------------------ deterministic checks


def test_deterministic_checks_name_the_worst_position_and_catch_nan():
    a = np.array([0.5, 0.25, 0.75])
    ok = study.deterministic_checks(a, a + 1e-12, np.array([0.6, 0.3, 0.8]))
    assert all(c["pass"] and c["positions_failing"] == 0 for c in ok.values())
    assert ok["vanilla_equals_tli"]["tolerance"] == study.EXACT_ROUNDOFF
    bad = study.deterministic_checks(a, np.array([0.5, 0.2, np.nan]), np.array([0.6, 0.1, 0.8]))
    assert bad["vanilla_equals_tli"]["positions_failing"] == 2  # 0.05 off and NaN
    assert bad["tli_within_oov_cap"]["positions_failing"] == 2  # 0.2 > 0.1, and NaN
    assert not bad["vanilla_equals_tli"]["pass"] and not bad["tli_within_oov_cap"]["pass"]


@pytest.fixture(scope="module")
def planted(tiny, tmp_path_factory):
    """Two tiny runs (the wide model drafting for the narrow one, K = 200 and 50, 20
    positions, 50 steps): one as is, one with TLI's proposal scaled by 0.9 in the study (as if
    its renormalisation by q(I) were dropped). Predicted and measured both use the scaled
    proposal, so every agreement check of that run still passes: only vanilla == TLI can see
    it, where the scaling lowers alpha (at K = 50 here the pruned drafter's mass so exceeds the
    target's on the kept ids that 0.9 of it still does: alpha = p(I) either way)."""
    from gpu_validation import samplers

    reports = {}
    for name in ("normal", "planted"):
        cfg = _tiny_cfg(tiny, tmp_path_factory.mktemp(name), drafter=tiny["wide"],
                        kept=(200, 50), e2e_kept=(200,), max_positions=20, n_steps=50,
                        e2e_tokens=4)
        with pytest.MonkeyPatch.context() as mp:
            if name == "planted":
                def scaled(qk, vm, kernels):
                    out = samplers.proposals(qk, vm, kernels)
                    out["tli"] = 0.9 * out["tli"]
                    return out

                mp.setattr(study, "proposals", scaled)
            reports[name] = harness.run(cfg, log=_quiet)
    return reports


def test_a_planted_scaled_tli_proposal_fails_the_run(planted):
    rep = planted["planted"]
    assert rep["all_checks_pass"] is False
    dc = {row["kept"]: row["deterministic_checks"] for row in rep["study"]["rows"]}
    assert not dc[200]["vanilla_equals_tli"]["pass"]
    assert dc[200]["vanilla_equals_tli"]["max_abs_difference"] > 1e-4
    assert all(d["tli_within_oov_cap"]["pass"] for d in dc.values())  # scaled down: under it
    lines = harness.summary_lines(rep)
    assert lines[-1] == "SOME CHECKS FAILED"
    fails = [ln for ln in lines if "vanilla == TLI FAIL" in ln]
    assert len(fails) == 1
    assert fails[0].startswith("K=200 deterministic checks per position (to 1e-09): ")


def test_a_normal_run_holds_both_relations_at_every_position(planted):
    rep = planted["normal"]
    rows = rep["study"]["rows"]
    n_stat = sum(len(r["checks"]) for r in rows) + len(rep["speculative"])
    assert rep["n_checks"] == n_stat + 2 * len(rows)
    for row in rows:
        dc = row["deterministic_checks"]
        assert list(dc) == list(study.DETERMINISTIC_CHECKS)
        assert all(c["pass"] and c["positions_failing"] == 0 for c in dc.values())
        assert dc["vanilla_equals_tli"]["max_abs_difference"] <= study.EXACT_ROUNDOFF
    # the deterministic checks spend none of the false-alarm rate
    assert rep["study"]["n_tests"] == 2 * 2 * len(study.SAMPLERS) + 1
    assert (f"deterministic checks per position (to {study.EXACT_ROUNDOFF:g}): vanilla == TLI "
            "ok, TLI <= OOV cap ok at every kept size") in harness.summary_lines(rep)


# --------------------------------------------------------------- one run's files per folder


@pytest.mark.parametrize("drawing", ["matplotlib missing", "interrupted"])
def test_an_earlier_runs_files_go_before_this_runs_first_file(tiny, tmp_path, monkeypatch,
                                                             drawing):
    """Every file the harness writes that an earlier run left in --out is removed before this
    run writes its first (laws.npz with --topk, right after teacher forcing), so its laws never
    sat beside the old report, nor the old figures beside its report when the figures were
    skipped (no matplotlib) or the drawing was interrupted; other files stay."""
    from gpu_validation import figures

    out = tmp_path / "run"
    out.mkdir()
    for name in harness.OUTPUT_FILES:
        (out / name).write_text("from an earlier run")
    (out / "notes.txt").write_text("the user's")
    seen = {}
    orig_save = harness.save_laws

    def save_laws(path, *a):
        seen["before_first_file"] = sorted(p.name for p in out.iterdir())
        return orig_save(path, *a)

    def no_figure(*a):
        raise (ImportError("No module named 'matplotlib'") if drawing == "matplotlib missing"
               else KeyboardInterrupt())

    monkeypatch.setattr(harness, "save_laws", save_laws)
    monkeypatch.setattr(figures, "acceptance_vs_kept", no_figure)
    cfg = _tiny_cfg(tiny, out, topk=8)
    if drawing == "interrupted":
        with pytest.raises(KeyboardInterrupt):
            harness.run(cfg, log=_quiet)
    else:
        harness.run(cfg, log=_quiet)
    assert seen["before_first_file"] == ["notes.txt"]
    assert sorted(p.name for p in out.iterdir()) == [
        "laws.npz", "laws_calib.npz", "notes.txt", "per_position.npz", "report.json"]
    assert (out / "notes.txt").read_text() == "the user's"
    assert json.loads((out / "report.json").read_text())["laws_file"]["k"] == 8


def test_a_run_refused_after_loading_leaves_the_earlier_run_in_place(tiny, tmp_path):
    """The earlier run's files go only when this run is about to write: a run refused once
    the models are loaded keeps them."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "report.json").write_text("from an earlier run")
    with pytest.raises(InputError, match="kept size 400 exceeds"):
        harness.run(_tiny_cfg(tiny, out, kept=(400,), e2e_kept=(400,)), log=_quiet)
    assert (out / "report.json").read_text() == "from an earlier run"
    # the study's own refusal of sparse_k came after the earlier run's files were gone
    with pytest.raises(InputError, match=r"sparse_k must be in 1\.\.300"):
        harness.run(_tiny_cfg(tiny, out, sparse_k=1000), log=_quiet)
    assert (out / "report.json").read_text() == "from an earlier run"


@pytest.mark.parametrize("stage", ["acceptance_study", "end_to_end"])
def test_a_run_that_fails_in_the_study_or_generation_leaves_the_earlier_run(
        tiny, tmp_path, monkeypatch, stage):
    """A study refused on the data (no drafter mass on the kept ids, say), or a generation
    that fails or is interrupted, came after the earlier run's files (and, with --topk, this
    run's laws.npz beside them) had gone: now nothing is removed or written until both are
    done."""
    out = tmp_path / "run"
    out.mkdir()
    for name in ("report.json", "laws.npz"):
        (out / name).write_text("from an earlier run")

    def fails(*a, **kw):
        raise InputError(f"{stage} failed")

    monkeypatch.setattr(study if stage == "acceptance_study" else harness, stage, fails)
    with pytest.raises(InputError, match=f"{stage} failed"):
        harness.run(_tiny_cfg(tiny, out, topk=8), log=_quiet)
    assert sorted(p.name for p in out.iterdir()) == ["laws.npz", "report.json"]
    assert all((out / n).read_text() == "from an earlier run" for n in ("laws.npz", "report.json"))


# ---------------------------------------------------------------- report and summary fields


def test_a_kept_size_beyond_the_shared_width_is_refused_before_teacher_forcing(
        tiny, tmp_path, monkeypatch):
    """A local or hub drafter's size is known once it is loaded: a kept size beyond the ids
    both models share (the narrow head's 300 of the wide one's 364 rows) is refused then,
    not after teacher-forcing both models on every text."""
    from gpu_validation import collect

    def teacher_forcing(*a, **kw):
        raise AssertionError("teacher-forced before refusing the kept size")

    monkeypatch.setattr(collect, "collect", teacher_forcing)
    for kept, e2e in (((320,), (50,)), ((50,), (301,))):
        cfg = _tiny_cfg(tiny, tmp_path / "run", drafter=tiny["wide"], kept=kept, e2e_kept=e2e)
        with pytest.raises(InputError, match=rf"kept size {max(kept + e2e)} exceeds the "
                                             r"drafter's vocabulary \(300 ids shared"):
            harness.run(cfg, log=_quiet)
    assert not (tmp_path / "run").exists()


def test_the_report_records_a_command_one_can_paste(tiny, tmp_path, monkeypatch):
    """Under ``python -m gpu_validation run`` Python puts the package's __main__.py in
    sys.argv[0]: the report said '__main__.py run ...', which runs nothing."""
    from gpu_validation.__main__ import main

    out = tmp_path / "my run"
    args = ["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--kept", "50",
            "--positions", "3", "--steps", "5", "--e2e-tokens", "2", "--no-timing",
            "--dtype", "float32", "--out", str(out)]
    main_py = str(harness.Path(harness.__file__).with_name("__main__.py"))
    monkeypatch.setattr(sys, "argv", [main_py, *args])
    main(args)
    cmd = json.loads((out / "report.json").read_text())["command"]
    assert cmd.startswith("python -m gpu_validation run --target ")
    assert cmd.endswith(f" --out '{out}'")  # quoted: the folder's name has a space
    assert harness.command_line(["/usr/bin/rdk-theory", "validate", "--quick"]) == (
        "rdk-theory validate --quick")


def test_laws_file_reports_the_k_it_stored(tiny, tmp_path):
    """--topk above the vocabulary stores every id (topk.save caps it at N); laws_file.k said
    the K asked for, not the 300 columns in the file."""
    out = tmp_path / "run"
    rep = harness.run(_tiny_cfg(tiny, out, topk=1000), log=_quiet)
    with np.load(out / "laws.npz") as z:
        stored = z["p_ids"].shape[1]
    assert stored == tiny["n_tokens"] == 300
    assert rep["laws_file"]["k"] == 300 and rep["laws_file"]["k_requested"] == 1000
    assert harness.run(_tiny_cfg(tiny, out, topk=8), log=_quiet)["laws_file"]["k"] == 8


def test_the_summary_says_why_one_timing_size_fits_no_slope():
    """--timing-sizes 4096 times one N, where no slope can be fitted: the summary printed an
    empty 'slopes:' line."""
    report = {"study": {"rows": []}, "speculative": [], "all_checks_pass": True,
              "timing": {"slopes": {"first_order@batch1": None, "floor@batch1": None}}}
    lines = harness.summary_lines(report)
    assert "slopes: none (a slope needs at least 2 timing sizes)" in lines
    report["timing"]["slopes"]["floor@batch1"] = 0.5
    assert "slopes: floor@batch1=0.50" in harness.summary_lines(report)
