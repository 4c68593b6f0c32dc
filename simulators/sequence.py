"""Exact sequence-level simulator of speculative decoding on toy LMs (Fraction arithmetic).

One speculative *iteration* with draft length ``gamma`` from a context ``c``: for positions
``t = 1..gamma`` the drafter proposes ``x_t ~ r_t`` (``r_t`` the sampler's proposal over T built
from the drafter law at ``c + x_<t``; its missing mass is a drafter token the target lacks),
the target accepts it with probability ``min(1, p_t(x_t) / r_t(x_t))``; the first rejection
emits ``y ~ res_t = (p_t - r_t)^+ / sum (p_t - r_t)^+`` and ends the block; if all ``gamma``
drafts are accepted the target's bonus token ``y ~ p_{gamma+1}`` ends it. The block holds
``L`` tokens, ``1 <= L <= gamma + 1``: the tokens per target call.

:func:`block_law` enumerates every draft path (each drafted token, each accept/reject outcome,
each residual/bonus token) and returns the exact law of the emitted block. Drafts after the
first rejection are never examined; their probabilities sum to 1 and are marginalised out.
Losslessness at sequence level is checked two ways:

* :func:`completed_law`: the block, completed by the target's own sampling up to ``gamma + 1``
  tokens, has exactly the target's law of ``gamma + 1`` tokens;
* :func:`stream_law`: the first ``n`` tokens of *repeated* iterations (as many as needed) have
  exactly the target's law ``target.sequence_law(prefix, n)``.

Proposals come from :mod:`rdk_theory.proposals` (the four samplers, any kernel). Exact mode
needs exact proposals: vanilla, TLI and RDK with a Fraction kernel (identity, marginal with a
Fraction ``w``/``lam``, a :class:`rdk_theory.kernels.DenseKernel` of Fractions) are exact as
computed. A float-only proposal (covariance-softmax RDK, first-order RDK, which use ``exp``) is
**rationalised**: its float64 vector is converted to Fractions (``limit_denominator``) and
renormalised exactly to the mass of ``q'``. Losslessness holds for *every* proposal, so the exact
check is meaningful for the rationalised copy; the float64 run of the same enumeration
(``exact=False``) is compared with the target within a named tolerance in the tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable

import numpy as np

from rdk_theory import _backend as B
from rdk_theory.proposals import SAMPLERS, build_proposals
from rdk_theory.validation import (KERNEL_ATOL, NEG_ATOL, InputError, as_count, as_prob_array,
                                   as_real_array, real_number)

ProposalFn = Callable[[tuple], np.ndarray]

#: Largest denominator kept when rationalising a float64 proposal.
RATIONAL_MAX_DENOMINATOR = 1 << 20
#: Float mode: a rejection mass up to this with an empty residual is the round-off of
#: ``r = p`` (``1 - sum r`` of a row that sums to 1 - 1e-16), and draws from ``p``; more is
#: a proposal inconsistent with ``p``.
FLOAT_REJECT_ROUNDOFF = 1e-9


def rationalise(vec, total=1) -> np.ndarray:
    """Exact Fraction copy of a float vector, renormalised to sum exactly to ``total``.

    Zeros stay zeros; entries are rounded with ``limit_denominator(2**20)`` first. If every
    entry rounds to 0 the result is all zeros (a zero proposal: alpha = 0). ``vec`` must be a
    non-empty 1-D vector of finite entries, none below ``-NEG_ATOL`` (such round-off is 0), and
    ``total`` a number >= 0 (InputError otherwise: NaN and -1 became 0 before).
    """
    arr = as_real_array(vec, "vec")
    if arr.ndim != 1 or arr.size == 0:
        raise InputError(f"vec must be a non-empty 1-D vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < -NEG_ATOL):
        raise InputError("vec must hold finite entries >= 0 (a law or a sub-stochastic "
                         "proposal)")
    t = real_number(total)
    if t is None or not 0 <= t < math.inf:  # NaN fails too
        raise InputError(f"total must be a finite number >= 0, got {total!r}")
    fr = [Fraction(float(v)).limit_denominator(RATIONAL_MAX_DENOMINATOR) if v > 0 else Fraction(0)
          for v in arr]
    s = sum(fr)
    if s == 0 or total == 0:
        return np.array([Fraction(0)] * len(fr), dtype=object)
    return np.array([f * Fraction(total) / s for f in fr], dtype=object)


def rationalise_kernel(matrix) -> np.ndarray:
    """Row-wise :func:`rationalise` of a float row-stochastic matrix (an exact kernel copy);
    a matrix that is not square and row-stochastic (within ``KERNEL_ATOL``) is an InputError."""
    arr = as_real_array(matrix, "kernel")
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.size == 0:
        raise InputError(f"kernel must be a non-empty square matrix, got shape {arr.shape}")
    arr = as_prob_array(arr, "kernel", atol=KERNEL_ATOL)
    return np.array([rationalise(row) for row in arr], dtype=object)


def _is_exact_kernel(kernel) -> bool:
    from rdk_theory.kernels import DenseKernel, IdentityKernel, MarginalKernel

    if kernel is None or isinstance(kernel, IdentityKernel):
        return True
    if isinstance(kernel, DenseKernel):
        return B.is_exact(kernel.matrix)
    if isinstance(kernel, MarginalKernel):
        return B.is_exact(kernel.w) and isinstance(kernel.lam, (Fraction, int))
    return False


def make_proposal_fn(drafter, vocab_map, sampler: str = "tli", *, kernel=None, first_order=None,
                     exact: bool = True) -> ProposalFn:
    """``context -> r`` over T for one of the four samplers, cached per context.

    ``kernel`` is needed by ``rdk_exact``, ``first_order`` (a
    :class:`rdk_theory.first_order.FirstOrderCovarianceKernel`) by ``rdk_first_order``. With
    ``exact=True`` the drafter must have Fraction tables; float-only proposals are rationalised
    (see the module docstring). ``fn.rationalised`` tells whether that happened.
    """
    if sampler not in SAMPLERS:
        raise InputError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")
    if sampler == "rdk_exact" and kernel is None:
        raise InputError("sampler rdk_exact needs a kernel")
    if sampler == "rdk_first_order" and first_order is None:
        raise InputError("sampler rdk_first_order needs a first-order kernel")
    if exact and getattr(drafter, "exact", True) is False:  # its proposals would be floats,
        # and the exact checks (is_lossless, block_law) would judge round-off
        raise InputError("exact=True needs a drafter with Fraction tables; pass exact=False "
                         "for a float drafter (e.g. drafter.float_copy())")
    rational = exact and not (sampler in ("vanilla", "tli") or
                              (sampler == "rdk_exact" and _is_exact_kernel(kernel)))
    cache: dict = {}

    def fn(context):
        key = tuple(context)
        if key not in cache:
            q = drafter.next_probs(key)
            if exact and not rational:
                props = build_proposals(q, vocab_map, kernel=kernel if sampler == "rdk_exact" else None,
                                        check=False)
                cache[key] = props[sampler]
            else:
                qf = np.asarray(q, dtype=np.float64)
                props = build_proposals(qf, vocab_map,
                                        kernel=kernel if sampler == "rdk_exact" else None,
                                        first_order=first_order if sampler == "rdk_first_order" else None,
                                        check=False)
                r = np.asarray(props[sampler], dtype=np.float64)
                if rational:
                    mass = sum(q[j] for j, t in enumerate(vocab_map.draft_to_target) if t >= 0)
                    r = rationalise(r, 1 if mass > 0 else 0)
                cache[key] = r
        return cache[key]

    fn.rationalised = rational
    fn.sampler = sampler
    return fn


@dataclass
class BlockLaw:
    """Exact law of one speculative iteration's emitted block.

    Attributes:
      law: ``{block tuple: probability}`` (variable length 1..gamma+1).
      gamma: draft length.
      prefix: the context the iteration started from.
      length_law: ``{L: P(L tokens emitted)}`` for every ``L`` in ``1 .. gamma + 1`` (0
        where a length never occurs): tokens per target call; ``L - 1`` drafts were accepted.
      expected_tokens: ``E[L]``.
    """

    law: dict
    gamma: int
    prefix: tuple
    length_law: dict = field(default_factory=dict)
    expected_tokens: object = 0

    def __post_init__(self):
        # every length, so that a table or figure has a column per length whatever the law
        lengths: dict = {k: 0 for k in range(1, self.gamma + 2)}
        for blk, w in self.law.items():
            lengths[len(blk)] = lengths.get(len(blk), 0) + w
        self.length_law = dict(sorted(lengths.items()))
        self.expected_tokens = sum(k * w for k, w in self.length_law.items())

    def position_acceptances(self) -> list:
        """``alpha_t = P(L > t) / P(L > t - 1)``: the conditional acceptance at each position,
        ``t = 1 .. gamma``; 0 where position ``t`` is never reached (``P(L > t - 1) = 0``)."""
        tail = [sum(w for k, w in self.length_law.items() if k > t) for t in range(self.gamma + 1)]
        return [tail[t] / tail[t - 1] if tail[t - 1] != 0 else 0 for t in range(1, self.gamma + 1)]


def block_law(target, proposal_fn: ProposalFn, gamma: int, prefix=()) -> BlockLaw:
    """Enumerate every draft path of one iteration; return the exact law of the emitted block.

    Parameters:
      target: a toy LM (``next_probs(context)`` over T).
      proposal_fn: from :func:`make_proposal_fn`.
      gamma: draft length (>= 0; 0 means the target alone emits one token).
      prefix: tuple of target ids already generated.
    """
    gamma = as_count(gamma, "gamma")
    prefix = tuple(prefix)
    return BlockLaw(_block_paths(target, proposal_fn, gamma, prefix), int(gamma), prefix)


def _checked_proposal(r, n: int, ctx: tuple) -> np.ndarray:
    """``r`` when it is a sub-stochastic vector over the target's ``n`` tokens, by the rules of
    :func:`rdk_theory.validation.as_prob_array` (exact for Fractions; for floats, finite and
    within the toolkit's tolerances for a law, entries below 0 by round-off clipped to 0).
    Anything else is an InputError: the identity ``min(r, p) + (p - r)^+ = p`` holds for every
    real vector, so a law built from an invalid ``r`` (negative entries, mass above 1) still
    completes to ``p`` and would be certified lossless."""
    r = np.asarray(r)  # a list of Fractions stays exact (as_prob_array reads a list as floats)
    if r.shape != (n,):
        raise InputError(f"the proposal at context {ctx} has shape {r.shape}, not ({n},)")
    if r.dtype.kind in "biu":  # integers (a point mass) are exact too: Python ints, not float64
        r = r.astype(np.int64).astype(object) if r.dtype.kind == "b" else r.astype(object)
    return as_prob_array(r, f"the proposal at context {ctx}", allow_sub_stochastic=True)


def checked_float_laws(target, proposal_fn: ProposalFn, ctx: tuple):
    """``(p, r)`` at context ``ctx`` as float64 arrays, for the Monte Carlo drivers: ``p`` (the
    target's row, as given) checked to be a law, ``r`` checked as :func:`block_law` checks it
    (:func:`_checked_proposal`). Without the checks a NaN proposal ran (every block of length
    1), and a 1-entry one was broadcast over the vocabulary."""
    p = checked_target_law(target, ctx)
    r = _checked_proposal(proposal_fn(ctx), p.shape[-1], ctx)
    return p, np.asarray(r, dtype=np.float64)


def checked_target_law(target, ctx: tuple) -> np.ndarray:
    """The target's row at ``ctx`` as float64, checked to be a law (a model of one's own is
    not checked when built, as a :class:`~simulators.toy_lm.MarkovLM`'s table is)."""
    p = np.asarray(target.next_probs(ctx))
    as_prob_array(p, f"the target's law at context {ctx}")
    return np.asarray(p, dtype=np.float64)


def _block_paths(target, proposal_fn: ProposalFn, gamma: int, prefix: tuple,
                 max_tokens: int | None = None) -> dict:
    """:func:`block_law`'s law as a dict; with ``max_tokens``, the law of the block's first
    ``max_tokens`` tokens (a path is cut there: its continuations' weights sum to its own, as
    at every node, so nothing after the cut is enumerated)."""
    law: dict = {}

    def add(block, w):
        if w != 0:
            law[block] = law.get(block, 0) + w

    def walk(block, w, t):
        if max_tokens is not None and len(block) >= max_tokens:
            add(block, w)
            return
        ctx = prefix + block
        p = target.next_probs(ctx)
        if t == gamma:  # every draft accepted: the target's bonus token
            for y in range(len(p)):
                add(block + (y,), w * p[y])
            return
        r = _checked_proposal(proposal_fn(ctx), len(p), ctx)
        excess = np.array([p[x] - r[x] if p[x] > r[x] else 0 * p[x] for x in range(len(p))], dtype=p.dtype)
        ex_total = excess.sum()
        reject = 0 * p[0]
        for x in range(len(p)):  # drafted target token x, probability r(x)
            if r[x] == 0:
                continue
            acc = p[x] / r[x] if p[x] < r[x] else 1  # min(1, p(x) / r(x))
            if acc != 0:
                walk(block + (x,), w * r[x] * acc, t + 1)
            reject = reject + r[x] * (1 - acc)
        reject = reject + (1 - r.sum())  # a drafter token the target lacks: always rejected
        if reject != 0:
            residual, res_total = excess, ex_total
            if ex_total == 0:
                # in floats, r = p up to round-off (sum r missing 1 by an ulp) leaves a rejection
                # mass of that size and no residual: the samplers then draw from p itself
                if p.dtype == object or reject > FLOAT_REJECT_ROUNDOFF:
                    raise AssertionError("rejection with an empty residual: proposal "
                                         "inconsistent with p")
                residual, res_total = p, p.sum()
            for y in range(len(p)):
                if residual[y] != 0:
                    add(block + (y,), w * reject * residual[y] / res_total)

    walk((), 1, 0)
    return law


def completed_law(target, block: BlockLaw) -> dict:
    """Law of the first ``gamma + 1`` tokens when each block is completed by the target itself."""
    n = block.gamma + 1
    out: dict = {}
    for blk, w in block.law.items():
        for tail, v in target.sequence_law(block.prefix + blk, n - len(blk)).items():
            out[blk + tail] = out.get(blk + tail, 0) + w * v
    return out


def stream_law(target, proposal_fn: ProposalFn, gamma: int, n_tokens: int, prefix=()) -> dict:
    """Exact law of the first ``n_tokens`` emitted by repeated speculative iterations.

    What follows depends only on the tokens emitted so far, not on how they were split into
    blocks, so paths that reach the same emitted prefix are merged (their weights summed)
    before it is expanded: each prefix is expanded once, shortest first, where enumerating
    every split expanded it once per split. From a prefix ``need`` tokens short of
    ``n_tokens``, a block is enumerated only up to its first ``need`` tokens."""
    prefix = tuple(prefix)
    n_tokens = as_count(n_tokens, "n_tokens")
    gamma = as_count(gamma, "gamma")
    if n_tokens == 0:
        return {(): 1}
    out: dict = {}
    # by_length[k]: {emitted prefix of k tokens: total probability of the paths reaching it}
    by_length: list = [dict() for _ in range(n_tokens)]
    by_length[0][()] = 1
    for k in range(n_tokens):
        for emitted, w in by_length[k].items():
            need = n_tokens - k  # only the block's first ``need`` tokens matter
            law = _block_paths(target, proposal_fn, gamma, prefix + emitted,
                               need if need < gamma + 1 else None)
            for blk, v in law.items():
                new = emitted + blk
                bucket = out if len(new) >= n_tokens else by_length[len(new)]
                key = new[:n_tokens]
                bucket[key] = bucket.get(key, 0) + w * v
        by_length[k] = None  # expanded: free it
    return out


def max_law_difference(law_a: dict, law_b: dict):
    """``max_s |law_a(s) - law_b(s)|`` over the union of supports (exact 0 means equal laws)."""
    keys = set(law_a) | set(law_b)
    return max(abs(law_a.get(s, 0) - law_b.get(s, 0)) for s in keys) if keys else 0


def is_lossless(target, proposal_fn: ProposalFn, gamma: int, prefix=(), n_tokens: int | None = None):
    """``(ok, max difference)``: block completion (and, with ``n_tokens``, the stream) vs target."""
    blk = block_law(target, proposal_fn, gamma, prefix)
    diff = max_law_difference(completed_law(target, blk), target.sequence_law(prefix, gamma + 1))
    if n_tokens:
        diff = max(diff, max_law_difference(stream_law(target, proposal_fn, gamma, n_tokens, prefix),
                                            target.sequence_law(prefix, n_tokens)))
    return diff == 0, diff
