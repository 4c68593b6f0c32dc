"""Property tests of statements O5 (first-order gain, concavity) and E (first-order error)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import assume, example, given
from hypothesis import strategies as st

from proofs.first_order_gain import alpha_of_lambda, right_derivative
from rdk_theory.acceptance import acceptance_rate, total_variation
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.kernels import covariance_softmax_kernel
from tests.strategies import Law, calibration_sets, kernels, laws, sub_laws
from tests.tolerances import FINITE_DIFF_ATOL, FLOAT64_ATOL, FINITE_DIFF_STEP, TV_BOUND_SLACK, assert_close, assert_leq

W = Law.from_weights


@st.composite
def gain_cases(draw):
    n = draw(st.integers(1, 5))
    _, k_exact, k_f64 = draw(kernels(n))
    return draw(laws(n)), draw(laws(n)), k_exact, k_f64


def _eye(n):
    e = np.array([[Fraction(int(i == j)) for j in range(n)] for i in range(n)], dtype=object)
    return e, e.astype(np.float64)


UNIFORM3 = np.array([[Fraction(1, 3)] * 3] * 3, dtype=object)


@given(case=gain_cases())
@example(case=(W([1, 1, 1]), W([1, 1, 1]), UNIFORM3, UNIFORM3.astype(float)))  # tie everywhere
@example(case=(W([1, 0, 0]), W([0, 0, 1]), UNIFORM3, UNIFORM3.astype(float)))  # disjoint supports
@example(case=(W([1]), W([1]), *_eye(1)))  # V = 1
def test_O5_right_derivative_formula_exact(case):
    p, qp, k, _ = case
    # alpha(lambda) is piecewise linear with kinks at (p - q')/d, |d| <= 1: any lambda below the
    # smallest positive kink gives the exact right derivative.
    d = qp.exact @ k - qp.exact
    kinks = [(p.exact[x] - qp.exact[x]) / d[x] for x in range(len(p)) if d[x] != 0 and (p.exact[x] - qp.exact[x]) / d[x] > 0]
    lam = min(kinks + [Fraction(1)]) / 2
    quotient = (alpha_of_lambda(p.exact, qp.exact, k, lam) - alpha_of_lambda(p.exact, qp.exact, k, 0)) / lam
    assert quotient == right_derivative(p.exact, qp.exact, k)


@given(case=gain_cases())
def test_O5_right_derivative_vs_finite_difference_float64(case):
    p, qp, _, k = case
    h = FINITE_DIFF_STEP
    fd = (alpha_of_lambda(p.f64, qp.f64, k, h) - alpha_of_lambda(p.f64, qp.f64, k, 0.0)) / h
    # exact ties (q' == p) are decided on the Fractions, since float64 equality is meaningless
    d = qp.f64 @ k - qp.f64
    tie = qp.exact == p.exact
    formula = d[(qp.exact < p.exact)].sum() + np.minimum(0.0, d[tie]).sum()
    assert_close(fd, formula, atol=FINITE_DIFF_ATOL, rtol=0)


@given(case=gain_cases(), l1=st.integers(0, 8), l2=st.integers(0, 8), t=st.integers(0, 4))
def test_O5_concave_in_lambda(case, l1, l2, t):
    p, qp, k, _ = case
    a, b, s = Fraction(l1, 8), Fraction(l2, 8), Fraction(t, 4)
    mid = alpha_of_lambda(p.exact, qp.exact, k, s * a + (1 - s) * b)
    assert mid >= s * alpha_of_lambda(p.exact, qp.exact, k, a) + (1 - s) * alpha_of_lambda(p.exact, qp.exact, k, b)


@given(data=st.data())
def test_O5_concave_in_kernel(data):
    n = data.draw(st.integers(1, 4))
    p, qp = data.draw(laws(n)), data.draw(laws(n))
    _, k1, _ = data.draw(kernels(n))
    _, k2, _ = data.draw(kernels(n))
    s = Fraction(data.draw(st.integers(0, 4)), 4)
    a = lambda m: acceptance_rate(p.exact, qp.exact @ m)  # noqa: E731
    assert a(s * k1 + (1 - s) * k2) >= s * a(k1) + (1 - s) * a(k2)


# ------------------------------------------------------------------------------------ E
#: Temperatures of the E tests. The small ones make the clip of MATH.md section 5 common: with
#: calibration laws of weights 0..6 a first-order vector has an entry below -1e-6 in ~20% of
#: draws at tau = 1e-3 and ~9% at 1e-2, against 0.65% of draws for {0.05, 0.2, 1, 5} alone.
FIRST_ORDER_TAUS = [1e-3, 1e-2, 0.05, 0.2, 1.0, 5.0]


@st.composite
def first_order_cases(draw, q_laws=laws):
    """``(calibration (S, n), tau, p, q')``; ``q'`` a law, or sub-stochastic with ``sub_laws``."""
    n = draw(st.integers(2, 8))
    cal = draw(calibration_sets(n))
    tau = draw(st.sampled_from(FIRST_ORDER_TAUS))
    return cal, tau, draw(laws(n)), draw(q_laws(n))


# Calibration rows (1, 0, 0), (0, 1, 0) at tau = 0.2 and q' = (1, 0, 0): the first-order vector
# before the clip is (0.823, -0.059, 0.236), so the clip and the renormalisation both matter.
CLIPPING = (np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), 0.2, W([1, 1, 1]), W([1, 0, 0]))
# Rows (0, 1, 0), (1/2, 0, 1/2) at tau = 0.05, q' = (2, 1, 3)/6 of full support: before the clip
# (0.538, -0.125, 0.587).
CLIPPING_FULL = (np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), 0.05, W([1, 2, 3]), W([2, 1, 3]))


def _assert_valid_proposal(r, qp):
    """A first-order proposal is what the step samples, divides by and builds the residual from
    (MATH.md section 5): every entry >= 0 (no tolerance: the clip sets exact zeros) and the
    total mass of ``q'`` kept (the renormalisation after the clip)."""
    r = np.asarray(r, dtype=np.float64)
    assert r.shape == qp.shape and np.all(np.isfinite(r))
    assert np.all(r >= 0), f"negative entries in the first-order proposal: {r}"
    assert_close(r.sum(), np.sum(qp))


def _first_order_by_definition(cal, tau, qp):
    """MATH.md section 5 written out from an Omega formed here (population covariance, 1/S):
    ``A = Omega / tau = diag(a) + B``, ``Z_i = exp(a_i) + N - 1 - a_i``,
    ``q''(j) = q'(j) (exp(a_j) - 1) / Z_j + sum_i q'(i) / Z_i + (B^T (q' / Z))_j``; returns that
    vector before the clip and after it (negatives to 0, then rescaled to ``sum q'``)."""
    n = cal.shape[1]
    a_mat = np.cov(cal, rowvar=False, bias=True) / tau
    a = np.diag(a_mat).copy()
    b = a_mat - np.diag(a)
    z = np.exp(a) + n - 1 - a
    v = qp / z
    raw = qp * np.expm1(a) / z + v.sum() + b.T @ v
    clipped = np.maximum(raw, 0.0)
    if raw.min() < 0:
        clipped *= qp.sum() / clipped.sum()
    return raw, clipped


@given(case=first_order_cases(q_laws=sub_laws))
@example(case=CLIPPING)
@example(case=CLIPPING_FULL)
def test_E_first_order_proposal_is_the_section5_formula(case):
    """The toolkit's first-order vector, before and after the clip, against the formula of
    MATH.md section 5 computed independently (``np.cov``, dense ``B``, no factor), on every
    engine, at float64 round-off; ``q'`` sub-stochastic too (the clip rescales to ``sum q'``)."""
    cal, tau, _, qp = case
    raw, clipped = _first_order_by_definition(cal, tau, qp.f64)
    assert_close(np.sum(raw), np.sum(qp.f64))  # the formula itself keeps the mass before the clip
    for engine in ("auto", "numpy"):
        fo = FirstOrderCovarianceKernel(cal, tau, engine=engine)
        assert_close(fo.transport_unclipped(qp.f64), raw)
        out = fo.transport(qp.f64)
        _assert_valid_proposal(out, qp.f64)
        assert_close(out, clipped)


@given(case=first_order_cases())
@example(case=CLIPPING)
@example(case=CLIPPING_FULL)
def test_E_tv_bound_on_toolkit_kernels(case):
    """Theorem E's inequality through the toolkit's calculators, and its equality case.

    The inequality holds for any two proposals of equal mass, so this tests ``acceptance_rate``
    and ``total_variation`` (their normalisations), not the first-order kernel's accuracy: that
    is :func:`test_E_tv_is_second_order_in_affinity`. Equality at ``p = q''_exact`` (then
    ``alpha = 1`` and ``1 - TV``) pins the factor 1/2 in TV, which the inequality alone would
    not (a TV twice too large passes it)."""
    cal, tau, p, qp = case
    r_ex = covariance_softmax_kernel(cal, tau).transport(qp.f64)
    r_fo = FirstOrderCovarianceKernel(cal, tau).transport(qp.f64)
    _assert_valid_proposal(r_fo, qp.f64)
    tv = total_variation(r_ex, r_fo)
    gap = abs(acceptance_rate(p.f64, r_ex) - acceptance_rate(p.f64, r_fo))
    assert_leq(gap, tv, slack=TV_BOUND_SLACK)
    tight = acceptance_rate(r_ex, r_ex) - acceptance_rate(r_ex, r_fo)
    assert_close(tight, tv)


@given(cal=st.integers(3, 8).flatmap(lambda n: calibration_sets(n, min_rows=3)), q=st.data())
def test_E_tv_is_second_order_in_affinity(cal, q):
    """Dividing max|B| by 100 (tau x 100) divides the TV by ~1e4: second order, not first.

    tau is set so that max|B| = 1e-2, 1e-3, 1e-4; the check is TV(1e-4) <= 2 TV(1e-2) 1e-4 plus
    float64 round-off (a first-order error would only shrink 100x and fail). Not from 1e-1:
    there the higher orders can still cancel part of the second, e.g. calibration rows
    (0, .5, .5), (0, .5, .5), (1, 0, 0) and q' = (5, 3, 4)/12 give TVs 4.5e-5, 9.8e-7, 1.0e-8
    at 1e-1, 1e-2, 1e-3: 46x, then 95x.
    """
    n = cal.shape[1]
    qp = q.draw(laws(n)).f64
    b0 = FirstOrderCovarianceKernel(cal, 1.0).max_offdiag_affinity()
    assume(b0 > 1e-6)  # constant calibration rows: Omega is round-off, both kernels agree
    tvs = []
    for target_b in (1e-2, 1e-3, 1e-4):
        tau = b0 / target_b
        fo = FirstOrderCovarianceKernel(cal, tau)
        tvs.append(float(total_variation(covariance_softmax_kernel(cal, tau).transport(qp), fo.transport(qp))))
    assert_leq(tvs[2], 2 * tvs[0] * 1e-4, slack=FLOAT64_ATOL)


def test_E_first_order_exact_for_zero_affinity():
    """Identical calibration rows: Omega = 0, so both kernels send every q' to the uniform law."""
    cal = np.tile(W([1, 2, 3]).f64, (4, 1))
    qp = W([3, 0, 1]).f64
    assert_close(covariance_softmax_kernel(cal, 1.0).transport(qp), FirstOrderCovarianceKernel(cal, 1.0).transport(qp))
