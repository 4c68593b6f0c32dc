"""DISCO: exact DP on acceptance traces vs Monte Carlo replay; oracle vs static; policies on toy LMs."""
from __future__ import annotations

import numpy as np
import pytest

from simulators import disco
from simulators.block import z_pvalue
from simulators.sequence import make_proposal_fn
from simulators.toy_lm import toy_pair
from tests.stats import assert_matches_law, assert_pvalue
from tests.tolerances import assert_close, assert_leq


def test_constant_trace_matches_closed_forms_away_from_the_end():
    """Away from the end a constant trace costs the closed-form rate per token: the end of the
    trace adds a constant, so the time of 2n tokens minus that of n is n times the rate
    (float64 round-off only)."""
    a, c, n = 0.8, 0.1, 3000
    for time_of, rate in ((lambda t: disco.trace_time_oracle(t, c), 1 - a + a * c),
                          (lambda t: disco.trace_time_static(t, 4, c),
                           (4 * c + 1) * (1 - a) / (1 - a ** 5))):
        assert_close(time_of(np.full(2 * n, a)) - time_of(np.full(n, a)), n * rate)


def test_oracle_beats_every_static_length_exactly():
    rng = np.random.default_rng(0)
    for _ in range(3):
        trace = disco.regime_trace(rng, 300)
        oracle = disco.trace_time_oracle(trace, 0.1)
        assert_leq(oracle, min(disco.trace_time_static(trace, g, 0.1) for g in range(12)))
        assert disco.trace_time_oracle(trace, 0.1, charge_mismatch=True) >= oracle


def test_gamma_zero_is_target_alone():
    trace = np.full(50, 0.7)
    assert disco.trace_time_static(trace, 0, 0.3) == 50.0


def test_threshold_zero_always_drafts_gamma_max():
    pair = toy_pair("same", seed=0)
    fn = make_proposal_fn(pair.drafter.float_copy(), pair.vocab_map, "vanilla", exact=False)
    out = disco.run_policy(pair.target.float_copy(), fn, 500, 0.1, np.random.default_rng(0),
                           policy="threshold", threshold=0.0, gamma_max=3)
    assert out["drafts"] == 3 * out["iterations"]
    st = disco.run_policy(pair.target.float_copy(), fn, 500, 0.1, np.random.default_rng(0),
                          policy="static", gamma=3)
    assert st["drafts"] == 3 * st["iterations"]


@pytest.mark.mc
def test_trace_dp_matches_monte_carlo_replay():
    """n = 400 replays of a 300-position regime trace per policy (static 3 and oracle): z-tests
    of the mean generation time against the exact DP at the suite's per-test false-alarm rate."""
    rng = np.random.default_rng(1)
    trace = disco.regime_trace(rng, 300)
    for policy, exact in ((3, disco.trace_time_static(trace, 3, 0.1)), ("oracle", disco.trace_time_oracle(trace, 0.1))):
        times = disco.trace_replay(trace, 0.1, policy, rng, n_runs=400)
        assert_pvalue(z_pvalue(times, exact), f"trace replay {policy}")


def test_toy_trace_walks_the_target_and_records_alpha_at_each_of_its_contexts():
    """Mutation pass: a trace drawn from the proposal instead of the target went unseen (only
    the alphas' range was checked). The pruned pair's TLI proposal has no mass on the target
    ids the drafter lacks, so a trace that emits them follows the target; and every recorded
    alpha is that of the target and proposal at the context the trace had reached."""
    from rdk_theory.acceptance import acceptance_rate

    pair = toy_pair("pruned", seed=0).float_copy()
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, "tli", exact=False)
    alphas, toks = disco.toy_trace(pair.target, fn, 400, np.random.default_rng(0))
    absent = set(range(pair.vocab_map.n_target)) - {int(i) for i in pair.vocab_map.intersection}
    assert absent and set(toks.tolist()) & absent
    for t in range(len(toks)):
        ctx = tuple(int(x) for x in toks[:t])
        assert alphas[t] == acceptance_rate(pair.target.next_probs(ctx), fn(ctx), check=False)


def test_oracle_gain_on_toy_lm_is_positive():
    """The oracle policy beats the best static gamma by a stated margin, not just by any amount.

    A seeded replay of 3000 tokens (deterministic for a checkout). Over five other seeds the
    ratio oracle / best static time per token was 0.70-0.73 (sd about 0.015), so the bound 0.8
    leaves about five standard deviations of Monte Carlo noise between it and the effect."""
    pair = toy_pair("pruned", seed=0)
    fn = make_proposal_fn(pair.drafter.float_copy(), pair.vocab_map, "tli", exact=False)
    tgt = pair.target.float_copy()
    rng = np.random.default_rng(2)
    static = min(disco.run_policy(tgt, fn, 3000, 0.1, rng, policy="static", gamma=g)["time_per_token"]
                 for g in (3, 4, 5))
    oracle = disco.run_policy(tgt, fn, 3000, 0.1, rng, policy="oracle")["time_per_token"]
    assert oracle < 0.8 * static, oracle / static


class _Unigram:
    """An order-0 target: the same next-token law after every context."""

    def __init__(self, probs):
        self.probs = np.asarray(probs, dtype=np.float64)

    def next_probs(self, ctx):
        return self.probs


#: target p and a sub-stochastic proposal r (a fifth of the drafter's mass is on a token the
#: target lacks): per-position acceptance alpha = min(.5, .7) + min(.3, .1) + 0 = 0.6.
_P, _R, _ALPHA = (0.5, 0.3, 0.2), (0.7, 0.1, 0.0), 0.6


def test_the_oracle_charges_no_mismatch_when_every_draft_is_accepted():
    """Mutation pass: with r = p every draft is accepted, so the oracle drafts gamma_max = 3
    and emits 4 tokens per call: 2000 tokens in 500 calls, 1500 drafts, time 500 (1 + 3 c).
    ``charge_mismatch`` must add nothing (it used to be untested; charging anyway gave 2000
    drafts and time 700)."""
    out = disco.run_policy(_Unigram([0.5, 0.5]), lambda ctx: np.array([0.5, 0.5]), 2000, 0.1,
                           np.random.default_rng(0), policy="oracle", gamma_max=3,
                           charge_mismatch=True)
    assert (out["iterations"], out["drafts"]) == (500, 1500)
    assert_close(out["time"], 500 * 1.3)


@pytest.mark.mc
def test_run_policy_emits_the_target_law_and_the_closed_form_tokens_per_call():
    """Static gamma = 3 on a unigram target, n = 30000 tokens (about 13800 target calls):
    chi-square of the emitted tokens against p, and a z-test of the mean tokens per call
    against (1 - alpha^4) / (1 - alpha) = 2.176 (calls are i.i.d. for a unigram target), each
    at the per-test false-alarm rate."""
    out = disco.run_policy(_Unigram(_P), lambda ctx: np.array(_R), 30_000, 0.1,
                           np.random.default_rng(11), policy="static", gamma=3, keep_tokens=True)
    assert out["emitted"].size == out["tokens"] == out["per_call"].sum()
    assert out["per_call"].size == out["iterations"]
    assert_matches_law(np.bincount(out["emitted"], minlength=3), np.array(_P), "DISCO static output vs p")
    assert_pvalue(z_pvalue(out["per_call"], (1 - _ALPHA ** 4) / (1 - _ALPHA)), "DISCO tokens per call")


def test_entry_drafts_verifies_and_resamples_from_the_same_proposal():
    """The per-context sampler: a draft is r's inverse CDF over its own mass (the rest is a
    token the target lacks, -1); the residual is (p - r)+ normalised."""
    e = disco._Entry(np.array([0.5, 0.5]), np.array([0.25, 0.25]))
    assert [e.draft(u) for u in (0.1, 0.3, 0.6)] == [0, 1, -1]
    e = disco._Entry(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    rng = np.random.default_rng(0)
    assert {e.draw_residual(rng) for _ in range(50)} == {1}  # (p - r)+ = (0, 1/2)


def test_drafting_costs_of_the_policies():
    """Exact draft counts: the threshold policy tests the proposal probability of the drafted
    token (r = 1 there, so it never stops before gamma_max); static pays gamma even when
    drafting stopped early at a token the target lacks."""
    target = _Unigram([0.5, 0.5])
    out = disco.run_policy(target, lambda ctx: np.array([1.0, 0.0]), 2000, 0.1,
                           np.random.default_rng(0), policy="threshold", threshold=0.9, gamma_max=3)
    assert out["drafts"] == 3 * out["iterations"]
    out = disco.run_policy(target, lambda ctx: np.array([0.5, 0.0]), 2000, 0.1,
                           np.random.default_rng(0), policy="static", gamma=3)
    assert out["drafts"] == 3 * out["iterations"]
    assert_close(out["time"], out["iterations"] * (3 * 0.1 + 1))


def test_all_accepted_traces_are_exact_at_the_end():
    """With every draft accepted the oracle drafts the whole rest of the trace in one call:
    time (n - 1) c + 1, with no mismatch to pay; the replay gives the same."""
    assert_close(disco.trace_time_oracle(np.ones(3), 0.1, charge_mismatch=True), 1.2)
    assert_close(disco.trace_time_oracle(np.ones(5), 0.1), 1.4)
    rng = np.random.default_rng(0)
    assert_close(disco.trace_replay(np.ones(5), 0.1, "oracle", rng)[0], 1.4)
    assert_close(disco.trace_replay(np.ones(5), 0.1, 2, rng)[0],
                 disco.trace_time_static(np.ones(5), 2, 0.1))


@pytest.mark.parametrize("kwargs, message", [
    ({"gamma": -1}, "gamma must be an integer >= 0"),  # time per token was 0.0
    ({"c": -2.0}, r"cost ratio c must be in \[0, 1\]"),  # time per token was -1.25
    ({"c": 5.0}, r"cost ratio c must be in \[0, 1\]"),
    ({"n_tokens": 0}, "n_tokens must be an integer >= 1"),  # ZeroDivisionError
    ({"policy": "threshold", "threshold": "0.4"}, r"threshold must be in \[0, 1\]"),
    ({"window": 0}, "window must be an integer >= 1"),
])
def test_run_policy_refuses_settings_that_give_impossible_times(kwargs, message):
    pair = toy_pair("same", seed=0)
    fn = make_proposal_fn(pair.drafter.float_copy(), pair.vocab_map, "vanilla", exact=False)
    args = {"n_tokens": 50, "c": 0.1, **kwargs}
    with pytest.raises(disco.InputError, match=message):
        disco.run_policy(pair.target.float_copy(), fn, args.pop("n_tokens"), args.pop("c"),
                         np.random.default_rng(0), **args)


@pytest.mark.parametrize("policy, c, message", [
    (-1, 1.0, "policy .* must be an integer >= 0"),  # a time of 0 for 10 tokens
    (2.7, 0.1, "policy .* must be an integer >= 0"),  # ran as static 2
    ("foo", 0.1, "policy .* must be an integer >= 0"),
    (2, None, r"cost ratio c must be in \[0, 1\]"),  # TypeError
])
def test_trace_replay_refuses_a_policy_that_is_not_oracle_or_a_length(policy, c, message):
    with pytest.raises(disco.InputError, match=message):
        disco.trace_replay(np.full(10, 0.5), c, policy, np.random.default_rng(0))
    if c is None:
        with pytest.raises(disco.InputError, match=message):
            disco.trace_time_static([0.5], 1, c)


def test_regime_trace_and_toy_models_name_bad_input():
    """regime_trace returned NaN traces for easy = NaN and raised numpy's error for 'x';
    sequence_prob read p[-1] for token -1; noisy_drafter took kept ids -1 and repeats;
    toy_pair's seed -1 was numpy's ValueError; a string drafter's token list shorter than its
    chain cut the law silently."""
    import numpy as np
    import pytest

    from rdk_theory.validation import InputError
    from simulators import disco, strings, toy_lm

    rng = np.random.default_rng(0)
    pair = toy_lm.toy_pair("pruned", 0)
    bad = [(lambda: disco.regime_trace(rng, 5, easy=float("nan")), "need easy in"),
           (lambda: disco.regime_trace(rng, 5, jitter="x"), "need jitter in"),
           (lambda: pair.target.sequence_prob((), [-1]), "a token id must be an integer >= 0"),
           (lambda: pair.target.sequence_prob((), [99]), "token id 99 is not below n_out = 5"),
           (lambda: toy_lm.noisy_drafter(pair.target, rng, kept_ids=[-1, 0]), ">= 0, got -1"),
           (lambda: toy_lm.noisy_drafter(pair.target, rng, kept_ids=[0, 0]), "more than once"),
           (lambda: toy_lm.toy_pair("same", -1), "seed must be an integer >= 0"),
           (lambda: strings.markov_string_drafter(strings.toy_string_models()[1], ["a"]),
            "token strings for a chain over"),
           (lambda: strings.segmentation_count("ab", [1]), "draft_tokens must be a list")]
    for call, message in bad:
        with pytest.raises(InputError, match=message):
            call()


def test_segmentation_count_reads_a_generator_once_and_task_starts_takes_no_tasks():
    """The type check read a generator of tokens, which then counted 0 segmentations; an
    empty list of task indices is no task, not a bad index."""
    import numpy as np

    from simulators import dsi, strings

    assert strings.segmentation_count("ab", (t for t in ["a", "b"])) == 1
    assert strings.segmentation_count("ab", iter(["a", "b", "ab"])) == 2
    assert dsi.task_starts([], 0.1, 2, 3).size == 0
    assert dsi.task_starts(np.int64(5), 0.1, 2, 3) == 1.4
