"""End-to-end speculative generation is lossless: the first two generated tokens follow the
target's own laws (tiny random Llama models, tests/tiny_models.py; no hub, seconds).

The harness's own end-to-end check compares accept decisions with alpha; it never looks at
which token a rejection or a full acceptance emits. Here: the drafter is the target itself,
pruned to its first 150 of 300 ids (TLI), so half the target's mass is out of the drafter's
vocabulary and rejections, residual draws and bonus tokens all occur. With gamma = 1 and two
new tokens, token 1 is an accepted draft or a residual draw, and token 2 a bonus draw or the
next round's token; their laws are p(. | prompt) and sum_x p(x | prompt) p(. | prompt x)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpu_validation import collect, models, speculative  # noqa: E402
from rdk_theory.proposals import tli_proposal  # noqa: E402
from rdk_theory.vocab import VocabMap  # noqa: E402
from tests.stats import (assert_matches_law, assert_no_zero_probability_emitted,  # noqa: E402
                         assert_pvalue, binomial_pvalue)
from tests.tolerances import FLOAT32_ATOL, assert_close  # noqa: E402

RUNS = 1500
#: The drafter's kept ids (TLI's I): the target's first 150 of its 300 ids.
KEPT = np.arange(150)


def _law_after(lm, prefixes):
    """The float64 law after each prefix (a batch of equal-length id lists)."""
    with torch.inference_mode():
        logits = lm.model(torch.tensor(prefixes)).logits[:, -1]
    p = lm.probs(logits).numpy().astype(np.float64)
    return p / p.sum(-1, keepdims=True)


def test_generated_tokens_follow_the_targets_laws(tiny):
    """Monte Carlo, n = RUNS = 1500 generations; for token 1 and token 2 each: no token of
    probability 0 emitted, a chi-square against the exact law, and an exact binomial test of
    how many fall in the drafter's kept set I against the law's mass on I; all four p-values
    at the suite's per-test rate FALSE_ALARM_PER_TEST = 4e-6 (tests/stats.py).

    The target's laws are near uniform over 300 ids, so the chi-square pools its bins by
    expected count, across I and its complement: against a rejection that resamples from p
    instead of the residual it had power 0.27 %. That bug moves token 1's share in I from
    p(I) ~ 0.50 to p(I) + (1 - p(I)) p(I) ~ 0.75 (the residual lies outside I), about 19
    standard deviations at n = 1500, and token 2's to ~ 0.62 (~ 10 sd): the binomial tests
    see it. A bonus token drawn from the wrong position's law (the last draft's instead of
    the next) is not seen here: the tiny model's next-token laws differ by a total
    variation of only ~ 0.06 between contexts (chi-square power ~ 1e-5 at this n); the
    deterministic test_generate_with_a_deterministic_target_emits_its_forced_tokens
    catches it."""
    lm = models.load(tiny["narrow"], dtype="float32")
    n = tiny["n_tokens"]
    prompt = collect.tokenize(lm.tokenizer, "def f(x):\n")
    vm = VocabMap.from_kept_ids(KEPT, n)

    def make(q_kept):
        return tli_proposal(q_kept[None], vm, check=False)[0]

    rng = np.random.default_rng(0)
    first, second = np.zeros(n, np.int64), np.zeros(n, np.int64)
    rejected = 0
    for _ in range(RUNS):
        g = speculative.generate(lm, lm, prompt, vm, make, gamma=1, max_new_tokens=2, rng=rng)
        first[g["tokens"][0]] += 1
        second[g["tokens"][1]] += 1
        rejected += not g["accepted"][0]
    p1 = _law_after(lm, [prompt])[0]
    p2_given = _law_after(lm, [prompt + [x] for x in range(n)])
    p2 = p1 @ p2_given
    assert rejected > RUNS // 10  # the residual path ran
    for counts, law, what in ((first, p1, "token 1"), (second, p2, "token 2")):
        assert_no_zero_probability_emitted(counts, law)
        assert_matches_law(counts, law, f"end-to-end {what}, n = {RUNS}")
        in_kept = int(counts[KEPT].sum())
        assert_pvalue(binomial_pvalue(in_kept, RUNS, float(law[KEPT].sum())),
                      f"end-to-end {what} in the kept set: {in_kept} of {RUNS}, "
                      f"p(I) = {law[KEPT].sum():.4f}")


def test_an_end_to_end_sampler_without_its_kernel_is_refused_before_any_work(tmp_path):
    """rdk_exact has no kernel in end-to-end generation (the study's sparse exact rows are not
    built there): asked for through the API, it generated with TLI under the other name."""
    from gpu_validation.harness import RunConfig, run
    from rdk_theory.validation import InputError

    cfg = RunConfig(target="nowhere/target", drafter="nowhere/drafter", e2e_samplers=("rdk_exact",),
                    out=str(tmp_path / "run"))
    with pytest.raises(InputError, match="end-to-end sampler 'rdk_exact' is not available"):
        run(cfg, log=lambda *a: None)
    assert not (tmp_path / "run").exists()
    # first-order RDK at an end-to-end size the study does not pick a tau for ran at an
    # absolute tau of 1e-4, not one picked on calibration
    cfg = RunConfig(target="nowhere/target", drafter="nowhere/drafter", kept=(4096,),
                    e2e_kept=(2048,), e2e_samplers=("tli", "rdk_first_order"),
                    out=str(tmp_path / "run"))
    with pytest.raises(InputError, match="end-to-end size 2048 must be among the study's kept"):
        run(cfg, log=lambda *a: None)
    assert not (tmp_path / "run").exists()


def test_an_e2e_kept_size_beyond_a_loaded_drafters_vocabulary_is_an_error(tiny, tmp_path, capsys):
    """--e2e-kept 1000 with a 300-id drafter was skipped silently and the run passed; it is
    now refused once the models are loaded, before the study, as --kept 400 is."""
    from gpu_validation.__main__ import main

    rc = main(["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--kept", "200",
               "--e2e-kept", "1000", "--positions", "5", "--steps", "10", "--no-timing",
               "--dtype", "float32", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1] == ("error: kept size 1000 exceeds the drafter's vocabulary "
                                   "(300 ids shared with the target)"), err
    assert not (tmp_path / "run" / "report.json").exists()


def test_an_e2e_size_outside_the_study_runs_tli_and_marginal(tiny, tmp_path, capsys):
    """Without first-order RDK among the end-to-end samplers, an end-to-end size the study did
    not tune is allowed (run() checks only that case), yet every kernel was built with
    first-order RDK's tau, None there: the run ended after the whole study with 'tau must be
    a finite real number > 0, got None' and wrote nothing."""
    import json

    from gpu_validation.__main__ import main

    rc = main(["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--kept", "50",
               "--e2e-kept", "40", "--e2e-tokens", "4", "--positions", "5", "--steps", "10",
               "--no-timing", "--dtype", "float32", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc in (0, 1) and "error:" not in err, err  # 1: a check failed, not a crash
    rows = json.loads((tmp_path / "run" / "report.json").read_text())["speculative"]
    assert {(r["kept"], r["sampler"]) for r in rows} == {(40, "tli"), (40, "marginal")}


def test_repeated_sizes_are_read_once_and_fit_no_slope():
    from gpu_validation import timing
    from gpu_validation.cli import _ints

    assert _ints("4096,1024,4096", "--timing-sizes") == (4096, 1024)
    assert timing.slope([4096, 4096], [1.0, 2.0]) is None
    assert timing.slope([1024, 4096], [1.0, 4.0]) == pytest.approx(1.0)


class _StubCache:
    def __init__(self, n):
        self.n = n

    def crop(self, m):
        self.n = self.n + m if m < 0 else m


class _ContextFree:
    """A model with the same next-token law at every position (no weights, no hub)."""

    def __init__(self, law):
        from types import SimpleNamespace

        self.logits = torch.log(torch.tensor(law, dtype=torch.float64))
        self.tokenizer = SimpleNamespace(decode=lambda ids: "")

    def model(self, x, past_key_values=None, use_cache=True):
        from types import SimpleNamespace

        n = (past_key_values.n if past_key_values is not None else 0) + x.shape[1]
        return SimpleNamespace(logits=self.logits.expand(1, x.shape[1], -1).clone(),
                               past_key_values=_StubCache(n))

    def probs(self, logits):
        return torch.softmax(logits, -1)


def test_a_sub_stochastic_proposal_drafts_the_absent_token_with_its_missing_mass():
    """r = q / 2 leaves half the drafter's mass on a token the target lacks: that draft must be
    made (with probability 1 - sum r) and rejected. Drawing from r / sum r instead emitted
    (0.22, 0.23, 0.33, 0.22) for p = (0.4, 0.3, 0.2, 0.1) and accepted 0.8 against alpha 0.4.
    Monte Carlo, n = 3,000 one-token generations: chi-square of the token against p, and a
    binomial test of the accept rate against alpha, each at the suite's per-test rate."""
    from tests.stats import assert_pvalue, binomial_pvalue

    p, q = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    vm = VocabMap.from_kept_ids(np.arange(4), 4)
    rng = np.random.default_rng(0)
    counts, accepts, n = np.zeros(4, dtype=np.int64), 0, 3000
    for _ in range(n):
        g = speculative.generate(_ContextFree(p), _ContextFree(q), [0], vm, lambda qk: 0.5 * qk,
                                 gamma=1, max_new_tokens=1, rng=rng)
        counts[g["tokens"][0]] += 1
        accepts += int(g["accepted"][0])
        assert g["alphas"][0] == pytest.approx(0.4)
    assert_matches_law(counts, p, "first token, sub-stochastic proposal")
    assert_pvalue(binomial_pvalue(accepts, n, 0.4), "accept rate vs alpha = 0.4")


def test_iid_tokens_per_call_is_theorem_b():
    """Theorem B's i.i.d. form (1 - a^(g+1)) / (1 - a), with its limits a = 0 and a = 1 (a^g
    for a^(g+1) went unseen)."""
    from gpu_validation.speculative import iid_tokens_per_call

    assert iid_tokens_per_call(0.5, 2) == 1 + 0.5 + 0.25  # exact in binary
    assert iid_tokens_per_call(0.0, 4) == 1.0
    assert iid_tokens_per_call(1.0, 4) == 5.0


class _HistCache:
    def __init__(self, ids):
        self.ids = list(ids)

    def crop(self, m):  # as transformers' DynamicCache.crop: a negative m drops -m tokens
        self.ids = self.ids[:m]


def _law(seed, history, n):
    """A next-token law over n ids that depends on every token of ``history``."""
    h = 0
    for t in history:
        h = (h * 31 + t + 7) % 1009
    logits = np.random.default_rng([seed, h, len(history)]).normal(0, 1.5, n)
    e = np.exp(logits - logits.max())
    return e / e.sum()


class _HistoryModel:
    def __init__(self, seed, n):
        from types import SimpleNamespace

        self.seed, self.n = seed, n
        self.tokenizer = SimpleNamespace(decode=lambda ids: "")

    def law(self, history):
        return _law(self.seed, list(history), self.n)

    def model(self, x, past_key_values=None, use_cache=True):
        from types import SimpleNamespace

        new = x[0].tolist()
        if any(t < 0 for t in new):
            raise IndexError(f"token id {min(new)} fed to the model")
        if not new:
            raise ValueError("empty input")
        hist = list(past_key_values.ids) if past_key_values is not None else []
        rows = []
        for t in new:
            hist.append(t)
            rows.append(np.log(self.law(hist)))
        return SimpleNamespace(logits=torch.tensor(np.array(rows))[None],
                               past_key_values=_HistCache(hist))

    def probs(self, logits):
        return torch.softmax(logits, -1)


def _replay_alphas(g, prompt, target, drafter, make):
    """alpha_t recomputed at the context the emitted tokens give each reached position."""
    from rdk_theory.acceptance import acceptance_rate

    new, gamma, out, idx, run = g["tokens"], g["gamma"], [], 0, 0
    for ok in g["accepted"]:
        ctx = prompt + new[:idx]
        out.append(float(acceptance_rate(target.law(ctx), make(drafter.law(ctx)), check=False)))
        idx += 1
        run = run + 1 if ok else 0
        if run == gamma:
            idx, run = idx + 1, 0  # the bonus token
    return out, idx


class _PointMassModel(_HistoryModel):
    def law(self, history):
        out = np.full(self.n, 1e-300)  # log() finite; float64 renormalisation makes it 0 mass
        out[(7 * sum(history) + len(history)) % self.n] = 1.0
        return out / out.sum()


@pytest.mark.parametrize("scale", [1.0, 0.6])  # a law, and a sub-stochastic proposal
def test_generate_records_each_positions_alpha_at_its_own_context(scale):
    """Every recorded alpha_t is alpha(p(.|ctx), r(.|ctx)) at the context the emitted tokens
    give, and the accept-length histogram counts the accepted drafts. The other
    end-to-end tests use gamma = 1 and context-free stubs, where a later position's context
    never matters: alpha_t from the first position's law, drafts not appended to the
    drafter's context, a rejected draft kept in its cache, a histogram off by one and an
    absent draft (-1) not ending the round all went unseen. Deterministic (fixed seed);
    gamma = 3 with models whose law depends on the whole history."""
    n, gamma, prompt = 6, 3, [1, 2]
    target, drafter = _HistoryModel(1, n), _HistoryModel(2, n)
    vm = VocabMap.identity(n)

    def make(q_kept):
        return scale * np.asarray(q_kept)

    rng = np.random.default_rng(0)
    g = speculative.generate(target, drafter, prompt, vm, make, gamma=gamma,
                             max_new_tokens=40, rng=rng)
    want, emitted = _replay_alphas(g, prompt, target, drafter, make)
    assert emitted == len(g["tokens"])
    assert_close(g["alphas"], want)
    assert 0 < sum(g["accepted"]) < len(g["accepted"])  # both branches ran
    hist = g["accept_length_histogram"]
    assert sum(hist) == g["target_calls"]
    assert sum(k * h for k, h in enumerate(hist)) == sum(g["accepted"])
    assert g["new_tokens"] == sum((k + 1) * h for k, h in enumerate(hist))


def test_generate_with_a_deterministic_target_emits_its_forced_tokens():
    """Target = drafter = a point mass on a token that depends on the whole history: every
    draft is accepted and every token, the bonus token included, is forced. A bonus drawn
    from the last draft's law, or drafts verified against the next position's law, emit
    other tokens. This test is the one that sees the first: the Monte Carlo test of the
    tiny pair above (n = 1500) has power ~ 1e-5 against it, its laws differing too little
    between contexts."""
    n, prompt = 5, [1, 2]
    lm = _PointMassModel(0, n)
    want = list(prompt)
    for _ in range(13):
        want.append(int(np.argmax(lm.law(want))))
    g = speculative.generate(lm, lm, prompt, VocabMap.identity(n), lambda q: np.asarray(q),
                             gamma=3, max_new_tokens=12, rng=np.random.default_rng(0))
    assert all(g["accepted"]) and g["accept_length_histogram"] == [0, 0, 0, 3]
    assert g["tokens"] == want[len(prompt):len(prompt) + len(g["tokens"])]


def test_draft_of_a_proposal_short_of_one_is_absent_exactly_when_u_exceeds_its_mass():
    """A proposal of mass m < 1 drafts the absent token (-1) exactly when its first uniform u
    is >= m (MATH.md section 2), down to m = 0.995: with a round-off allowance of 1e-2 such an
    r was drawn from r / m and its absent token never drafted. Deterministic: u is read from
    a copy of each seeded generator."""
    r = np.array([0.5, 0.3, 0.195])
    absent = 0
    for seed in range(2000):
        u = np.random.default_rng(seed).random()
        x = speculative._draft(r, np.random.default_rng(seed))
        assert (x == -1) == (u >= r.sum()), seed
        absent += x == -1
    assert absent > 0  # the absent branch was reached


def test_a_proposal_without_mass_drafts_nothing_and_the_target_emits():
    """r = 0 (TLI with q(I) = 0: MATH.md section 3's definition, alpha 0 and a draw from p):
    no draft is made or recorded, every round's one target call emits a token from p (a
    point mass here). Recording a rejected absent draft with alpha 0 went unseen."""
    p = np.array([0.0, 0.0, 1.0, 0.0])
    g = speculative.generate(_ContextFree(p), _ContextFree(np.full(4, 0.25)), [0],
                             VocabMap.identity(4), lambda qk: np.zeros(4), gamma=3,
                             max_new_tokens=3, rng=np.random.default_rng(0))
    assert g["tokens"] == [2, 2, 2] and g["target_calls"] == 3
    assert g["alphas"] == [] and g["accepted"] == []
    assert g["accept_length_histogram"] == [3, 0, 0, 0]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_proposal_with_a_non_finite_entry_is_an_error_not_an_absent_draft(bad):
    """A NaN or infinite proposal entry (a sampler or kernel bug) raises FloatingPointError:
    its NaN mass failed ``mass > 0`` and was read as 'no mass', so the target emitted every
    token and the run recorded no position, silently."""
    p = np.array([0.0, 0.0, 1.0, 0.0])
    r = np.array([0.25, bad, 0.25, 0.25])
    with pytest.raises(FloatingPointError, match="mass is not finite"):
        speculative.generate(_ContextFree(p), _ContextFree(np.full(4, 0.25)), [0],
                             VocabMap.identity(4), lambda qk: r, gamma=3, max_new_tokens=3,
                             rng=np.random.default_rng(0))


def test_generation_length_is_at_least_n_and_at_most_gamma_more_and_eos_does_not_stop_it():
    """The documented length law (behaviour kept: committed results stay reproducible): the
    length is checked between rounds only, so ``new_tokens`` lies in [N, N + gamma] (with
    p = q every draft is accepted and a round adds gamma + 1: N = 1, gamma = 4 gives 5), and
    an end-of-sequence token (id 0 here, p = 0.7) does not stop generation. --e2e-tokens'
    help said only 'new tokens per prompt in generation'; now it states this law."""
    import argparse

    from gpu_validation.cli import add_run_arguments

    p, q = np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.4, 0.3, 0.2, 0.1])
    vm = VocabMap.identity(4)
    for gamma in (1, 4):
        for n in (1, 3, 8):
            for seed in range(20):
                target = _ContextFree(p)
                target.tokenizer.eos_token_id = 0
                g = speculative.generate(target, _ContextFree(q), [1], vm, np.asarray,
                                         gamma=gamma, max_new_tokens=n,
                                         rng=np.random.default_rng(seed))
                assert n <= g["new_tokens"] <= n + gamma, (gamma, n, seed, g["new_tokens"])
                if n == 8:  # some EOS before the last round: it did not stop the generation
                    assert 0 in g["tokens"][:n - gamma - 1], (gamma, seed, g["tokens"])
    g = speculative.generate(_ContextFree(p), _ContextFree(p), [1], vm, np.asarray, gamma=4,
                             max_new_tokens=1, rng=np.random.default_rng(0))
    assert g["new_tokens"] == 5 and g["target_calls"] == 1
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert ("at least N, since generation stops after the first round that reaches N, so up "
            "to gamma = 4 more; end-of-sequence tokens do not stop it") in text


@pytest.mark.parametrize("record", [True, False])
def test_a_sliding_window_cache_crops_or_is_recomputed_not_an_error(monkeypatch, record):
    """Past its window, a sliding-window layer's cache refuses to crop (transformers'
    RuntimeError): end-to-end generation with a Gemma 3 or Mistral pair died once the text
    outgrew the window (a fuzzing pass). The cache now records its past from its first token
    where transformers can (every crop then succeeds, nothing is recomputed); where it cannot
    (``record=False``: the model's own cache), it is dropped and the context recomputed. Every
    logit row matches a full forward pass of the same tokens, a prompt longer than the window
    fed at once included."""
    from types import SimpleNamespace

    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Gemma3TextConfig"):
        pytest.skip("this transformers has no Gemma 3")
    if record and not hasattr(transformers.DynamicCache, "activate_past_recording"):
        pytest.skip("this transformers' cache cannot record its past")
    if not record:
        monkeypatch.setattr(speculative, "_recording_cache", lambda model: None)
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=256)
    model = transformers.Gemma3ForCausalLM(config).eval()
    tokens = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(1)).tolist()

    def check(out, end):
        with torch.inference_mode():
            full = model(torch.tensor([tokens[:end]])).logits[0]
        assert_close(out[-1].numpy(), full[-1].numpy(), rtol=0, atol=FLOAT32_ATOL)

    cached = speculative._Cached(SimpleNamespace(model=model), "cpu")
    resets = 0
    for end in range(3, 40, 3):  # 3 tokens in, 2 back (a rejection): past the window of 8
        check(cached.feed(tokens[:end]), end)
        cached.crop(end - 2)
        resets += cached.seen == 0
    assert resets == 0 if record else resets > 0
    cached = speculative._Cached(SimpleNamespace(model=model), "cpu")
    cached.feed(tokens[:20])  # a prompt longer than the window, fed at once
    cached.crop(18)
    check(cached.feed(tokens[:21]), 21)
