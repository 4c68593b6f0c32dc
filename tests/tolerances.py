"""Named tolerances for the whole test suite: import from here, never write a bare ``atol=1e-7``.

Tiers (STYLE.md): the exact tier asserts ``==`` on ``Fraction`` and needs no tolerance; the float64
tier uses the constants below; the Monte Carlo tier asserts p-values against
``tests.stats.FALSE_ALARM_PER_TEST`` instead of any tolerance.

Why these values: every float64 quantity checked here is a sum of at most a few thousand terms in
[0, 1], so the accumulated round-off is below ``N * eps ~ 1e-13``; ``1e-12`` leaves a safety
factor without hiding a genuine error (a lossless bug moves mass by at least ``1e-3`` on the small
supports drawn by the strategies).
"""
from __future__ import annotations

import numpy as np

#: Relative / absolute tolerance for float64 identities (sums of <= ~1e4 terms in [0, 1]).
FLOAT64_RTOL = 1e-12
FLOAT64_ATOL = 1e-12
#: Slack allowed on a float64 *inequality* (``lhs <= rhs + slack``), e.g. alpha <= p(I).
INEQUALITY_SLACK = 1e-12
#: Slack on the TV bound of Theorem E, ``|alpha_exact - alpha_fo| <= TV(q''_exact, q''_fo)``.
TV_BOUND_SLACK = 1e-12
#: Agreement of the torch float64 path with the numpy float64 reference.
TORCH_FLOAT64_ATOL = 1e-12
#: Agreement of a float32 computation with its float64 reference (N <= 1e5, values in [0, 1]).
FLOAT32_ATOL = 1e-5
#: A float32 law over ~1.5e5 ids: its row sum (in float64) and each entry against the float64
#: softmax, relative. One float32 rounding is 6e-8 and an accurate sum's error over 1.5e5 such
#: terms stays near 1e-7; torch's vectorised float32 exp adds 1e-6 to 2e-6 per entry. A biased
#: normalisation (rows summing to 1 + 1e-5, as torch's own float32 CPU softmax) fails both.
FLOAT32_LAW_SUM_ATOL = 1e-6
FLOAT32_LAW_RTOL = 8e-6
#: Step and tolerance of a one-sided finite difference of alpha(lam) (piecewise linear in lam:
#: the forward difference is exact once the step is below the first kink, up to round-off).
FINITE_DIFF_STEP = 1e-7
FINITE_DIFF_ATOL = 1e-6
#: Tolerance of scipy.optimize.linprog (HiGHS) optima: its primal/dual feasibility tolerance is 1e-7.
LP_ATOL = 1e-6
#: The best-static-kernel LP is solved at feasibility tolerances of 1e-10; the kernel it returns
#: is within 4.2e-10 of the LP's own objective over 400 random cases.
KERNEL_LP_ATOL = 1e-9
#: Bisection tolerance on rho (K-SEQ) and lam (rank-one mixing) in the bound calculators.
BISECTION_ATOL = 1e-10
#: Upward slack of the Fourier-transform p-value (gpu_validation.agreement.binomial_sum_p_value)
#: at the tests' sizes (at most 200 positions x 30 steps): its round-off bound, given once per
#: outcome summed so that it never falls below the exact one; it grows with the sizes.
FFT_P_VALUE_SLACK = 1e-10


def assert_close(actual, expected, *, rtol: float = FLOAT64_RTOL, atol: float = FLOAT64_ATOL,
                 err_msg: str = "") -> None:
    """``np.testing.assert_allclose`` with the suite's float64 defaults."""
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64),
                               rtol=rtol, atol=atol, err_msg=err_msg)


def assert_leq(lhs, rhs, *, slack: float = INEQUALITY_SLACK, err_msg: str = "") -> None:
    """Assert ``lhs <= rhs + slack`` elementwise, naming the worst violation."""
    lhs = np.asarray(lhs, dtype=np.float64)
    rhs = np.asarray(rhs, dtype=np.float64)
    gap = lhs - rhs
    if np.any(gap > slack):
        i = np.unravel_index(int(np.argmax(gap)), gap.shape) if gap.ndim else ()
        raise AssertionError(
            f"{err_msg} expected lhs <= rhs + {slack:g}; at {i}: lhs = {lhs[i]!r}, rhs = {rhs[i]!r}"
        )
