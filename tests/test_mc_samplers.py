"""Monte Carlo tier: the emitted tokens of every sampler follow p; broken samplers are caught.

Each assertion is a chi-square goodness-of-fit p-value compared with
``tests.stats.FALSE_ALARM_PER_TEST`` (4e-6; the suite budget is stated in tests/stats.py), plus
an explicit check that no zero-probability token was emitted. Sample sizes are stated per test.
Seeds are fixed, so the outcome is deterministic for a given checkout.
"""
from __future__ import annotations

import numpy as np
import pytest

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.kernels import covariance_softmax_kernel
from rdk_theory.proposals import SAMPLERS, build_proposals
from rdk_theory.sampling import emitted_counts, sample_steps
from rdk_theory.vocab import VocabMap
from tests.stats import (FALSE_ALARM_PER_TEST, assert_matches_law, assert_no_zero_probability_emitted,
                         assert_pvalue, binomial_pvalue, chi_square_gof)

#: Steps per sampler test: every pooled chi-square bin expects at least
#: ``tests.stats.MIN_EXPECTED`` = 100 (the smallest nonzero p(x) expects ~14 on its own and is
#: pooled; chi_square_gof refuses a sample that cannot reach 100).
N_STEPS = 200_000
#: Steps per negative control (enough power: see each control's docstring).
N_CONTROL = 200_000
N_BF16 = 10_000_000


def _case():
    """N_T = 12 with exact zeros in p, a heterogeneous drafter (two tokens absent from T, three
    OOV target tokens), and a covariance kernel from a fixed calibration set."""
    rng = np.random.default_rng(2024)
    p = rng.dirichlet(np.full(12, 0.7))
    p[[3, 7]] = 0.0  # exact zeros: must never be emitted
    p /= p.sum()
    m = np.array([0, 1, 2, 3, 4, 5, 6, 8, -1, -1])  # target ids 7, 9, 10, 11 are OOV
    q = rng.dirichlet(np.full(10, 0.7))
    cal = rng.dirichlet(np.full(12, 0.5), size=32)
    return p, q, VocabMap(12, m), cal


@pytest.mark.mc
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sampler_emits_p(sampler):
    """n = 200000 steps per sampler; chi-square p-value > FALSE_ALARM_PER_TEST = 4e-6; no
    zero-probability token; the accepted count against Binomial(n, alpha(p, r)) (each step
    accepts independently with probability alpha; vanilla's r is sub-stochastic here, its
    mass off the target is never accepted)."""
    p, q, vm, cal = _case()
    tau = 0.05
    props = build_proposals(q, vm, kernel=covariance_softmax_kernel(cal, tau),
                            first_order=FirstOrderCovarianceKernel(cal, tau))
    r = props[sampler]
    tokens, accepted = sample_steps(p, r, N_STEPS, np.random.default_rng(100 + SAMPLERS.index(sampler)))
    counts = emitted_counts(tokens, 12)
    assert counts.sum() == N_STEPS
    assert_matches_law(counts, p, f"{sampler} with n = {N_STEPS}")
    alpha = float(acceptance_rate(p, r))
    assert_pvalue(binomial_pvalue(int(accepted.sum()), N_STEPS, alpha),
                  f"{sampler}: accepted count vs Binomial({N_STEPS}, {alpha:.4f})")


# ------------------------------------------------------------------- broken samplers
def _generic_steps(p, r_draw, r_ratio, res_law, n, rng):
    """A verification step with its three ingredients separated, so each can be broken.

    Draft ``x ~ r_draw`` (rejected outright with probability ``1 - sum r_draw``), accept with
    probability ``min(1, p(x) / r_ratio(x))``, else emit ``y ~ res_law``.
    """
    mass = r_draw.sum()
    drafted = rng.random(n) < mass
    x = rng.choice(p.size, size=n, p=r_draw / mass)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(r_ratio[x] > 0, p[x] / r_ratio[x], np.inf)
    ok = drafted & (rng.random(n) < ratio)
    y = rng.choice(p.size, size=n, p=res_law / res_law.sum())
    return np.where(ok, x, y)


def _residual(p, r):
    e = np.maximum(p - r, 0.0)
    return e / e.sum()


def test_generic_step_is_correct_when_unbroken():
    """Sanity for the controls below: the unbroken generic step passes (n = 200000)."""
    p, q, vm, cal = _case()
    r = build_proposals(q, vm)["tli"]
    y = _generic_steps(p, r, r, _residual(p, r), N_CONTROL, np.random.default_rng(11))
    assert_matches_law(emitted_counts(y, 12), p, "unbroken generic step")


def test_control_dividing_by_the_wrong_proposal_is_detected():
    """Draw from RDK's proposal but divide by TLI's (and use TLI's residual): n = 200000."""
    p, q, vm, cal = _case()
    props = build_proposals(q, vm, kernel=covariance_softmax_kernel(cal, 0.05))
    r_rdk, r_tli = props["rdk_exact"], props["tli"]
    y = _generic_steps(p, r_rdk, r_tli, _residual(p, r_tli), N_CONTROL, np.random.default_rng(12))
    assert chi_square_gof(emitted_counts(y, 12), p) < FALSE_ALARM_PER_TEST


def test_control_forgetting_the_residual_is_detected():
    """On rejection draw from p instead of the residual (p - r)^+: n = 200000."""
    p, q, vm, _ = _case()
    r = build_proposals(q, vm)["tli"]
    y = _generic_steps(p, r, r, p, N_CONTROL, np.random.default_rng(13))
    assert chi_square_gof(emitted_counts(y, 12), p) < FALSE_ALARM_PER_TEST


def test_control_always_accept_is_detected():
    """Always accept the draft (no ratio test, no residual): emits tokens with p = 0."""
    p, q, vm, _ = _case()
    r = build_proposals(q, vm)["tli"]
    rng = np.random.default_rng(14)
    x = rng.choice(12, size=N_CONTROL, p=r / r.sum())
    counts = emitted_counts(x, 12)  # every draft emitted = always accept
    with pytest.raises(AssertionError, match="zero-probability"):
        assert_no_zero_probability_emitted(counts, p)


def test_control_bf16_drafts_divided_by_fp32_probabilities_is_detected():
    """Drafts drawn from bf16-rounded, renormalised r but divided by the fp32 r.

    p = (1/4, 1/4, 1/2), r = (0.2510, 0.2529, 0.4961): bf16 rounds r_0 up and r_1 down by
    ~0.38%, so tokens 0 and 1 are emitted with relative bias ~+-0.38% (absolute ~1e-3). Power:
    the expected chi-square statistic at n = 1e7 is ~70 (df 2), far beyond the critical value
    24.9 at FALSE_ALARM_PER_TEST = 4e-6; with the correct fp32 draws the same test passes.
    """
    torch = pytest.importorskip("torch")
    p = np.array([0.25, 0.25, 0.5])
    r = np.array([0.2510, 0.2529, 0.4961])
    r = r / r.sum()
    r_bf16 = torch.tensor(r, dtype=torch.float32).to(torch.bfloat16).double().numpy()
    assert not np.array_equal(r_bf16, r)
    y = _generic_steps(p, r_bf16 / r_bf16.sum(), r, _residual(p, r), N_BF16, np.random.default_rng(15))
    assert chi_square_gof(emitted_counts(y, 3), p) < FALSE_ALARM_PER_TEST
    y_ok = _generic_steps(p, r, r, _residual(p, r), N_BF16, np.random.default_rng(16))
    assert_matches_law(emitted_counts(y_ok, 3), p, "fp32 draws, n = 1e7")
