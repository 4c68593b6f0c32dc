"""Exact sequence-level losslessness of one (and repeated) speculative iterations on toy LMs.

Tiers: exact (Fraction, ``==``) for every sampler on every toy pair; float64 for first-order RDK
without rationalising; Monte Carlo (the real sampler) against the exact block law.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rdk_theory.case import default_tau
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.kernels import DenseKernel, IdentityKernel, MarginalKernel, covariance_softmax_kernel
from rdk_theory.proposals import SAMPLERS
from rdk_theory.validation import InputError
from rdk_theory.vocab import VocabMap
from simulators.block import expected_tokens, simulate_blocks, z_pvalue
from simulators.sequence import (
    block_law,
    completed_law,
    is_lossless,
    make_proposal_fn,
    max_law_difference,
    rationalise_kernel,
    stream_law,
)
from simulators.toy_lm import TOY_PAIRS, MarkovLM, random_markov_lm, toy_pair
from tests.stats import assert_matches_law, assert_pvalue
from tests.tolerances import FLOAT64_ATOL, assert_close


def _kwargs(pair, sampler):
    cal = pair.calibration_probs()
    tau = default_tau(cal)
    if sampler == "rdk_exact":
        return {"kernel": covariance_softmax_kernel(cal, tau)}
    if sampler == "rdk_first_order":
        return {"first_order": FirstOrderCovarianceKernel(cal, tau)}
    return {}


@pytest.mark.parametrize("name", TOY_PAIRS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_is_lossless_at_sequence_level_exactly(name, sampler):
    """Block completed by the target, and 4 tokens of repeated iterations, equal p exactly."""
    pair = toy_pair(name, seed=1)
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, sampler, **_kwargs(pair, sampler))
    assert fn.rationalised == (sampler in ("rdk_exact", "rdk_first_order"))
    ok, diff = is_lossless(pair.target, fn, gamma=2, prefix=(0,), n_tokens=4)
    assert ok and diff == 0
    blk = block_law(pair.target, fn, 2, prefix=(0,))
    assert sum(blk.law.values()) == 1
    assert set(blk.length_law) == {1, 2, 3}


@pytest.mark.parametrize("name", TOY_PAIRS)
def test_exact_rdk_with_exact_kernels_needs_no_rationalising(name):
    pair = toy_pair(name, seed=2)
    n = pair.vocab_map.n_target
    rng = np.random.default_rng(0)
    w = rng.integers(0, 4, size=(n, n)) + np.eye(n, dtype=int)
    dense = np.array([[Fraction(int(x), int(row.sum())) for x in row] for row in w], dtype=object)
    marg_w = np.array([Fraction(1, n)] * n, dtype=object)
    for kernel in (IdentityKernel(), DenseKernel(dense), MarginalKernel(marg_w, Fraction(1, 3)),
                   DenseKernel(rationalise_kernel(covariance_softmax_kernel(pair.calibration_probs(), 0.01).matrix))):
        fn = make_proposal_fn(pair.drafter, pair.vocab_map, "rdk_exact", kernel=kernel)
        assert not fn.rationalised
        assert is_lossless(pair.target, fn, gamma=3, n_tokens=4) == (True, 0)


def test_identity_kernel_rdk_equals_tli_block_law():
    pair = toy_pair("hetero", seed=3)
    tli = block_law(pair.target, make_proposal_fn(pair.drafter, pair.vocab_map, "tli"), 3)
    rdk = block_law(pair.target, make_proposal_fn(pair.drafter, pair.vocab_map, "rdk_exact",
                                                  kernel=IdentityKernel()), 3)
    assert tli.law == rdk.law


def test_first_order_float64_enumeration_is_lossless_within_round_off():
    """Without rationalising: the float64 enumeration matches p up to float64 round-off."""
    pair = toy_pair("pruned", seed=4)
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, "rdk_first_order", exact=False,
                          **_kwargs(pair, "rdk_first_order"))
    ok, diff = is_lossless(pair.target.float_copy(), fn, gamma=3, n_tokens=4)
    assert diff <= FLOAT64_ATOL


def test_iid_positions_give_statement_b_closed_form_exactly():
    """Order-0 (context-free) models: E[L] = 1 + sum_k alpha^k with alpha = alpha(p, r)."""
    rng = np.random.default_rng(5)
    target = random_markov_lm(rng, 5, order=0)
    drafter = random_markov_lm(rng, 5, order=0)
    from rdk_theory.vocab import VocabMap

    vm = VocabMap.identity(5)
    fn = make_proposal_fn(drafter, vm, "vanilla")
    p, r = target.next_probs(()), fn(())
    alpha = sum(min(a, b) for a, b in zip(p, r))
    for gamma in range(0, 5):
        blk = block_law(target, fn, gamma)
        assert blk.expected_tokens == expected_tokens([alpha] * gamma)
        assert all(a == alpha for a in blk.position_acceptances())


@pytest.mark.parametrize("name", TOY_PAIRS)
def test_statement_b_telescopes_for_context_dependent_models(name):
    pair = toy_pair(name, seed=6)
    blk = block_law(pair.target, make_proposal_fn(pair.drafter, pair.vocab_map, "tli"), 3)
    assert expected_tokens(blk.position_acceptances()) == blk.expected_tokens


@pytest.mark.parametrize("name,sampler", [("pruned", "rdk_exact"), ("hetero", "tli")])
def test_stream_law_merges_prefixes_and_cuts_blocks_without_changing_the_law(name, sampler):
    """stream_law expands each emitted prefix once and enumerates a block only as far as the
    tokens still needed; the definition, written out here, expands every split of the
    emitted tokens into whole blocks. Both give the same Fractions, and the target's law."""
    pair = toy_pair(name, seed=3)
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, sampler, **_kwargs(pair, sampler))
    gamma, n = 2, 4

    def by_splits(emitted, w, out):
        if len(emitted) >= n:
            out[emitted[:n]] = out.get(emitted[:n], 0) + w
            return out
        for blk, v in block_law(pair.target, fn, gamma, emitted).law.items():
            by_splits(emitted + blk, w * v, out)
        return out

    law = stream_law(pair.target, fn, gamma, n)
    assert law == by_splits((), Fraction(1), {})
    assert law == pair.target.sequence_law((), n)
    assert stream_law(pair.target, fn, gamma, 0) == {(): 1}


def test_checker_is_not_vacuous():
    """Negative controls: another target's law, and one block's mass moved, are both refuted."""
    pair = toy_pair("same", seed=7)
    other = toy_pair("same", seed=8).target
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, "tli")
    blk = block_law(pair.target, fn, 2)
    assert max_law_difference(completed_law(pair.target, blk), other.sequence_law((), 3)) != 0
    assert max_law_difference(stream_law(pair.target, fn, 2, 3), other.sequence_law((), 3)) != 0
    keys = sorted(blk.law)
    moved = dict(blk.law)
    delta = min(moved[keys[0]], moved[keys[-1]]) / 2
    moved[keys[0]] -= delta
    moved[keys[-1]] += delta
    blk.law = moved
    assert max_law_difference(completed_law(pair.target, blk), pair.target.sequence_law((), 3)) != 0


@pytest.mark.parametrize("r, match", [
    ([Fraction(3, 2), Fraction(-1, 2)], r"context \(\) holds a negative entry: Fraction\(-1, 2\)"),
    ([Fraction(1), Fraction(1)], "must sum to at most 1 along its last axis, got 2"),
    ([0.5, float("nan")], "non-finite"),
    ([0.75, 0.2502], r"at most 1 along its last axis \(tolerance 0.0001\); row \(0,\) sums to 1.0002"),
    ([1.5, -0.5], r"negative probability -0.5 at index \(1,\)"),
    ([Fraction(1), float("nan")], "non-finite"),  # an object array of a Fraction and a float
    ([0.5 + 0.5j, 0.5], "real numbers"),  # astype(float64) would drop the imaginary part
    (["0.5", "0.5"], "real numbers"),
    ([Fraction(1)], "shape"),
])
def test_an_invalid_proposal_is_refused_not_certified(r, match):
    """min(r, p) + (p - r)^+ = p holds for any real r: is_lossless certified r = (3/2, -1/2)
    and r = (1, 1) as lossless, from a "law" with negative entries. Now an InputError."""
    half = np.array([Fraction(1, 2)] * 2, dtype=object)
    r = np.array(r, dtype=object if isinstance(r[0], (Fraction, str, complex)) else np.float64)
    with pytest.raises(InputError, match=match):
        is_lossless(MarkovLM(2, 0, {(): half}), lambda ctx: r, 2, n_tokens=3)


def test_a_float_proposal_within_the_toolkit_tolerance_is_taken():
    """A float32 softmax row misses 1 by ~1e-9: a vanilla proposal summing to 1 + 2.7e-9 was
    refused by a 1e-9 allowance, where every validator of the toolkit takes rows within
    PROB_ATOL; such a row is taken, its law as before."""
    p = np.array([0.5, 0.5])
    r = np.array([0.25, 0.75 + 2.7e-9])
    law = block_law(MarkovLM(2, 0, {(): p}), lambda ctx: r, 1).law
    assert_close(sum(law.values()), 1.0)


def test_a_float_proposal_negative_by_round_off_gives_a_law_without_negative_weights():
    """An entry below 0 by round-off (within NEG_ATOL) is taken, as every validator of the
    toolkit takes it, and read as 0: the block law used it as it was and gave the block that
    drafts that token a negative weight (-1e-13 here)."""
    p = np.array([0.5, 0.25, 0.25])
    r = np.array([0.6, 0.4 + 1e-13, -1e-13])
    law = block_law(MarkovLM(3, 0, {(): p}), lambda ctx: r, 1).law
    assert min(law.values()) >= 0
    assert_close(sum(law.values()), 1.0)


def test_an_integer_proposal_keeps_the_law_exact():
    """An int or bool proposal (a point mass) is exact, as Fractions are: read as float64 by
    the shared check, is_lossless called a lossless point mass lossy (5.55e-17 off)."""
    lm = MarkovLM(3, 0, {(): np.array([Fraction(1, 10), Fraction(2, 10), Fraction(7, 10)],
                                      dtype=object)})
    for r in (np.array([0, 1, 0]), np.array([False, True, False]), [0, 1, 0]):
        assert is_lossless(lm, lambda ctx: r, 2) == (True, Fraction(0))
        assert all(isinstance(w, Fraction) for w in block_law(lm, lambda ctx: r, 2).law.values())


def test_context_longer_than_order_uses_last_tokens():
    lm = MarkovLM(2, 1, {(-1,): np.array([Fraction(1), Fraction(0)], dtype=object),
                         (0,): np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object),
                         (1,): np.array([Fraction(0), Fraction(1)], dtype=object)})
    assert lm.sequence_law((), 3) == {(0, 0, 0): Fraction(1, 4), (0, 0, 1): Fraction(1, 4),
                                      (0, 1, 1): Fraction(1, 2)}


def test_retokenizing_drafter_reads_the_last_token_of_its_own_tokenization():
    """Mutation pass: the hetero drafter conditioning on the wrong token of its re-tokenized
    context went unseen (every sampler stays lossless with any drafter; only the acceptance
    numbers move). Target text a|b|c is drafter ab|c, so the order-1 chain reads c; c|a|b is
    c|ab, read as ab; and those two rows differ, so a wrong token would show."""
    from simulators.toy_lm import HETERO_DRAFT_TOKENS, HETERO_TARGET_TOKENS, greedy_tokenize

    drafter = toy_pair("hetero", seed=0).drafter
    t = {s: i for i, s in enumerate(HETERO_TARGET_TOKENS)}
    d = {s: i for i, s in enumerate(HETERO_DRAFT_TOKENS)}
    assert greedy_tokenize("abc", HETERO_DRAFT_TOKENS) == [d["ab"], d["c"]]
    after_c, after_ab = drafter.chain.next_probs((d["c"],)), drafter.chain.next_probs((d["ab"],))
    assert list(after_c) != list(after_ab)
    assert list(drafter.next_probs((t["a"], t["b"], t["c"]))) == list(after_c)
    assert list(drafter.next_probs((t["c"], t["a"], t["b"]))) == list(after_ab)


def test_random_toy_tables_refuse_more_entries_than_they_may_hold():
    """toy_pair(order=12) ran out of memory building 305 million contexts; the table's size
    is now checked before any is built (summed only up to the cap: order 10,000 has a count
    of 3,011 digits), and an order that fits still builds."""
    with pytest.raises(InputError, match="an order-12 chain over 5 symbols has more than "
                                         "400,000 contexts of 5 tokens each"):
        toy_pair("pruned", order=12)
    with pytest.raises(InputError, match="an order-10000 chain over 2 symbols has more than "
                                         "2,000,000 contexts: more than"):
        random_markov_lm(np.random.default_rng(0), 2, n_out=1, order=10_000)
    with pytest.raises(InputError, match="more than the 2,000,000 entries"):
        random_markov_lm(np.random.default_rng(0), 2, n_out=10**6, order=1)
    lm = random_markov_lm(np.random.default_rng(0), 3, order=3)
    assert len(lm.table) == 1 + 3 + 9 + 27  # BOS-padded starts, then every 3-token context


@pytest.mark.mc
def test_monte_carlo_blocks_match_exact_law():
    """n = 20000 iterations of the real sampler (pruned pair, first-order RDK, gamma = 3):
    chi-square of the emitted blocks and of their lengths against the exact laws, and a z-test of
    the mean tokens per call; each at the suite's per-test false-alarm rate (tests/stats.py)."""
    pair = toy_pair("pruned", seed=9)
    kw = _kwargs(pair, "rdk_first_order")
    exact_fn = make_proposal_fn(pair.drafter, pair.vocab_map, "rdk_first_order", exact=False, **kw)
    tgt = pair.target.float_copy()
    law = block_law(tgt, exact_fn, 3).law
    blocks = simulate_blocks(tgt, exact_fn, 3, 20000, np.random.default_rng(10))
    keys = sorted(set(law) | set(blocks))
    index = {k: i for i, k in enumerate(keys)}
    counts = np.zeros(len(keys), dtype=np.int64)
    for b in blocks:
        counts[index[b]] += 1
    probs = np.array([float(law.get(k, 0.0)) for k in keys])
    assert_matches_law(counts, probs / probs.sum(), "emitted blocks vs exact block law")
    lengths = np.array([len(b) for b in blocks])
    length_probs = np.array([sum(v for k, v in law.items() if len(k) == L) for L in range(1, 5)])
    assert_matches_law(np.bincount(lengths, minlength=5)[1:], length_probs / length_probs.sum(),
                       "tokens per call vs exact law")
    assert_pvalue(z_pvalue(lengths, float(sum(L * w for L, w in zip(range(1, 5), length_probs)))),
                  "mean tokens per call")


def test_rationalised_proposal_keeps_the_mass_of_target_id_zero():
    """The only drafter token in the target maps to target id 0: the rationalised proposal
    must keep q(I) > 0 (a mass test on ids > 0 would zero it and give E[tokens] = 1). Its
    exact E[tokens per call] matches the float64 block law within rationalising round-off
    (entries rounded to denominators <= 2^20: far below 1e-6 here; the bug gives a gap > 0.1)."""
    rng = np.random.default_rng(1)
    target = random_markov_lm(rng, 3, order=0, zero_prob=0.0)
    drafter = random_markov_lm(rng, 2, order=0, zero_prob=0.0)
    vm = VocabMap(3, np.array([0, -1]))
    kern = covariance_softmax_kernel(np.array([[0.6, 0.3, 0.1], [0.2, 0.3, 0.5]]), 0.1)
    exact = block_law(target, make_proposal_fn(drafter, vm, "rdk_exact", kernel=kern), 2)
    approx = block_law(target.float_copy(),
                       make_proposal_fn(drafter.float_copy(), vm, "rdk_exact", kernel=kern, exact=False), 2)
    assert exact.expected_tokens > 1
    assert abs(float(exact.expected_tokens) - approx.expected_tokens) < 1e-6


def test_length_law_lists_every_length_with_zeros_where_none_occurs():
    """A drafter equal to the target (exact Fractions) accepts every draft: L = gamma + 1 with
    probability 1. The length law still holds every length 1..gamma+1 (the CLI's table and
    the figure have a column per length), with exact zeros, and E[L] and the per-position
    acceptances are unchanged by them."""
    from simulators.toy_lm import MarkovLM

    p = np.array([Fraction(3, 5), Fraction(1, 10), Fraction(1, 5), Fraction(1, 10)], dtype=object)
    fn = make_proposal_fn(MarkovLM(4, 0, {(): p.copy()}), VocabMap.identity(4), "tli")
    law = block_law(MarkovLM(4, 0, {(): p}), fn, 3)
    assert law.length_law == {1: 0, 2: 0, 3: 0, 4: 1}
    assert law.expected_tokens == 4 and law.position_acceptances() == [1, 1, 1]


@pytest.mark.parametrize("sampler", ["vanilla", "tli"])
def test_float_block_law_of_a_drafter_equal_to_the_target(sampler):
    """r = p in floats: the row (0.6, 0.1, 0.2, 0.1) sums to 1 - 1e-16, whose round-off was a
    rejection with an empty residual, raised as 'proposal inconsistent with p'. Every draft
    is accepted: L = gamma + 1 up to that round-off. A real inconsistency still raises."""
    from simulators.toy_lm import MarkovLM

    p = np.array([0.6, 0.1, 0.2, 0.1])
    target = MarkovLM(4, 0, {(): p})
    fn = make_proposal_fn(MarkovLM(4, 0, {(): p.copy()}), VocabMap.identity(4), sampler,
                          exact=False)
    law = block_law(target, fn, 2)
    assert_close([law.expected_tokens, law.length_law[3]], [3, 1], rtol=0)
    short = np.array([0.5, 0.1, 0.2, 0.1])  # r = p on a "law" that sums to 0.9: reject 0.1
    with pytest.raises(InputError, match=r"row \(\) must sum to 1"):  # refused as a table
        MarkovLM(4, 0, {(): short})
    with pytest.raises(AssertionError, match="inconsistent with p"):  # a model of one's own
        block_law(_Rows(short), lambda ctx: short, 1)


class _Rows:
    """A toy LM of one's own (anything with n_out and next_probs): its rows are not checked
    as a MarkovLM's table is, so block_law's own guard must catch what they get wrong."""

    def __init__(self, row):
        self.row, self.n_out = row, len(row)

    def next_probs(self, context):
        return self.row


def test_greedy_tokenize_takes_the_longest_match_first():
    """Longest match first with the hetero drafter's tokens: "abcca" is ab | cc | a, "bca" is
    bc | a (shortest first would give a | b | c | c | a and b | c | a)."""
    from simulators.toy_lm import HETERO_DRAFT_TOKENS, greedy_tokenize

    ids = {t: i for i, t in enumerate(HETERO_DRAFT_TOKENS)}
    assert greedy_tokenize("abcca", HETERO_DRAFT_TOKENS) == [ids["ab"], ids["cc"], ids["a"]]
    assert greedy_tokenize("bca", HETERO_DRAFT_TOKENS) == [ids["bc"], ids["a"]]


def test_exact_block_law_refuses_a_tiny_rejection_with_an_empty_residual():
    """In Fractions there is no round-off: a rejection with an empty residual, however small
    (a target row summing to 1 - 10^-12, r = p), is an inconsistent proposal and raises; the
    float round-off allowance (FLOAT_REJECT_ROUNDOFF) is for float64 rows only."""
    short = np.array([Fraction(1, 2), Fraction(1, 2) - Fraction(1, 10**12)], dtype=object)
    with pytest.raises(AssertionError, match="inconsistent with p"):
        block_law(_Rows(short), lambda ctx: short, 1)


def test_is_lossless_checks_the_stream_beyond_the_first_block(monkeypatch):
    """Negative control for the stream check: a block law that is right at the prefix but
    wrong at every later context (the enumeration patched to move mass there) passes the block
    completion check alone, and is refuted once ``n_tokens`` asks for the stream."""
    from simulators import sequence

    real = sequence._block_paths  # what block_law and stream_law enumerate with

    def wrong_later(target, fn, gamma, prefix=(), max_tokens=None):
        law = real(target, fn, gamma, prefix, max_tokens)
        if tuple(prefix):
            keys = sorted(law)
            delta = min(law[keys[0]], law[keys[-1]]) / 2
            law[keys[0]] -= delta
            law[keys[-1]] += delta
        return law

    monkeypatch.setattr(sequence, "_block_paths", wrong_later)
    pair = toy_pair("same", seed=7)
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, "tli")
    assert is_lossless(pair.target, fn, 1) == (True, 0)
    ok, diff = is_lossless(pair.target, fn, 1, n_tokens=3)
    assert not ok and diff > 0


def test_noisy_drafter_imitates_the_kept_target_ids():
    """A pruned drafter's token j imitates target token kept_ids[j]: without noise, its row is
    round(12 p[kept]) normalised: [6, 2] / 8 for kept ids [2, 0] of p = (1/6, 1/3, 1/2) (the
    first two target ids instead would give [2, 4] / 6)."""
    from simulators.toy_lm import noisy_drafter

    p = np.array([Fraction(1, 6), Fraction(1, 3), Fraction(1, 2)], dtype=object)
    drafter = noisy_drafter(MarkovLM(3, 0, {(): p}), np.random.default_rng(0), kept_ids=[2, 0], noise=0)
    assert drafter.n_out == 2
    assert list(drafter.next_probs(())) == [Fraction(3, 4), Fraction(1, 4)]


def test_exact_proposals_need_an_exact_drafter():
    """exact=True with a float drafter built float proposals, and is_lossless then judged
    round-off: (False, 1.4e-17), a false 'not lossless'."""
    from rdk_theory.validation import InputError
    from simulators.toy_lm import toy_pair

    pair = toy_pair("pruned", seed=0)
    with pytest.raises(InputError, match="exact=True needs a drafter with Fraction tables"):
        make_proposal_fn(pair.drafter.float_copy(), pair.vocab_map, "tli")
    fn = make_proposal_fn(pair.drafter, pair.vocab_map, "tli")
    assert is_lossless(pair.target, fn, gamma=2, n_tokens=3) == (True, 0)


def test_length_law_keeps_the_full_block_key_when_it_never_occurs():
    """Every L in 1..gamma + 1 is a key, 0 where that length never occurs: a table built from
    1..gamma only was filled back whenever a full block had mass (the only zero-filling test
    had P(L = gamma + 1) = 1), and lost its last column here, where the drafter proposes only
    a token the target never emits."""
    p = np.array([Fraction(1, 2), Fraction(1, 2), Fraction(0)], dtype=object)
    q = np.array([Fraction(0), Fraction(0), Fraction(1)], dtype=object)
    fn = make_proposal_fn(MarkovLM(3, 0, {(): q}), VocabMap.identity(3), "tli")
    assert block_law(MarkovLM(3, 0, {(): p}), fn, 2).length_law == {1: 1, 2: 0, 3: 0}


@pytest.mark.parametrize("seed", range(3))
def test_the_pruned_toy_pair_keeps_the_most_frequent_target_ids(seed):
    """The pruned pair's drafter keeps the target ids of most mass (summed over the toy LM's
    contexts); keeping the least frequent was caught only by a DISCO gain threshold."""
    pair = toy_pair("pruned", seed)
    mass = np.sum([[float(v) for v in row] for row in pair.target.table.values()], axis=0)
    kept = sorted(int(t) for t in pair.vocab_map.draft_to_target)
    assert min(mass[kept]) >= max(np.delete(mass, kept))


@pytest.mark.parametrize("make, message", [
    (lambda: {(): np.array([Fraction(3, 2), Fraction(-1, 2)], dtype=object)},
     r"row \(\) holds a negative entry"),
    (lambda: {(): np.array([Fraction(1), Fraction(1)], dtype=object)},
     r"row \(\) must sum to 1 exactly"),
    (lambda: {(): np.array([np.nan, 1.0])}, r"row \(\) has a non-finite value"),
    (lambda: {(): 0.5}, r"row \(\) has shape \(\), expected \(2,\)"),
    (lambda: {}, "table must be a non-empty dict of rows"),
])
def test_a_markov_table_of_rows_that_are_not_laws_is_refused(make, message):
    """A target row (3/2, -1/2) was accepted, and is_lossless certified it: the completion
    identity min(r, p) + (p - r)^+ = p holds for any real vector. A row (1, 1) gave an
    expected block length of 4 where L lies in [1, 2]."""
    from simulators.toy_lm import MarkovLM

    with pytest.raises(InputError, match=message):
        MarkovLM(2, 0, make())
    with pytest.raises(InputError, match=r"n_out must be an integer >= 1, got 2.5"):
        MarkovLM(2.5, 0, {(): np.array([0.5, 0.5])})  # int() made 2 outputs of it


@pytest.mark.parametrize("bad, message", [
    (lambda n: np.full(n, np.nan), "has a non-finite value"),
    (lambda n: np.array([1.0]), r"has shape \(1,\), not \(5,\)"),
    (lambda n: np.full(n, 0.5), "must sum to at most 1"),
])
def test_the_monte_carlo_drivers_check_proposals_as_block_law_does(bad, message):
    """simulate_blocks, toy_trace and run_policy took r unchecked: a NaN proposal ran (every
    block of length 1, alphas NaN), a 1-entry one was broadcast over the vocabulary."""
    from simulators import block, disco
    from simulators.toy_lm import toy_pair

    pair = toy_pair("pruned", 0)
    fn = lambda ctx: bad(pair.target.n_out)  # noqa: E731
    runs = (lambda rng: block.simulate_blocks(pair.target, fn, 1, 100, rng),
            lambda rng: disco.toy_trace(pair.target, fn, 3, rng),
            lambda rng: disco.run_policy(pair.target, fn, 5, 0.1, rng))
    for run in runs:
        with pytest.raises(InputError, match=message):
            run(np.random.default_rng(0))


def test_simulator_draws_refuse_what_is_no_numpy_generator():
    """A raw AttributeError ('NoneType' has no 'random') in each before."""
    from simulators import block, disco, dsi, spectr, strings
    from simulators.toy_lm import random_markov_lm

    p = np.array([0.5, 0.5])
    calls = [lambda g: block.mc_tokens_iid([0.5], 3, g), lambda g: disco.regime_trace(g, 5),
             lambda g: disco.trace_replay([0.5], 0.1, 1, g),
             lambda g: dsi.dsi_monte_carlo(0.1, 0.5, 1, 2, 3, g),
             lambda g: spectr.kseq_sample(p, p, 1.5, 2, 5, g),
             lambda g: strings.draft_target_token(lambda ctx: {"a": 1.0}, g),
             lambda g: random_markov_lm(g, 3)]
    for call in calls:
        with pytest.raises(InputError, match="numpy.random.Generator"):
            call(None)


def test_rationalise_refuses_what_is_no_law():
    """NaN and -1 entries became 0 ([nan, 1] came back as the law [0, 1]), a negative total
    gave negative 'probabilities', inf was a raw OverflowError."""
    from simulators.sequence import rationalise, rationalise_kernel

    for vec, total in (([np.nan, 1.0], 1), ([-1.0, 2.0], 1), ([np.inf, 1.0], 1), ([[0.5, 0.5]], 1)):
        with pytest.raises(InputError, match="^vec must"):
            rationalise(vec, total)
    with pytest.raises(InputError, match="^total must be a finite number >= 0, got -1"):
        rationalise([0.5, 0.5], -1)
    assert rationalise([0.25, 0.75]).tolist() == [Fraction(1, 4), Fraction(3, 4)]
    with pytest.raises(InputError, match="kernel must sum to 1"):
        rationalise_kernel([[2.0, 0.0], [0.1, 0.1]])
