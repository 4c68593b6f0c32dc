"""Property tests of statements B (block efficiency), S (string level) and K (multi-draft)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from proofs.block_efficiency import expected_by_enumeration, expected_from_law, tail_sum
from rdk_theory.bounds import expected_tokens_per_call
from rdk_theory.multidraft import (
    beta, kseq_accept_law, kseq_acceptance, kseq_best_rho, kseq_is_valid, kseq_output_law,
    one_minus_inv_e, optimal_acceptance_cut, optimal_acceptance_lp,
)
from rdk_theory.string_level import (
    psi, psi_by_segmentations, slem_acceptance, slrs_acceptance, unigram_drafter,
)
from tests.strategies import Law, law_pairs, laws, toy_tokenizers
from tests.tolerances import LP_ATOL, assert_close, assert_leq

W = Law.from_weights
alphas = st.lists(st.integers(0, 4).map(lambda k: Fraction(k, 4)), min_size=1, max_size=6)


# ------------------------------------------------------------------------------------ B
@given(a=alphas)
@example(a=[Fraction(1)] * 3)
@example(a=[Fraction(0)])
def test_B_tail_sum_equals_expectation_exactly(a):
    assert tail_sum(a) == expected_from_law(a) == expected_by_enumeration(a)
    assert expected_tokens_per_call(np.array(a, dtype=object)) == tail_sum(a)
    assert_close(expected_tokens_per_call(np.array(a, dtype=np.float64)), float(tail_sum(a)))


@given(k=st.integers(0, 3), g=st.integers(1, 8))
def test_B_iid_closed_form(k, g):
    a = Fraction(k, 4)
    assert tail_sum([a] * g) == (1 - a ** (g + 1)) / (1 - a)


def test_B_iid_alpha_one_gives_gamma_plus_one():
    assert tail_sum([Fraction(1)] * 5) == 6


# ------------------------------------------------------------------------------------ S
@given(tok=toy_tokenizers(), data=st.data())
@example(tok=({"a": Fraction(1)}, ["a"]), data=None)  # V = 1 on both sides
def test_S_slrs_at_least_slem_with_psi_by_segmentations(tok, data):
    drafter_law, target_vocab = tok
    drafter = unigram_drafter(drafter_law)
    ps = psi(target_vocab, drafter)
    assert list(ps) == list(psi_by_segmentations(target_vocab, drafter, list(drafter_law)))
    assert all(0 <= x <= 1 for x in ps)
    p = data.draw(laws(len(target_vocab))).exact if data is not None else np.array([Fraction(1)], dtype=object)
    assert slrs_acceptance(p, ps) >= slem_acceptance(p, ps)


def test_S_psi_known_values():
    """Drafter {a: 1/2, ab: 1/4, b: 1/4}: P(starts with 'ab') = 1/4 + 1/2 * 1/4."""
    d = unigram_drafter({"a": Fraction(1, 2), "ab": Fraction(1, 4), "b": Fraction(1, 4)})
    assert list(psi(["a", "ab", "b", "abb"], d)) == [Fraction(3, 4), Fraction(3, 8), Fraction(1, 4), Fraction(3, 32)]


# ------------------------------------------------------------------------------------ K
rhos = st.sampled_from([Fraction(1), Fraction(9, 8), Fraction(3, 2), Fraction(2), Fraction(5, 2), Fraction(4)])
EQUAL = (W([1, 2, 1]), W([1, 2, 1]))
DISJOINT = (W([1, 1, 0, 0]), W([0, 0, 1, 1]))
POINT = (W([0, 1]), W([0, 1]))


@given(pq=law_pairs(max_n=4), k=st.integers(1, 4), rho=rhos)
@example(pq=EQUAL, k=2, rho=Fraction(1))
@example(pq=DISJOINT, k=3, rho=Fraction(2))
@example(pq=POINT, k=2, rho=Fraction(1))
def test_K_validity_condition_and_acceptance_exact(pq, k, rho):
    p, q = pq
    valid = kseq_is_valid(p.exact, q.exact, rho, k)
    law = kseq_output_law(p.exact, q.exact, rho, k)
    b = beta(p.exact, q.exact, rho)
    assert kseq_accept_law(p.exact, q.exact, rho, k).sum() == kseq_acceptance(p.exact, q.exact, rho, k) == 1 - (1 - b) ** k
    if valid:
        assert list(law) == list(p.exact)
    elif any(rho * qx >= px > 0 for px, qx in zip(p.exact, q.exact)):
        assert list(law) != list(p.exact)  # the "only if" direction under its side condition


def test_K_condition_is_not_necessary_without_side_condition():
    """q puts mass off supp(p): the condition fails at rho = 1, k = 2, yet K-SEQ is lossless."""
    p = W([1, 1, 0]).exact
    q = W([1, 1, 8]).exact
    assert not kseq_is_valid(p, q, Fraction(1), 2)
    assert list(kseq_output_law(p, q, Fraction(1), 2)) == list(p)


@given(pq=law_pairs(max_n=4), k=st.integers(1, 3))
@example(pq=EQUAL, k=3)
@example(pq=DISJOINT, k=2)
@example(pq=(W([1]), W([1])), k=2)
@example(pq=(W([0, 1]), W([6, 5])), k=1)
@example(pq=(W([3, 4, 2]), W([3, 4, 2])), k=3)
def test_K_best_rho_and_one_minus_inv_e_ratio(pq, k):
    p, q = pq[0].f64, pq[1].f64
    rho = kseq_best_rho(p, q, k)
    assert 1 <= rho <= k and kseq_is_valid(p, q, rho, k)
    if rho > 1 + 1e-6:
        assert not kseq_is_valid(p, q, rho - 1e-6, k)
    acc = float(kseq_acceptance(p, q, rho, k))
    opt = optimal_acceptance_lp(p, q, k)
    assert_close(opt, float(optimal_acceptance_cut(pq[0].exact, pq[1].exact, k)), atol=LP_ATOL)
    assert_leq(acc, opt, slack=LP_ATOL)
    assert_leq(one_minus_inv_e() * opt, acc, slack=LP_ATOL)
    assert_close(kseq_output_law(p, q, rho, k), p)


@given(pq=law_pairs(max_n=4, sub_stochastic_second=True), k=st.integers(1, 3))
@example(pq=(W([1, 1]), W([0, 0], 1)), k=1)
def test_K_cut_of_a_sub_stochastic_draft_law_adds_a_never_accepted_draft(pq, k):
    """A sub-stochastic q equals a normalised one with an extra "no draft" token that the
    target never emits: the min-cut optimum must be the same, exactly (Fractions); with one
    draft it is sum min(p, q)."""
    p, q = pq[0].exact, pq[1].exact
    q0 = 1 - sum(q, Fraction(0))
    p_ext = np.array(list(p) + [Fraction(0)], dtype=object)
    q_ext = np.array(list(q) + [q0], dtype=object)
    assert optimal_acceptance_cut(p, q, k) == optimal_acceptance_cut(p_ext, q_ext, k)
    if k == 1:
        assert optimal_acceptance_cut(p, q, 1) == sum(map(min, p, q), Fraction(0))


def test_K_single_draft_is_speculative_sampling():
    p, q = W([3, 1, 0]).f64, W([1, 1, 2]).f64
    assert kseq_best_rho(p, q, 1) == 1.0
    assert_close(kseq_acceptance(p, q, 1.0, 1), np.minimum(p, q).sum())
    assert_close(optimal_acceptance_lp(p, q, 1), np.minimum(p, q).sum(), atol=LP_ATOL)


def test_K_rejects_bad_parameters():
    from rdk_theory.validation import InputError

    with pytest.raises(InputError):
        kseq_acceptance(W([1]).f64, W([1]).f64, 0.5, 2)
    with pytest.raises(InputError):
        kseq_acceptance(W([1]).f64, W([1]).f64, 1.0, 0)


def test_K_float_roundoff_does_not_flip_validity():
    """Found by the thorough profile: at k = 1 (or p == q) the condition holds with equality and
    float64 round-off in beta used to make rho = 1 'invalid'."""
    assert kseq_is_valid(W([0, 1]).f64, W([6, 5]).f64, 1.0, 1)
    assert kseq_best_rho(W([3, 4, 2]).f64, W([3, 4, 2]).f64, 3) == 1.0
