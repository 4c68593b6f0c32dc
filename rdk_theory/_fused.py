"""Fused CPU kernel for the first-order RDK proposal (optional: needs numba, extra ``fast``).

The numpy path of :class:`rdk_theory.first_order.FirstOrderCovarianceKernel` makes about eight
passes over each (N,) row: two thin matrix products, a product with the diagonal coefficient,
an in-place add, the negativity check and, for the acceptance, ``minimum`` and ``sum``. Here one
compiled loop does it in two passes over the row, walking the target vocabulary in chunks that
stay in L1:

* pass 1: ``v = q' / Z`` for the chunk, ``sum v``, and ``u = C v`` (r dot products);
* pass 2: ``q'' = sum v + q' * coef + C^T u / tau`` for the chunk, written once, with the sum
  of its negative parts (for the clip) and, when ``p`` is given, ``sum min(p, q'')`` (the
  acceptance).

A row with a negative entry is then clipped and renormalised to ``sum q'`` exactly as the numpy
path does, and its acceptance recomputed. Rows are taken in blocks that share one read of the
factor ``C``; the block size grows with the factor so that a large factor (many calibration
rows) is read once per block rather than once per row.

Arithmetic is float64 throughout (a float32 factor is promoted as it is read); the summation
order differs from BLAS, so the two engines agree to round-off, not bit for bit
(``tests/test_core_fused.py``). No timed test: speed is measured side by side in
``benchmarks/bench_proposals.py``.
"""
from __future__ import annotations

import importlib

import numpy as np

#: Elements of the target vocabulary per chunk: the chunk of ``v`` (16 KiB) stays in L1 and
#: the four factor rows swept with it (64 KiB) in L2; a larger chunk also makes the per-chunk
#: bookkeeping (array views) negligible next to the arithmetic.
CHUNK = 2048
#: Factor bytes per row of a block; the block grows with ``C`` so ``C`` is read once per block.
_FACTOR_BYTES_PER_ROW = 2 << 20
#: ``engine="auto"`` takes the fused engine up to this many factor rows. Beyond, the numpy
#: engine's BLAS products (multi-threaded) win: benchmarks/results_cpu.json, S = 64 against
#: rank 8 at batch 1 and 64.
AUTO_MAX_ROWS = 16
_compiled: dict = {}


def block_rows(n_rows: int, factor_bytes: int) -> int:
    """Rows per block: 1 while the factor fits in about 2 MiB (it stays in cache), more beyond."""
    return int(min(max(n_rows, 1), max(1, round(factor_bytes / _FACTOR_BYTES_PER_ROW))))


def available() -> bool:
    """Whether numba imports here (tried once, on first use: ``import rdk_theory`` stays light)."""
    if "ok" not in _compiled:
        try:
            importlib.import_module("numba")
            _compiled["ok"] = True
        except Exception:  # noqa: BLE001 - a broken numba install means: use the numpy engine
            _compiled["ok"] = False
    return _compiled["ok"]


def _kernel():
    """The compiled entry point, jitted on first use (numba caches the machine code on disk)."""
    if "first_order" not in _compiled:
        import numba

        # Re-association lets LLVM vectorise the reductions; no 'nnan'/'ninf', so a NaN would
        # still propagate (inputs are validated before they get here anyway).
        jit = numba.njit(cache=True, nogil=True, boundscheck=False,
                         fastmath={"reassoc", "contract", "nsz", "arcp"})
        # _first_order_py calls _dots and _axpys by their global names: bind the jitted ones.
        globals()["_dots"] = jit(_dots_py)
        globals()["_axpys"] = jit(_axpys_py)
        _compiled["first_order"] = jit(_first_order_py)
    return _compiled["first_order"]


def _dots_py(v, c, j0, m, u):
    """``u[k] += sum_j v[j] c[k, j0 + j]``, four factor rows per sweep over ``v``."""
    r = c.shape[0]
    k = 0
    while k + 4 <= r:
        c0 = c[k, j0:j0 + m]
        c1 = c[k + 1, j0:j0 + m]
        c2 = c[k + 2, j0:j0 + m]
        c3 = c[k + 3, j0:j0 + m]
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        for j in range(m):
            x = v[j]
            a0 += x * c0[j]
            a1 += x * c1[j]
            a2 += x * c2[j]
            a3 += x * c3[j]
        u[k] += a0
        u[k + 1] += a1
        u[k + 2] += a2
        u[k + 3] += a3
        k += 4
    while k < r:
        ck = c[k, j0:j0 + m]
        a0 = 0.0
        for j in range(m):
            a0 += v[j] * ck[j]
        u[k] += a0
        k += 1

def _axpys_py(v, c, j0, m, w):
    """``v[j] += sum_k w[k] c[k, j0 + j]``, four factor rows per sweep over ``v``."""
    r = c.shape[0]
    k = 0
    while k + 4 <= r:
        c0 = c[k, j0:j0 + m]
        c1 = c[k + 1, j0:j0 + m]
        c2 = c[k + 2, j0:j0 + m]
        c3 = c[k + 3, j0:j0 + m]
        w0 = w[k]
        w1 = w[k + 1]
        w2 = w[k + 2]
        w3 = w[k + 3]
        for j in range(m):
            v[j] += w0 * c0[j] + w1 * c1[j] + w2 * c2[j] + w3 * c3[j]
        k += 4
    while k < r:
        ck = c[k, j0:j0 + m]
        wk = w[k]
        for j in range(m):
            v[j] += wk * ck[j]
        k += 1

# Plain-Python bindings (the loops also run un-jitted, slowly); _kernel() rebinds the jitted ones.
_dots, _axpys = _dots_py, _axpys_py


def _first_order_py(q, p, with_alpha, c, shift, inv_z, coef, inv_tau, out, alpha, chunk, rb):
    n_rows, n = q.shape
    r = c.shape[0]
    u = np.empty((rb, r))
    sv = np.empty(rb)
    lo = np.empty(rb)
    v = np.empty(chunk)
    for b0 in range(0, n_rows, rb):
        nb_ = min(b0 + rb, n_rows) - b0
        u[:] = 0.0
        sv[:] = 0.0
        lo[:] = 0.0
        for j0 in range(0, n, chunk):  # pass 1: sum v and u = C v
            m = min(j0 + chunk, n) - j0
            iz = inv_z[j0:j0 + m]
            for i in range(nb_):
                qi = q[b0 + i, j0:j0 + m]
                s = 0.0
                for j in range(m):
                    y = qi[j] * iz[j]
                    v[j] = y
                    s += y
                sv[i] += s
                _dots(v, c, j0, m, u[i])
        for i in range(nb_):
            # the stored factor is C + shift 1^T: u = C v = stored v - shift sum v, and
            # C^T u / tau = stored^T u / tau - (shift . u / tau) 1 goes into sum v
            corr = 0.0
            for k in range(r):
                x = (u[i, k] - shift[k] * sv[i]) * inv_tau
                u[i, k] = x
                corr += x * shift[k]
            sv[i] -= corr
            alpha[b0 + i] = 0.0
        for j0 in range(0, n, chunk):  # pass 2: q'' written once, min and acceptance
            m = min(j0 + chunk, n) - j0
            cf = coef[j0:j0 + m]
            for i in range(nb_):
                qi = q[b0 + i, j0:j0 + m]
                s0 = sv[i]
                for j in range(m):
                    v[j] = s0 + qi[j] * cf[j]
                _axpys(v, c, j0, m, u[i])
                oi = out[b0 + i, j0:j0 + m]
                low = lo[i]  # sum of the negative parts: < 0 iff some entry is < 0
                if with_alpha:
                    pi = p[b0 + i, j0:j0 + m]
                    s = 0.0
                    for j in range(m):  # selects, not min(): min() did not vectorise as well
                        x = v[j]
                        oi[j] = x
                        y = pi[j]
                        s += x if x < y else y
                        low += x if x < 0.0 else 0.0
                    alpha[b0 + i] += s
                else:
                    for j in range(m):
                        x = v[j]
                        oi[j] = x
                        low += x if x < 0.0 else 0.0
                lo[i] = low
        for i in range(nb_):  # rare: clip at 0 and renormalise to sum q'
            if lo[i] < 0:
                oi = out[b0 + i]
                qi = q[b0 + i]
                tot = 0.0
                tq = 0.0
                for j in range(n):
                    x = max(oi[j], 0.0)
                    oi[j] = x
                    tot += x
                    tq += qi[j]
                scale = tq / tot if tot > 0 else 0.0
                s = 0.0
                for j in range(n):
                    x = oi[j] * scale
                    oi[j] = x
                    if with_alpha:
                        s += min(x, p[b0 + i, j])
                alpha[b0 + i] = s


def first_order(q_prime, target_probs, arrays, *, chunk=CHUNK, rows=None):
    """First-order proposal (and, when ``target_probs`` is given, its acceptance) in one pass.

    ``q_prime`` (..., N) float64. ``arrays = (stored, shift, inv_z, coef, tau)`` as set up by
    :class:`rdk_theory.first_order.FirstOrderCovarianceKernel`: the factor is
    ``C = stored - shift 1^T`` with ``stored`` (r, N) float64 or float32 and ``shift`` (r,)
    float64 (zeros when ``stored`` is ``C`` itself). Returns ``(proposal, alpha)``, ``alpha``
    None when ``target_probs`` is None. Needs numba (:func:`available`).
    """
    if not available():
        raise ImportError("the fused first-order kernel needs numba: pip install 'rdk-theory[fast]'")
    stored, shift, inv_z, coef, tau = arrays
    shape = q_prime.shape
    q2 = np.ascontiguousarray(q_prime, dtype=np.float64).reshape(-1, shape[-1])
    with_alpha = target_probs is not None
    if with_alpha:
        p = target_probs if target_probs.shape == shape else np.broadcast_to(target_probs, shape)
        p2 = np.ascontiguousarray(p, dtype=np.float64).reshape(q2.shape)
    else:
        p2 = q2[:0]
    out = np.empty_like(q2)
    alpha = np.empty(q2.shape[0])
    rb = rows or block_rows(q2.shape[0], stored.nbytes)
    _kernel()(q2, p2, with_alpha, stored, shift, inv_z, coef, 1.0 / tau, out, alpha,
              int(chunk), int(rb))
    return out.reshape(shape), (alpha.reshape(shape[:-1])[()] if with_alpha else None)
