"""Acceptance rate, residual, exact output law of one verification step, and distances.

For a target ``p`` and a proposal ``r`` over the target vocabulary (``r`` may be
sub-stochastic: drafter mass on tokens the target lacks is always rejected) [3]:

* ``alpha(p, r) = sum_x min(p(x), r(x))`` is the probability that the draft is accepted;
* ``res = max(0, p - r) / sum_x max(0, p - r)`` is the residual drawn from on rejection;
  it is undefined only when ``alpha = 1``, where it is never used and is returned as zeros;
* the output law of one step is ``min(p, r) + (1 - alpha) res``, which equals ``p``
  (Theorem L in MATH.md).

All functions act on the last axis and broadcast over leading axes. They accept numpy float64,
numpy object arrays of ``fractions.Fraction`` (exact, compare with ``==``; Fractions mixed with
floats give float64) and torch tensors.
"""
from __future__ import annotations

import math
from fractions import Fraction

from . import _backend as B
from .validation import InputError, as_prob_array, check_broadcast, common_tier, same_backend
from .vocab import check_vocab_map


def _check_pair(p, r, check: bool, names=("target_probs", "proposal"), p_sums_to_one=True):
    """Both as probability arrays on one backend and in one tier (Fractions mixed with floats
    give float64), over one vocabulary, with leading shapes that broadcast (else InputError
    naming the input); ``r`` may sum to less than 1, and so may ``p`` unless ``p_sums_to_one``."""
    if not check:
        return p, r
    p = as_prob_array(p, names[0], allow_sub_stochastic=not p_sums_to_one)
    r = as_prob_array(r, names[1], allow_sub_stochastic=True)
    p, r = common_tier(*same_backend(p, r, names))
    if p.shape[-1] != r.shape[-1]:
        raise InputError(
            f"{names[0]} and {names[1]} must share the last axis (the target vocabulary): "
            f"{p.shape[-1]} != {r.shape[-1]}"
        )
    check_broadcast(p.shape[:-1], r.shape[:-1], names)
    return p, r


def acceptance_rate(target_probs, proposal, *, check: bool = True):
    """``alpha(p, r) = sum_x min(p(x), r(x))``, shape (...).

    Parameters:
      target_probs: ``p``, (..., N_T), sums to 1.
      proposal: ``r``, (..., N_T), sums to at most 1.
      check: validate the inputs (skip only in hot loops on trusted arrays).

    ``p`` and ``r`` are taken as given: float rows pass validation when they miss 1 by at most
    ``PROB_ATOL`` (1e-4), and alpha then moves by as much (``alpha(p, p)`` is ``sum p``, which
    can be 1 + 1e-4). The samplers divide ``p`` by its sum (and an ``r`` above 1 by its own)
    before they draw, so where measured and computed acceptances must agree to round-off,
    pass rows divided by their sums.
    """
    p, r = _check_pair(target_probs, proposal, check)
    return B.total(B.minimum(p, r))


def residual(target_probs, proposal, *, check: bool = True):
    """``max(0, p - r) / sum max(0, p - r)``; all zeros where ``alpha = 1`` (never used there)."""
    p, r = _check_pair(target_probs, proposal, check)
    excess = B.positive_part(p - r)
    return B.safe_divide(excess, B.total(excess, keepdims=True))


def step_output_law(target_probs, proposal, *, check: bool = True):
    """Exact law of the token emitted by one verification step: ``min(p, r) + (1 - alpha) res``.

    Computed from the step's own ingredients (accept branch plus reject branch), not from ``p``,
    so that comparing it with ``p`` tests losslessness.
    """
    p, r = _check_pair(target_probs, proposal, check)
    accepted = B.minimum(p, r)
    alpha = B.total(accepted, keepdims=True)
    return accepted + (1 - alpha) * residual(p, r, check=False)


def total_variation(a, b, *, check: bool = True):
    """``TV(a, b) = (1/2) sum_x |a(x) - b(x)|`` over the last axis."""
    a, b = _check_pair(a, b, check, ("a", "b"), p_sums_to_one=False)
    d = a - b
    twice = B.total(B.positive_part(d) + B.positive_part(-d))
    return twice * Fraction(1, 2) if B.is_exact(d) else twice / 2  # int 0 / 2 is a float


def oov_cap(target_probs, vocab_map, *, check: bool = True):
    """``p(I)``: the target mass on tokens the drafter can propose; TLI's alpha never exceeds it.

    Parameters:
      target_probs: (..., N_T).
      vocab_map: :class:`rdk_theory.vocab.VocabMap` with ``n_target == N_T``.
    """
    check_vocab_map(vocab_map)
    p = as_prob_array(target_probs, "target_probs") if check else target_probs
    if p.shape[-1] != vocab_map.n_target:
        raise InputError(f"target_probs has {p.shape[-1]} columns, vocab_map.n_target is {vocab_map.n_target}")
    if B.is_torch(p):
        return p.index_select(-1, vocab_map.on_device("intersection", p.device)).sum(-1)
    return B.total(p[..., vocab_map.intersection])


def finite_tau_score(score, tau, kernel: str = "the kernel") -> float:
    """``score``, a mean acceptance of ``kernel`` at temperature ``tau`` in a tau search, as a
    float; FloatingPointError when it is NaN or infinite. A non-finite acceptance is a kernel
    bug, not a poor tau: a search comparing ``score > best`` would skip it silently (NaN
    compares False), or let it win at the first grid point."""
    score = float(score)
    if not math.isfinite(score):
        raise FloatingPointError(f"{kernel} at tau = {tau:.3g} gave a non-finite acceptance "
                                 f"({score})")
    return score
