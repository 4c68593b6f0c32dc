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
from tests.stats import assert_matches_law, assert_no_zero_probability_emitted  # noqa: E402

RUNS = 1500


def _law_after(lm, prefixes):
    """The float64 law after each prefix (a batch of equal-length id lists)."""
    with torch.inference_mode():
        logits = lm.model(torch.tensor(prefixes)).logits[:, -1]
    p = lm.probs(logits).numpy().astype(np.float64)
    return p / p.sum(-1, keepdims=True)


def test_generated_tokens_follow_the_targets_laws(tiny):
    """Chi-square of token 1 and token 2 over RUNS = 1500 generations against their exact
    laws, each at the suite's per-test false-alarm rate (tests/stats.py), and no token of
    probability 0 emitted."""
    lm = models.load(tiny["narrow"], dtype="float32")
    n = tiny["n_tokens"]
    prompt = collect.tokenize(lm.tokenizer, "def f(x):\n")
    vm = VocabMap.from_kept_ids(np.arange(150), n)

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
        assert_matches_law(counts, law, f"end-to-end {what}")


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
