"""Proposal builders for the four samplers (MATH.md section 3).

Each builder maps drafter probabilities ``q`` (..., N_D) to a proposal ``r`` (..., N_T) over the
target vocabulary. The verification step (:mod:`rdk_theory.sampling`) draws from ``r``, divides
by ``r`` and builds its residual from the same ``r``, so every sampler here is lossless.

======================  ==========================================  =========================
sampler                 proposal over T                             reference
======================  ==========================================  =========================
vanilla (union)         ``q`` scattered to T; mass on tokens the    [2] Alg. 1
                        target lacks stays unplaced (rejected)
TLI                     ``q' = q`` restricted to ``I``, renormalised [2] Alg. 4
exact RDK               ``q'' = M^T q'`` for a row-stochastic ``M``  [1]
first-order RDK         first-order approximation of ``M^T q'``     [1], MATH.md section 5
======================  ==========================================  =========================

**[definition]** When ``q(I) = 0``, TLI and RDK have no proposal: the builders return the zero
vector, so ``alpha = 0`` and the step draws from ``p`` directly.
"""
from __future__ import annotations

from . import _backend as B
from . import _triton
from .acceptance import acceptance_rate
from .validation import (InputError, as_prob_array, check_broadcast, check_not_a_class,
                         common_tier, same_backend)
from .vocab import check_vocab_map

SAMPLERS = ("vanilla", "tli", "rdk_exact", "rdk_first_order")


def _check(draft_probs, vocab_map, check):
    check_vocab_map(vocab_map)
    if check:
        draft_probs = as_prob_array(draft_probs, "draft_probs")
    if draft_probs.shape[-1] != vocab_map.n_draft:
        raise InputError(
            f"draft_probs has {draft_probs.shape[-1]} columns but draft_to_target has "
            f"{vocab_map.n_draft} entries"
        )
    return draft_probs


def vanilla_proposal(draft_probs, vocab_map, *, check: bool = True):
    """``r(x) = q(j)`` for the drafter token ``j`` with target id ``x``; 0 elsewhere.

    Sub-stochastic when some drafter tokens are absent from the target ([2], Alg. 1). For the
    identity map the result *is* ``draft_probs`` (no copy; the core never writes to it).
    """
    q = _check(draft_probs, vocab_map, check)
    return B.scatter_last(q, vocab_map.draft_to_target, vocab_map.n_target,
                          plan=vocab_map.scatter_plan_for(q))


def tli_proposal(draft_probs, vocab_map, *, check: bool = True):
    """``q'(x) = q(x) / q(I)`` on ``I``, 0 elsewhere; all zeros where ``q(I) = 0`` ([2], Alg. 4)."""
    r = vanilla_proposal(draft_probs, vocab_map, check=check)
    return B.safe_divide(r, B.total(r, keepdims=True))


def rdk_proposal(draft_probs, vocab_map, kernel, *, check: bool = True):
    """``q'' = M^T q'``: draw ``i ~ q'`` (TLI), then ``x ~ M[i, :]`` ([1]).

    ``kernel`` is any object with ``transport(q_prime)`` (see :mod:`rdk_theory.kernels`); an
    exact kernel gives exact RDK, a :class:`rdk_theory.first_order.FirstOrderCovarianceKernel`
    gives first-order RDK. A kernel whose class sets ``fuses_normalisation`` (the first-order
    one) is given TLI's unnormalised ``r`` with ``normalise=True`` and divides by ``sum r``
    inside its own passes (same numbers to round-off, one write and one read of ``q'`` fewer).
    """
    _check_kernel(kernel, vocab_map, "kernel")
    if getattr(kernel, "fuses_normalisation", False):
        return kernel.transport(vanilla_proposal(draft_probs, vocab_map, check=check),
                                normalise=True)
    return kernel.transport(tli_proposal(draft_probs, vocab_map, check=check))


def rdk_proposal_with_acceptance(target_probs, draft_probs, vocab_map, kernel, *,
                                 check: bool = True):
    """``(q'', alpha(p, q''))``: the proposal of :func:`rdk_proposal` and its acceptance.

    The decode-loop call from the drafter's ``q`` to what a verification step needs. With a
    first-order kernel on a compiled engine (numpy float64 input) TLI's division, the transport
    and ``sum min(p, q'')`` all come out of the kernel's two passes over each row
    (:meth:`rdk_theory.FirstOrderCovarianceKernel.transport_with_acceptance` with
    ``normalise=True``); with any other kernel it is :func:`rdk_proposal` followed by
    :func:`rdk_theory.acceptance_rate`. ``target_probs`` (..., N_T) broadcasts against the
    proposal's leading axes.
    """
    q = _check(draft_probs, vocab_map, check)
    _check_kernel(kernel, vocab_map, "kernel")
    if check:
        target_probs = as_prob_array(target_probs, "target_probs")
        if target_probs.shape[-1] != vocab_map.n_target:
            raise InputError(f"target_probs has {target_probs.shape[-1]} columns but the target "
                             f"vocabulary has {vocab_map.n_target} tokens")
        check_broadcast(target_probs.shape[:-1], q.shape[:-1], ("target_probs", "draft_probs"))
    if getattr(kernel, "fuses_normalisation", False):
        if _triton.usable_draft(kernel, q, vocab_map, target_probs):  # TLI's scatter fused too
            return _triton.first_order(kernel, q, target_probs, normalise=True,
                                       vocab_map=vocab_map)
        return kernel.transport_with_acceptance(vanilla_proposal(q, vocab_map, check=False),
                                                target_probs, normalise=True)
    out = kernel.transport(tli_proposal(q, vocab_map, check=False))
    p, r = common_tier(*same_backend(target_probs, out, ("target_probs", "proposal")))
    return out, acceptance_rate(p, r, check=False)  # Fractions with floats: float64


def _check_kernel(kernel, vocab_map, name, *, optional: bool = False):
    check_vocab_map(vocab_map)  # before vocab_map.n_target below
    if kernel is None and optional:
        return
    check_not_a_class(kernel, name)
    if not callable(getattr(kernel, "transport", None)):
        raise InputError(f"{name} must be a kernel, an object with transport(q') (see "
                         f"rdk_theory.kernels), got {type(kernel).__name__}: wrap a matrix "
                         "once with rdk_theory.as_kernel")
    n = getattr(kernel, "n", None)
    if n is not None and n != vocab_map.n_target:
        raise InputError(f"{name} is over {n} tokens but the target vocabulary has {vocab_map.n_target}")


def build_proposals(draft_probs, vocab_map, *, kernel=None, first_order=None, check: bool = True):
    """The proposals of every sampler that the given kernels allow, as a dict keyed by sampler.

    ``vanilla`` and ``tli`` always; ``rdk_exact`` when ``kernel`` is given; ``rdk_first_order``
    when ``first_order`` is given.
    """
    q = _check(draft_probs, vocab_map, check)
    _check_kernel(kernel, vocab_map, "kernel", optional=True)
    _check_kernel(first_order, vocab_map, "first_order", optional=True)
    out = {"vanilla": vanilla_proposal(q, vocab_map, check=False)}
    out["tli"] = B.safe_divide(out["vanilla"], B.total(out["vanilla"], keepdims=True))
    if kernel is not None:
        out["rdk_exact"] = kernel.transport(out["tli"])
    if first_order is not None:
        out["rdk_first_order"] = first_order.transport(out["tli"])
    return out
