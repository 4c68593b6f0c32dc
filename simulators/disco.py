"""Dynamic speculation length (DISCO [5]): the oracle length and a confidence-threshold policy.

Facts from the DISCO paper [5] (arXiv 2405.04304): a *static* speculation lookahead (the same
draft length every iteration) is suboptimal; the *oracle* lookahead (each iteration drafts until
the first mismatch) varies widely across iterations and bounds the attainable speedup; DISCO's
learned policy reports about 10% average speedup over the best static lookahead. The models below
are this project's own.

Cost model (as in [3]): a drafter forward costs ``c``, a target forward 1; an iteration that
drafts ``g`` tokens costs ``g c + 1`` and emits (accepted drafts) + 1 tokens.

**[definition] oracle**: it knows which drafts will be accepted and drafts exactly those, so an
iteration with ``j`` accepted drafts costs ``j c + 1`` (the token at the first mismatch is the
target's own; with ``charge_mismatch=True`` the mismatching draft is paid for too, ``(j+1) c + 1``).
For i.i.d. acceptance ``a`` its time per token is ``1 - a + a c``.

Two settings:

* **traces** of per-position acceptance probabilities ``alpha_t`` (:func:`regime_trace`, or
  :func:`toy_trace` along a sequence sampled from a toy LM): exact expected generation time by
  dynamic programming (:func:`trace_time_static`, :func:`trace_time_oracle`) and a Monte Carlo
  replay with common random numbers (:func:`trace_replay`).
* **toy LMs**: real speculative sampling (:func:`run_policy`) with a static length, the oracle,
  and a confidence threshold like transformers' ``assistant_confidence_threshold``: drafting
  stops after a drafted token whose probability under the proposal is below the threshold (that
  token is still verified), or at ``gamma_max``.
"""
from __future__ import annotations

import numpy as np

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.sampling import InverseCdf
from rdk_theory.validation import InputError, as_count, as_real_array, check_numpy_rng, real_number

from .sequence import checked_float_laws


def _check_cost(c) -> float:
    value = real_number(c)
    if value is None or not 0 <= value <= 1:  # NaN fails too
        raise InputError(f"cost ratio c must be in [0, 1], got {c!r}: a drafter slower than the "
                         "target never pays off (and the oracle bounds the policies only then)")
    return value


def _check_trace(alphas, c):
    a = as_real_array(alphas, "trace")
    if a.ndim != 1 or a.size == 0 or np.any(a < 0) or np.any(a > 1) or not np.all(np.isfinite(a)):
        raise InputError("a trace must be a non-empty 1-D array of acceptances in [0, 1]")
    _check_cost(c)
    return a


def regime_trace(rng, n: int, *, easy: float = 0.9, hard: float = 0.3, switch: float = 0.05,
                 jitter: float = 0.05) -> np.ndarray:
    """Per-position acceptances from a two-regime Markov chain (easy/hard stretches of text).

    The regime flips with probability ``switch`` per position; ``alpha_t`` is the regime's
    level plus uniform jitter, clipped to [0, 1].
    """
    n = as_count(n, "n", 1)  # 2.5 was numpy's raw TypeError
    check_numpy_rng(rng, "regime_trace needs")
    given = {"easy": easy, "hard": hard, "switch": switch, "jitter": jitter}
    values = {name: real_number(v) for name, v in given.items()}
    for name, v in values.items():  # NaN gave a NaN trace, 'x' a raw numpy error
        if v is None or not 0 <= v <= 1:
            raise InputError(f"need {name} in [0, 1], got {given[name]!r}")
    easy, hard, switch, jitter = values.values()
    flips = rng.random(n) < switch
    state = np.cumsum(flips) % 2
    level = np.where(state == 0, easy, hard)
    return np.clip(level + jitter * (2 * rng.random(n) - 1), 0.0, 1.0)


def toy_trace(target, proposal_fn, n: int, rng, prefix=()) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``n`` target tokens; return ``alpha_t = alpha(p_t, r_t)`` along them and the tokens."""
    n = as_count(n, "n")  # 2.5 was numpy's raw TypeError
    check_numpy_rng(rng, "toy_trace needs")
    ctx, alphas, toks = tuple(prefix), np.empty(n), np.empty(n, dtype=np.int64)
    for t in range(n):
        p, r = checked_float_laws(target, proposal_fn, ctx)
        alphas[t] = acceptance_rate(p, r, check=False)
        toks[t] = rng.choice(p.size, p=p)
        ctx = ctx + (int(toks[t]),)
    return alphas, toks


def _run_probs(a, t, length):
    """P(exactly j leading accepts from position t), j = 0..length (the last: all accepted)."""
    seg = a[t:t + length]
    run = np.concatenate([[1.0], np.cumprod(seg)])
    out = run[:-1] * (1 - seg)
    return np.concatenate([out, run[-1:]])


def trace_time_static(alphas, gamma: int, c: float) -> float:
    """Exact expected time to emit the whole trace with a static draft length ``gamma``.

    ``V(t) = g c + 1 + sum_j P_j(t) V(t + j + 1)`` with ``g = min(gamma, n - t - 1)`` (never
    drafting past the end) and ``P_j`` the probability of exactly ``j`` leading accepts.
    """
    a = _check_trace(alphas, c)
    gamma = as_count(gamma, "gamma")
    n = a.size
    v = np.zeros(n + 1)
    for t in range(n - 1, -1, -1):
        g = min(int(gamma), n - t - 1)
        probs = _run_probs(a, t, g)
        v[t] = g * c + 1 + float(probs @ v[t + 1: t + g + 2])
    return float(v[0])


def trace_time_oracle(alphas, c: float, *, charge_mismatch: bool = False) -> float:
    """Exact expected time of the oracle (drafts exactly the drafts that will be accepted)."""
    a = _check_trace(alphas, c)
    n = a.size
    v = np.zeros(n + 1)
    for t in range(n - 1, -1, -1):
        g = n - t - 1
        probs = _run_probs(a, t, g)
        j = np.arange(g + 1)
        drafts = j + (1 if charge_mismatch else 0)
        drafts[-1] = g  # all remaining accepted: no mismatch to pay for
        v[t] = float(probs @ (drafts * c + 1 + v[t + 1: t + g + 2]))
    return float(v[0])


def trace_replay(alphas, c: float, policy, rng, n_runs: int = 1) -> np.ndarray:
    """Monte Carlo generation times over the trace; ``policy`` is an int (static) or ``"oracle"``.

    Acceptance at position t is ``u_t < alpha_t`` with one uniform ``u_t`` per position and run,
    shared by all policies given the same ``rng`` state (common random numbers).
    """
    a = _check_trace(alphas, c)
    if not (isinstance(policy, str) and policy == "oracle"):
        policy = as_count(policy, "policy (\"oracle\" or a static draft length)")
    n = a.size
    check_numpy_rng(rng, "trace_replay needs")
    out = np.empty(as_count(n_runs, "n_runs"))
    for r in range(int(n_runs)):
        ok = rng.random(n) < a
        t, time = 0, 0.0
        while t < n:
            if policy == "oracle":
                j = 0
                while t + j < n - 1 and ok[t + j]:
                    j += 1
                time += j * c + 1
            else:
                g = min(int(policy), n - t - 1)
                j = 0
                while j < g and ok[t + j]:
                    j += 1
                time += g * c + 1
            t += j + 1
        out[r] = time
    return out


def run_policy(target, proposal_fn, n_tokens: int, c: float, rng, *, policy="static", gamma: int = 4,
               threshold: float = 0.4, gamma_max: int = 16, charge_mismatch: bool = False,
               prefix=(), window: int = 8, keep_tokens: bool = False) -> dict:
    """Real speculative sampling on toy LMs under a speculation-length policy.

    Parameters:
      policy: ``"static"`` (``gamma`` drafts), ``"oracle"`` (draft until the first rejected
        draft, or at ``gamma_max``; that draft is not paid for unless ``charge_mismatch``), or
        ``"threshold"`` (stop after a drafted token with proposal probability ``< threshold``,
        or at ``gamma_max``). The cap makes the oracle a bound for policies that draft at
        most ``gamma_max`` per call (with ``p == q`` it would never stop); the trace oracle
        (:func:`trace_time_oracle`) has no cap.
      window: contexts are cut to the last ``window`` target tokens (exact for Markov targets
        of order <= window; a re-tokenizing drafter re-tokenizes that window).
      keep_tokens: also return ``"emitted"`` (the target ids, in order) and ``"per_call"``
        (tokens emitted by each target call), e.g. to test the output law.
    Returns ``{"tokens", "time", "iterations", "drafts", "time_per_token", "tokens_per_call"}``.
    """
    if policy not in ("static", "oracle", "threshold"):
        raise InputError(f"unknown policy {policy!r}: static, oracle or threshold")
    n_tokens, c = as_count(n_tokens, "n_tokens", 1), _check_cost(c)
    gamma, gamma_max = as_count(gamma, "gamma"), as_count(gamma_max, "gamma_max")
    window = as_count(window, "window", 1)
    check_numpy_rng(rng, "run_policy needs")
    if real_number(threshold) is None or not 0 <= threshold <= 1:
        raise InputError(f"threshold must be in [0, 1], got {threshold!r}")
    ctx = tuple(prefix)[-window:]
    emitted = iters = drafts = 0
    time = 0.0
    out_tokens, per_call = [], []
    cap = int(gamma) if policy == "static" else int(gamma_max)
    law = _LawCache(target, proposal_fn)
    while emitted < n_tokens:
        iters += 1
        # draft phase: the drafter proposes before the target verifies anything
        proposed, dctx = [], ctx
        for _ in range(cap):
            e = law.get(dctx)
            x = e.draft(rng.random())
            proposed.append(x)
            if x < 0:  # a drafter token the target lacks: it will be rejected; stop drafting
                break
            dctx = (dctx + (x,))[-window:]
            if policy == "threshold" and e.r[x] < threshold:
                break
        # verify phase: accept with min(1, p/r); the first rejection emits a residual token
        accepted = 0
        y = None
        for x in proposed:
            e = law.get(ctx)
            if x >= 0 and rng.random() * e.r[x] < e.p[x]:
                ctx, emitted, accepted = (ctx + (x,))[-window:], emitted + 1, accepted + 1
                if keep_tokens:
                    out_tokens.append(x)
                continue
            y = e.draw_residual(rng)
            break
        if y is None:  # every draft accepted: the target's bonus token
            y = law.get(ctx).draw_target(rng)
        ctx, emitted = (ctx + (y,))[-window:], emitted + 1
        if keep_tokens:
            out_tokens.append(y)
            per_call.append(accepted + 1)
        if policy == "static":
            g = cap
        elif policy == "threshold":
            g = len(proposed)
        else:
            g = accepted + (1 if charge_mismatch and accepted < len(proposed) else 0)
        drafts += g
        time += g * c + 1
    out = {"tokens": emitted, "time": time, "iterations": iters, "drafts": drafts,
           "time_per_token": time / emitted, "tokens_per_call": emitted / iters}
    if keep_tokens:
        out["emitted"], out["per_call"] = np.array(out_tokens, dtype=np.int64), np.array(per_call)
    return out


class _Entry:
    """Float64 laws at one context with inverse-CDF samplers built once (the core's
    :class:`rdk_theory.sampling.InverseCdf`, as in every verification step of the toolkit)."""

    def __init__(self, p, r):
        self.p, self.r = p, r
        self.r_draw = InverseCdf(r)  # r may be sub-stochastic: its total is the drafting mass
        self.p_draw = InverseCdf(p)
        excess = np.maximum(p - r, 0.0)
        # the residual is empty only if r = p up to round-off: then p itself is the residual
        self.res_draw = InverseCdf(excess) if excess.sum() > 0 else self.p_draw

    def draft(self, u: float) -> int:
        """The drafted token for a uniform ``u``, or -1 (a drafter token the target lacks)."""
        mass = self.r_draw.total
        return int(self.r_draw(u / mass)) if u < mass else -1

    def draw_target(self, rng):
        return int(self.p_draw(rng.random()))

    def draw_residual(self, rng):
        return int(self.res_draw(rng.random()))


class _LawCache:
    def __init__(self, target, proposal_fn):
        self.target, self.proposal_fn, self.cache = target, proposal_fn, {}

    def get(self, ctx):
        e = self.cache.get(ctx)
        if e is None:
            e = _Entry(*checked_float_laws(self.target, self.proposal_fn, ctx))
            self.cache[ctx] = e
        return e
