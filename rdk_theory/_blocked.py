"""Blocked BLAS engine for first-order RDK with a large factor (optional: needs numba, extra
``fast``).

The fused engine (:mod:`rdk_theory._fused`) wins for a truncated rank: its hand-written dot
products are fine for a few factor rows. For the full factor of S calibration rows (S = 64 and
more) the two products ``u = [C v ; sum v]`` and ``u [C / tau ; 1]`` are 4 batch S N flops, and
BLAS does them several times faster than hand-written loops. The numpy engine uses BLAS too but
then makes about six more passes over each (N,) row. Here:

* rows are taken in blocks of :data:`ROWS`; for each block, ``u = q' left^T`` is one BLAS
  product ((rows, N) by (N, S + 1));
* the vocabulary is walked in chunks of about :data:`CHUNK_BYTES` of product output; for each
  chunk ``u right[:, chunk]`` is one BLAS product into a buffer that stays in cache, and one
  compiled loop (:func:`_epilogue_py`) adds ``q' * coef``, writes ``q''`` once and sums
  ``min(p, q'')`` (the acceptance) and the negative parts (for the clip).

With ``normalise=True`` (TLI's division folded in, as in :mod:`rdk_theory._fused`) the input
is the unnormalised ``r``: a ones row of ``left`` makes the first product give ``sum r`` too,
and the epilogue multiplies by ``1 / sum r`` (float32 products: rows with a sum outside
:data:`F32_SUMS` are divided first instead).

So ``q''`` is written once and never read back, and the products run on BLAS's threads while
the epilogue runs on the calling thread (no numba thread pool: the two pools' spinning
workers cannot collide, see :mod:`rdk_theory._fused`).

Precision: the products run in the dtype of ``left`` and ``right``. In float64 (what
:class:`rdk_theory.first_order.FirstOrderCovarianceKernel` passes unless float32 products are
asked for) the result agrees with the numpy engine to float64 round-off. In float32
(``factor_dtype="float32"`` with ``engine="blas"``, an explicit choice) ``q'`` and both
matrices are rounded to float32 and the products accumulate in float32; everything else is
float64. Then the vector is within
:func:`float32_error_bound` of the float64 computation of the same kernel, not within float64
round-off, and it sums to ``sum q'`` only up to that error. With ``normalise=True`` the
products run on the rounded ``r`` and are scaled by ``1 / sum r`` (its float64 sum) in float64
afterwards, so the bound is ``float32_error_bound(r, ...) / sum r`` for a sum in
:data:`F32_SUMS` (other rows are divided first: the bound of ``q'``). The error bound is the
classical one for a dot product computed in any order (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., 2002, Lemma 3.1 and section 3.1), applied to both products and to the
roundings of the operands, with an absolute term for underflow.
"""
from __future__ import annotations

import numpy as np

from . import _fused

#: Rows per block: one product ``u = q' left^T`` per block, and the chunk buffer holds
#: ``ROWS`` rows.
ROWS = 64
#: Bytes of product output per chunk of the vocabulary: the chunk's ``u right[:, chunk]`` is
#: written into a buffer of about this size and read back by the epilogue while it is still in
#: cache (batch 64, S = 64, N = 32K..262K: 4 MiB was at least as fast as 1 or 16 MiB).
CHUNK_BYTES = 4 << 20
#: Fewest vocabulary elements per chunk (large batches would otherwise get tiny chunks).
MIN_CHUNK = 1024
#: Row sums of normalising input that the float32 products take as they are: ``r`` is rounded
#: to float32 before it is scaled, so a sum far from 1 would put its entries below float32's
#: normal range (lost to underflow) or above its largest value (inf). Rows with a sum outside
#: this range are divided first and redone (:func:`rdk_theory._fused.redo_dividing_first`).
F32_SUMS = (2.0 ** -60, 2.0 ** 60)
_compiled: dict = {}
_F32 = np.dtype(np.float32)


def _epilogue_py(buf, q, p, prow, with_alpha, coef, scale, out, r0, j0, alpha, low):
    """``out[r0 + i, j0 + k] = (buf[i, k] + q[r0 + i, j0 + k] coef[j0 + k]) g`` for the chunk,
    ``g = scale[r0 + i]`` (the row's ``1 / sum r`` for normalising input, else 1), with the
    chunk's ``sum min(p, q'')`` (row ``prow[r0 + i]`` of ``p``) added to ``alpha`` and its
    negative parts to ``low``."""
    rows, m = buf.shape
    c = coef[j0:j0 + m]
    for i in range(rows):
        g = scale[r0 + i]
        b = buf[i]
        qi = q[r0 + i, j0:j0 + m]
        oi = out[r0 + i, j0:j0 + m]
        neg = 0.0
        if with_alpha:
            pi = p[prow[r0 + i], j0:j0 + m]
            s = 0.0
            for k in range(m):
                x = (b[k] + qi[k] * c[k]) * g
                oi[k] = x
                y = pi[k]
                s += y if y <= x else x  # min(p, q''); a NaN in q'' stays NaN
                neg += x if x < 0.0 else 0.0
            alpha[r0 + i] += s
        else:
            for k in range(m):
                x = (b[k] + qi[k] * c[k]) * g
                oi[k] = x
                neg += x if x < 0.0 else 0.0
        low[r0 + i] += neg


def _epilogue():
    """The compiled epilogue and the fused engine's row clip (:func:`_fused._clip_row_py`, so
    both engines clip and renormalise with the same loop), jitted on first use (machine code
    cached on disk) with the fused engine's options: re-association for vectorised sums, NaN
    still propagates."""
    if "epilogue" not in _compiled:
        import numba

        jit = numba.njit(cache=True, nogil=True, boundscheck=False,
                         fastmath={"reassoc", "contract", "nsz", "arcp"})
        _compiled["clip_row"] = jit(_fused._clip_row_py)
        _compiled["to_f32"] = jit(_to_f32_py)
        _compiled["epilogue"] = jit(_epilogue_py)
    return _compiled["epilogue"]


def _to_f32_py(x, out, sums):
    """``out = float32(x)`` (rounded to nearest, as ``astype``) and ``sums`` = the rows' float64
    sums, in one read of ``x``: the float32 products take the rounded rows, the scale of
    normalising input the exact float64 sum (a float32 sum would be off by up to ``N 2^-24``)."""
    for i in range(x.shape[0]):
        t = 0.0
        for k in range(x.shape[1]):
            y = x[i, k]
            out[i, k] = y
            t += y
        sums[i] = t


def chunk_size(rows: int, n: int, itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Vocabulary elements per chunk: ``chunk_bytes`` of product output for ``rows`` rows, at
    least :data:`MIN_CHUNK`, at most ``n``."""
    return int(min(n, max(MIN_CHUNK, chunk_bytes // (max(rows, 1) * itemsize))))


def first_order(q_prime, target_probs, arrays, *, normalise: bool = False, rows: int = ROWS,
                chunk_bytes: int = CHUNK_BYTES, min_sum: float = _fused.TINY):
    """First-order proposal (and, when ``target_probs`` is given, its acceptance).

    ``q_prime`` (..., N) float64; ``target_probs`` broadcastable to it, or None.
    ``arrays = (left, right, coef)``: ``left`` (S + 2, N) and ``right`` (S + 1, N), both float64
    or both float32, with ``q'' = (q' left[:-1]^T) right + q' * coef`` before the clip and
    ``left[-1]`` all ones (see
    :meth:`rdk_theory.first_order.FirstOrderCovarianceKernel._blas_arrays`); ``coef`` (N,)
    float64. A row with a negative entry is clipped at 0 and renormalised to ``sum q'``, and
    its acceptance recomputed, as on the other engines. With ``normalise=True`` the input is
    any non-negative ``r`` and the result that of ``q' = r / sum r`` (zeros where the sum is
    0), as in :func:`rdk_theory._fused.first_order`: the float64 products take ``sum r`` from
    the ones row of ``left`` (float32 products: from the float64 sum taken while ``r`` is
    rounded), and the epilogue scales by ``1 / sum r``. ``rows`` and ``chunk_bytes`` set the
    block and chunk sizes (tests use them to reach every path). ``min_sum``: normalising rows
    with a smaller sum are divided first and redone (the kernel passes the fused engine's
    :func:`rdk_theory._fused.smallest_scaled_sum` of its tau: at tau = 1e-300 an ``r`` of
    1e-200 times ``C / Z`` underflowed to 0 before the scale). Returns ``(proposal, alpha)``,
    ``alpha`` None when ``target_probs`` is None. Needs numba.
    """
    epilogue = _compiled.get("epilogue")
    if epilogue is None:
        if not _fused.available():
            raise ImportError("the blocked first-order engine needs numba: "
                              "pip install 'rdk-theory[fast]'")
        epilogue = _epilogue()
    left, right, coef = arrays
    n = coef.shape[0]
    shape, q2, p2, prow, with_alpha = _fused.rows_of(q_prime, target_probs, n)
    n_rows = q2.shape[0]
    out = np.empty((n_rows, n))
    alpha = np.zeros(n_rows)
    low = np.zeros(n_rows)
    sums = np.empty(n_rows)
    scale = np.ones(n_rows)
    rb = max(1, min(int(rows), n_rows))
    ch = chunk_size(rb, n, left.dtype.itemsize, chunk_bytes)
    flat = np.empty(rb * ch, dtype=left.dtype)  # chunk buffer, reshaped per chunk: contiguous
    f32 = left.dtype == _F32
    q32 = np.empty((rb, n), dtype=_F32) if f32 else None
    lo, hi = F32_SUMS if f32 else (_fused.TINY, np.inf)
    lo = max(lo, min_sum)
    for r0 in range(0, n_rows, rb):
        qb = q2[r0:r0 + rb]
        nb = qb.shape[0]
        if f32:
            _compiled["to_f32"](qb, q32[:nb], sums[r0:r0 + nb])
            if normalise:  # rows redone below: zeros, not the infs of an overflowed rounding
                t = sums[r0:r0 + nb]
                q32[:nb][(t < lo) | (t > hi)] = 0
            u = q32[:nb] @ left[:-1].T  # (rows, S + 1)
        elif normalise:
            u = qb @ left.T  # (rows, S + 2): the last column is sum r
            sums[r0:r0 + nb] = u[:, -1]
            u = np.ascontiguousarray(u[:, :-1])
        else:
            u = qb @ left[:-1].T
        if normalise:
            t = sums[r0:r0 + nb]
            ok = (t >= lo) & (t <= hi)  # the rest: 0 (scale 0) or redone below
            scale[r0:r0 + nb] = np.divide(1.0, t, out=np.zeros(nb), where=ok)
        for j0 in range(0, n, ch):
            m = min(ch, n - j0)
            buf = flat[:nb * m].reshape(nb, m)
            np.matmul(u, right[:, j0:j0 + m], out=buf)
            epilogue(buf, q2, p2, prow, with_alpha, coef, scale, out, r0, j0, alpha, low)
    clip_row = _compiled["clip_row"]
    for i in np.flatnonzero(low < 0):  # rare: clip, renormalise, recompute the acceptance
        clip_row(q2, p2, prow, with_alpha, out, int(i), alpha, scale[i])
    if normalise:
        _fused.redo_dividing_first(q2, p2 if with_alpha else None, prow, sums, out, alpha,
                                   lambda qn, pn: first_order(qn, pn, arrays, rows=rows,
                                                              chunk_bytes=chunk_bytes,
                                                              min_sum=min_sum), lo, hi)
    return _fused.shaped(out, alpha, shape, with_alpha)


def float32_error_bound(q_prime, left, right):
    """Per entry, a bound on ``|q''_f32 - q''|`` before the clip, where ``q''_f32`` is computed
    by :func:`first_order` from the float32 roundings of ``q_prime``, ``left`` and ``right``
    (``left``, ``right`` given here in float64) and ``q''`` is the same formula in exact
    arithmetic.

    Model: the standard one of floating-point arithmetic extended by an absolute error for
    underflow (Higham, chapter 2): every float32 operation, the roundings of the operands
    included, returns ``x (1 + d) + h`` with ``|d| <= e = 2^-24`` and ``|h| <= eta = 2^-126``
    (the smallest normal number: this covers gradual underflow and flush to zero alike).
    Let ``g(k) = k e / (1 - k e)``, ``n = N``, ``m = S + 1``, ``a = |q'| |left|^T``.

    * First product, ``u^_k`` against ``u_k = sum_j q'_j left_kj``: the two operand roundings
      and the n-term sum give ``|u^_k - u_k| <= g(n + 2) a_k + U_k`` with
      ``U_k = (1 + g(n)) eta ((1 + e) sum_j (|left_kj| + |q'_j|) + n (2 + eta))``
      (an absolute error per operand rounding, times the other operand, and at most one per
      product and per addition, each grown by at most ``1 + g(n)`` by later roundings).
    * Second product, ``b^_j`` against ``b_j = sum_k u_k right_kj``, with
      ``R_kj = |right_kj| (1 + e) + eta`` bounding the rounded ``|right|``:
      ``|b^_j - b_j| <= sum_k (g(n + 2) a_k + U_k) R_kj + sum_k a_k (e |right_kj| + eta)
      + g(m) sum_k (a_k (1 + g(n + 2)) + U_k) R_kj + 2 m eta (1 + g(m))``,
      using ``|u_k| <= a_k``.

    The float64 epilogue adds only float64 round-off (the float32 to float64 conversion is
    exact), which the caller's float64 slack covers. Without underflow the ``eta`` terms are
    below 1e-30 and the bound is relative: about ``g(N + 2) (|right|^T a)_j``. Costs two
    products: for tests and audits.
    """
    e, eta = 2.0 ** -24, 2.0 ** -126
    q = np.abs(np.asarray(q_prime, dtype=np.float64))
    left, right = np.abs(left), np.abs(right)
    n, m = left.shape[1], left.shape[0]
    g = lambda k: k * e / (1 - k * e)  # noqa: E731
    gn, gm = g(n + 2), g(m)
    a = q @ left.T  # (..., m)
    big_u = (1 + g(n)) * eta * ((1 + e) * (left.sum(axis=1) + q.sum(axis=-1, keepdims=True))
                                + n * (2 + eta))
    r = right * (1 + e) + eta
    return ((gn * a + big_u) @ r + e * (a @ right) + eta * a.sum(axis=-1, keepdims=True)
            + gm * ((a * (1 + gn) + big_u) @ r) + 2 * m * eta * (1 + gm))
