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
    prefix_probability, psi, psi_by_segmentations, slem_acceptance, slrs_acceptance,
    unigram_drafter,
)
from rdk_theory.validation import InputError
from tests.strategies import Law, law_pairs, laws, toy_tokenizers
from tests.tolerances import BISECTION_ATOL, FLOAT64_ATOL, LP_ATOL, assert_close, assert_leq

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
    slrs, slem = slrs_acceptance(p, ps), slem_acceptance(p, ps)
    # each acceptance against its definition (MATH.md section 6, S), exactly
    assert slrs == sum((min(a, b) for a, b in zip(p, ps)), Fraction(0))
    assert slem == sum((a * b for a, b in zip(p, ps)), Fraction(0))
    assert slrs >= slem


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
    # the smallest valid rho, to the bisection's tolerance (1e-6 here let a bisection 1e5 x
    # looser than its tol=1e-12 pass every test)
    if rho > 1 + BISECTION_ATOL:
        assert not kseq_is_valid(p, q, rho - BISECTION_ATOL, k, strict=True)
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


# ------------------------------------------------------------------- review fixes (K, S)
def float_law(x) -> list:
    """The law that float64 ``x`` is: its entries as Fractions, divided by their exact sum when
    that is within FLOAT64_ATOL of 1 (a float law rarely sums to 1 exactly; [0.9, 0.1] sums to
    1 + 2^-55, which kseq_is_valid's exact tier refuses)."""
    exact = [Fraction(float(v)) for v in x]
    total = sum(exact, Fraction(0))
    return [v / total for v in exact] if abs(total - 1) <= FLOAT64_ATOL else exact


def exactly_valid(p, q, rho, k) -> bool:
    """K-SEQ's validity condition ``1 - (1 - beta)^k <= rho beta`` in Fractions, for the laws
    the floats ``p`` and ``q`` are (:func:`float_law`): an oracle independent of the module."""
    rho = Fraction(rho)
    b = sum((min(y, x / rho) for x, y in zip(float_law(p), float_law(q))), Fraction(0))
    return 1 - (1 - b) ** k <= rho * b


def exact_rho_star(p, q, k) -> tuple:
    """``(lo, hi)``: the exact rho* of the laws the floats are lies in (lo, hi], 2^-80 wide."""
    lo, hi = Fraction(1), Fraction(k)
    if exactly_valid(p, q, lo, k):
        return lo, lo
    while hi - lo > Fraction(1, 1 << 80):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if exactly_valid(p, q, mid, k) else (mid, hi)
    return lo, hi


def test_kseq_best_rho_searches_up_to_k_itself_when_float_k_rounds_below_it():
    """k = 2^53 + 1 has no float: float(k) = 2^53 is below it, and the bisection's upper end
    is then the float above (2^53 + 2). With p = (1, 0) and q = (1e-40, 1 - 1e-40) (the
    float 1.0: the law is q over its exact sum), beta = q(0) = e ~ 1e-40 for rho < 1/e, and
    1 - (1 - e)^k <= rho e holds only for rho >= ~k - k^2 e / 2 = k - 4e-9: 2^53 (= k - 1) is
    invalid, so an upper end left at float(k) would be returned invalid; the answer is
    2^53 + 2, exactly valid (the condition decided in Fractions for the laws the floats are,
    by kseq_is_valid's exact tier, cheap at any k)."""
    k = 2 ** 53 + 1
    p, q = np.array([1.0, 0.0]), np.array([1e-40, 1 - 1e-40])
    rho = kseq_best_rho(p, q, k)
    assert rho == 2.0 ** 53 + 2
    laws = np.array(float_law(p), dtype=object), np.array(float_law(q), dtype=object)
    assert kseq_is_valid(*laws, Fraction(rho), k)
    assert not kseq_is_valid(*laws, Fraction(2 ** 53), k)


@pytest.mark.timeout(60)
def test_kseq_best_rho_ends_and_refuses_a_tolerance_it_cannot_meet():
    """The bisection looped forever once tol was below the float spacing near rho* (tol = 0,
    or the default 1e-12 with rho* ~ 14,427), and a NaN tol returned k (3, not 2.1)."""
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    for bad in (float("nan"), 0, -1e-3, float("inf"), "1e-6", True):
        with pytest.raises(InputError, match="tol must be a finite real number > 0"):
            kseq_best_rho(p, q, 3, tol=bad)
    rho = kseq_best_rho(p, q, 3, tol=1e-300)  # stops at adjacent floats (of the exact check)
    assert exactly_valid(p, q, rho, 3) and not exactly_valid(p, q, np.nextafter(rho, 0), 3)
    big = kseq_best_rho(p, np.array([1 - 1e-9, 1e-9]), 20_000)
    assert 1 < big < 20_000 and kseq_is_valid(p, np.array([1 - 1e-9, 1e-9]), big, 20_000)


F = Fraction


@pytest.mark.parametrize("p, q, k", [
    ([F(11, 451639), F(2, 851659), F(384632147574, 384642419101)],
     [F(26, 181293), F(0), F(181267, 181293)], 6),  # rho* 1.1303120489..., the slope of g small
    ([F(1, 2), F(1, 3), F(1, 6)], [F(1, 6), F(1, 6), F(2, 3)], 2),
    ([F(1, 2), F(1, 3), F(1, 6)], [F(1, 6), F(1, 6), F(2, 3)], 3),
])
def test_kseq_best_rho_is_valid_in_exact_arithmetic(p, q, k):
    """The float rho* granted the 1e-12 slack of kseq_is_valid, so it sat up to 1e-8 below the
    exact rho* (the slack over a small slope of g): the exact check refused it and K-SEQ's
    accepted law exceeded p by 1e-12. The bisection now decides each step exactly (for the
    laws the floats are), so Fraction(rho) passes the exact check of the laws they round too,
    and it stays within 1e-7 of their exact rho*."""
    pe, qe = np.array(p, dtype=object), np.array(q, dtype=object)
    pf, qf = pe.astype(float), qe.astype(float)
    rho = kseq_best_rho(pf, qf, k)
    assert kseq_is_valid(pe, qe, Fraction(rho), k)  # the margin covers the floats' rounding
    lo, hi = Fraction(1), Fraction(k)  # the exact rho* of the given Fractions, by bisection
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if kseq_is_valid(pe, qe, mid, k) else (mid, hi)
    assert float(hi) - 1e-7 <= rho <= float(hi) + 1e-7


def test_an_int_rho_keeps_integer_laws_exact():
    """An int rho with an object array of ints divided int / int, a float: beta came out
    0.333... and the validity of a rho that is invalid by 1e-13 was judged True in floats."""
    a = 1 - Fraction(1, 10 ** 13)
    p, q = np.array([1, 0], dtype=object), np.array([a, 1 - a], dtype=object)
    assert kseq_is_valid(p, q, 1, 2) is False is kseq_is_valid(p, q, Fraction(1), 2)
    b = beta(np.array([1, 0], dtype=object), np.array([Fraction(1, 2)] * 2, dtype=object), 3)
    assert b == Fraction(1, 3) and isinstance(b, Fraction)
    law = kseq_accept_law(np.array([1, 0], dtype=object), np.array([Fraction(1, 2)] * 2,
                                                                    dtype=object), 3, 2)
    assert all(isinstance(v, Fraction) for v in law)


def test_kseq_mixes_an_exact_law_with_a_float_one_in_float64():
    """An exact p with a float q gave object arrays of Python floats, and with q = (0.3, 0.7)
    an exact Fraction(7, 8) where every min picked the exact side; bounds and string_level
    give float64 for such a mix, and so does multidraft now."""
    p = np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)
    q = np.array([0.3, 0.7])
    for law in (kseq_accept_law(p, q, 2, 3), kseq_output_law(p, q, 2, 3)):
        assert law.dtype == np.float64
    acc = kseq_acceptance(p, q, 2, 3)
    assert not isinstance(acc, Fraction)
    assert acc == pytest.approx(kseq_acceptance(np.array([0.5, 0.5]), q, 2, 3), abs=FLOAT64_ATOL)


def test_kseq_validity_is_judged_relative_to_a_tiny_beta():
    """With beta ~ 1e-13 the whole condition sat below the absolute slack 1e-12, so rho = 1 was
    'valid' and the output law put 3x p on the small tokens; the exact check says rho = 1 is
    invalid and rho* = 3 (relative slack: the float rho* is within 1e-12 of 3)."""
    F = Fraction
    p, q = np.array([1 - 2e-13, 1e-13, 1e-13]), np.array([0.0, 0.5, 0.5])
    pe = np.array([1 - 2 * F(1e-13), F(1e-13), F(1e-13)], dtype=object)
    qe = np.array([F(0), F(1, 2), F(1, 2)], dtype=object)
    assert not kseq_is_valid(pe, qe, F(1), 3) and not kseq_is_valid(p, q, 1.0, 3)
    assert kseq_is_valid(pe, qe, F(3), 3)
    rho = kseq_best_rho(p, q, 3)
    assert rho == pytest.approx(3, rel=1e-11)
    assert_close(kseq_output_law(p, q, rho, 3), p, rtol=1e-9, atol=0)  # relative, per token
    # rho = inf (never accept) is lossless: valid, without inf * 0 = NaN off q's support
    assert kseq_is_valid([0.5, 0.5, 0.0], [0.9, 0.0, 0.1], float("inf"), 2)


@pytest.mark.parametrize("bad", ["2", None, 1j, np.array([1.0, 2.0]), float("nan"), 0.5, True,
                                 np.True_])
def test_kseq_refuses_a_rho_that_is_not_a_real_number_at_least_one(bad):
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    assert kseq_acceptance(p, q, np.array(2.0), 2) == kseq_acceptance(p, q, 2.0, 2)  # 0-d
    with pytest.raises(InputError, match="rho must be a real number"):
        kseq_acceptance(p, q, bad, 2)
    if not (isinstance(bad, float) and bad == 0.5):
        with pytest.raises(InputError, match="rho must be a real number > 0"):
            beta(p, q, bad)


def test_kseq_reads_a_0d_tensor_rho_as_its_number():
    """A 0-d tensor rho was refused, where a tensor k and a 0-d array passed."""
    torch = pytest.importorskip("torch")
    p, q = np.array([0.5, 0.5]), np.array([0.9, 0.1])
    assert kseq_acceptance(p, q, torch.tensor(2.0), 2) == kseq_acceptance(p, q, 2.0, 2)
    assert beta(p, q, torch.tensor(3)) == beta(p, q, 3)
    for bad in (torch.tensor([2.0]), torch.tensor(True), torch.tensor(2 + 1j)):
        with pytest.raises(InputError, match="rho must be a real number"):
            kseq_acceptance(p, q, bad, 2)


def test_optimal_acceptance_lp_takes_a_sub_stochastic_draft_law_like_the_cut():
    """The LP refused q summing to 1 - 1e-6, which the validator accepts; a sub-stochastic q
    drafts 'nothing' with the missing mass, as in the min-cut form, and the two agree."""
    for p, q in (([0.5, 0.5], [0.5, 0.5 - 1e-6]), ([0.5, 0.3, 0.2], [0.5, 0.2, 0.0]),
                 ([0.2, 0.8], [0.0, 0.0])):
        for k in (1, 2, 3):
            assert optimal_acceptance_lp(p, q, k) == pytest.approx(
                float(optimal_acceptance_cut(p, q, k)), abs=LP_ATOL)


def test_optimal_acceptance_lp_adds_no_atom_for_round_off(monkeypatch):
    """A normalised q whose float sum is 1 - 2e-16 drafted 'nothing' with that mass: (n + 1)^k
    tuples instead of n^k (17^4 fit the LP's limit, 18^4 was refused)."""
    import itertools
    import types

    from rdk_theory import multidraft as md

    q = np.full(7, 1 / 7)
    assert 0 < 1 - q.sum() < md.LP_MASS_ROUNDOFF
    seen = []
    counting = lambda drafts, repeat: (seen.append(len(drafts)), itertools.product(drafts, repeat=repeat))[1]  # noqa: E731
    monkeypatch.setattr(md, "itertools", types.SimpleNamespace(product=counting))
    assert optimal_acceptance_lp(q, q, 2) == pytest.approx(1.0, abs=LP_ATOL)
    assert seen == [7]


def test_psi_refuses_an_empty_token_from_a_drafter_function():
    """Mutation pass: a drafter function (not :func:`unigram_drafter`, which checks its table)
    offering the empty string must get an InputError; without the check the recursion of
    :func:`prefix_probability` never shortened the string (a RecursionError)."""
    drafter = lambda prefix: {"": Fraction(1, 2), "a": Fraction(1, 2)}  # noqa: E731
    with pytest.raises(InputError, match="drafter tokens after context .* must be non-empty strings"):
        psi(["a"], drafter)


def test_slem_acceptance_clips_psi_to_one():
    """Mutation pass: psi within the input tolerance above 1 (1 + 5e-5) must count as 1, or
    the acceptance exceeds 1 (1.00005)."""
    assert float(slem_acceptance([0.5, 0.5], [1 + 5e-5, 0.2])) == 0.6
    assert float(slem_acceptance([1.0], [1 + 5e-5])) == 1.0


def test_string_level_acceptances_are_per_context():
    """A (C, V) batch was summed over every axis: two contexts of SLRS 1 gave 2.0."""
    p = np.array([[0.5, 0.5], [1.0, 0.0]])
    s = np.array([0.5, 0.5])
    assert slem_acceptance(p, s).tolist() == [0.5, 0.5]
    assert slrs_acceptance(p, s).tolist() == [1.0, 0.5]
    assert slrs_acceptance(p, np.stack([s, s])).tolist() == [1.0, 0.5]
    exact = slrs_acceptance(np.array([Fraction(1, 2)] * 2, dtype=object),
                            np.array([Fraction(1, 3), Fraction(1)], dtype=object))
    assert exact == Fraction(5, 6)
    # Fractions with floats: float64, whichever side holds the floats
    halves = np.array([Fraction(1, 2)] * 2, dtype=object)
    quarters = np.array([Fraction(1, 4)] * 2, dtype=object)
    for got in (slrs_acceptance(halves, [0.25, 1.0]), slem_acceptance([0.5, 0.5], quarters)):
        assert np.asarray(got).dtype == np.float64
    assert float(slrs_acceptance(halves, [0.25, 1.0])) == 0.75


@pytest.mark.parametrize("call, match", [
    (lambda: slrs_acceptance([0.5, float("nan")], [0.5, 0.5]), "non-finite"),
    (lambda: slrs_acceptance([-1.0, 2.0], [0.5, 0.5]), "negative probability"),
    (lambda: slem_acceptance(["a"], [0.5]), "must hold real numbers"),
    (lambda: slrs_acceptance([0.5, 0.5], [0.2, 1.5]), r"psi holds 1.5: each entry is a probability"),
    (lambda: slrs_acceptance([0.5, 0.5], [0.5, 0.5, 0.0]), "cover the same target tokens"),
    (lambda: psi(["a"], unigram_drafter({"a": -0.5, "b": 1.5})), "negative probability"),
    (lambda: psi("ab", unigram_drafter({"a": 0.5, "b": 0.5})), "got the string 'ab'"),
    (lambda: unigram_drafter({1: 1.0}), "drafter tokens must be non-empty strings, got 1"),
    (lambda: unigram_drafter([("a", 1.0)]), "must map token strings to probabilities"),
    (lambda: psi_by_segmentations(["a"], unigram_drafter({"a": 1.0}), "ab"), "got the string"),
])
def test_string_level_refuses_what_it_cannot_use(call, match):
    """Each of these returned a number (nan, -0.5, -0.5 for psi), read a string as its
    characters, or raised a TypeError."""
    with pytest.raises(InputError, match=match):
        call()


# ------------------------------------------------------------------- review fixes, round 2
@pytest.mark.parametrize("p, q, k, closed_form", [
    ([0.5, 0.5], [0.45, 0.55], 16, Fraction(10, 9)),  # was 1.21629
    ([0.5, 0.5], [0.4999, 0.5001], 4, Fraction(5000, 4999)),  # was 1.0010010
])
def test_kseq_best_rho_is_the_exact_rho_star_at_high_acceptance(p, q, k, closed_form):
    """The bisection's float test demanded a 1e-12 relative margin, which only passes once
    (1 - beta)^k >= ~1e-12; g is nearly flat there, so rho overshot the exact rho* by 1-10%
    (1.21629 for 10/9, 1.0010010 for 1.0002000). Now each step is decided exactly: rho is
    valid for the laws the floats are and above their rho* by at most tol."""
    rho = kseq_best_rho(np.array(p), np.array(q), k, tol=BISECTION_ATOL)
    lo, hi = exact_rho_star(p, q, k)
    assert exactly_valid(p, q, rho, k)
    assert lo < Fraction(rho) <= lo + Fraction(BISECTION_ATOL)
    # rho* = max p / q up to (1 - beta)^k ~ 1e-16: from there on rho beta = sum p = 1
    assert_close(rho, float(closed_form), rtol=0, atol=BISECTION_ATOL)


def test_kseq_best_rho_takes_p_equals_q_as_rho_one_only_when_that_is_valid():
    """p == q returned rho = 1 even when p sums to 1 - 5e-5 (a law within PROB_ATOL), where
    rho = 1 is invalid (the accepted mass 1 - (5e-5)^k exceeds p's); laws that are equal up to
    their float rounding still give exactly 1."""
    p = np.array([0.5, 0.49995])
    assert not kseq_is_valid(p, p, 1.0, 3)
    rho = kseq_best_rho(p, p, 3)
    assert rho > 1 and kseq_is_valid(p, p, rho, 3) and exactly_valid(p, p, rho, 3)
    lo, _ = exact_rho_star(p, p, 3)
    assert lo < Fraction(rho) <= lo + Fraction(BISECTION_ATOL)
    law = W([1, 1, 1, 1, 1, 1, 1]).f64  # exact sum 1 - 2^-54
    assert kseq_best_rho(law, law, 12) == 1.0


@pytest.mark.timeout(60)
def test_multidraft_refuses_or_answers_an_astronomical_k():
    """optimal_acceptance_lp computed len(drafts) ** k before its size check (k = 2^62 never
    finished) and enumerated one k-tuple for a single draft (k = 1e10: MemoryError); the
    exact tier raised (1 - beta) to the k-th power in Fractions (hours, or memory, at k =
    2^62). Now: an InputError naming the limit, and kseq_is_valid decides at any k."""
    pf, qf = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    with pytest.raises(InputError, match="LP too large"):
        optimal_acceptance_lp(pf, qf, 2 ** 62)
    with pytest.raises(InputError, match="LP too large: k = 10000000000 drafts"):
        optimal_acceptance_lp(pf, np.array([1.0, 0.0]), 10 ** 10)
    p, q = W([1, 1]).exact, W([1, 2]).exact
    for call in (lambda: kseq_acceptance(p, q, 1, 2 ** 62),
                 lambda: kseq_accept_law(p, q, Fraction(3, 2), 2 ** 62),
                 lambda: kseq_output_law(p, q, 1, 2 ** 62),
                 lambda: optimal_acceptance_cut(p, q, 2 ** 62)):
        with pytest.raises(InputError, match="too large for exact arithmetic"):
            call()
    # beta(3/2) = 2/3: 1 - (1/3)^k <= 1 holds; beta(1) = 5/6: 1 - (1/6)^k <= 5/6 fails
    assert kseq_is_valid(p, q, Fraction(3, 2), 2 ** 62) is True
    assert kseq_is_valid(p, q, Fraction(1), 2 ** 62) is False
    # beta = 2^-70 keeps (1 - beta)^k in play at k = 2^62: 1 - (1 - beta)^k = 2^-8 (1 - 2^-9 +
    # O(2^-18)) against rho beta = 2^-8 rho / k: valid at rho = k (1 - 2^-10), not k (1 - 2^-8)
    k = 2 ** 62
    one = np.array([Fraction(1), Fraction(0)], dtype=object)
    tiny = np.array([Fraction(1, 2 ** 70), 1 - Fraction(1, 2 ** 70)], dtype=object)
    assert kseq_is_valid(one, tiny, k * (1 - Fraction(1, 2 ** 10)), k) is True
    assert kseq_is_valid(one, tiny, k * (1 - Fraction(1, 2 ** 8)), k) is False


def test_psi_of_a_long_string_needs_no_recursion():
    """psi and prefix_probability recursed once per drafter token: a 1,200-character target
    token with a one-character-token drafter raised RecursionError."""
    drafter = unigram_drafter({"a": Fraction(1, 2), "b": Fraction(1, 2)})
    assert psi(["a" * 1200], drafter).tolist() == [Fraction(1, 2 ** 1200)]
    assert prefix_probability("ab" * 700, drafter) == Fraction(1, 2 ** 1400)


def test_prefix_probability_refuses_the_empty_string_as_psi_does():
    """prefix_probability("") returned the drafter's mass on tokens (0.5 here), where every
    output starts with "" (probability 1); psi refuses an empty target token, and so does it."""
    drafter = unigram_drafter({"a": 0.5})
    with pytest.raises(InputError, match="string must be a non-empty str"):
        prefix_probability("", drafter)
    assert prefix_probability("a", drafter) == 0.5


def test_string_level_keeps_the_exact_tier_exact_and_floats_float():
    """A Fraction drafter that never produces the token gave psi = float array([0.]); exact p
    with float psi gave slrs/slem as an object array of floats (passed off as exact)."""
    drafter = unigram_drafter({"a": Fraction(1, 2)})
    assert psi(["c"], drafter).dtype == object and psi(["c"], drafter).tolist() == [Fraction(0)]
    for got in (psi(["c", "a"], drafter), psi_by_segmentations(["c", "a"], drafter, ["a"])):
        assert got.dtype == object and got.tolist() == [Fraction(0), Fraction(1, 2)]
        assert all(isinstance(v, Fraction) for v in got)
    assert psi(["c"], unigram_drafter({"a": 0.5})).dtype == np.float64
    p = np.array([[Fraction(1, 2), Fraction(1, 2)]] * 2, dtype=object)
    for fn in (slrs_acceptance, slem_acceptance):
        out = fn(p, [0.3, 0.9])
        assert out.dtype == np.float64
        assert_close(out, [0.8, 0.8] if fn is slrs_acceptance else [0.6, 0.6])
    assert slrs_acceptance(p, np.array([Fraction(1, 3), Fraction(1)], dtype=object)).tolist() == \
        [Fraction(5, 6)] * 2


def test_kseq_best_rho_screens_only_what_floats_can_decide_and_strict_takes_no_slack():
    """Mutation pass. With the float screen's margin at 0, a step within round-off of rho* was
    decided in floats: at tol = 1e-300 this p, q, k = 7 gave 3.1061989627186475, exactly
    invalid (the smallest valid float is the next one up). strict=True demands the slack
    where the default grants it: at p == q, rho = 1 the condition holds with equality, so only
    the default passes. And rho = 1 is returned as 1.0 when it is valid (disjoint supports)."""
    p = np.array([0.05281174160899797, 0.5485375089293253, 0.12577775935808375, 0.27287299010359284])
    q = np.array([0.05191813813643795, 0.14836854305432512, 0.046902451753743815, 0.7528108670554932])
    rho = kseq_best_rho(p, q, 7, tol=1e-300)
    assert exactly_valid(p, q, rho, 7) and not exactly_valid(p, q, np.nextafter(rho, 0), 7)
    half = np.array([0.5, 0.5])
    assert kseq_is_valid(half, half, 1.0, 2) and not kseq_is_valid(half, half, 1.0, 2, strict=True)
    assert kseq_best_rho([0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], 3) == 1.0


def test_kseq_best_rho_reads_a_float_law_off_by_round_off_as_the_law_it_rounds():
    """[0.1, 0.2, 0.7] sums to 1 - 2^-55 exactly: it is read as that law divided by its exact
    sum (LAW_SUM_ROUNDOFF), whose rho* at k = 16 is max p / q = 0.7 / 0.65 = 14 / 13 to
    (1 - beta)^16. Read as the sub-stochastic law it holds, rho* was 1.10 (the accepted mass
    may not exceed p's, which needs (1 - beta)^16 >= 2^-55)."""
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.1, 0.25, 0.65])
    assert sum(Fraction(x) for x in p) == 1 - Fraction(1, 2**55)
    rho = kseq_best_rho(p, q, 16)
    assert 14 / 13 - BISECTION_ATOL <= rho <= 14 / 13 + BISECTION_ATOL


def test_power_at_least_decides_an_exact_tie_of_an_odd_negative_power_by_its_bounds():
    """(-1/2)^k >= -2^-k holds with equality: for odd k the bounds of |x|^k = 2^-k are exact
    and meet the target, which decides it (hi <= target). Read strictly, the tie went on to
    the exact power, unaffordable at k = 2^21 + 1 (2k bits > MAX_EXACT_POWER_BITS): None,
    'undecidable', for a tie the bounds had settled."""
    from rdk_theory.multidraft import MAX_EXACT_POWER_BITS, _power_at_least

    k = (1 << 21) + 1
    assert 2 * k > MAX_EXACT_POWER_BITS
    assert _power_at_least(Fraction(-1, 2), k, Fraction(-1, 1 << k)) is True
    assert _power_at_least(Fraction(-1, 2), k, Fraction(-1, 1 << (k - 1))) is True
    assert _power_at_least(Fraction(-1, 2), k, Fraction(-1, 1 << (k + 1))) is False
