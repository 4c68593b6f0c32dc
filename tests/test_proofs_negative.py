"""Proofs as code are not vacuous: for every statement, a plausible bug in the function its
checker relies on makes ``check()`` report ``failed`` with a counterexample.

Each test monkeypatches one name inside the proof module (the core function it imported, or
the kernel class it builds) with a wrong version and asserts that the check fails on the leg
the bug breaks. L and O5 (and one leg of O2) have such tests in tests/test_proofs.py.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

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


def test_L_fails_when_the_step_is_wrong_only_for_sub_stochastic_proposals(monkeypatch):
    """Guards against a planted bug (the exhaustive grid takes only normalised proposals r):
    L claims losslessness for every sub-stochastic r, but no test breaks the core only
    there. Here the accept branch is divided by the proposal's mass (exact when sum r =
    1), so only the sub-stochastic part of the grid can see it."""
    import proofs.lossless as lossless
    from rdk_theory.acceptance import step_output_law

    def scaled_accept(p, r, *, check=True):  # the bug core
        mass = sum(r)
        law = step_output_law(p, r, check=check)
        if mass == 0:
            return law
        return law + np.minimum(p, r) * (1 / mass - 1)

    monkeypatch.setattr(lossless, "step_output_law", scaled_accept)
    res = lossless.check()
    assert res.status == "failed", res.to_dict()
    assert 0 < sum(Fraction(v) for v in res.to_dict()["counterexample"]["r"]) < 1


def test_A_fails_when_alpha_leaves_zero_one_for_a_sub_stochastic_proposal(monkeypatch):
    """Guards against a planted bug (the leg 0 <= alpha <= 1 dropped): nothing broke only
    that leg. An alpha that subtracts the proposal's missing mass is exact for normalised
    r (so the TV identity holds) but negative for r = 0."""
    import proofs.acceptance_tv as a_tv

    def minus_missing(p, r, *, check=True):  # the bug
        return B.total(np.minimum(p, r)) - (1 - B.total(r))

    monkeypatch.setattr(a_tv, "acceptance_rate", minus_missing)
    res = a_tv.check()
    assert res.status == "failed", res.to_dict()
    c = res.to_dict()["counterexample"]
    assert set(c) == {"p", "r", "alpha"} and Fraction(c["alpha"]) < 0


def test_A_fails_when_total_variation_skips_the_zeros_of_the_proposal(monkeypatch):
    """Guards against a planted bug (the identity alpha = 1 - TV checked only for r > 0
    everywhere): the existing negative control (TV without its 1/2) is wrong for every r
    != p, so a grid without zero entries still catches it. A TV summed over r's support
    only (a sparse loop) is wrong exactly where r has zeros."""
    import proofs.acceptance_tv as a_tv

    def support_tv(a, b, *, check=True):  # the bug: sums |a - b| where b > 0 only
        return sum(abs(x - y) for x, y in zip(a, b) if y > 0) / 2

    monkeypatch.setattr(a_tv, "total_variation", support_tv)
    res = a_tv.check()
    assert res.status == "failed", res.to_dict()
    c = res.to_dict()["counterexample"]
    assert "tv" in c and 0 in [Fraction(v) for v in c["r"]]


def test_O1_fails_when_vanilla_is_renormalised_like_tli(monkeypatch):
    """Guards against a planted bug (the check of vanilla against its definition dropped): a
    vanilla that renormalises like TLI never breaks alpha_TLI >= alpha_vanilla, so only
    that check can see it."""
    import proofs.tli_vs_vanilla as o1
    from rdk_theory.proposals import tli_proposal

    monkeypatch.setattr(o1, "vanilla_proposal", lambda q, vm, check=True: tli_proposal(q, vm, check=check))
    res = o1.check()
    assert res.status == "failed", res.to_dict()
    assert "by_definition" in res.to_dict()["counterexample"]


def test_O2_fails_when_vanilla_differs_from_tli_on_a_pruned_map(monkeypatch):
    """Guards against a planted bug (the leg alpha_vanilla == alpha_TLI for a pruned drafter
    dropped): nothing patched vanilla."""
    import proofs.oov_cap as o2
    from rdk_theory.proposals import vanilla_proposal

    monkeypatch.setattr(o2, "vanilla_proposal",
                        lambda q, vm, check=True: vanilla_proposal(q, vm, check=check) * Fraction(1, 2))
    res = o2.check()
    assert res.status == "failed", res.to_dict()
    assert {"alpha_vanilla", "alpha_tli"} <= set(res.to_dict()["counterexample"])


def test_O2_cap_leg_fails_on_a_small_leak_off_I(monkeypatch):
    """Guards against a planted bug (the cap compared with slack: a_t > cap + 1/3): the
    existing wrapping-TLI control exceeds the cap by a whole point mass somewhere, so a
    slack survives. A TLI leaking 1/6 of its mass onto the last target id exceeds p(I) by
    at most 1/6. (vanilla is patched the same way, so the vanilla == TLI leg stays
    quiet.)"""
    import proofs.oov_cap as o2
    from rdk_theory.proposals import tli_proposal

    def leaky(q, vm, *, check=True):  # the bug: 1/6 of the mass moved to the last id
        r = tli_proposal(q, vm, check=check)
        if sum(r) == 0:
            return r
        r = r * Fraction(5, 6)
        r[-1] += Fraction(1, 6)
        return r

    monkeypatch.setattr(o2, "tli_proposal", leaky)
    monkeypatch.setattr(o2, "vanilla_proposal", leaky)
    res = o2.check()
    assert res.status == "failed", res.to_dict()
    c = res.to_dict()["counterexample"]
    assert 0 < Fraction(c["alpha_tli"]) - Fraction(c["cap"]) <= Fraction(1, 6)


def test_O3_fails_when_the_dense_kernel_computes_in_floats(monkeypatch):
    """Guards against a planted bug (the explicit dense identity dropped from the loop, only
    IdentityKernel checked): a DenseKernel that loses exactness (computes in float64)
    then goes unseen."""
    import proofs.identity_kernel as o3
    from rdk_theory.kernels import DenseKernel

    class FloatDense(DenseKernel):  # the bug: float64 arithmetic, exact inputs or not
        def transport(self, q_prime):
            return np.asarray(q_prime, dtype=np.float64) @ np.asarray(self.matrix, dtype=np.float64)

    monkeypatch.setattr(o3, "DenseKernel", FloatDense)
    res = o3.check()
    assert res.status == "failed", res.to_dict()
    assert res.to_dict()["counterexample"]["kernel"] == "FloatDense"


def test_O3_symbolic_leg_is_load_bearing(monkeypatch):
    """Guards against a planted bug (the symbolic leg I^T q = q dropped): O3 still reported
    'proved'. With sympy's Identity replaced by the zero matrix the symbolic leg must
    fail."""
    import sympy

    import proofs.identity_kernel as o3

    monkeypatch.setattr(sympy, "Identity", lambda n: sympy.ZeroMatrix(n, n))
    res = o3.check()
    assert res.status == "failed" and "sympy" in str(res.counterexample), res.to_dict()


def test_O2_symbolic_leg_is_load_bearing(monkeypatch):
    """Guards against a planted bug (the symbolic leg min(p, r) <= p replaced by True): O2
    still 'proved'."""
    import proofs.oov_cap as o2

    monkeypatch.setattr(o2, "holds_for_all_orderings", lambda *a, **k: (False, ("p", "r")))
    res = o2.check()
    assert res.status == "failed" and "sympy" in str(res.counterexample), res.to_dict()


def test_E_bound_leg_fails_on_a_first_order_kernel_that_loses_mass(monkeypatch):
    """Guards against a planted bug (the float64 leg compared with 2 TV): the existing E
    control breaks only the slope leg. A first-order kernel that clips without
    renormalising (loses mass) breaks |alpha_ex - alpha_fo| <= TV (by up to 1.11 TV on
    the fixed sweep, never 2 TV): the bound leg must report it, before the slope leg."""
    import proofs.first_order_error as e
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    class Leaky(FirstOrderCovarianceKernel):  # the bug: clip, no renormalisation
        def transport(self, q_prime, *, normalise=False):
            return np.maximum(super().transport(q_prime, normalise=normalise) - 0.02, 0.0)

    monkeypatch.setattr(e, "FirstOrderCovarianceKernel", Leaky)
    res = e.check()
    assert res.status == "failed", res.to_dict()
    assert {"tau", "gap", "tv"} <= set(res.to_dict()["counterexample"])


def test_E_exact_leg_fails_when_total_variation_skips_the_last_token(monkeypatch):
    """Guards against a planted bug (the exact leg compared with 2 TV): a TV that skips the
    last token (an off-by-one) is at least half the true TV on N = 3, so only the exact
    bound sees it; the exhaustive leg must report it (counterexample with p, a, b)."""
    import proofs.first_order_error as e

    def tv_off_by_one(a, b, *, check=True):  # the bug
        d = np.asarray(a)[..., :-1] - np.asarray(b)[..., :-1]
        return np.abs(d).sum(axis=-1) / 2

    monkeypatch.setattr(e, "total_variation", tv_off_by_one)
    res = e.check()
    assert res.status == "failed", res.to_dict()
    assert {"p", "a", "b", "gap", "tv"} <= set(res.to_dict()["counterexample"])


def test_B_iid_symbolic_leg_is_load_bearing(monkeypatch):
    """Guards against a planted bug (the symbolic i.i.d. closed-form leg replaced by True):
    B stayed 'proved'. With sympy's geometric summation broken the leg must fail."""
    import sympy

    import proofs.block_efficiency as be

    monkeypatch.setattr(sympy, "summation", lambda *a, **k: sympy.Integer(0))
    res = be.check()
    assert res.status == "failed" and "sympy" in str(res.counterexample), res.to_dict()


def test_K_only_if_leg_fails_on_a_too_strict_validity_condition(monkeypatch):
    """Guards against a planted bug (the 'only if' leg dropped): a validity condition that
    is too strict (exponent k + 1) calls valid rho invalid; only that leg can see it (the
    output law is still p)."""
    import proofs.multidraft as k_seq
    from rdk_theory.multidraft import beta

    def too_strict(p, q, rho, k):  # the bug
        b = beta(p, q, rho)
        return bool(1 - (1 - b) ** (int(k) + 1) <= rho * b)

    monkeypatch.setattr(k_seq, "kseq_is_valid", too_strict)
    res = k_seq.check()
    assert res.status == "failed", res.to_dict()
    assert res.to_dict()["counterexample"].get("why") == "invalid rho yet lossless"


def test_K_fails_when_rho_star_is_not_the_smallest_valid_rho(monkeypatch):
    """Guards against a planted bug (the check that rho* is the *smallest* valid rho
    dropped): a bisection that stops 0.05 too high still gives a valid rho with most of
    the acceptance."""
    import proofs.multidraft as k_seq
    from rdk_theory.multidraft import kseq_best_rho

    monkeypatch.setattr(k_seq, "kseq_best_rho",
                        lambda p, q, k: min(float(k), kseq_best_rho(p, q, k) + 0.05))
    res = k_seq.check()
    assert res.status == "failed", res.to_dict()
    assert "rho_star" in res.to_dict()["counterexample"]


def _float64_core(fn):
    """``fn`` computing in float64 whatever its inputs (the mutant of an exact core)."""
    def wrapped(*arrays, **kwargs):
        return fn(*(np.asarray(a, dtype=np.float64) for a in arrays), **kwargs)

    return wrapped


@pytest.mark.parametrize("module, names, keys", [
    ("lossless", ("step_output_law",), ("p", "r", "output_law")),
    ("acceptance_tv", ("acceptance_rate", "total_variation"), ("p", "r", "inexact")),
    ("mass_transfer", ("acceptance_rate",), ("p", "r", "gain", "inexact")),
    ("first_order_error", ("acceptance_rate",), ("p", "a", "b", "inexact")),
])
def test_exact_legs_fail_when_the_core_falls_back_to_floats(monkeypatch, module, names, keys):
    """The grids of L, A, O4 and E are quarters, exact in float64, and Fraction(1, 4) == 0.25:
    a core that silently computed in floats passed every == there (a review found it). The
    checks now require every number to be a Fraction."""
    import importlib

    mod = importlib.import_module(f"proofs.{module}")
    for name in names:
        monkeypatch.setattr(mod, name, _float64_core(getattr(mod, name)))
    _assert_failed(mod.check(), *keys)


def test_S_fails_when_slrs_sums_max_instead_of_min(monkeypatch):
    """An SLRS acceptance of sum max(p, psi) still exceeds SLEM's, so the inequality alone did
    not see it; S now compares both acceptances with their definitions."""
    import proofs.string_level as s

    monkeypatch.setattr(s, "slrs_acceptance", lambda p, psi: sum(max(a, b) for a, b in zip(p, psi)))
    res = s.check()
    _assert_failed(res, "p", "slrs", "slem", "by_definition")


def test_S_fails_when_psi_loses_mass_on_a_prefix_free_vocabulary(monkeypatch):
    """psi scaled by 1/2 still lies in [0, 1], still agrees with a brute force scaled alike, and
    keeps SLRS >= SLEM; over the prefix-free target vocabulary it no longer sums to 1."""
    import proofs.string_level as s

    half = lambda fn: lambda *a: fn(*a) * Fraction(1, 2)  # noqa: E731
    monkeypatch.setattr(s, "psi", half(s.psi))
    monkeypatch.setattr(s, "psi_by_segmentations", half(s.psi_by_segmentations))
    res = s.check()
    _assert_failed(res, "target_vocab", "psi", "sum_psi")
    assert tuple(res.counterexample["target_vocab"]) == s.PREFIX_FREE_TARGET


@pytest.mark.parametrize("name, mutant, keys", [
    ("best_static_kernel_lp", lambda p, qp, **kw: (np.eye(p.shape[-1]), -1.0), ("lp_mean_alpha",)),
    ("best_mixing_lambda", lambda p, qp, w: (7.0, 2.0), ("lam", "mean_alpha", "attained")),
])
def test_O5_fails_when_an_optimiser_reports_what_it_does_not_attain(monkeypatch, name, mutant, keys):
    """O5's docstring and the README map it to the two optimisers that rest on its concavity;
    the check called neither, so garbage from them passed."""
    import proofs.first_order_gain as o5

    monkeypatch.setattr(o5, name, mutant)
    _assert_failed(o5.check(), *keys)


def test_A_fails_when_total_variation_is_twice_the_negative_part(monkeypatch):
    """Guards against a planted bug (a review's mutant): TV as twice the negative part of
    p - r is right wherever the masses are equal, so alpha = 1 - TV for normalised r held
    and only sub-stochastic r can show it; A compares TV with 1/2 sum |p - r| there too."""
    import proofs.acceptance_tv as a_tv

    def negative_part_only(a, b, *, check=True):  # the bug
        return 2 * B.total(B.positive_part(b - a)) * Fraction(1, 2)

    monkeypatch.setattr(a_tv, "total_variation", negative_part_only)
    res = a_tv.check()
    _assert_failed(res, "p", "r", "tv", "by_definition")
    c = res.to_dict()["counterexample"]
    assert sum(Fraction(v) for v in c["r"]) < 1
    assert Fraction(c["tv"]) != Fraction(c["by_definition"])


def test_O1_fails_when_tli_is_under_normalised(monkeypatch):
    """Guards against a planted bug (a review's mutant): a TLI divided by (q(I) + 1)/2 instead of
    q(I) still lies above vanilla, so the inequality holds; only the check of TLI against its
    definition can see it (exact arithmetic kept, so it is the value that is wrong)."""
    import proofs.tli_vs_vanilla as o1
    from rdk_theory.proposals import vanilla_proposal

    def under_normalised(q, vm, *, check=True):  # the bug
        r = vanilla_proposal(q, vm, check=check)
        return r / ((B.total(r, keepdims=True) + 1) * Fraction(1, 2))

    monkeypatch.setattr(o1, "tli_proposal", under_normalised)
    res = o1.check()
    _assert_failed(res, "q", "draft_to_target", "tli", "by_definition")
    c = res.to_dict()["counterexample"]
    assert [Fraction(v) for v in c["tli"]] != [Fraction(v) for v in c["by_definition"]]


def test_O3_fails_when_the_dense_kernel_applies_M_instead_of_its_transpose(monkeypatch):
    """Guards against a planted bug (a review's mutant): a dense kernel computing M q' instead of
    M^T q' agrees on every symmetric kernel, and the identity and the uniform kernel are
    symmetric; O3's kernel leg (non-symmetric 3 x 3 kernels) must report it."""
    import proofs.identity_kernel as o3
    from rdk_theory.kernels import DenseKernel

    class Transposed(DenseKernel):  # the bug: q' @ M^T
        def transport(self, q_prime):
            return q_prime @ self.matrix.T

    monkeypatch.setattr(o3, "DenseKernel", Transposed)
    res = o3.check()
    _assert_failed(res, "q", "draft_to_target", "M", "rdk", "by_definition")
    c = res.to_dict()["counterexample"]
    m = [[Fraction(v) for v in row] for row in c["M"]]
    assert m != [list(col) for col in zip(*m)]  # a non-symmetric kernel


def _no_clip(normalised_to_one=False):
    """A first-order kernel whose clip is missing (or, ``normalised_to_one``, renormalises the
    clipped vector to 1 instead of to sum q')."""
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    class Mutant(FirstOrderCovarianceKernel):
        def transport(self, q_prime, *, normalise=False):
            q_prime = np.asarray(q_prime, dtype=np.float64)
            if normalise:
                q_prime = q_prime / q_prime.sum(axis=-1, keepdims=True)
            out = self.transport_unclipped(q_prime)
            if normalised_to_one and out.min() < 0:
                out = np.maximum(out, 0.0)
                out /= out.sum(axis=-1, keepdims=True)
            return out

    return Mutant


@pytest.mark.parametrize("to_one", [False, True])
def test_E_clip_leg_fails_when_the_clip_is_dropped_or_renormalises_to_one(monkeypatch, to_one):
    """Guards against a planted bug (a review's mutant): the bound holds for any two proposals
    of equal mass, clipped or not, and the sweep never clips, so a first-order kernel without
    its clip passed E. The clip leg (taus where the vector goes negative) must report it, and
    a clip that renormalises to 1, not to sum q', on its sub-stochastic rows."""
    import proofs.first_order_error as e

    monkeypatch.setattr(e, "FirstOrderCovarianceKernel", _no_clip(to_one))
    res = e.check()
    _assert_failed(res, "tau", "engine", "normalise", "min", "sum", "want_sum")
    c = res.to_dict()["counterexample"]
    assert c["tau"] in e.CLIP["taus"]
    if to_one:
        assert c["min"] >= 0 and abs(c["sum"] - c["want_sum"]) > 1e-3
    else:
        assert c["min"] < 0


@pytest.mark.parametrize("engine", ["fused", "blas"])
def test_E_clip_leg_checks_each_compiled_engine(monkeypatch, engine):
    """Guards against a planted bug (a review's mutant: the fused engine's clip dropped): the
    clip leg runs every engine, so a compiled engine that skips the clip is reported under its
    own name while the others are right."""
    pytest.importorskip("numba")
    import proofs.first_order_error as e
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    run = FirstOrderCovarianceKernel._run

    def no_clip_on_one_engine(self, eng, q_prime, target_probs, normalise):  # the bug
        if eng != engine:
            return run(self, eng, q_prime, target_probs, normalise)
        if normalise:
            q_prime = q_prime / q_prime.sum(axis=-1, keepdims=True)
        return self.transport_unclipped(q_prime), None

    monkeypatch.setattr(FirstOrderCovarianceKernel, "_run", no_clip_on_one_engine)
    res = e.check()
    _assert_failed(res, "tau", "engine", "min")
    assert res.counterexample["engine"] == engine and res.counterexample["min"] < 0


def test_E_clip_leg_fails_as_vacuous_where_nothing_is_clipped(monkeypatch):
    """The clip leg must not pass silently at a tau where the first-order vector has no
    negative entry (nothing would then be checked)."""
    import proofs.first_order_error as e

    monkeypatch.setattr(e, "CLIP", dict(taus=(30.0,)))
    res = e.check()
    _assert_failed(res, "tau", "why")
    assert "vacuous" in res.counterexample["why"]
