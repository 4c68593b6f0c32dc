"""A validation run's report says what the run did (gpu_validation.harness): the positions, the
calibration counts, the Bonferroni split of the run-wide false-alarm rate, the checks that
decide the pass, the per-position file and the summary table. Tiny random Llama models
(tests/tiny_models.py; no hub, a few seconds); the timing sweep is replaced by a stub (its
structure is tests/test_timing.py's), so nothing here is timed."""
from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("torch")

from gpu_validation import agreement, collect, harness, models, pruning, speculative, study, timing  # noqa: E402
from gpu_validation.samplers import SAMPLERS  # noqa: E402
from rdk_theory.validation import InputError  # noqa: E402
from tests import stats  # noqa: E402
from tests.tolerances import assert_close  # noqa: E402

KEPT = (200, 50)
POSITIONS = 20
#: The stub sweep's report: dense exact measured at one N only, so its slope is None.
STUB_TIMING = {"device": "cpu", "calib_rows": 64, "repeats": 5, "slopes": {
    "first_order@batch1": 1.0, "dense_exact@batch1": None, "floor@batch1": 0.5},
    "rows": [{"n": 64, "batch": 1, "device": "cpu", "floor_s": 1e-3, "first_order_s": 2e-3,
              "dense_exact_s": 4e-3, "first_order_ratio_to_floor": 2.0,
              "dense_exact_ratio_to_floor": 4.0},
             {"n": 256, "batch": 1, "device": "cpu", "floor_s": 2e-3, "first_order_s": 8e-3,
              "dense_exact_s": None, "first_order_ratio_to_floor": 4.0}]}


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    """One run (K = 200 and 50 of 300 ids, 20 positions, 50 steps, generation at K = 200 with
    TLI and marginal RDK, top-8 laws, seed 3) with spies on what the stages are given; returns
    (report, config, seen). One generation size and two samplers: 1 x 2 checks, not 1 + 2.
    The run-wide false-alarm rate agreement.FALSE_ALARM is lowered to the suite's
    FALSE_ALARM_PER_TEST for the run (``tests.stats.assert_run_checks_pass``)."""
    seen = {"sweep": []}
    out = tmp_path_factory.mktemp("run")
    cfg = harness.RunConfig(target=tiny["narrow"], drafter=tiny["narrow"], dtype="float32",
                            kept=KEPT, e2e_kept=(200,), max_positions=POSITIONS, n_steps=50,
                            e2e_tokens=6, timing_sizes=(64, 256), topk=8, seed=3,
                            progress=False, out=str(out))
    orig_pair, orig_study = harness.collect_pair, study.acceptance_study

    def collect_pair(c, log):
        seen["pair"] = orig_pair(c, log)
        return seen["pair"]

    def acceptance_study(p, q, counts, kept, **kw):
        seen["study_in"] = (p, q, counts, kw["other_tests"])
        seen["study_out"] = orig_study(p, q, counts, kept, **kw)
        return seen["study_out"]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness, "collect_pair", collect_pair)
        mp.setattr(study, "acceptance_study", acceptance_study)
        mp.setattr(timing, "sweep", lambda **kw: seen["sweep"].append(kw) or STUB_TIMING)
        mp.setattr(agreement, "FALSE_ALARM", stats.FALSE_ALARM_PER_TEST)
        report = harness.run(cfg, log=lambda *a: None)
    assert json.loads((out / "report.json").read_text())["n_checks"] == report["n_checks"]
    return report, cfg, seen


def test_positions_are_evenly_spaced_from_first_to_last(run):
    report, cfg, seen = run
    _, _, ev, _, _ = seen["pair"]
    n = ev.p.shape[0]
    assert n > POSITIONS
    sel = np.linspace(0, n - 1, POSITIONS).round().astype(int)
    assert sel[0] == 0 and sel[-1] == n - 1
    p, q, _, _ = seen["study_in"]
    assert np.array_equal(p, ev.p[sel]) and np.array_equal(q, ev.q[sel])
    assert report["data"]["eval_positions"] == n
    assert report["data"]["positions_used"] == POSITIONS


def test_pruning_counts_and_teacher_forced_alphas_come_from_the_right_texts(run):
    """The drafter is pruned by unigram counts of the calibration texts (never the evaluation
    texts); the teacher-forced full-vocabulary alpha is the mean over each text's positions."""
    report, cfg, seen = run
    tgt, _, ev, ca, counts = seen["pair"]
    cal_ids = [collect.tokenize(tgt.tokenizer, collect.read_text(t)) for t in collect.CALIB_TEXTS]
    want = pruning.token_counts(cal_ids, ev.p.shape[1])
    assert np.array_equal(seen["study_in"][2], want) and np.array_equal(counts, want)
    assert report["data"]["calibration_positions"] == ca.p.shape[0] != ev.p.shape[0]
    tf = report["data"]["teacher_forced_alpha_full_vocab"]
    assert list(tf) == list(ev.texts)
    for i, name in enumerate(ev.texts):
        rows = ev.source == i
        a = np.minimum(ev.p[rows], ev.q[rows]).astype(np.float64).sum(1)
        assert_close(tf[name], a.mean(), err_msg=name)


def test_the_false_alarm_rate_is_split_over_every_check_of_the_run(run):
    """Bonferroni over the whole run (module docstring): 2 tests (aggregate, dispersion) per
    sampler and kept size, plus one per end-to-end (kept size, sampler); each end-to-end
    check runs at FALSE_ALARM / that total, as the study's do (the run's FALSE_ALARM, as
    its report records it: the fixture lowered it to FALSE_ALARM_PER_TEST)."""
    report, cfg, seen = run
    n_e2e = len(cfg.e2e_kept) * len(cfg.e2e_samplers)
    assert n_e2e == 2 and seen["study_in"][3] == n_e2e
    total = 2 * len(KEPT) * len(SAMPLERS) + n_e2e
    assert report["study"]["n_tests"] == total
    assert [(e["kept"], e["sampler"]) for e in report["speculative"]] == [
        (200, s) for s in ("tli", "marginal")]
    for e in report["speculative"]:
        assert_close(e["check"]["test_level"], report["false_alarm"] / total)
    assert report["false_alarm"] == stats.FALSE_ALARM_PER_TEST


def test_every_check_counts_towards_the_pass(run):
    """n_checks: every study check, every end-to-end check, the two deterministic checks per
    kept size (vanilla == TLI, TLI <= p(I)) and the top-k bound (--topk)."""
    report, _, _ = run
    n_study = sum(len(r["checks"]) for r in report["study"]["rows"])
    assert n_study == len(KEPT) * len(SAMPLERS)
    rows = report["study"]["rows"]
    assert all(list(r["deterministic_checks"]) == list(study.DETERMINISTIC_CHECKS) for r in rows)
    n_exact = 2 * len(KEPT)
    assert report["n_checks"] == n_study + len(report["speculative"]) + n_exact + 1
    parts = ([c["pass"] for r in rows for c in r["checks"].values()]
             + [e["check"]["pass"] for e in report["speculative"]]
             + [c["pass"] for r in rows for c in r["deterministic_checks"].values()]
             + [report["laws_file"]["bound_holds"]])
    assert report["all_checks_pass"] is all(parts)


def test_generation_figures_are_computed_from_the_counts(run):
    report, cfg, _ = run
    for e in report["speculative"]:
        assert e["gamma"] == cfg.gamma and len(e["accept_length_histogram"]) == cfg.gamma + 1
        assert sum(e["accept_length_histogram"]) == e["target_calls"] > 0
        assert e["tokens_per_call"] == e["new_tokens"] / e["target_calls"]
        assert_close(e["iid_prediction_tokens_per_call"],
                     speculative.iid_tokens_per_call(e["check"]["predicted_rate"], cfg.gamma))


def test_per_position_file_holds_every_cell_of_the_study(run):
    report, cfg, seen = run
    st = seen["study_out"]
    with np.load(cfg.out + "/per_position.npz") as z:
        got = {k: z[k] for k in z.files}
    assert set(got) == {f"{s}@{k}:{w}" for s in SAMPLERS for k in KEPT
                        for w in ("predicted", "measured")}
    for key, d in st["per_position"].items():
        for w in ("predicted", "measured"):
            assert np.array_equal(got[f"{key}:{w}"], np.asarray(d[w], dtype=np.float32))
            assert got[f"{key}:{w}"].shape == (POSITIONS,)


def test_timing_stage_gets_the_runs_device_sizes_and_seed(run):
    report, cfg, seen = run
    assert seen["sweep"] == [{"device": "cpu", "sizes": (64, 256), "seed": 3}]
    assert report["timing"] == STUB_TIMING
    assert (harness.Path(cfg.out) / "time_vs_n.png").stat().st_size > 0


def test_summary_table_cells_and_slopes(run):
    """Each cell is 'predicted/measured ok' (the header names predicted first); the slopes
    line leaves out a slope that could not be fitted (None); the last line is the verdict.
    Monte Carlo (20 positions x 50 steps per study cell, generation of 6 tokens): that every
    check passes is one counted assertion at FALSE_ALARM_PER_TEST
    (``tests.stats.assert_run_checks_pass``)."""
    report, _, _ = run
    stats.assert_run_checks_pass(report)
    lines = harness.summary_lines(report)
    for r, line in zip(report["study"]["rows"], lines[1:1 + len(KEPT)]):
        c = r["checks"]["tli"]
        cell = f"{c['predicted_mean']:.4f}/{c['measured_mean']:.4f} {'ok' if c['pass'] else 'FAIL':>2}"
        assert line.split()[0] == str(r["kept"]) and cell.rjust(16) in line
        assert c["pass"] and cell.endswith(" ok")
    assert "slopes: first_order@batch1=1.00, floor@batch1=0.50" in lines
    assert lines[-1] == "ALL CHECKS PASS"


def test_a_failed_check_fails_the_run_and_the_command(tiny, tmp_path, monkeypatch, capsys):
    """One end-to-end check failing (a stand-in for its test): all_checks_pass is False, the
    summary says so (its line ends in FAIL) and the command exits 1 (the report is written).
    Monte Carlo (5 positions x 20 steps per study cell): that the study's checks pass is one
    counted assertion at FALSE_ALARM_PER_TEST, the run's rate lowered to it
    (``tests.stats.assert_run_checks_pass``)."""
    from gpu_validation.__main__ import main

    monkeypatch.setattr(agreement, "FALSE_ALARM", stats.FALSE_ALARM_PER_TEST)
    orig = agreement.martingale_agreement

    def fails(*a, **kw):
        return {**orig(*a, **kw), "pass": False}

    monkeypatch.setattr(agreement, "martingale_agreement", fails)
    out = tmp_path / "run"
    rc = main(["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--kept", "50",
               "--positions", "5", "--steps", "20", "--e2e-tokens", "4", "--no-timing",
               "--dtype", "float32", "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    report = json.loads((out / "report.json").read_text())
    stats.assert_run_checks_pass(report, study_only=True)
    assert all(c["pass"] for r in report["study"]["rows"] for c in r["checks"].values())
    assert report["all_checks_pass"] is False and rc == 1
    # K = 50: study + TLI and marginal e2e + vanilla == TLI and TLI <= p(I)
    assert report["n_checks"] == len(SAMPLERS) + 2 + 2
    assert "SOME CHECKS FAILED" in lines and "ALL CHECKS PASS" not in lines
    e2e = [ln for ln in lines if ln.startswith("e2e K=50") and "(p=" in ln]  # not the log lines
    assert len(e2e) == 2 and all(ln.endswith(" FAIL") for ln in e2e)


def test_a_kept_size_equal_to_the_drafters_vocabulary_is_allowed(tiny, tmp_path):
    """Every id kept (K = N = 300) is a valid size: only K > N is refused."""
    cfg = harness.RunConfig(target=tiny["narrow"], drafter=tiny["narrow"], dtype="float32",
                            kept=(tiny["n_tokens"],), e2e_kept=(tiny["n_tokens"],),
                            e2e_samplers=("tli",), max_positions=5, n_steps=10, e2e_tokens=2,
                            timing=False, progress=False, out=str(tmp_path / "run"))
    report = harness.run(cfg, log=lambda *a: None)
    assert [r["kept"] for r in report["study"]["rows"]] == [300]
    assert [e["kept"] for e in report["speculative"]] == [300]


@pytest.mark.parametrize("progress", [True, False])
def test_collection_draws_one_bar_step_per_text(monkeypatch, capsys, progress):
    """Teacher forcing is minutes of a validation run (and of the main job on the real pair):
    each of the two collections gets a bar of one step per text when progress is on, none
    when it is off."""
    from types import SimpleNamespace

    vocab = {"a": 0, "b": 1}
    lm = SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: vocab), output_width=32)
    seen = []

    def fake_collect(tgt, drf, texts, *, device, progress):
        seen.append((tuple(texts), progress and (progress.total, progress.desc)))
        if progress is not None:
            progress.update(len(texts))
        return SimpleNamespace(p=np.full((3, 2), 0.5))

    monkeypatch.setattr(models, "load", lambda spec, **kw: lm)
    monkeypatch.setattr(models, "share_output_width", lambda *a: None)
    monkeypatch.setattr(collect, "collect", fake_collect)
    monkeypatch.setattr(collect, "read_text", lambda name: "a b")
    monkeypatch.setattr(collect, "tokenize", lambda tok, text: [0, 1])
    # no kept sizes: the stub models are checked on their head width only (sparse_k 16 <= 32)
    harness.collect_pair(harness.RunConfig(target="t", drafter="d", progress=progress, kept=(),
                                           e2e_kept=()), log=lambda *a: None)
    ev, ca = collect.EVAL_TEXTS, collect.CALIB_TEXTS
    if progress:
        assert seen == [(tuple(ev), (len(ev), "teacher-forcing evaluation texts")),
                        (tuple(ca), (len(ca), "teacher-forcing calibration texts"))]
        assert "teacher-forcing evaluation texts" in capsys.readouterr().err
    else:
        assert seen == [(tuple(ev), None), (tuple(ca), None)]
        assert capsys.readouterr().err == ""


def test_tokenizers_with_the_same_size_but_other_ids_are_refused(monkeypatch):
    """The pruned-drafter study needs one tokenizer: same number of ids is not enough."""
    from types import SimpleNamespace

    vocabs = {"t": {"a": 0, "b": 1}, "d": {"a": 1, "b": 0}}

    def load(spec, **kw):
        return SimpleNamespace(tokenizer=SimpleNamespace(get_vocab=lambda: vocabs[spec]))

    monkeypatch.setattr(models, "load", load)
    monkeypatch.setattr(models, "share_output_width",
                        lambda *a: pytest.fail("went on past the tokenizer check"))
    with pytest.raises(models.ModelError, match="same tokenizer"):
        harness.collect_pair(harness.RunConfig(target="t", drafter="d"), log=lambda *a: None)


def test_quick_settings_are_those_of_the_help():
    """--quick: '2 kept sizes, 256 positions, 1000 steps, short generation and timing'."""
    q = harness.RunConfig.quick()
    assert len(q.kept) == 2 and q.max_positions == 256 and q.n_steps == 1000
    assert q.e2e_tokens < harness.RunConfig().e2e_tokens
    assert harness.RunConfig.quick(n_steps=7).n_steps == 7


def test_an_unknown_end_to_end_sampler_is_refused_with_the_choices(tmp_path):
    with pytest.raises(InputError, match="choose from tli, marginal, rdk_first_order"):
        harness.run(harness.RunConfig(target="x/t", drafter="x/d", e2e_samplers=("tli", "bogus"),
                                      out=str(tmp_path / "r")), log=lambda *a: None)


def test_outputs_survive_a_failed_timing_sweep_and_replace_links_and_stale_files(
        tiny, tmp_path, monkeypatch):
    """Three ways a run's --out misled: the timing sweep ran before anything was written, so
    one that failed (out of memory at a large --timing-sizes) lost the whole study; files were
    written through a symbolic link at their name; and files of an earlier run that this one
    does not write (laws.npz without --topk, time_vs_n.png) stayed beside its report."""
    out = tmp_path / "run"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("not a report")
    (out / "report.json").symlink_to(victim)
    for stale in ("laws.npz", "laws_calib.npz", "time_vs_n.png"):
        (out / stale).write_text("from an earlier run")

    def sweep_out_of_memory(**kw):
        raise MemoryError("a sweep too large for this machine")

    monkeypatch.setattr(timing, "sweep", sweep_out_of_memory)
    cfg = harness.RunConfig(target=tiny["narrow"], drafter=tiny["narrow"], dtype="float32",
                            kept=(50,), e2e_kept=(50,), e2e_samplers=("tli",), max_positions=5,
                            n_steps=10, e2e_tokens=2, timing_sizes=(64,), progress=False,
                            out=str(out))
    with pytest.raises(MemoryError):
        harness.run(cfg, log=lambda *a: None)
    assert victim.read_text() == "not a report"
    assert not (out / "report.json").is_symlink()
    report = json.loads((out / "report.json").read_text())
    assert [r["kept"] for r in report["study"]["rows"]] == [50] and report["timing"] is None
    assert (out / "per_position.npz").stat().st_size > 0
    assert sorted(p.name for p in out.iterdir()) == [
        "acceptance_vs_kept.png", "per_position.npz", "predicted_vs_measured.png", "report.json"]


def test_a_timing_size_beyond_the_cap_is_refused_before_any_model_loads(tmp_path):
    cfg = harness.RunConfig(target="nowhere/target", drafter="nowhere/drafter",
                            timing_sizes=(64, timing.MAX_SIZE + 1), out=str(tmp_path / "run"))
    with pytest.raises(InputError, match="timing size 1,048,577 exceeds 1,048,576"):
        harness.run(cfg, log=lambda *a: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting, message", [
    (dict(gamma=0), "gamma must be an integer >= 1"),
    (dict(e2e_tokens=0), "e2e_tokens must be an integer >= 1"),
    (dict(calib_rank=-1), "calib_rank must be an integer >= 1"),
    (dict(calib_rank=2.5), "calib_rank must be an integer >= 1"),
])
def test_run_settings_that_would_test_nothing_are_refused_before_any_model_loads(
        tmp_path, setting, message):
    """gamma 0 or e2e_tokens 0 gave end-to-end checks on 0 positions that passed (plain target
    sampling); calib_rank -1 kept S - 1 directions through a slice, 0 failed after the study
    with 'the calibration rows do not vary' (a fuzzing pass)."""
    cfg = harness.RunConfig(target="nowhere/target", drafter="nowhere/drafter",
                            out=str(tmp_path / "run"), **setting)
    with pytest.raises(InputError, match=message):
        harness.run(cfg, log=lambda *a: None)
    assert not (tmp_path / "run").exists()


def test_run_takes_a_full_rank_and_whole_floats_and_runs_with_the_ints(monkeypatch, tmp_path):
    """calib_rank None (the full factor, as calibration_stats takes it) passes the checks, and
    gamma 4.0 reaches the stages as the int 4 (it passed the check and then failed in
    np.zeros(gamma + 1) after the study; a second reading)."""
    seen = {}

    def stages(cfg, out, log):
        seen["cfg"] = cfg
        return {}

    monkeypatch.setattr(models, "check_specs", lambda *a, **k: None)
    monkeypatch.setattr(models, "builtin_base", lambda spec: None)
    monkeypatch.setattr(harness, "_run_stages", stages)
    harness.run(harness.RunConfig(calib_rank=None, gamma=4.0, e2e_tokens=8.0,
                                  out=str(tmp_path / "run")), log=lambda *a: None)
    cfg = seen["cfg"]
    assert cfg.calib_rank is None and (cfg.gamma, cfg.e2e_tokens) == (4, 8)
    assert type(cfg.gamma) is int and type(cfg.e2e_tokens) is int


def test_the_pipeline_helpers_name_bad_arguments():
    """Each was a raw error or a wrong number: a rank of -1 kept S - 1 directions, alpha 1.5
    gave 3.0 tokens per call, gamma 0 generated without drafting, an empty prompt failed in
    the model's forward pass, chunk 0 was range()'s error, a q of other rows a broadcast
    error, short counts were named as q', and duplicate kept sizes were counted twice."""
    rng = np.random.default_rng(0)
    cal = rng.dirichlet(np.ones(5), 6)
    for rank in (-1, 0, 2.5):
        with pytest.raises(InputError, match="rank must be an integer >= 1"):
            collect.calibration_stats(cal, rank=rank)
    assert collect.calibration_stats(cal, rank=2)[1].shape == (2, 5)
    for alpha in (1.5, float("nan"), -0.1):
        with pytest.raises(InputError, match="alpha must be an acceptance rate in"):
            speculative.iid_tokens_per_call(alpha, 2)
    # sum min(p, p) of float64 laws can be 1 + 2.2e-16: round-off, read as 1 (a second reading)
    assert speculative.iid_tokens_per_call(1 + 2.2e-16, 4) == 5.0
    for kw, message in ((dict(gamma=0), "gamma must be an integer >= 1"),
                        (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
                        (dict(prompt_ids=[]), "prompt_ids must hold at least one token")):
        args = {**dict(target=None, drafter=None, prompt_ids=[1], vocab_map=None,
                       make_proposal=None, rng=rng, gamma=2), **kw}
        with pytest.raises(InputError, match=message):
            speculative.generate(**args)
    p = rng.dirichlet(np.ones(5), 4).astype(np.float32)
    mu, factor = collect.calibration_stats(cal)
    base = dict(p=p, q=p, counts=np.arange(5), kept_sizes=[3], mu=mu, factor=factor,
                p_cal=cal, q_cal=cal, n_steps=0, rng=rng, sparse_k=2)
    for kw, message in ((dict(q=p[:3]), "must be \\(positions, N\\) pairs"),
                        (dict(counts=np.arange(4)), "counts must hold one token count per"),
                        (dict(kept_sizes=[]), "kept_sizes must be distinct sizes"),
                        (dict(kept_sizes=[3, 3]), "kept_sizes must be distinct sizes"),
                        (dict(chunk=0), "chunk must be an integer >= 1")):
        with pytest.raises(InputError, match=message):
            study.acceptance_study(**{**base, **kw})
    assert [r["kept"] for r in study.acceptance_study(**base)["rows"]] == [3]


def test_non_finite_laws_name_the_model_and_its_dtype():
    """float16 logits that overflow gave NaN laws, which surfaced as 'the calibration rows do
    not vary' (or draft_probs_full 'must be finite') far from their cause."""
    import torch

    class Overflowing:
        spec, info = "hot-model", {"dtype": "float16"}
        model = staticmethod(lambda x: type("Out", (), {"logits": torch.zeros(1, 3, 4)})())

        @staticmethod
        def probs(logits):
            return torch.full(logits.shape, float("nan"))

    with pytest.raises(models.ModelError, match="hot-model gave non-finite .* float16"):
        collect.next_token_probs(Overflowing(), [1, 2, 3])


def test_an_empty_timing_sweep_is_refused_not_the_default_one():
    """sizes=() ran the whole default sweep (``sizes or default``)."""
    from gpu_validation import timing
    from rdk_theory.validation import InputError

    with pytest.raises(InputError, match="names no vocabulary size"):
        timing.sweep(sizes=())
