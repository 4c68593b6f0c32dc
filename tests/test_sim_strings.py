"""SLEM / SLRS on toy tokenizers: psi both ways, losslessness, ordering, and the cost of psi."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rdk_theory.string_level import segmentations
from rdk_theory.validation import InputError
from simulators.strings import (
    DRAFT_TOKENS,
    TARGET_TOKENS,
    cost_table,
    draft_target_token,
    markov_string_drafter,
    segmentation_count,
    string_step,
    toy_string_models,
)
from tests.stats import assert_matches_law


@pytest.mark.parametrize("seed", range(3))
def test_psi_slem_slrs_exact(seed):
    tgt, dr = toy_string_models(seed)
    for ctx in range(len(TARGET_TOKENS)):
        p = tgt.next_probs((ctx,))
        res = string_step(p, markov_string_drafter(dr, DRAFT_TOKENS, start=(ctx,)))
        assert list(res["psi"]) == list(res["psi_by_segmentations"])
        assert sum(res["psi"]) == 1  # the target vocabulary is a complete prefix code
        assert list(res["slrs_output_law"]) == list(p)
        assert res["slrs"] >= res["slem"]


def test_segmentation_count_matches_enumeration_and_grows_exponentially():
    for L in range(1, 7):
        s = ("ab" * L)[:L]
        assert segmentation_count(s, DRAFT_TOKENS) == len(segmentations(s, DRAFT_TOKENS))
    counts = [r["segmentations"] for r in cost_table(range(10, 31), enumerate_up_to=0)]
    ratios = np.array(counts[1:]) / np.array(counts[:-1])
    assert np.all(ratios > 1.5)  # golden-ratio growth for this drafter vocabulary
    # a token listed twice counts once, as in the enumeration (it counted twice: 2 against 1)
    for tokens in (["a", "a", "b"], ["ab", "a", "", "b", "ab"]):
        assert segmentation_count("ab", tokens) == len(segmentations("ab", tokens))
    # "" is not a target token: both refuse it, as psi does (both returned 0 segmentations)
    for fn in (segmentations, segmentation_count):
        with pytest.raises(InputError, match="non-empty str"):
            fn("", DRAFT_TOKENS)


@pytest.mark.mc
def test_drafted_target_token_follows_psi():
    """n = 4000 simulated drafts (drafter generates text until it spells a target token):
    chi-square against psi at the per-test false-alarm rate."""
    tgt, dr = toy_string_models(0)
    nxt = markov_string_drafter(dr, DRAFT_TOKENS, start=(0,))
    psi = string_step(tgt.next_probs((0,)), nxt)["psi"]
    rng = np.random.default_rng(5)
    draws = [draft_target_token(nxt, rng) for _ in range(4000)]
    assert_matches_law(np.bincount(draws, minlength=3), np.array([float(x) for x in psi]), "drafted token vs psi")


def test_draft_target_token_conditions_each_draw_on_the_tokens_drafted_so_far():
    """The drafter is asked for its next token after the prefix it has drafted: "a" then (after
    "a") "b" spells "ab", target token 1; with the prefix stuck at (), it would draw "a" again
    and read "aa" (target token 0)."""
    seen = []

    def drafter_next(prefix):
        seen.append(prefix)
        return {"a": 1} if prefix == () else {"b": 1}

    assert draft_target_token(drafter_next, np.random.default_rng(0)) == 1
    assert seen == [(), ("a",)]


def test_markov_string_drafter_reads_the_text_before_the_step():
    """``start`` is the chain's context: after drafter token 1 this order-1 chain says "b",
    after token 0 it says "a"; with an empty prefix the answer must follow ``start`` (dropping
    it fell back to the BOS row, 'ab', whatever came before)."""
    from simulators.toy_lm import BOS, MarkovLM

    one = lambda i: np.array([Fraction(int(j == i)) for j in range(3)], dtype=object)  # noqa: E731
    chain = MarkovLM(3, 1, {(0,): one(0), (1,): one(1), (2,): one(2), (BOS,): one(2)})
    tokens = ("a", "b", "ab")
    for ctx, want in ((0, "a"), (1, "b"), (2, "ab")):
        nxt = markov_string_drafter(chain, tokens, start=(ctx,))
        assert nxt(()) == {want: 1}
    assert markov_string_drafter(chain, tokens)(("b",)) == {"b": 1}  # the prefix extends start


def test_string_step_reports_slrs_and_slem_by_their_definitions():
    """slrs = sum_t min(p, psi) and slem = sum_t p psi, exactly: 'slrs' computed as SLEM kept
    slrs >= slem and was caught only by the README's table snapshot."""
    target, drafter = toy_string_models(0)
    p = target.next_probs((0,))
    res = string_step(p, markov_string_drafter(drafter, DRAFT_TOKENS, start=(0,)))
    assert res["slrs"] == sum(min(a, b) for a, b in zip(p, res["psi"])) == Fraction(1577, 2028)
    assert res["slem"] == sum(a * b for a, b in zip(p, res["psi"])) == Fraction(1531, 4056)


def test_draft_target_token_and_beta_name_their_inputs():
    """A string token list was read as its characters, an empty token matched every text at
    once, max_tokens 2.5 was a raw TypeError, and beta with rho = 10^400 against float laws
    a raw OverflowError (p / rho is 0 there, as at rho = inf)."""
    from fractions import Fraction

    import numpy as np
    import pytest

    from rdk_theory import multidraft
    from rdk_theory.validation import InputError
    from simulators import strings

    rng = np.random.default_rng(0)
    drafter = lambda prefix: {"a": 1.0}  # noqa: E731
    for kw, message in (({"target_tokens": "ab"}, "not one string"),
                        ({"target_tokens": ["", "ab"]}, "list of non-empty strings"),
                        ({"max_tokens": 2.5}, "max_tokens must be an integer >= 1")):
        with pytest.raises(InputError, match=message):
            strings.draft_target_token(drafter, rng, **kw)
    assert strings.draft_target_token(drafter, rng, target_tokens=(t for t in ["b", "a"])) == 1
    half = np.array([0.5, 0.5])
    assert multidraft.beta(half, half, Fraction(10**400)) == 0.0
    assert multidraft.beta(half, half, 10**400) == 0.0
