"""Property tests of statements L, A, O1, O2, O3, O4 (MATH.md section 6).

Exact tier (``==`` on Fractions) where the statement is an identity; float64 tier with the
named tolerances of tests/tolerances.py otherwise.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from rdk_theory.acceptance import acceptance_rate, oov_cap, residual, step_output_law, total_variation
from rdk_theory.kernels import DenseKernel, IdentityKernel
from rdk_theory.proposals import rdk_proposal, tli_proposal, vanilla_proposal
from rdk_theory.vocab import VocabMap
from tests.strategies import Law, kernels, law_pairs, laws, magnitude_laws, vocab_cases
from tests.tolerances import FLOAT64_ATOL, assert_close, assert_leq

W = Law.from_weights
# Edge cases pinned for every pair test: p == q, disjoint supports, point masses, V = 1.
EDGE_PAIRS = [
    (W([1, 2, 3]), W([1, 2, 3])),      # p == q
    (W([1, 1, 0, 0]), W([0, 0, 2, 1])),  # disjoint supports
    (W([0, 1, 0]), W([0, 1, 0])),      # equal point masses
    (W([1, 0]), W([0, 1])),            # distinct point masses
    (W([1]), W([1])),                  # V = 1
]


def pin_pairs(test):
    for pair in EDGE_PAIRS:
        test = example(pair)(test)
    return test


# ------------------------------------------------------------------------------------ L
@given(pr=law_pairs(sub_stochastic_second=True))
@pin_pairs
@example(pr=(W([1, 2]), Law.from_weights([0, 0], total=1)))  # r = 0: alpha = 0, draw from p
def test_L_output_law_is_p_exactly(pr):
    p, r = pr
    assert list(step_output_law(p.exact, r.exact)) == list(p.exact)


@given(pr=law_pairs(law=magnitude_laws))
@example(pr=(W([10**20 - 1, 1]), W([1, 0])))  # 1 - alpha = 1e-20: the residual is all on token 1
def test_L_output_law_is_p_exactly_at_any_magnitude(pr):
    """Entries from 1e-300 to 1: ``1 - alpha`` (the residual's normaliser) tiny but positive
    must still give a residual law and the output law ``p``; only an exact 0 is a zero. In
    float64 the residual is ``max(0, p - r) / sum max(0, p - r)`` of the float rows whenever
    that sum is positive, however small (relative round-off only)."""
    p, r = pr
    assert list(step_output_law(p.exact, r.exact)) == list(p.exact)
    res = residual(p.exact, r.exact)
    if acceptance_rate(p.exact, r.exact) < 1:
        assert sum(res) == 1 and all(x >= 0 for x in res)
    excess = np.maximum(p.f64 - r.f64, 0.0)
    if excess.sum() > 0:
        assert_close(residual(p.f64, r.f64), excess / excess.sum())


@given(pr=law_pairs(sub_stochastic_second=True))
@pin_pairs
def test_L_output_law_is_p_float64(pr):
    p, r = pr
    assert_close(step_output_law(p.f64, r.f64), p.f64)


@given(pr=law_pairs())
@pin_pairs
def test_L_residual_is_safe_when_alpha_is_one(pr):
    p, r = pr
    res = residual(p.exact, r.exact)
    if acceptance_rate(p.exact, r.exact) == 1:
        assert all(x == 0 for x in res)  # never used, never a division by zero
    else:
        assert sum(res) == 1 and all(x >= 0 for x in res)


# ------------------------------------------------------------------------------------ A
@given(pr=law_pairs())
@pin_pairs
def test_A_alpha_is_one_minus_tv_exactly(pr):
    p, r = pr
    assert acceptance_rate(p.exact, r.exact) == 1 - total_variation(p.exact, r.exact)


@given(pr=law_pairs(sub_stochastic_second=True))
@pin_pairs
@example(pr=(W([1, 0]), Law.from_weights([0, 0], total=1)))  # r = 0: TV 1/2
def test_total_variation_is_half_the_l1_distance_exactly(pr):
    """TV by its definition, sub-stochastic r included: a TV computed as twice the negative
    part alone agreed wherever the two masses are equal (so with 1 - alpha), and every proof
    and test passed with it."""
    p, r = pr
    assert total_variation(p.exact, r.exact) == sum(abs(a - b) for a, b in zip(p.exact, r.exact)) / 2
    assert_close(total_variation(p.f64, r.f64), np.abs(p.f64 - r.f64).sum() / 2)


@given(pr=law_pairs(sub_stochastic_second=True))
@pin_pairs
def test_A_alpha_in_unit_interval(pr):
    p, r = pr
    a = acceptance_rate(p.exact, r.exact)
    assert 0 <= a <= 1
    af = acceptance_rate(p.f64, r.f64)
    assert_leq(0.0, af)
    assert_leq(af, 1.0)


# ----------------------------------------------------------------------------------- O1/O2
@st.composite
def drafter_cases(draw, kind=None, law=laws):
    nt, m = draw(vocab_cases(kind=kind))
    q = draw(law(len(m)))
    p = draw(law(nt))
    return VocabMap(nt, m), p, q


EMPTY = (VocabMap(3, np.array([-1, -1])), W([1, 1, 1]), W([1, 2]))
SINGLETON_KEPT = (VocabMap(4, np.array([2])), W([1, 0, 3, 1]), W([1]))  # kept set of size 1
HETERO = (VocabMap(3, np.array([0, -1, 2])), W([2, 1, 0]), W([1, 3, 1]))


@given(case=drafter_cases())
@example(case=EMPTY)
@example(case=SINGLETON_KEPT)
@example(case=HETERO)
def test_O1_tli_at_least_vanilla(case):
    """O1 as MATH.md states it, termwise: vanilla's proposal is the drafter's mass where it
    lands (``q`` on ``I``, unnormalised), TLI's is ``q' = q / q(I) >= q`` on ``I`` (both 0
    off ``I``), so each acceptance term ``min(p, q')`` is at least ``min(p, q)``; the totals
    follow. Both proposals against their definitions, written here."""
    vm, p, q = case
    van, tli = vanilla_proposal(q.exact, vm), tli_proposal(q.exact, vm)
    assert list(van) == _scatter_by_definition(q.exact, vm)
    assert list(tli) == _tli_by_definition(q.exact, vm)
    assert all(t >= v for t, v in zip(tli, van))
    assert all(min(a, t) >= min(a, v) for a, t, v in zip(p.exact, tli, van))
    assert acceptance_rate(p.exact, tli) >= acceptance_rate(p.exact, van)


@given(case=drafter_cases())
@example(case=EMPTY)
@example(case=SINGLETON_KEPT)
@example(case=HETERO)
def test_O2_tli_capped_by_oov_mass(case):
    """``alpha_TLI <= p(I)`` with ``p(I)`` summed here over the target ids the map reaches
    (not read from ``oov_cap``, which must equal it, in both tiers)."""
    vm, p, q = case
    p_i = _p_of_intersection(p.exact, vm)
    assert oov_cap(p.exact, vm) == p_i
    assert_close(oov_cap(p.f64, vm), float(p_i))
    assert acceptance_rate(p.exact, tli_proposal(q.exact, vm)) <= p_i


@given(case=drafter_cases(kind="pruned"))
@example(case=SINGLETON_KEPT)
def test_O2_pruned_vanilla_equals_tli(case):
    vm, p, q = case
    van, tli = vanilla_proposal(q.exact, vm), tli_proposal(q.exact, vm)
    assert list(van) == list(tli)
    assert acceptance_rate(p.exact, van) <= sum(p.exact[vm.draft_to_target])  # p(D)


@given(case=drafter_cases(kind="empty"))
@example(case=EMPTY)
def test_O2_empty_intersection_has_no_proposal(case):
    vm, p, q = case
    for r in (vanilla_proposal(q.exact, vm), tli_proposal(q.exact, vm)):
        assert acceptance_rate(p.exact, r) == 0
        assert list(step_output_law(p.exact, r)) == list(p.exact)  # draws from p directly


# ------------------------------------------------------------------------------------ O3
@given(case=drafter_cases())
@example(case=EMPTY)
@example(case=SINGLETON_KEPT)
def test_O3_identity_kernel_is_tli(case):
    """Both sides against TLI written from its definition, not against ``tli_proposal`` only
    (``rdk_proposal`` calls it, so that comparison alone could not fail)."""
    vm, _, q = case
    eye = np.array([[Fraction(int(i == j)) for j in range(vm.n_target)] for i in range(vm.n_target)], dtype=object)
    tli = _tli_by_definition(q.exact, vm)
    assert list(tli_proposal(q.exact, vm)) == tli
    assert list(rdk_proposal(q.exact, vm, IdentityKernel())) == tli
    assert list(rdk_proposal(q.exact, vm, DenseKernel(eye))) == tli


@given(case=drafter_cases(law=magnitude_laws))
@example(case=(VocabMap(2, np.array([0, -1])), W([1, 1]), W([1, 10**20 - 1])))  # q(I) = 1e-20
def test_O3_tli_is_its_definition_at_any_magnitude(case):
    """TLI divides by ``q(I)``: a tiny positive ``q(I)`` (1e-300 and up) still gives a law on
    ``I``, exactly and in float64 (relative round-off); only ``q(I) = 0`` gives zeros."""
    vm, _, q = case
    tli = _tli_by_definition(q.exact, vm)
    assert list(tli_proposal(q.exact, vm)) == tli
    assert_close(tli_proposal(q.f64, vm), np.array(tli, dtype=np.float64))


def _scatter_by_definition(q, vm):
    """Vanilla's proposal ``r(x) = sum_{d -> x} q(d)`` over the drafter ids mapped into the
    target (``-1``: not in the target, dropped), unnormalised, one Fraction at a time."""
    out = [Fraction(0)] * vm.n_target
    for d, x in enumerate(vm.draft_to_target):
        if x >= 0:
            out[int(x)] += q[d]
    return out


def _tli_by_definition(q, vm):
    """``q'(x) = sum_{d -> x} q(d) / q(I)`` over the drafter ids mapped into the target; all 0
    when ``q(I) = 0`` (MATH.md section 3), one Fraction at a time."""
    out = _scatter_by_definition(q, vm)
    mass = sum(out, Fraction(0))
    return [v / mass for v in out] if mass else out


def _p_of_intersection(p, vm):
    """``p(I)``: the target's mass on the ids some drafter id maps to (each id once)."""
    reached = {int(x) for x in vm.draft_to_target if x >= 0}
    return sum((p[x] for x in reached), Fraction(0))


@given(data=st.data())
def test_L_holds_for_rdk_with_any_kernel(data):
    vm, p, q = data.draw(drafter_cases())
    _, k_exact, k_f64 = data.draw(kernels(vm.n_target))
    r = rdk_proposal(q.exact, vm, DenseKernel(k_exact))
    assert list(step_output_law(p.exact, r)) == list(p.exact)
    rf = rdk_proposal(q.f64, vm, DenseKernel(k_f64))
    assert_close(rf, r.astype(np.float64))


# ------------------------------------------------------------------------------------ O4
@given(data=st.data())
def test_O4_mass_transfer_gain_exact(data):
    p, r = data.draw(law_pairs(min_n=2))
    n = len(p)
    surplus = [i for i in range(n) if r.exact[i] > p.exact[i]]
    deficit = [j for j in range(n) if r.exact[j] < p.exact[j]]
    if not surplus or not deficit:
        return  # p == r: nothing to move
    i = data.draw(st.sampled_from(surplus))
    j = data.draw(st.sampled_from(deficit))
    frac = Fraction(data.draw(st.integers(1, 8)), 8)
    delta = frac * (r.exact[i] - p.exact[i])
    moved = r.exact.copy()
    moved[i] -= delta
    moved[j] += delta
    gain = acceptance_rate(p.exact, moved) - acceptance_rate(p.exact, r.exact)
    assert gain == min(delta, p.exact[j] - r.exact[j])


def test_O4_rdk_can_exceed_oov_cap():
    """A kernel moving drafted mass onto an OOV token beats TLI's ceiling p(I)."""
    vm = VocabMap(2, np.array([0]))  # token 1 is OOV
    p, q = W([1, 1]), W([1])
    k = np.array([[Fraction(1, 2), Fraction(1, 2)], [Fraction(0), Fraction(1)]], dtype=object)
    r = rdk_proposal(q.exact, vm, DenseKernel(k))
    assert acceptance_rate(p.exact, r) == 1 > oov_cap(p.exact, vm) == Fraction(1, 2)
    _ = FLOAT64_ATOL
