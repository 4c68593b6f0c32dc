"""Offline cost model of distributed speculative inference (DSI) [4] against SI and non-SI.

Facts taken from the DSI paper [4] (arXiv 2405.14105): DSI overlaps drafting and verification
by running several target (and drafter) instances at once (*speculation parallelism*); it is
lossless; it is proved faster than SI and non-SI in expectation for any drafter; SI can be slower
than non-SI when the drafter is slow or inaccurate; the paper's simulations report DSI 1.29-1.92x
faster than SI for off-the-shelf model pairs on a single node. The timing model below is this
project's own **[definition]**, written from those facts, not from the paper's code.

Units: a target forward costs 1, a drafter forward ``c``; each draft is accepted independently
with probability ``a`` (the i.i.d. model of [3]); ``k`` is the lookahead; ``servers`` target
instances are available (each task occupies one for 1 time unit).

* **non-SI**: 1 per token.
* **SI** [3]: an iteration costs ``k c + 1`` and yields ``(1 - a^(k+1)) / (1 - a)`` tokens.
* **DSI [definition]**: after each restart (time 0, a verified prefix) the drafter drafts
  without pause, one token per ``c``. Task ``j = 0, 1, 2, ...`` is a target forward over the
  prefix plus the first ``j k`` drafts; it is *ready* at ``j k c`` and starts at
  ``s_j = max(j k c, s_{j-S} + 1)`` with ``S`` servers (a server frees 1 after its task began);
  task 0 (no drafts) starts at once. Task ``j`` ends at ``s_j + 1`` and settles the drafts at
  positions ``(j-1) k + 1 .. j k + 1`` (its last row checks the draft that follows its input,
  drafted by then because ``c <= 1``). With ``m`` the position of the first rejected draft
  (``P(m) = a^(m-1) (1 - a)``), the cycle emits ``m`` tokens (``m - 1`` accepted drafts and
  the target's correction) at ``tau(m) = s_{j(m)} + 1``, ``j(m) = ceil((m - 1) / k)``; later
  tasks are cancelled and the next cycle starts. By renewal-reward, the expected time per
  token is ``E[tau] / E[m]``.
  Closed form of the schedule: ``s_j = j k c`` if ``S k c >= 1`` (servers never bind), else
  ``s_j = (j mod S) k c + floor(j / S)``.
  Guarantees (pathwise, hence in expectation): with ``k c <= 1``, ``s_j <= j`` so
  ``tau(m) <= m`` (never slower than non-SI); with ``k = 1`` and ``S >= ceil(1/c)``,
  ``E[tau]/E[m] = c + (1 - c)(1 - a)``, which is ``<=`` SI's cost for every lookahead
  (multiply by ``sum_{i<=k'} a^i <= k' + 1``). :func:`dsi_best` searches the lookaheads with
  ``k c <= 1``; the tests check the never-slower claim over whole grids, ``servers`` included.

:func:`dsi_monte_carlo` replays the same timeline event by event (a queue of servers, draws of
acceptances) without the closed forms, for the exact-vs-Monte-Carlo test.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from rdk_theory.validation import InputError, as_count, as_real_array, check_numpy_rng, real_number

from .block import expected_tokens_iid

def _check(c, a, k=1, servers=1):
    cv, av = real_number(c), real_number(a)  # '0.5', None, arrays, True: raw errors or 1 before
    if cv is None or not (0 < cv <= 1):
        raise InputError(f"drafter cost c must be a number in (0, 1] target forwards, got {c!r}")
    if av is None or not (0 <= av < 1):
        raise InputError(f"acceptance a must be a number in [0, 1) (a = 1 never rejects), got "
                         f"{a!r}")
    as_count(k, "lookahead k", 1)
    as_count(servers, "servers", 1)


#: Largest ``k_max`` of :func:`si_best` and :func:`dsi_best`, which evaluate every lookahead up
#: to it (10^9 built a list for minutes); the CLI's whole sweep is capped at as many.
K_MAX_LIMIT = 2 ** 21


def _check_k_max(k_max) -> int:
    k_max = as_count(k_max, "k_max", 1)
    if k_max > K_MAX_LIMIT:
        raise InputError(f"k_max must be at most {K_MAX_LIMIT:,} (each lookahead up to it is "
                         f"evaluated), got {k_max:,}")
    return k_max


def non_si_cost(c=None, a=None) -> float:
    """Time per token without speculation: 1."""
    return 1.0


def si_cost(c: float, a: float, k: int) -> float:
    """SI time per token: ``(k c + 1) / E[tokens per iteration]``."""
    _check(c, a, k)
    return float((k * c + 1) / expected_tokens_iid(a, int(k)))


def si_best(c: float, a: float, k_max: int = 64) -> tuple[int, float]:
    """The SI lookahead in ``1..k_max`` with the least time per token, and that time."""
    k_max = _check_k_max(k_max)
    costs = [si_cost(c, a, k) for k in range(1, int(k_max) + 1)]
    i = int(np.argmin(costs))
    return i + 1, float(costs[i])


def task_starts(j, c: float, k: int, servers: int) -> np.ndarray:
    """``s_j`` for task indices ``j`` (closed form of ``s_j = max(j k c, s_{j-S} + 1)``)."""
    _check(c, 0.0, k, servers)  # servers 0 divided by zero, -1 gave [0, -1, -2]
    j = np.asarray(j)
    if j.size and (j.dtype.kind not in "iu" or j.min() < 0):  # [] is no task: an empty result
        raise InputError("task indices j must be integers >= 0")
    kc = k * c
    if servers * kc >= 1:
        return j * kc
    return (j % servers) * kc + (j // servers)


def dsi_cost(c: float, a: float, k: int, servers: int) -> float:
    """Exact expected DSI time per token ``E[tau] / E[m]`` (see the module docstring), in
    closed form for any ``a`` in [0, 1).

    ``P(j(m) = 0) = 1 - a`` and ``P(j(m) = j) = a x^(j-1) (1 - x)`` for ``j >= 1``, with
    ``x = a^k``. Summing the schedule's closed form against these geometric weights (``y =
    x^S``): ``E[s] = a k c / (1 - x)`` when ``S k c >= 1``, else
    ``E[s] = a (1 - x) k c / (1 - y) sum_{r=1}^{S-1} r x^(r-1) + a x^(S-1) / (1 - y)``; then
    ``E[tau] = 1 + E[s]`` and ``E[m] = 1 / (1 - a)``. (A sum truncated where the tail falls
    below 1e-16 needed ``37 / (1 - a)`` terms: 274 GiB at ``a = 1 - 1e-9``.)
    """
    _check(c, a, k, servers)
    k, servers = int(k), int(servers)
    if a == 0:
        return float(task_starts(0, c, k, servers) + 1)
    log_x = k * math.log(a)
    x, one_minus_x = math.exp(log_x), -math.expm1(log_x)  # 1 - a^k without cancellation
    kc = k * c
    if servers * kc >= 1:
        mean_s = a * kc / one_minus_x
    else:
        one_minus_y = -math.expm1(servers * log_x)
        powers = _weighted_powers(x, servers - 1)
        mean_s = (a * one_minus_x * kc * powers + a * x ** (servers - 1)) / one_minus_y
    return float((1.0 + mean_s) * (1 - a))


def _weighted_powers(x: float, n: int, chunk: int = 1 << 16) -> float:
    """``sum_{r=1}^{n} r x^(r-1)``, a chunk of terms at a time, stopping once the terms (which
    fall geometrically past their peak at ``r = -1 / log x``) are below float64 round-off of
    the sum: bounded memory for any ``n`` (a million servers, say)."""
    total, start = 0.0, 1
    while start <= n:
        r = np.arange(start, min(n, start + chunk - 1) + 1, dtype=np.float64)
        terms = r * x ** (r - 1)
        total += float(terms.sum())
        if terms[-1] <= 1e-17 * total and (x == 0 or r[-1] > -1 / math.log(x)):
            break
        start += chunk
    return total


def dsi_best(c: float, a: float, servers: int, k_max: int = 64) -> tuple[int, float]:
    """The DSI lookahead ``k`` (``1 <= k <= min(k_max, 1/c)``) with the least time per token."""
    _check(c, a, 1, servers)
    hi = max(1, min(_check_k_max(k_max), int(math.floor(1 / c + 1e-12))))
    costs = [dsi_cost(c, a, k, servers) for k in range(1, hi + 1)]
    i = int(np.argmin(costs))
    return i + 1, float(costs[i])


def servers_needed(c: float, k: int) -> int:
    """Target servers at which the schedule stops waiting for a free server: ``ceil(1 / (k c))``."""
    _check(c, 0.0, k)
    need = 1 / (k * c)
    if need > MAX_SERVERS:  # c = 5e-324 overflowed int(ceil(inf))
        raise InputError(f"1 / (k c) = {need:.4g} servers: more than {MAX_SERVERS:,}")
    return int(math.ceil(need - 1e-12))


#: Most servers :func:`servers_needed` reports (the int64 range).
MAX_SERVERS = 2 ** 63 - 1


def dsi_monte_carlo(c: float, a: float, k: int, servers: int, n_cycles: int, rng):
    """Event-by-event replay of ``n_cycles`` DSI cycles; returns ``(times, tokens)`` per cycle.

    Each cycle: draw the acceptances of drafts 1, 2, ... until the first rejection (position
    ``m``); launch tasks in order when their drafts are ready and a server is free (a heap of
    server free times); the cycle ends when the first task covering position ``m`` finishes.
    """
    _check(c, a, k, servers)
    n_cycles = as_count(n_cycles, "n_cycles")  # 2.5 ran 2 cycles; -1 was numpy's ValueError
    check_numpy_rng(rng, "dsi_monte_carlo needs")
    times = np.empty(n_cycles)
    tokens = np.empty(n_cycles, dtype=np.int64)
    for i in range(n_cycles):
        m = 1
        while rng.random() < a:
            m += 1
        free = [0.0] * int(servers)  # server free times (min-heap)
        heapq.heapify(free)
        j = 0
        while True:
            start = max(j * k * c, heapq.heappop(free))
            heapq.heappush(free, start + 1.0)
            if j * k + 1 >= m:  # task j settles positions up to j k + 1
                times[i] = start + 1.0
                break
            j += 1
        tokens[i] = m
    return times, tokens


def sweep(c_values, a_values, servers: int, k_max: int = 64, progress=None) -> dict:
    """Heat-map sweep: best-k DSI, best-k SI and non-SI time per token on the (c, a) grid.

    Returns arrays of shape (len(c_values), len(a_values)): ``dsi``, ``si``, ``dsi_k``, ``si_k``,
    plus ``speedup_vs_si = si / dsi`` and ``speedup_vs_nonsi = 1 / dsi`` and ``si_vs_nonsi``.
    """
    cs, as_ = as_real_array(c_values, "c_values"), as_real_array(a_values, "a_values")
    if cs.ndim != 1 or as_.ndim != 1:  # [[0.5]] was a raw TypeError, ['x'] numpy's ValueError
        raise InputError(f"c_values and a_values must be 1-D, got shapes {cs.shape}, "
                         f"{as_.shape}")
    out = {key: np.zeros((cs.size, as_.size)) for key in ("dsi", "si", "dsi_k", "si_k")}
    rows = range(cs.size) if progress is None else progress(range(cs.size))
    for i in rows:
        for j, a in enumerate(as_):
            out["dsi_k"][i, j], out["dsi"][i, j] = dsi_best(cs[i], a, servers, k_max)
            out["si_k"][i, j], out["si"][i, j] = si_best(cs[i], a, k_max)
    out["speedup_vs_si"] = out["si"] / out["dsi"]
    out["speedup_vs_nonsi"] = 1.0 / out["dsi"]
    out["si_vs_nonsi"] = 1.0 / out["si"]
    out["c"], out["a"], out["servers"] = cs, as_, int(servers)
    return out
