"""Fused CPU kernel for the first-order RDK proposal (optional: needs numba, extra ``fast``).

The numpy path of :class:`rdk_theory.first_order.FirstOrderCovarianceKernel` makes about eight
passes over each (N,) row: two thin matrix products, a product with the diagonal coefficient,
an in-place add, the negativity check and, for the acceptance, ``minimum`` and ``sum``. Here one
compiled loop does it in two passes over the row, walking the target vocabulary in chunks that
stay in L1:

* pass 1: ``v = q' / Z`` for the chunk, ``sum v``, ``sum q'`` and ``u = C v`` (r dot
  products), reading ``1 / Z``; pass 2 forms the diagonal coefficient from the same array
  (:func:`_pass2_py`), so the two passes read one per-token array and the second finds it in
  cache;
* pass 2: ``q'' = sum v + q' * coef + C^T u / tau`` for the chunk, written once, with the sum
  of its negative parts (for the clip) and, when ``p`` is given, ``sum min(p, q'')`` (the
  acceptance).

Each pass is one loop per chunk and row for a rank of at most 4: the first four factor rows
are read in the same loop that reads ``q'`` (and, in pass 2, writes ``q''``);
each further group of four rows adds one sweep over a chunk-sized buffer in L1
(:func:`_group_py`). Writing the chunk's slices out before the loop is what lets LLVM
vectorise it (indexing the whole rows did not).

TLI's division can ride along (``normalise=True``): the input is then the drafter's
unnormalised mass ``r`` on the target's tokens, pass 1's ``sum r`` gives the scale
``1 / sum r``, and pass 2 applies it (the vector is linear in ``q'`` before the clip), so
``q' = r / sum r`` is never written and read back.

A row with a negative entry is then clipped and renormalised to ``sum q'`` exactly as the numpy
path does, and its acceptance recomputed. Rows are taken in blocks that share one read of the
factor ``C``; the block grows with the factor, so that a large factor (many calibration rows)
is read once per block rather than once per row, and with short rows, several of which share
one read of a factor that has outgrown L2 (:func:`block_rows`).

Threads (``threads=`` of :func:`first_order`; default 1): blocks run in parallel on numba's
threads (``prange``). When there are fewer blocks than threads (batch 1) the vocabulary of each
block is split into segments instead: every thread runs pass 1 on its segment, the partial
``u`` and ``sum v`` are added up, and every thread runs pass 2 on its segment. That is how
batch 1 uses more than one core: at batch 1 the factor is read from memory twice per call and
one core cannot draw the bandwidth of two.

One thread is the default because numba's OpenMP workers spin for a while after each call, and
so do the BLAS (OpenBLAS) workers after each matrix product: interleaving the two on the same
cores made both 30-55 times slower on the 2-core test machine (a BLAS product with the fused
engine at ``threads=2``, N = 32K: ``benchmarks/bench_thread_contention.py``). With one thread
the pool is never woken. To use several threads next to BLAS or torch work, give the pools
separate cores or set ``OMP_WAIT_POLICY=PASSIVE`` before the first call (workers then sleep at
once, and each call pays their wake-up).

Arithmetic is float64 throughout (a float32 factor is promoted as it is read); the summation
order differs from BLAS, so the two engines agree to round-off, not bit for bit
(``tests/test_core_fused.py``). No timed test: speed is measured side by side in
``benchmarks/bench_proposals.py``.
"""
from __future__ import annotations

import functools
import importlib
import threading
import types

import numpy as np

#: Elements of the target vocabulary per chunk: the chunk of ``v`` (16 KiB) stays in L1 and
#: the four factor rows swept with it (64 KiB) in L2; a larger chunk also makes the per-chunk
#: bookkeeping (array views) negligible next to the arithmetic.
CHUNK = 2048
#: Fewest vocabulary elements per segment when a block is split between threads: below
#: about this many, the second parallel launch costs more than the split saves (measured at
#: batch 1, ranks 1 and 8, N = 16K..131K: splitting loses at 16K for rank 1, wins from 32K).
MIN_SEGMENT = 16_384
#: Factor bytes per row of a block; the block grows with ``C`` so ``C`` is read once per block.
_FACTOR_BYTES_PER_ROW = 2 << 20
#: q' bytes per block: short rows share a block, so the factor, read from L3 once it outgrows
#: L2, is read once per block rather than once per row (batch 64, N = 32K, rank 8: 2.6x the
#: floor in blocks of 4 rows, 3.1x one row at a time; from N = 131K one row fills it and
#: nothing changes). With several threads the batch still makes one block per thread at least.
_ROW_BYTES_PER_BLOCK = 1 << 20
#: ``engine="auto"`` takes the fused engine up to this many factor rows. Beyond, BLAS products
#: (multi-threaded) win, and auto takes the blas engine (:mod:`rdk_theory._blocked`):
#: benchmarks/results_cpu.json, S = 64 against rank 8 at batch 1 and 64.
AUTO_MAX_ROWS = 16
#: Smallest row sum that normalising input (``normalise=True``) is scaled by in the kernel:
#: ``1 / sum`` is then at most 2^900, and an entry's absolute round-off at most 2^-174. A row
#: with a smaller positive sum (a drafter that puts almost no mass on the target's vocabulary)
#: is redone by dividing first (:func:`redo_dividing_first`).
TINY = 2.0 ** -900
#: Largest in-kernel scale times ``1 / tau``: a row is scaled in the kernel only when its
#: ``(1 / sum r) / tau`` stays below this (:func:`smallest_scaled_sum`). The engines' fast-math
#: may multiply ``1 / sum r`` by ``1 / tau`` before either meets ``C v``, so that product
#: itself must be finite (tau 1e-200 with sum r 1e-120 gave inf, then 0 * inf = NaN).
MAX_SCALE_OVER_TAU = 2.0 ** 1000
_compiled: dict = {}
_F64 = np.dtype(np.float64)
_LAUNCH = threading.Lock()
#: Held while :func:`_kernel` builds (a thread that saw the first key written but not the
#: others read a missing key: KeyError 'first_order_serial' on the first concurrent calls).
_BUILD = threading.Lock()


def block_rows(n_rows: int, factor_bytes: int, n: int = 0, threads: int = 1) -> int:
    """Rows per block: one per 2 MiB of factor, or as many rows of ``n`` float64 as fit in
    1 MiB (``n`` 0: not counted) but no more than leave one block per thread; at least 1, at
    most the batch. (A large factor may still put the batch in fewer blocks than threads:
    :func:`plan` then splits the vocabulary.)"""
    by_factor = round(factor_bytes / _FACTOR_BYTES_PER_ROW)
    by_rows = _ROW_BYTES_PER_BLOCK // (8 * n) if n > 0 else 0
    by_rows = min(by_rows, -(-max(n_rows, 1) // max(threads, 1)))
    return int(min(max(n_rows, 1), max(1, by_factor, by_rows)))


def available() -> bool:
    """Whether numba imports here (tried once, on first use: ``import rdk_theory`` stays light)."""
    if "ok" not in _compiled:
        try:
            importlib.import_module("numba")
            _compiled["ok"] = True
        except Exception:  # noqa: BLE001 - a broken numba install means: use the numpy engine
            _compiled["ok"] = False
    return _compiled["ok"]


def _kernel(parallel: bool = True):
    """The compiled entry point, jitted on first use (numba caches the machine code on disk).

    Two builds of the same driver. The serial one (``parallel=False``: ``prange`` is a plain
    range) serves one thread, the default: it never touches numba's thread pool, its thread
    count or the launch lock, which at batch 1 and N = 32K saved about as much time as the floor
    itself costs (``benchmarks/bench_proposals.py``). The parallel build serves every larger
    thread count: :func:`first_order` sets numba's (thread-local) thread count around the call.
    """
    if "first_order" not in _compiled:
        with _BUILD:  # the build writes several keys: a second thread waits for all of them
            if "first_order" not in _compiled:
                _build()
    return _compiled["first_order" if parallel else "first_order_serial"]


def _build():
    """Jit the driver's two builds and their helpers (:func:`_kernel`, under ``_BUILD``)."""
    import numba

    # Re-association lets LLVM vectorise the reductions; no 'nnan'/'ninf', so a NaN would
    # still propagate (inputs are validated before they get here anyway).
    opts = dict(cache=True, nogil=True, boundscheck=False,
                fastmath={"reassoc", "contract", "nsz", "arcp"})
    jit = numba.njit(**opts)
    # The driver calls the helpers and prange by their global names: bind the jitted ones.
    g = globals()
    for name in ("_group", "_weights", "_add4", "_dots", "_axpys", "_pass1", "_scale_rows",
                 "_centre", "_pass2", "_clip_row", "_work_item"):
        g[name] = jit(g[name + "_py"])
    g["prange"] = numba.prange
    parallel_build = numba.njit(parallel=True, **opts)(_first_order_py)
    # A renamed copy for the serial build: numba's on-disk cache is keyed by the function's
    # name and bytecode, not by ``parallel``, so one name would let either build load the
    # other's machine code from the cache.
    serial = types.FunctionType(_first_order_py.__code__, g, "_first_order_serial_py")
    serial.__qualname__ = serial.__name__
    _compiled["first_order_serial"] = numba.njit(**opts)(serial)
    _compiled["threads"] = (numba.get_num_threads, numba.set_num_threads)
    _compiled["first_order"] = parallel_build  # last: the key that says the build is done


def _group_py(c, k, j0, m):
    """The chunk ``[j0, j0 + m)`` of the factor rows ``k .. k + 3`` as four slices.

    Past the last row the last row is repeated: its repeats are L1 hits, their dot products
    are dropped and their weights are 0 (:func:`_weights_py`), so one loop body serves every
    rank, and the passes fold the first group into the loop that reads ``q'`` (and writes
    ``q''``): a rank of at most 4 makes one sweep over each chunk per pass."""
    g = c.shape[0] - 1
    return (c[k, j0:j0 + m], c[min(k + 1, g), j0:j0 + m], c[min(k + 2, g), j0:j0 + m],
            c[min(k + 3, g), j0:j0 + m])


def _weights_py(w, k):
    """``w[k .. k + 3]``, 0 past the last row (see :func:`_group_py`)."""
    r = w.shape[0]
    return (w[k], w[k + 1] if k + 1 < r else 0.0, w[k + 2] if k + 2 < r else 0.0,
            w[k + 3] if k + 3 < r else 0.0)


def _add4_py(u, k, a0, a1, a2, a3):
    """``u[k .. k + 3] += (a0, a1, a2, a3)``, dropping the repeats past the last row."""
    r = u.shape[0]
    u[k] += a0
    if k + 1 < r:
        u[k + 1] += a1
    if k + 2 < r:
        u[k + 2] += a2
    if k + 3 < r:
        u[k + 3] += a3


def _dots_py(v, c, k0, j0, m, u):
    """``u[k] += sum_j v[j] c[k, j0 + j]`` for the factor rows ``k >= k0``, four per sweep."""
    for k in range(k0, c.shape[0], 4):
        c0, c1, c2, c3 = _group(c, k, j0, m)
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
        _add4(u, k, a0, a1, a2, a3)


def _axpys_py(v, xs, ys, g, c, k0, j0, m, w):
    """``v[j] = xs[j] ys[j] g + sum_k w[k] c[k, j0 + j]`` over the factor rows ``k >= k0``,
    four per sweep (the first sweep writes ``v``, the others add to it)."""
    for k in range(k0, c.shape[0], 4):
        c0, c1, c2, c3 = _group(c, k, j0, m)
        w0, w1, w2, w3 = _weights(w, k)
        if k == k0:
            for j in range(m):
                v[j] = xs[j] * ys[j] * g + w0 * c0[j] + w1 * c1[j] + w2 * c2[j] + w3 * c3[j]
        else:
            for j in range(m):
                v[j] += w0 * c0[j] + w1 * c1[j] + w2 * c2[j] + w3 * c3[j]


def _pass1_py(q, inv_z, c, b0, nb_, j_lo, j_hi, chunk, u, sv, sq, v):
    """Columns ``[j_lo, j_hi)`` of rows ``b0 .. b0 + nb_``: ``sv += sum v``, ``u += C v`` and
    ``sq += sum q`` (the row sum that normalises the input, see :func:`first_order`).

    ``v = q' / Z`` from ``inv_z`` (``1 / Z``) itself. (It was once derived from the diagonal
    coefficient as ``(1 - coef_j) / N``: where ``e^-a_j`` nears float64's eps that subtraction
    cancels, and ``B`` amplified the error to 5e-7 at tau = 1e-20.) The first four factor rows
    are dotted in the loop that forms ``v`` (:func:`_group_py`); further rows sweep the stored
    chunk of ``v``."""
    r = c.shape[0]
    for j0 in range(j_lo, j_hi, chunk):
        m = min(j0 + chunk, j_hi) - j0
        w = inv_z[j0:j0 + m]
        c0, c1, c2, c3 = _group(c, 0, j0, m)
        for i in range(nb_):
            qi = q[b0 + i, j0:j0 + m]
            s = 0.0
            t = 0.0
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            a3 = 0.0
            for j in range(m):
                x = qi[j]
                y = x * w[j]
                v[j] = y
                s += y
                t += x
                a0 += y * c0[j]
                a1 += y * c1[j]
                a2 += y * c2[j]
                a3 += y * c3[j]
            sv[i] += s
            sq[i] += t
            _add4(u[i], 0, a0, a1, a2, a3)
            if r > 4:
                _dots(v, c, 4, j0, m, u[i])


def _scale_rows_py(sq, sums, scale, b0, nb_, normalise, min_sum):
    """Record the row sums and each row's scale: ``1 / sum q`` (normalising input; 0 for a
    row whose sum is 0 or below ``min_sum``, :func:`smallest_scaled_sum`, which the caller
    redoes), else 1."""
    for i in range(nb_):
        t = sq[i]
        sums[b0 + i] = t
        if normalise:
            scale[b0 + i] = 1.0 / t if t >= min_sum else 0.0
        else:
            scale[b0 + i] = 1.0


def _centre_py(u, sv, shift, inv_tau, scale, b0, nb_):
    """Turn the accumulated ``stored v`` into ``C v g / tau`` and fold the shift into
    ``g sum v``, ``g = scale[b0 + i]`` (the input's linear scale, :func:`_scale_rows_py`).

    The stored factor is ``C + shift 1^T``: ``C v = stored v - shift sum v``, and
    ``C^T u / tau = stored^T u / tau - (shift . u / tau) 1`` goes into ``sum v``.
    """
    for i in range(nb_):
        g = scale[b0 + i]
        h = inv_tau * g  # at most MAX_SCALE_OVER_TAU (smallest_scaled_sum)
        corr = 0.0
        for k in range(u.shape[1]):
            x = (u[i, k] - shift[k] * sv[i]) * h
            u[i, k] = x
            corr += x * shift[k]
        sv[i] = sv[i] * g - corr


def _pass2_py(q, p, prow, with_alpha, c, inv_z, n_f, scale, out, b0, nb_, j_lo, j_hi, chunk, u,
              sv, lo, al, v, one, cf):
    """Columns ``[j_lo, j_hi)``: ``q''`` written once; ``lo += sum of its negative parts``
    (< 0 iff an entry is < 0) and, with ``p``, ``al += sum min(p, q'')``; row ``i`` of ``q``
    reads row ``prow[i]`` of ``p`` (:func:`rows_of`: a broadcast ``p`` is not copied).

    The diagonal coefficient ``coef_j = 1 - N / Z_j`` (an identity of the first-order
    definition: the vector sums to ``sum q'``) is formed per chunk into ``cf`` from ``inv_z``
    (the array pass 1 read, now in cache) and ``n_f = N``; its absolute error is float64's eps,
    round-off relative to ``q'_j`` in the term ``q'_j coef_j``.

    One loop forms ``q''`` from ``q' coef g`` (``g`` the row's scale), ``sum v`` and the first
    four factor rows and writes it. With more than four rows, ``q' coef g`` plus the other
    rows' terms are first put in the chunk of ``v`` (:func:`_axpys_py`), and the loop reads
    ``v`` times ``one`` (ones) in place of ``q' coef``. Without ``p`` the loop reads ``q'`` in
    its place (L1 hits): ``al`` then gets ``sum min(q', q'')``, which the caller never reads."""
    r = c.shape[0]
    for j0 in range(j_lo, j_hi, chunk):
        m = min(j0 + chunk, j_hi) - j0
        w = inv_z[j0:j0 + m]
        for j in range(m):
            cf[j] = 1.0 - n_f * w[j]
        c0, c1, c2, c3 = _group(c, 0, j0, m)
        for i in range(nb_):
            qi = q[b0 + i, j0:j0 + m]
            pi = p[prow[b0 + i], j0:j0 + m] if with_alpha else qi
            w0, w1, w2, w3 = _weights(u[i], 0)
            g = scale[b0 + i]
            xs = qi
            ys = cf
            if r > 4:
                _axpys(v, qi, cf, g, c, 4, j0, m, u[i])
                xs = v[:m]
                ys = one[:m]
                g = 1.0
            s0 = sv[i]
            oi = out[b0 + i, j0:j0 + m]
            s = 0.0
            low = 0.0
            for j in range(m):  # selects, not min(): min() did not vectorise as well
                x = s0 + xs[j] * ys[j] * g + w0 * c0[j] + w1 * c1[j] + w2 * c2[j] + w3 * c3[j]
                oi[j] = x
                y = pi[j]
                s += y if y <= x else x  # min(p, q''); a NaN in q'' stays NaN
                low += x if x < 0.0 else 0.0
            al[i] += s
            lo[i] += low


def _clip_row_py(q, p, prow, with_alpha, out, row, alpha, g):
    """Rare: clip row ``row`` at 0, renormalise it to ``g sum q`` (``sum q'``: ``g`` is the
    row's scale, 1 when ``q`` is ``q'`` itself) and recompute its acceptance against row
    ``prow[row]`` of ``p``."""
    oi = out[row]
    qi = q[row]
    n = oi.shape[0]
    tot = 0.0
    tq = 0.0
    for j in range(n):
        x = max(oi[j], 0.0)
        oi[j] = x
        tot += x
        tq += qi[j]
    scale = tq * g / tot if tot > 0 else 0.0
    s = 0.0
    for j in range(n):
        x = oi[j] * scale
        oi[j] = x
        if with_alpha:
            s += min(x, p[prow[row], j])
    alpha[row] = s


def _work_item_py(it, nseg, rb, n_rows, n_chunks, chunk, n):
    """Work item ``it`` of the split path: ``(block, segment, first row, rows, j_lo, j_hi)``;
    segment ``s`` of ``nseg`` is a run of whole chunks (the last one may be empty)."""
    b = it // nseg
    s = it % nseg
    b0 = b * rb
    j_lo = min(n_chunks * s // nseg * chunk, n)
    j_hi = min(n_chunks * (s + 1) // nseg * chunk, n)
    return b, s, b0, min(b0 + rb, n_rows) - b0, j_lo, j_hi


def _first_order_py(q, p, prow, with_alpha, c, shift, inv_z, n_f, inv_tau, out, alpha, chunk, rb, nseg,
                    normalise, sums, scale, min_sum):
    """Rows in blocks of ``rb``; with ``nseg > 1`` each block's vocabulary is also split into
    ``nseg`` chunk-aligned segments. ``prange`` runs the work items on numba's threads in the
    parallel build and is a plain ``range`` in the serial one (and un-jitted). ``sums`` and
    ``scale`` (n_rows,) receive each row's sum and scale (:func:`_scale_rows_py`). Returns the
    number of rows that normalising input left for the caller to redo (sum in
    ``(0, min_sum)``, :func:`smallest_scaled_sum`)."""
    n_rows, n = q.shape
    r = c.shape[0]
    nblk = (n_rows + rb - 1) // rb
    one = np.ones(chunk)  # read-only, shared by every work item (pass 2, rank > 4)
    if nseg <= 1:  # whole rows per work item: pass 2 follows pass 1 while the block is warm
        for b in prange(nblk):
            b0 = b * rb
            nb_ = min(b0 + rb, n_rows) - b0
            u = np.zeros((rb, r))
            sv = np.zeros(rb)
            lo = np.zeros(rb)
            al = np.zeros(rb)
            sq = np.zeros(rb)
            v = np.empty(chunk)
            _pass1(q, inv_z, c, b0, nb_, 0, n, chunk, u, sv, sq, v)
            _scale_rows(sq, sums, scale, b0, nb_, normalise, min_sum)
            _centre(u, sv, shift, inv_tau, scale, b0, nb_)
            _pass2(q, p, prow, with_alpha, c, inv_z, n_f, scale, out, b0, nb_, 0, n, chunk, u, sv,
                   lo, al, v, one, np.empty(chunk))
            for i in range(nb_):
                alpha[b0 + i] = al[i]
                if lo[i] < 0:
                    _clip_row(q, p, prow, with_alpha, out, b0 + i, alpha, scale[b0 + i])
    else:  # fewer blocks than threads (batch 1): split the vocabulary, reduce u between passes
        n_chunks = (n + chunk - 1) // chunk
        u = np.zeros((nblk, nseg, rb, r))
        sv = np.zeros((nblk, nseg, rb))
        lo = np.zeros((nblk, nseg, rb))
        al = np.zeros((nblk, nseg, rb))
        sq = np.zeros((nblk, nseg, rb))
        for it in prange(nblk * nseg):
            b, s, b0, nb_, j_lo, j_hi = _work_item(it, nseg, rb, n_rows, n_chunks, chunk, n)
            _pass1(q, inv_z, c, b0, nb_, j_lo, j_hi, chunk, u[b, s], sv[b, s], sq[b, s],
                   np.empty(chunk))
        for b in range(nblk):
            for s in range(1, nseg):
                u[b, 0] += u[b, s]
                sv[b, 0] += sv[b, s]
                sq[b, 0] += sq[b, s]
            nb_ = min(b * rb + rb, n_rows) - b * rb
            _scale_rows(sq[b, 0], sums, scale, b * rb, nb_, normalise, min_sum)
            _centre(u[b, 0], sv[b, 0], shift, inv_tau, scale, b * rb, nb_)
        for it in prange(nblk * nseg):
            b, s, b0, nb_, j_lo, j_hi = _work_item(it, nseg, rb, n_rows, n_chunks, chunk, n)
            _pass2(q, p, prow, with_alpha, c, inv_z, n_f, scale, out, b0, nb_, j_lo, j_hi, chunk,
                   u[b, 0], sv[b, 0], lo[b, s], al[b, s], np.empty(chunk), one, np.empty(chunk))
        for row in range(n_rows):
            b = row // rb
            i = row - b * rb
            alpha[row] = al[b, :, i].sum()
            if lo[b, :, i].sum() < 0:
                _clip_row(q, p, prow, with_alpha, out, row, alpha, scale[row])
    small = 0
    if normalise:
        for row in range(n_rows):
            if 0.0 < sums[row] < min_sum:
                small += 1
    return small


# Plain-Python bindings (the loops also run un-jitted, slowly); _kernel() rebinds the jitted ones.
(_group, _weights, _add4, _dots, _axpys, _pass1, _scale_rows, _centre, _pass2, _clip_row,
 _work_item, prange) = (_group_py, _weights_py, _add4_py, _dots_py, _axpys_py, _pass1_py,
                        _scale_rows_py, _centre_py, _pass2_py, _clip_row_py, _work_item_py, range)


def plan(n_rows: int, n: int, factor_bytes: int, threads: int, *, chunk: int = CHUNK,
         rows: int | None = None):
    """``(rows per block, vocabulary segments per block)`` for ``threads`` threads.

    Blocks of ``rows`` (default :func:`block_rows`) rows; when there are fewer blocks than
    threads (batch 1, or a large factor that puts the whole batch in one block) each block's
    vocabulary is split into segments so that every thread has work, each of at least
    :data:`MIN_SEGMENT` elements.
    """
    rb = int(rows or block_rows(n_rows, factor_bytes, n, threads))
    n_blocks = -(-max(n_rows, 1) // rb)
    nseg = -(-threads // n_blocks) if threads > n_blocks else 1
    return rb, int(max(1, min(nseg, n // MIN_SEGMENT)))


def default_threads() -> int:
    """numba's thread count (``NUMBA_NUM_THREADS``, by default the number of cores)."""
    if "most" not in _compiled:
        import numba

        _compiled["most"] = int(numba.config.NUMBA_NUM_THREADS)
    return _compiled["most"]


def first_order(q_prime, target_probs, arrays, *, normalise=False, threads=None, chunk=CHUNK,
                rows=None, segments=None):
    """First-order proposal (and, when ``target_probs`` is given, its acceptance) in two passes.

    ``q_prime`` (..., N) float64. With ``normalise=True`` it is any non-negative ``r`` (TLI's
    unnormalised proposal, the drafter's mass on the target's tokens) and the result is that of
    ``q' = r / sum r`` (all zeros where ``sum r = 0``, TLI's convention): pass 1 sums ``r``
    beside ``C v``, and since the vector is linear in ``q'`` before the clip, ``C v``,
    ``sum v`` and ``q' coef`` are scaled by ``1 / sum r`` on the way; the division pass that
    would write ``q'`` and the pass that would read it back are saved.

    ``arrays = (stored, shift, inv_z, tau)`` (``inv_z``: ``1 / Z`` per token) as set up by
    :class:`rdk_theory.first_order.FirstOrderCovarianceKernel`: the factor is
    ``C = stored - shift 1^T`` with ``stored`` (r, N) float64 or float32 and ``shift`` (r,)
    float64 (zeros when ``stored`` is ``C`` itself). ``threads``: how many of numba's threads
    to use (default 1, the calling thread only; at most :func:`default_threads`). ``rows`` and
    ``segments`` override :func:`plan` (tests use them to reach every code path). Returns
    ``(proposal, alpha)``, ``alpha`` None when ``target_probs`` is None. Needs numba.
    """
    serial = _compiled.get("first_order_serial")  # one dict read per call once compiled
    if serial is None:
        if not available():
            raise ImportError("the fused first-order kernel needs numba: "
                              "pip install 'rdk-theory[fast]'")
        serial = _kernel(parallel=False)
    stored, shift, inv_z, tau = arrays
    n = inv_z.shape[0]
    shape, q2, p2, prow, with_alpha = rows_of(q_prime, target_probs, n)
    n_rows = q2.shape[0]
    out = np.empty((n_rows, n))
    alpha = np.empty(n_rows)
    sums = np.empty(n_rows)
    scale = np.empty(n_rows)
    threads = 1 if threads is None or threads == 1 else max(1, min(int(threads), default_threads()))
    rb, nseg = _plan_memo(n_rows, n, stored.nbytes, threads, chunk, rows)
    lo = smallest_scaled_sum(tau)
    args = (q2, p2, prow, with_alpha, stored, shift, inv_z, float(n), 1.0 / tau, out, alpha,
            chunk, rb, segments or nseg, bool(normalise), sums, scale, lo)
    if threads == 1:  # the serial build: no thread pool, no lock
        small = serial(*args)
    else:
        small = _run_parallel(args, threads)
    if small:
        redo_dividing_first(q2, p2 if with_alpha else None, prow, sums, out, alpha,
                            lambda qn, pn: first_order(qn, pn, arrays, threads=threads,
                                                       chunk=chunk), lo)
    return shaped(out, alpha, shape, with_alpha)


def smallest_scaled_sum(tau):
    """The smallest row sum of normalising input that the fused kernel scales in place:
    :data:`TINY`, or more when ``tau`` is so small that ``(1 / sum) / tau`` would pass
    :data:`MAX_SCALE_OVER_TAU`. Rows below it are redone by :func:`redo_dividing_first`."""
    return max(TINY, (1.0 / tau) / MAX_SCALE_OVER_TAU)


def redo_dividing_first(r, p, prow, sums, out, alpha, run, lo=TINY, hi=np.inf):
    """Rows of normalising input whose sum is positive but outside ``[lo, hi]`` (by default
    below :data:`TINY`; the engines gave them scale 0): divide them by their sum first, as
    :func:`rdk_theory.tli_proposal` does, and redo them with ``run(q', p or None) -> (q'',
    alpha)`` (row ``i`` of ``r`` goes with row ``prow[i]`` of ``p``, as in :func:`rows_of`).
    Such rows are rare, and finding none costs one pass over ``sums``; shared by both
    compiled engines."""
    small = np.flatnonzero((sums > 0) & ((sums < lo) | (sums > hi)))
    if small.size:
        rows = r[small]
        got, a = run(rows / rows.sum(axis=-1, keepdims=True), None if p is None else p[prow[small]])
        out[small] = got
        if p is not None:
            alpha[small] = a


@functools.lru_cache(maxsize=256)
def _plan_memo(n_rows, n, factor_bytes, threads, chunk, rows):
    """:func:`plan`, remembered: a decode loop asks for the same shapes on every call."""
    return plan(n_rows, n, factor_bytes, threads, chunk=chunk, rows=rows)


def _run_parallel(args, threads):
    """The parallel build on ``threads`` of numba's threads.

    numba's thread count is per calling thread; the lock keeps two Python threads out of the
    thread pool at once (the 'workqueue' threading layer, numba's fallback, aborts on that), so
    calls from several Python threads take turns."""
    kernel = _kernel()
    get_threads, set_threads = _compiled["threads"]
    with _LAUNCH:
        before = get_threads()
        if before != threads:
            set_threads(threads)
        try:
            return kernel(*args)
        finally:
            if before != threads:
                set_threads(before)


def rows_of(q_prime, target_probs, n):
    """The compiled engines' inputs: ``(shape, q2, p2, prow, with_alpha)`` with ``q2`` and ``p2``
    C-contiguous float64 (rows, N) and ``prow`` int64 (rows,): row ``i`` of ``q2`` goes with
    row ``prow[i]`` of ``p2``. A ``p`` broadcast over ``q'``'s leading axes keeps its own rows
    (one row for a ``p`` of shape (N,)), so ``p2`` is never copied out to ``q'``'s size.
    Without ``target_probs``, ``p2`` and ``prow`` are empty stand-ins. ``ValueError`` when
    ``q'`` is not over ``n`` tokens or ``p`` does not broadcast to it."""
    shape = q_prime.shape
    if shape[-1] != n:
        raise ValueError(f"q' has {shape[-1]} entries per row, the kernel {n}")
    q2 = _rows(q_prime)
    if target_probs is None:
        return shape, q2, q2[:0], _NO_ROWS, False
    if target_probs.shape == shape and target_probs.flags.c_contiguous:
        return shape, q2, _rows(target_probs), _identity_rows(q2.shape[0]), True
    if target_probs.shape[-1:] != (n,) or target_probs.ndim > len(shape):
        raise ValueError(f"p of shape {target_probs.shape} does not broadcast to q' {shape}")
    # a leading axis of stride 0 (a user's own broadcast view) is one row, not many copies
    p = target_probs[tuple(slice(0, 1) if st == 0 and d > 1 else slice(None)
                           for st, d in zip(target_probs.strides[:-1], target_probs.shape[:-1]))]
    p2 = _rows(p)
    if not p2.flags.writeable:  # a read-only view (of a user's broadcast): numba types it apart
        p2 = p2.copy()
    lead = p.shape[:-1]
    prow = np.arange(p2.shape[0], dtype=np.int64).reshape(lead) if lead else np.zeros((), np.int64)
    prow = np.array(np.broadcast_to(prow, shape[:-1])).reshape(-1)  # a copy: writeable, as above
    return shape, q2, p2, prow, True


_NO_ROWS = np.zeros(0, dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _identity_rows(n_rows):
    """``arange(n_rows)``, remembered (a decode loop asks for the same size). Left writeable:
    numba types a read-only array apart and would compile the engines once more for it."""
    return np.arange(n_rows, dtype=np.int64)


def shaped(out, alpha, shape, with_alpha):
    """The engines' result: ``(q'' in q's shape, alpha in its leading shape or None)``."""
    return out.reshape(shape), (alpha.reshape(shape[:-1])[()] if with_alpha else None)


def _rows(x):
    """``x`` as a C-contiguous float64 (rows, N) array (a view when it already is one)."""
    if not (x.dtype == _F64 and x.flags.c_contiguous):
        x = np.ascontiguousarray(x, dtype=np.float64)
    return x.reshape(-1, x.shape[-1])
