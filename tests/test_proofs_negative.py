"""Proofs as code are not vacuous: for every statement, a plausible bug in the function its
checker relies on makes ``check()`` report ``failed`` with a counterexample.

Each test monkeypatches one name inside the proof module (the core function it imported, or
the kernel class it builds) with a wrong version and asserts that the check fails on the leg
the bug breaks. L and O5 (and one leg of O2) have such tests in tests/test_proofs.py.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from rdk_theory import _backend as B


def _assert_failed(res, *keys):
    """``res`` is a failed check whose (dict) counterexample names ``keys``."""
    assert res.status == "failed", res.to_dict()
    assert not res.ok
    assert res.counterexample is not None
    assert isinstance(res.counterexample, dict) and set(keys) <= set(res.counterexample), res.to_dict()


def test_A_fails_when_total_variation_is_not_halved(monkeypatch):
    """TV computed as sum |a - b| (the L1 distance, no 1/2) breaks alpha = 1 - TV for every
    normalised r != p; A's exhaustive leg must report it."""
    import proofs.acceptance_tv as a_tv

    def l1(a, b, *, check=True):  # the mutant: forgets the factor 1/2
        return B.total(abs(a - b))

    monkeypatch.setattr(a_tv, "total_variation", l1)
    res = a_tv.check()
    _assert_failed(res, "p", "r", "alpha", "tv")
    assert sum(res.counterexample["r"]) == 1  # the normalised case, where the identity is claimed


def test_O1_fails_when_tli_multiplies_by_q_of_I_instead_of_dividing(monkeypatch):
    """A TLI proposal scaled by q(I) instead of divided by it is below vanilla wherever
    q(I) < 1, so alpha_TLI < alpha_vanilla somewhere; O1's main inequality must catch it."""
    import proofs.tli_vs_vanilla as o1
    from rdk_theory.proposals import vanilla_proposal

    def inverted(q, vm, *, check=True):  # the mutant: r * q(I), not r / q(I)
        r = vanilla_proposal(q, vm, check=check)
        return r * B.total(r, keepdims=True)

    monkeypatch.setattr(o1, "tli_proposal", inverted)
    res = o1.check()
    _assert_failed(res, "alpha_tli", "alpha_vanilla")
    assert Fraction(res.counterexample["alpha_tli"]) < Fraction(res.counterexample["alpha_vanilla"])


def test_O2_cap_leg_fails_when_unmapped_drafter_tokens_wrap_to_the_last_target_token(monkeypatch):
    """A TLI whose scatter lets draft_to_target = -1 index the last target token puts mass off I,
    so alpha_TLI can exceed p(I); O2's cap leg (not only its definition check of p(I)) must
    report it."""
    import proofs.oov_cap as o2

    def wrapping_tli(q, vm, *, check=True):  # the mutant: -1 is numpy's last index
        r = np.array([Fraction(0)] * vm.n_target, dtype=object)
        for j, x in enumerate(vm.draft_to_target):
            r[x] += q[j]
        return r / sum(r) if sum(r) else r

    monkeypatch.setattr(o2, "tli_proposal", wrapping_tli)
    res = o2.check()
    _assert_failed(res, "alpha_tli", "cap")
    assert Fraction(res.counterexample["alpha_tli"]) > Fraction(res.counterexample["cap"])


def test_O3_fails_when_rdk_transports_the_unnormalised_vanilla_proposal(monkeypatch):
    """RDK that feeds the kernel vanilla's r instead of TLI's r / q(I) (the renormalisation
    forgotten) differs from TLI even with M = I whenever q(I) < 1; O3 must report it."""
    import proofs.identity_kernel as o3
    from rdk_theory.proposals import vanilla_proposal

    def unnormalised_rdk(q, vm, kernel, *, check=True):  # the mutant: no division by q(I)
        return kernel.transport(vanilla_proposal(q, vm, check=check))

    monkeypatch.setattr(o3, "rdk_proposal", unnormalised_rdk)
    res = o3.check()
    _assert_failed(res, "q", "draft_to_target", "rdk", "tli")
    assert sum(Fraction(v) for v in res.counterexample["rdk"]) < 1


def test_O4_fails_when_alpha_takes_max_instead_of_min(monkeypatch):
    """alpha computed as sum max(p, r) (min typed as max; it is 2 - alpha for normalised r)
    turns every gain into a loss, so the claimed gain min(delta, p(j) - r(j)) > 0 is never met;
    O4's exhaustive leg must report it."""
    import proofs.mass_transfer as o4

    def with_max(p, r, *, check=True):  # the mutant
        return B.total(np.maximum(p, r))

    monkeypatch.setattr(o4, "acceptance_rate", with_max)
    res = o4.check()
    _assert_failed(res, "p", "r", "i", "j", "delta", "gain")
    c = res.counterexample
    assert Fraction(c["delta"]) <= Fraction(c["r"][c["i"]]) - Fraction(c["p"][c["i"]])  # the claimed case


def test_E_slope_leg_fails_on_a_first_order_kernel_with_the_wrong_covariance_scale(monkeypatch):
    """A first-order kernel whose covariance is summed over the S calibration contexts, not
    averaged (factor C without its 1/sqrt(S)), approximates another kernel: its TV to the exact
    kernel falls like max|B| (slope 1), not max|B|^2; E's log-log slope leg must report it."""
    import proofs.first_order_error as e
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    def summed_covariance(calibration_probs, tau):  # the mutant: Omega = S * covariance
        cal = np.asarray(calibration_probs, dtype=np.float64)
        return FirstOrderCovarianceKernel.from_factor(cal - cal.mean(axis=0), tau)

    monkeypatch.setattr(e, "FirstOrderCovarianceKernel", summed_covariance)
    res = e.check()
    _assert_failed(res, "loglog_slope", "max_abs_B", "max_tv")
    assert res.counterexample["loglog_slope"] < e.MIN_SLOPE


def test_B_fails_when_block_efficiency_stops_one_position_early(monkeypatch):
    """Block efficiency 1 + sum_{k < gamma} prod_{t <= k} alpha_t (the last position dropped,
    an off-by-one) disagrees with the enumerated E[N + 1] unless every alpha is 0; B's
    cross-check of rdk_theory.bounds.expected_tokens_per_call must report it."""
    import proofs.block_efficiency as be

    def off_by_one(acceptances):  # the mutant: cumprod summed over the first gamma - 1 positions
        a = np.asarray(acceptances)
        return 1 + np.cumprod(a, axis=-1)[..., :-1].sum(axis=-1)

    monkeypatch.setattr(be, "expected_tokens_per_call", off_by_one)
    res = be.check()
    _assert_failed(res, "alphas", "enumerated", "formula")
    alphas = [Fraction(v) for v in res.counterexample["alphas"]]
    assert be.tail_sum(alphas) == Fraction(res.counterexample["enumerated"])  # the reference holds


def test_S_fails_when_psi_ignores_drafter_tokens_that_overrun_the_target_string(monkeypatch):
    """psi by a recursion that counts a drafter token only if it ends inside s_t (tok == s,
    not tok.startswith(s)) misses overrunning tokens such as 'ab' for target 'a'; S's check of
    the recursion against the enumerated segmentations must report it."""
    import proofs.string_level as s

    def prefix_no_overrun(string, next_token_probs, prefix=()):  # the mutant
        total = 0
        for tok, prob in next_token_probs(prefix).items():
            if tok == string:
                total = total + prob
            elif string.startswith(tok):
                total = total + prob * prefix_no_overrun(string[len(tok):], next_token_probs, prefix + (tok,))
        return total

    def psi_no_overrun(target_tokens, next_token_probs):
        return np.array([prefix_no_overrun(t, next_token_probs) for t in target_tokens], dtype=object)

    monkeypatch.setattr(s, "psi", psi_no_overrun)
    res = s.check()
    _assert_failed(res, "drafter", "psi", "by_segmentations")
    assert list(res.counterexample["psi"]) != list(res.counterexample["by_segmentations"])


def test_K_fails_when_the_validity_condition_uses_k_minus_one_drafts(monkeypatch):
    """The condition 1 - (1 - beta)^(k-1) <= rho beta (exponent off by one) holds for every rho
    once k = 2, so it calls invalid rho valid; K's 'valid => output law == p' leg must report
    an output law that is not p."""
    import proofs.multidraft as k_seq
    from rdk_theory.multidraft import beta

    def off_by_one(p, q, rho, k):  # the mutant
        b = beta(p, q, rho)
        return bool(1 - (1 - b) ** (int(k) - 1) <= rho * b)

    monkeypatch.setattr(k_seq, "kseq_is_valid", off_by_one)
    res = k_seq.check()
    _assert_failed(res, "p", "q", "k", "rho", "output_law")
    c = res.counterexample
    assert [Fraction(v) for v in c["output_law"]] != [Fraction(v) for v in c["p"]]
