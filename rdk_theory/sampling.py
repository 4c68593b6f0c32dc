"""The lossless verification step [3] for any proposal, with an explicit random generator.

One step: with probability ``r(T)`` draft ``x ~ r / r(T)`` (otherwise the draft is a drafter
token the target lacks, always rejected); accept ``x`` with probability ``min(1, p(x)/r(x))``;
on rejection emit ``y ~ res = max(0, p - r) / sum max(0, p - r)``. The draw, the ratio's
denominator and the residual use the very same ``r``: that is what makes the output law exactly
``p`` (Theorem L). Randomness comes from the caller: a ``numpy.random.Generator`` for numpy
arrays, a ``torch.Generator`` (or None) for torch tensors.
"""
from __future__ import annotations

import numpy as np

from . import _backend as B
from .validation import (NEG_ATOL, InputError, as_count, as_prob_array, as_real_array,
                         check_dense_tensor, check_numpy_rng, host, same_backend, type_name)


class InverseCdf:
    """Inverse-CDF draws from non-negative ``weights`` (normalised on the fly), precomputed once.

    Negative weights beyond round-off (``-NEG_ATOL``) and non-finite ones raise InputError; all
    zeros are allowed (``last`` is then -1, and a draw is an InputError). ``total`` is the weights'
    sum (the drafting mass of a sub-stochastic law). Finite weights of any size are fine, with
    no numpy warning: a total below ``2^-960`` (where ``u * total`` would lose bits) or beyond
    float64's range (``total`` is then inf) is searched on a copy scaled by a power of two.

    ``self(u)`` maps uniforms ``u`` in [0, 1) to indices ``i`` with
    ``cdf[i-1] <= u * total < cdf[i]``; an index of zero weight is never returned (an index
    past the last positive weight is clamped to it: for u < 1, ``u * top`` rounds below ``top``
    in float64, so the clamp is a guard only). A ``u`` outside [0, 1), NaN included, is an
    InputError. For loops that draw
    many times from the same law (simulators), build it once; :func:`draw` and :func:`sample_steps` use it too.
    """

    def __init__(self, weights):
        w = as_real_array(weights, "weights")  # a string or a ragged list is an InputError
        if w.ndim != 1 or w.size == 0:
            raise InputError(f"weights must be a non-empty 1-D vector, got shape {w.shape}")
        low = w.min()
        if low < 0:  # NaN compares False here, and is caught by the total below
            if low < -NEG_ATOL:
                raise InputError(f"weights must be non-negative, got {low:.3g}")
            w = np.maximum(w, 0.0)  # round-off negatives are 0 (a copy)
        with np.errstate(over="ignore"):  # finite weights whose sum overflows: rescaled below
            self.cdf = np.cumsum(w)  # sequential: a zero weight repeats the previous sum exactly
        self.total = float(self.cdf[-1])  # the weights' sum (a sub-stochastic law's mass)
        self._top = self.total  # what the search scales u by: the last entry of cdf
        if not (_SMALLEST_TOTAL <= self.total < np.inf) and self.total > 0:
            # finite weights whose sum overflows, or so small that u * total would round to
            # multiples of the smallest subnormal: search their scaled copy
            w, shift = _rescaled(w)
            self.cdf = np.cumsum(w)
            self._top = float(self.cdf[-1])
            with np.errstate(over="ignore"):  # the sum itself: inf where it overflows
                self.total = float(np.ldexp(self._top, shift))
        if not np.isfinite(self._top):  # NaN and inf weights end up here
            raise InputError(f"weights must be finite, got a total of {self._top}")
        positive = np.flatnonzero(w > 0)
        self.last = int(positive[-1]) if positive.size else -1

    def __call__(self, u):
        if self.last < 0:  # the clamp below would return -1, which indexes the last token
            raise InputError("weights are all zero: nothing can be drawn from them")
        if not (type(u) is np.ndarray and u.dtype.kind == "f"):
            # a string or a complex u was parsed, or lost its imaginary part; a Python float
            # (a draw per token in the simulators) takes the short way
            u = np.asarray(u) if type(u) is float else as_real_array(u, "u")
        # outside [0, 1) (NaN included) a negative u returned index 0 whatever its weight,
        # and 7 or NaN the last positive one: refused, as the docstring promises no zero weight
        if u.size and not (u.min() >= 0 and u.max() < 1):  # two reads, no mask on the way
            flat = u.ravel()
            bad = flat[~((flat >= 0) & (flat < 1))][0]
            raise InputError(f"uniforms must be in [0, 1), got {float(bad)!r}")
        return np.minimum(np.searchsorted(self.cdf, u * self._top, side="right"), self.last)


#: Smallest weight total searched as it is: below, ``u * total`` has fewer than 53 significant
#: bits (subnormal), so :class:`InverseCdf` scales the weights by a power of two first.
_SMALLEST_TOTAL = 2.0 ** -960


def _rescaled(w):
    """``(w 2^-e, e)`` with the power of two that brings the largest entry into [0.5, 1):
    exact for tiny weights (scaling up keeps every bit), and for weights whose sum overflows
    float64 it loses only entries below ``2^-1074`` of the largest. NaN and inf weights come
    back as they are, with ``e = 0`` (the caller refuses them)."""
    top = float(w.max())
    if not (0 < top < np.inf):
        return w, 0
    e = int(np.frexp(top)[1])
    return np.ldexp(w, -e), e


def _inverse_cdf(weights, u):
    return InverseCdf(weights)(u)


def _inverse_cdf_torch(weights, u):
    """The torch twin of :class:`InverseCdf`, over the positive weights only: a CUDA
    ``cumsum`` is a parallel scan that groups its additions differently for each prefix, so a
    zero weight need not repeat the previous sum exactly and ``searchsorted`` could land on
    it. Searching the positive entries alone makes a zero weight unreachable on any device.
    Weights whose largest entry is below 1/2 are first scaled up by a power of two (exact, and
    with no host sync), so that ``u * total`` keeps its 53 bits for a tiny total, as in
    :class:`InverseCdf`."""
    import torch

    positive = torch.nonzero(weights > 0).flatten()
    w = weights.index_select(0, positive)
    up = -torch.frexp(w.max()).exponent.clamp(max=0)  # scale up only (exact), by 2^up
    two = torch.full((), 2.0, dtype=w.dtype, device=w.device)
    # in two halves: 2^up itself overflows float64 beyond up = 1023 (weights below 2^-1023)
    w = w * two.pow(up // 2) * two.pow(up - up // 2)
    cdf = torch.cumsum(w, 0)
    idx = torch.searchsorted(cdf, (u * cdf[-1]).contiguous(), right=True)
    return positive.index_select(0, torch.clamp(idx, max=positive.numel() - 1))


#: Most steps one :func:`sample_steps` call holds (2^40: 17 TiB of tokens and flags; a larger
#: n was numpy's "array is too big" ValueError or torch's storage-size RuntimeError).
MAX_STEPS = 2**40


def sample_steps(target_probs, proposal, n: int, rng, *, check: bool = True):
    """Run ``n`` independent verification steps for one context.

    Parameters:
      target_probs: ``p``, (N_T,).
      proposal: ``r``, (N_T,), sums to at most 1.
      n: number of steps.
      rng: ``numpy.random.Generator`` (numpy inputs) or ``torch.Generator``/None (torch inputs).

    Returns:
      ``(tokens, accepted)``: emitted target ids (n,) int64 and whether each draft was accepted
      (n,) bool, as numpy arrays or torch tensors matching the inputs.
    """
    n = as_count(n, "n")
    if n > MAX_STEPS:
        raise InputError(f"n = {n} steps would be held in memory at once (at least 17 bytes "
                         f"each); sample_steps takes at most {MAX_STEPS:,}: use sample_counts, "
                         "which counts any n in bounded memory")
    if check:
        target_probs, proposal = _one_context(target_probs, proposal, "sample_steps")
        target_probs, proposal = same_backend(target_probs, proposal, ("target_probs", "proposal"))
    if B.is_torch(target_probs):
        return _sample_steps_torch(target_probs, proposal, n, rng)
    check_numpy_rng(rng)
    p, r = _normalised(np.asarray(target_probs, dtype=np.float64), np.asarray(proposal, dtype=np.float64))
    mass = float(r.sum())
    drafted = rng.random(n) < mass
    tokens = np.zeros(n, dtype=np.int64)
    accepted = np.zeros(n, dtype=bool)
    if mass > 0:
        k = int(drafted.sum())
        x = _inverse_cdf(r, rng.random(k))
        ok = rng.random(k) * r[x] < p[x]  # accept with probability min(1, p(x) / r(x))
        tokens[np.flatnonzero(drafted)] = x
        accepted[np.flatnonzero(drafted)] = ok
    rejected = np.flatnonzero(~accepted)
    if rejected.size:
        excess = np.maximum(p - r, 0.0)
        # the residual is empty only if r = p up to round-off: then p itself is the residual
        tokens[rejected] = _inverse_cdf(excess if excess.sum() > 0 else p, rng.random(rejected.size))
    return tokens, accepted


def _one_context(target_probs, proposal, caller):
    """``(p, r)`` validated (``r`` may be sub-stochastic), both of shape (N_T,)."""
    target_probs = as_prob_array(target_probs, "target_probs")
    proposal = as_prob_array(proposal, "proposal", allow_sub_stochastic=True)
    if target_probs.ndim != 1 or proposal.shape != target_probs.shape:
        raise InputError(
            f"{caller} takes one context: target_probs and proposal must both be "
            f"(N_T,), got {tuple(target_probs.shape)} and {tuple(proposal.shape)}"
        )
    return target_probs, proposal


def _normalised(p, r):
    """``p`` rescaled to sum 1 and ``r`` to sum at most 1 (inputs pass validation within a
    tolerance); the step then uses this one ``r`` for the draw, the ratio and the residual."""
    p = p / p.sum()
    total = r.sum()
    return p, (r / total if total > 1 else r)


def _check_generator(generator, device) -> None:
    """torch draws need a ``torch.Generator`` (or None) on the tensors' device type."""
    import torch

    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise InputError(f"torch tensors need a torch.Generator (or None), got "
                         f"{type_name(generator)}")
    if generator.device.type != torch.device(device).type:
        raise InputError(f"the torch.Generator is on {generator.device} but the tensors are on "
                         f"{device}: use torch.Generator(device={str(device)!r})")


def _sample_steps_torch(p, r, n, generator):
    import torch

    dev = p.device
    _check_generator(generator, dev)
    p, r = _normalised(p.detach().double(), r.detach().double())  # no autograd graph, no warning
    mass = float(r.sum())
    rand = lambda k: torch.rand(k, generator=generator, device=dev, dtype=torch.float64)  # noqa: E731
    drafted = rand(n) < mass
    tokens = torch.zeros(n, dtype=torch.int64, device=dev)
    accepted = torch.zeros(n, dtype=torch.bool, device=dev)
    idx = torch.nonzero(drafted).flatten()
    if mass > 0 and idx.numel():
        x = _inverse_cdf_torch(r, rand(idx.numel()))
        ok = rand(idx.numel()) * r[x] < p[x]
        tokens[idx] = x
        accepted[idx] = ok
    rej = torch.nonzero(~accepted).flatten()
    if rej.numel():
        excess = (p - r).clamp_min(0)
        tokens[rej] = _inverse_cdf_torch(excess if float(excess.sum()) > 0 else p, rand(rej.numel()))
    return tokens, accepted


def draw(weights, rng) -> int:
    """One index drawn with probability ``weights / sum(weights)`` (a zero weight never wins).

    ``weights``: a 1-D vector of finite non-negative numbers with a positive sum (numpy, or a
    tensor on any device); ``rng``: a ``numpy.random.Generator``."""
    sampler = InverseCdf(weights)  # checks the shape, finiteness and sign
    if not sampler.total > 0:
        raise InputError(f"weights must have a positive sum, got {sampler.total:.3g}")
    check_numpy_rng(rng)
    return int(sampler(rng.random(1))[0])


def verify_draft(target_probs, proposal, draft: int, rng, *, check: bool = True):
    """Verify an already drafted token ``draft ~ proposal``: ``(emitted token, accepted)``.

    Accepts with probability ``min(1, p(x)/r(x))``; otherwise draws from the residual built from
    the same ``r`` (from ``p`` when the residual is empty, i.e. ``r = p`` up to round-off). For
    drafting loops (speculative generation) where the draft is drawn outside the step.
    ``draft = -1`` is a drafter token the target lacks (a sub-stochastic ``r`` leaves mass
    ``1 - r(T)`` for those): always rejected, so the residual is drawn. ``check`` validates
    ``p``, ``r`` and ``draft`` (ids outside ``[-1, N_T)``, and a draft with ``r(draft) = 0``
    or ``-1`` with ``r(T) = 1``, which cannot have been drawn from ``r``, raise InputError;
    unchecked, such a draft would be accepted and the law would not be ``p``). ``p`` and ``r``
    may be tensors on any device: the step runs on the host, so ``rng`` is always a
    ``numpy.random.Generator``.
    """
    if check:  # on the inputs as given: a half-precision tensor keeps its dtype's tolerance
        target_probs, proposal = _one_context(target_probs, proposal, "verify_draft")
        draft = as_count(draft, "draft", lo=-1)
        n = target_probs.shape[0]
        if draft >= n:
            raise InputError(f"draft = {draft} is out of range: the target has {n} "
                             "tokens (-1: a drafter token the target lacks)")
    p = np.asarray(host(target_probs, "target_probs"), dtype=np.float64)
    r = np.asarray(host(proposal, "proposal"), dtype=np.float64)
    check_numpy_rng(rng, "verify_draft draws on the host (tensors are copied there): it needs")
    p, r = _normalised(p, r)
    if check and draft >= 0 and not r[draft] > 0:
        raise InputError(f"draft = {draft} has probability 0 under the proposal, so it was not "
                         "drawn from it: draw the draft from the very r that verifies it")
    if check and draft == -1 and not r.sum() < 1:
        raise InputError("draft = -1 (a drafter token the target lacks) has probability 0 under "
                         "a proposal that puts all its mass on the target's tokens, so it was not "
                         "drawn from it: draw the draft from the very r that verifies it")
    if draft >= 0 and rng.random() * r[draft] < p[draft]:
        return int(draft), True
    excess = np.maximum(p - r, 0.0)
    return draw(excess if excess.sum() > 0 else p, rng), False


def verify_step(target_probs, proposal, rng):
    """One verification step; returns ``(token, accepted)`` as Python ``(int, bool)``."""
    tokens, accepted = sample_steps(target_probs, proposal, 1, rng)
    return int(tokens[0]), bool(accepted[0])


#: Steps per draw of :func:`sample_counts`: about 30 MB of working arrays, whatever ``n``.
COUNT_CHUNK = 1 << 20


def sample_counts(target_probs, proposal, n: int, rng, *, chunk: int = COUNT_CHUNK,
                  progress: bool | None = None):
    """:func:`sample_steps` for any ``n`` in bounded memory: ``(counts, accepted)``.

    The ``n`` steps are drawn ``chunk`` at a time (one call of :func:`sample_steps` each,
    the same generator throughout), so memory stays at one chunk's arrays (a chunk of more
    than :data:`MAX_STEPS` steps is an InputError when ``n`` fills it). ``counts`` is how
    often each target id was emitted, (N_T,) int64; ``accepted`` how many drafts were
    accepted, an int. For ``n <= chunk`` the draws are exactly those of
    ``sample_steps(p, r, n, rng)``. ``progress``: a bar on stderr (None: when it is a terminal).
    Inputs as for :func:`sample_steps`: numpy arrays with a ``numpy.random.Generator``, or
    tensors on any device with a ``torch.Generator`` (or None); validated as it validates
    them. Tensors are counted on their device (N_T integers copied per chunk); the counts
    are a host numpy array either way.
    """
    from ._progress import progress as bar

    n, chunk = as_count(n, "n"), as_count(chunk, "chunk", 1)
    if min(n, chunk) > MAX_STEPS:  # sample_steps' own message would send the caller here
        raise InputError(f"chunk = {chunk}: {min(n, chunk):,} steps would be held in memory at "
                         f"once (at least 17 bytes each); a chunk takes at most {MAX_STEPS:,}: "
                         f"leave chunk at its default ({COUNT_CHUNK:,}) or choose a smaller one")
    counts, accepted = None, 0
    blocks = max(1, -(-n // chunk))  # n = 0: one empty draw, which validates the inputs
    sizes = (min(chunk, n - i * chunk) for i in range(blocks))  # lazily: flat for any n
    for size in bar(sizes, desc="steps", total=blocks, enabled=progress):
        tokens, ok = sample_steps(target_probs, proposal, size, rng)  # checks its inputs
        if counts is None:
            counts = np.zeros(np.shape(target_probs)[-1], dtype=np.int64)
        counts += _bincount(tokens, counts.size)
        accepted += int(ok.sum())
    return counts, accepted


def emitted_counts(tokens, n_target: int) -> np.ndarray:
    """How often each target id was emitted, (N_T,) int64 on the host (a tensor's tokens are
    counted on their device: N_T integers cross, not the tokens). ``tokens``: a 1-D array or
    tensor of integer ids in ``[0, n_target)``; anything else is an InputError (an id beyond
    the target lengthened the counts, a negative one was numpy's ValueError)."""
    n_target = as_count(n_target, "n_target", 1)
    wide = False
    if B.is_torch(tokens):
        import torch

        check_dense_tensor(tokens, "tokens")
        integer = not (tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool)
        size = tokens.numel()
        wide = tokens.dtype in (torch.uint16, torch.uint32, torch.uint64)
        if wide:  # torch has no min, max or bincount for these: count them as int64
            tokens = tokens.to(torch.int64)  # uint64 ids from 2^63 wrap below 0
    else:
        listed = not isinstance(tokens, np.ndarray)
        try:
            tokens = np.asarray(tokens)
        except ValueError:  # a ragged list
            raise InputError("tokens must be a 1-D list of integer target ids, got a ragged "
                             "nested list") from None
        if listed and tokens.size == 0:  # [] comes as float64
            tokens = tokens.astype(np.int64)
        integer, size = tokens.dtype.kind in "iu", tokens.size
    if tokens.ndim != 1 or not integer:
        raise InputError(f"tokens must be a 1-D list of integer target ids, got {tokens.dtype} "
                         f"of shape {tuple(tokens.shape)}")
    if size:
        lo, hi = (int(x) for x in (tokens.min(), tokens.max()))
        if lo < 0 or hi >= n_target:
            bad = lo if lo < 0 else hi
            if wide and bad < 0:
                bad += 2**64  # a uint64 id that wrapped in the cast above
            raise InputError(f"tokens holds {bad}, outside the {n_target} "
                             f"target ids (0..{n_target - 1})")
    return _bincount(tokens, n_target)


def _bincount(tokens, n_target: int) -> np.ndarray:
    if B.is_torch(tokens):
        import torch

        return B.to_numpy(torch.bincount(tokens, minlength=n_target)).astype(np.int64)
    # as int64: numpy 1.26's bincount refuses uint64 ids (the range is checked already)
    return np.bincount(B.to_numpy(tokens).astype(np.int64, copy=False), minlength=n_target).astype(np.int64)
