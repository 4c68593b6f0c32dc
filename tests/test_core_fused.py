"""The fused first-order engine (numba) against the numpy reference engine.

The two engines compute the same formula in a different summation order, so they agree to
float64 round-off (``tests.tolerances``), including rows that need the clip, chunk and block
boundaries, and ranks that leave the last group of four factor rows short.
"""
from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import _fused
from tests.tolerances import assert_close

pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba not installed (extra 'fast')")


def _case(n, seed=0, s=12, batch=(5,), conc=0.3):
    rng = np.random.default_rng(seed)
    cal = rng.dirichlet(np.full(n, conc), size=s)
    q = rng.dirichlet(np.full(n, 0.5), size=batch)
    p = rng.dirichlet(np.full(n, 0.5), size=batch)
    return cal, q, p


def _pair(cal, tau, rank=None, factor_dtype="float64"):
    return tuple(rt.FirstOrderCovarianceKernel(cal, tau, rank=rank, engine=e, factor_dtype=factor_dtype)
                 for e in ("numpy", "fused"))


@pytest.mark.parametrize("factor_dtype", ["float64", "float32"])
@pytest.mark.parametrize("rank", [None, 1, 2, 3, 4, 5, 6, 8, 9])  # groups of 4 rows, short ones
@pytest.mark.parametrize("n", [7, 2048, 2049, 4500])
def test_engines_agree_on_proposal_and_acceptance(n, rank, factor_dtype):
    cal, q, p = _case(n, seed=n)
    ref, fused = _pair(cal, 0.02, rank if rank is None or rank <= min(12, n) else None, factor_dtype)
    r_ref = ref.transport(q)
    r_fu, alpha = fused.transport_with_acceptance(q, p)
    assert_close(r_fu, r_ref)
    assert_close(fused.transport(q), r_ref)
    assert_close(alpha, rt.acceptance_rate(p, r_ref))
    _, alpha_ref = ref.transport_with_acceptance(q, p)
    assert_close(alpha, alpha_ref)


@pytest.mark.parametrize("factor_dtype", ["float64", "float32"])
@pytest.mark.parametrize("chunk", [4, 7, 256])
@pytest.mark.parametrize("rows", [1, 2, 3, 64])
def test_clipped_rows_agree_for_every_block_and_chunk_size(rows, chunk, factor_dtype):
    cal, q, p = _case(25, seed=3, batch=(7,))
    ref, fused = _pair(cal, 3e-4, factor_dtype=factor_dtype)  # strongly non-linear: negatives
    neg = ref.transport_unclipped(q).min(axis=-1) < 0
    assert neg.any() and not neg.all(), neg  # clipped and unclipped rows in one batch
    r_fu, alpha = _fused.first_order(q, p, fused._fused_arrays, rows=rows, chunk=chunk)
    assert r_fu.min() >= 0
    assert_close(r_fu, ref.transport(q))
    assert_close(r_fu.sum(axis=-1), q.sum(axis=-1))
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)))
    assert_close(fused.transport(q), ref.transport(q))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,segments", [(1, 2), (1, 3), (2, 2), (3, 5), (7, 4)])
@pytest.mark.parametrize("factor_dtype", ["float64", "float32"])
def test_vocabulary_split_between_threads_agrees(rows, segments, threads, factor_dtype):
    """Batch 1 on several threads splits the vocabulary and reduces ``u`` between the passes:
    segment edges on and off chunk edges, an empty last segment (5 segments of 25 columns in
    chunks of 7), clipped and unclipped rows, partial last blocks."""
    cal, q, p = _case(25, seed=3, batch=(7,))
    ref, fused = _pair(cal, 3e-4, factor_dtype=factor_dtype)
    neg = ref.transport_unclipped(q).min(axis=-1) < 0
    assert neg.any() and not neg.all(), neg
    r_fu, alpha = _fused.first_order(q, p, fused._fused_arrays, rows=rows, chunk=7,
                                     segments=segments, threads=threads)
    assert_close(r_fu, ref.transport(q))
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)))
    wide_cal, wide_q, wide_p = _case(3 * _fused.MIN_SEGMENT + 5, seed=4, batch=(1,))
    ref, fused = _pair(wide_cal, 0.02, rank=5, factor_dtype=factor_dtype)
    r_fu, alpha = _fused.first_order(wide_q, wide_p, fused._fused_arrays, threads=threads)
    assert_close(r_fu, ref.transport(wide_q))
    assert_close(alpha, rt.acceptance_rate(wide_p, r_fu))


def test_plan_splits_the_vocabulary_only_when_threads_would_idle():
    big = 64 * 8 * 262_144  # S = 64 at 262K: the whole batch in one block
    assert _fused.plan(1, 262_144, 8 * 8 * 262_144, 2) == (1, 2)  # batch 1: split
    assert _fused.plan(1, 262_144, 8 * 8 * 262_144, 1) == (1, 1)  # one thread: never
    assert _fused.plan(64, 262_144, 8 * 8 * 262_144, 2) == (8, 1)  # blocks enough
    assert _fused.plan(64, 262_144, big, 4) == (64, 4)
    assert _fused.plan(3, 262_144, 8, 8) == (1, 3)  # 3 blocks, 8 threads: 3 segments each
    assert _fused.plan(1, 2 * _fused.MIN_SEGMENT - 1, 8, 2) == (1, 1)  # too short to split
    assert _fused.plan(1, 2 * _fused.MIN_SEGMENT, 8, 4) == (1, 2)
    assert _fused.plan(5, 100, 8, 2, rows=2) == (2, 1)
    # short rows share a block (1 MiB of q'), but every thread still gets a block of its own
    assert _fused.plan(64, 32_768, 8 * 8 * 32_768, 1) == (4, 1)
    assert _fused.plan(8, 16_384, 4 * 8 * 16_384, 2) == (4, 1)
    assert _fused.plan(16, 8192, 8 * 8192, 4) == (4, 1)
    assert _fused.plan(64, 4096, 4 * 8 * 4096, 8) == (8, 1)


def test_threads_option_and_concurrent_callers():
    """``threads`` is validated and changes nothing beyond round-off; numba's thread count is
    restored after a call; Python threads calling one kernel at once get the right answers."""
    import threading

    import numba

    cal, q, p = _case(40_000, seed=9, batch=(2,))
    ref = rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4, engine="numpy")
    want = ref.transport(q)
    for threads in (None, 1, 2, 64):
        fused = rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4, engine="fused", threads=threads)
        before = numba.get_num_threads()
        assert_close(fused.transport(q[:1]), want[:1])
        assert numba.get_num_threads() == before
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(rt.InputError, match="threads"):
            rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4, threads=bad)
    fused = rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4, engine="fused", threads=2)
    got, errors = {}, []

    def work(i):
        try:
            for _ in range(5):
                got[i] = fused.transport_with_acceptance(q[i % 2], p[i % 2])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    for i, (r, a) in got.items():
        assert_close(r, want[i % 2])
        assert_close(a, rt.acceptance_rate(p[i % 2], want[i % 2]))


def test_one_thread_takes_the_serial_build_and_never_the_thread_pool(monkeypatch):
    """threads=1 (the default) runs the serial build: it agrees with the parallel build on the
    vocabulary split, and never reads or sets numba's thread count nor takes the launch lock."""
    cal, q, p = _case(3 * _fused.MIN_SEGMENT + 5, seed=12, batch=(1,))
    fused = rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4, engine="fused")
    want = _fused.first_order(q, p, fused._fused_arrays, threads=2, segments=3)
    _fused._kernel()

    def forbidden(*_):
        raise AssertionError("the one-thread path touched numba's thread pool")

    class Lock:
        __enter__ = __exit__ = forbidden

    monkeypatch.setitem(_fused._compiled, "threads", (forbidden, forbidden))
    monkeypatch.setattr(_fused, "_LAUNCH", Lock())
    for threads in (None, 1):
        got = _fused.first_order(q, p, fused._fused_arrays, threads=threads, segments=3)
        assert_close(got[0], want[0])
        assert_close(got[1], want[1])
    with pytest.raises(AssertionError, match="thread pool"):
        _fused.first_order(q, p, fused._fused_arrays, threads=2)


def test_a_caller_during_the_first_build_waits_for_all_of_it(monkeypatch):
    """The build writes three entries; a thread arriving while the serial build compiled saw
    the parallel one written, skipped the build and read the serial entry that was not there
    yet (KeyError 'first_order_serial', on about 1 process in 40 of eight first callers).
    Here the serial compile is held until the second caller is done or 2 s have passed."""
    import threading

    import numba

    monkeypatch.setattr(_fused, "_compiled", {"ok": True})  # as in a fresh process
    in_gap, checked, seen = threading.Event(), threading.Event(), []
    njit = numba.njit

    def held_njit(*args, **kwargs):
        decorate = njit(*args, **kwargs)

        def wrapped(fn):
            if fn.__name__ == "_first_order_serial_py":
                in_gap.set()
                checked.wait(2.0)
            return decorate(fn)
        return wrapped if not args else decorate

    monkeypatch.setattr(numba, "njit", held_njit)
    builder = threading.Thread(target=_fused._kernel)
    builder.start()
    assert in_gap.wait(60)

    def second():
        try:
            seen.append(_fused._kernel(parallel=False))
        except Exception as exc:  # noqa: BLE001 - asserted below
            seen.append(exc)
        checked.set()

    caller = threading.Thread(target=second)
    caller.start()
    builder.join()
    caller.join()
    assert seen == [_fused._compiled["first_order_serial"]], seen
    assert {"first_order", "first_order_serial", "threads"} <= set(_fused._compiled)


def test_serial_and_parallel_builds_never_share_a_disk_cache_entry():
    """numba names its disk-cache files by the function's qualified name and keys entries by
    bytecode, not by ``parallel``: the two builds must come from differently named functions,
    or a later process could load the parallel machine code for the serial build (or the
    reverse)."""
    par, ser = _fused._kernel(True), _fused._kernel(False)
    assert par is not ser
    assert par.py_func.__qualname__ != ser.py_func.__qualname__
    assert par.py_func.__code__ is ser.py_func.__code__  # the same driver, not a copy of it


def test_diagonal_coefficient_comes_from_the_inverse_normaliser():
    """Pass 2 forms ``coef = 1 - N / Z`` from the ``1/Z`` array pass 1 read: the identity holds
    to float64's eps in absolute terms at every temperature, round-off for the term
    ``q'_j coef_j`` (at tau = 1e-6 the diagonal reaches a = 124, where 1/Z ~ 1e-54)."""
    for tau in (1e-6, 1e-3, 1.0):
        cal, _, _ = _case(500, seed=13, s=8)
        k = rt.FirstOrderCovarianceKernel(cal, tau, engine="numpy")
        assert np.max(np.abs((1.0 - k.n * k.inv_z) - k._coef)) <= 4e-16


@pytest.mark.parametrize("tau", [1e-12, 1e-20, 1e-28])
def test_fused_engine_where_the_normaliser_nears_float64_eps(tau):
    """A token at a = 39.4 (e^-a ~ 7e-18) correlated with one of huge variance: deriving 1/Z as
    (1 - coef) / N cancelled to a negative number, and B (up to 6e10 here) amplified it, the
    fused engine's q'' off by 5e-7 at tau = 1e-20 and its acceptance by 5e-4 at 1e-28 (the
    correction of the wrong sign). Now it agrees with the numpy engine to round-off."""
    base = np.array([0.2, 0.2, 0.6])
    d = np.sqrt(4 * 39.375 * tau)
    cal = np.array([base + [d, 0.5, -0.5 - d], base])
    q, p = np.array([0.4, 0.3, 0.3]), np.array([0.1, 0.3, 0.6])
    want = rt.FirstOrderCovarianceKernel(cal, tau, engine="numpy").transport_with_acceptance(q, p)
    for engine in ("fused", "auto"):
        got = rt.FirstOrderCovarianceKernel(cal, tau, engine=engine).transport_with_acceptance(q, p)
        assert_close(got[0], want[0])
        assert_close(got[1], want[1])


def test_fused_engine_refuses_a_row_of_the_wrong_width():
    k = rt.FirstOrderCovarianceKernel(_case(500, seed=13, s=8)[0], 1e-3, engine="numpy")
    with pytest.raises(ValueError, match="entries per row"):
        _fused.first_order(np.full((1, 499), 1 / 499), None, k._fused_arrays)


def test_float32_factor_is_recentred_and_close_to_the_float64_kernel():
    cal, q, p = _case(3000, seed=7, s=16, batch=(4,))
    f64 = rt.FirstOrderCovarianceKernel(cal, 0.01, engine="numpy")
    f32 = rt.FirstOrderCovarianceKernel(cal, 0.01, factor_dtype="float32")
    stored, shift, *_ = f32._fused_arrays
    assert stored.dtype == np.float32 and stored.nbytes == f64.factor.nbytes // 2
    # C~ = round32(C) - shift: rows sum to 0 again, so q'' keeps the mass sum q' unclipped
    assert np.abs(f32.factor.sum(axis=1)).max() <= 1e-15 * np.abs(f32.factor).sum(axis=1).max()
    assert_close(f32.transport_unclipped(q).sum(axis=-1), q.sum(axis=-1))
    # C~ is C up to float32 rounding, so the proposals differ by far less than the first-order
    # error itself (which is O(max|B|^2)); 1e-6 in TV is a loose bound for 2^-24 relative
    assert np.abs(f32.factor - f64.factor).max() <= 2.0**-23 * np.abs(f64.factor).max()
    tv = rt.total_variation(f32.transport(q), f64.transport(q))
    assert np.all(tv <= 1e-6), tv
    with pytest.raises(rt.InputError, match="factor_dtype"):
        rt.FirstOrderCovarianceKernel(cal, 0.01, factor_dtype="float16")


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize("segments", [1, 3])
def test_the_loops_run_as_plain_python_too(segments, normalise):
    """The same loops, un-jitted, give the same numbers: the kernel's logic, not numba's
    (with ``normalise``, from the unnormalised ``r = q / 4``)."""
    cal, q, p = _case(25, seed=3, batch=(3,))
    ref = rt.FirstOrderCovarianceKernel(cal, 3e-4, rank=6, engine="numpy", factor_dtype="float32")
    out, alpha, sums, scale = np.empty_like(q), np.empty(3), np.empty(3), np.empty(3)
    stored, shift, inv_z, tau = ref._fused_arrays
    given = q / 4 if normalise else q
    # p's rows stored in reverse and found through the row map
    _fused._first_order_py(given, p[::-1].copy(), np.array([2, 1, 0]), True, stored, shift, inv_z, float(q.shape[1]), 1 / tau, out, alpha,
                           8, 2, segments, normalise, sums, scale, _fused.TINY)
    assert_close(out, ref.transport(q))
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)))
    assert_close(sums, given.sum(axis=-1))
    assert_close(scale, 4.0 if normalise else 1.0)


def test_shapes_zero_rows_and_sub_stochastic_input():
    cal, q, p = _case(50, seed=1, batch=(2, 3))
    ref, fused = _pair(cal, 0.05)
    # leading axes are kept; a 1-D row gives a scalar acceptance
    r, a = fused.transport_with_acceptance(q, p)
    assert r.shape == q.shape and a.shape == (2, 3)
    r1, a1 = fused.transport_with_acceptance(q[1, 2], p[1, 2])
    assert r1.shape == (50,) and np.ndim(a1) == 0
    assert_close(r1, ref.transport(q[1, 2]))
    # q(I) = 0 gives the zero proposal (no proposal) and alpha = 0, as on the numpy engine
    z = np.zeros((2, 50))
    rz, az = fused.transport_with_acceptance(z, p[0, :2])
    assert np.all(rz == 0) and np.all(az == 0)
    # a sub-stochastic q' (vanilla-like) keeps its mass sum q'
    half = q[0] * 0.5
    assert_close(fused.transport(half), ref.transport(half))
    assert_close(fused.transport(half).sum(axis=-1), 0.5)
    # the input is never written to
    before = q.copy()
    fused.transport(q)
    assert np.array_equal(q, before)


@pytest.mark.parametrize("engine", ["fused", "blas"])
def test_torch_and_fraction_inputs_take_their_own_backend(engine):
    cal, q, _ = _case(20, seed=2, batch=(2,))
    fused = rt.FirstOrderCovarianceKernel(cal, 0.05, engine=engine)
    exact = np.array([Fraction(x) for x in q[0]], dtype=object)
    # a Fraction array is read as float64 (the kernel's numbers are floats): it took an
    # object-array path that returned Python floats in an object array, passed off as exact
    got_exact = fused.transport(exact)
    assert got_exact.dtype == np.float64
    assert np.array_equal(got_exact, fused.transport(exact.astype(np.float64)))
    assert_close(got_exact, fused.transport(q[0]))
    torch = pytest.importorskip("torch")
    got = fused.transport(torch.from_numpy(q))
    assert isinstance(got, torch.Tensor)
    assert_close(got.numpy(), fused.transport(q))


def test_auto_falls_back_to_numpy_without_numba(monkeypatch):
    cal, q, _ = _case(40, seed=4, batch=(3,))
    ref = rt.FirstOrderCovarianceKernel(cal, 0.05, engine="numpy").transport(q)
    monkeypatch.setattr(_fused, "available", lambda: False)
    monkeypatch.setattr(_fused, "_compiled", {})  # without numba nothing was ever compiled
    auto = rt.FirstOrderCovarianceKernel(cal, 0.05)
    assert auto._route(q) is None
    assert np.array_equal(auto.transport(q), ref)  # literally the numpy engine
    big, _, _ = _case(40, seed=4, s=_fused.AUTO_MAX_ROWS + 8)
    assert rt.FirstOrderCovarianceKernel(big, 0.05)._route(q) is None  # not blas either
    for engine in ("fused", "blas"):
        with pytest.raises(rt.InputError, match=f"engine='{engine}' needs numba"):
            rt.FirstOrderCovarianceKernel(cal, 0.05, engine=engine)
    with pytest.raises(ImportError, match="numba"):
        _fused.first_order(q, None, auto._fused_arrays)


def test_auto_takes_fused_for_a_truncated_rank_and_blas_for_a_large_factor():
    cal, q, _ = _case(40, seed=8, s=_fused.AUTO_MAX_ROWS + 8, batch=(2,))
    fo = rt.FirstOrderCovarianceKernel
    assert fo(cal, 0.05, rank=_fused.AUTO_MAX_ROWS)._route(q) == "fused"
    assert fo(cal, 0.05, rank=_fused.AUTO_MAX_ROWS + 1)._route(q) == "blas"
    assert fo(cal, 0.05, engine="fused")._route(q) == "fused"
    assert fo(cal, 0.05, rank=2, engine="blas")._route(q) == "blas"
    assert fo(cal, 0.05, engine="numpy")._route(q) is None
    # float32 arithmetic is never chosen for the user: a large float32 factor on auto takes
    # the blas engine with float64 products, the numpy engine's arithmetic
    auto32 = fo(cal, 0.05, factor_dtype="float32")
    assert auto32._route(q) == "blas" and auto32._blas_arrays()[0].dtype == np.float64
    assert_close(auto32.transport(q), fo(cal, 0.05, factor_dtype="float32", engine="numpy").transport(q))
    forced = fo(cal, 0.05, factor_dtype="float32", engine="blas")
    assert forced._route(q) == "blas" and forced._blas_arrays()[0].dtype == np.float32


def test_engine_is_read_only_and_an_empty_factor_is_refused():
    cal, q, _ = _case(40, seed=5, batch=(2,))
    k = rt.FirstOrderCovarianceKernel(cal, 0.05, rank=4)
    k.transport(q)  # the fused-engine decision is taken here, once
    with pytest.raises(AttributeError):
        k.engine = "numpy"
    for shape in [(0, 40), (3, 0)]:
        with pytest.raises(rt.InputError, match="r, N >= 1"):
            rt.FirstOrderCovarianceKernel.from_factor(np.zeros(shape), 0.1)


@pytest.mark.parametrize("engine", ["fused", "blas"])
def test_bad_engine_and_bad_input_for_a_forced_compiled_engine(engine):
    cal, q, _ = _case(10, seed=6, batch=(2,))
    with pytest.raises(rt.InputError, match="engine"):
        rt.FirstOrderCovarianceKernel(cal, 0.05, engine="cuda")
    forced = rt.FirstOrderCovarianceKernel(cal, 0.05, engine=engine)
    with pytest.raises(rt.InputError, match=f"engine='{engine}' takes a numpy float64"):
        forced.transport(q.astype(np.longdouble))
    # float32, float16 and big-endian float64 are read as float64 (a big-endian array was
    # refused as "not a float64 array")
    want = forced.transport(q)
    for dtype in (">f8", np.float32, np.float16):
        narrow = q.astype(dtype)
        got = forced.transport(narrow)
        assert got.dtype == np.float64
        assert_close(got, forced.transport(narrow.astype(np.float64)))
    assert np.array_equal(forced.transport(q.astype(">f8")), want)


def test_host_transports_compute_narrow_floats_in_float64():
    """numpy float16 ``q'`` given to a kernel's transport was computed in float16: the
    marginal kernel's ``(1 - lam) q'`` lost the small entries (a result in float16, off the
    float64 one by float16's rounding). Every host transport now reads float16 and float32
    as float64, and gives the float64 input's numbers exactly."""
    rng = np.random.default_rng(1)
    n = 50_000
    q16 = rng.dirichlet(np.ones(n)).astype(np.float16)
    cal = rng.dirichlet(np.ones(n // 100), size=4)
    kernels = [rt.MarginalKernel(np.full(n, 1 / n), 0.999), rt.DenseKernel(np.eye(n // 100)),
               rt.sparse_topk_kernel(rt.covariance_affinity(cal), 3, 0.1, n=n // 100),
               rt.FirstOrderCovarianceKernel(cal, 0.1, engine="numpy")]
    for kernel in kernels:
        x = q16 if kernel.n == n else (q16[: n // 100] / q16[: n // 100].sum()).astype(np.float16)
        got = kernel.transport(x)
        assert got.dtype == np.float64, type(kernel).__name__
        assert np.array_equal(got, kernel.transport(x.astype(np.float64))), type(kernel).__name__


def test_block_rows_grows_with_the_factor_and_never_exceeds_the_batch():
    assert _fused.block_rows(64, 8 * 8 * 32_768) == 1  # rank 8 at 32K: 2 MiB, stays in cache
    assert _fused.block_rows(64, 8 * 8 * 32_768, 32_768) == 4  # but 4 rows of q' fill 1 MiB
    assert _fused.block_rows(64, 4 * 8 * 131_072, 131_072) == 2  # rank 4: 4 MiB; one row, 1 MiB
    assert _fused.block_rows(2, 8, 1024) == 2  # never more than the batch
    assert _fused.block_rows(64, 64 * 8 * 262_144) == 64  # S = 64 at 262K: 128 MiB
    assert _fused.block_rows(3, 64 * 8 * 262_144) == 3
    assert _fused.block_rows(1, 1) == 1


@pytest.mark.parametrize("engine", ["fused", "blas"])
def test_a_round_off_sized_negative_entry_is_still_clipped(engine):
    """An entry of -1e-10 in the first-order vector (built on purpose: for a token j outside the
    support of q', q''_j = sum v + c_j u / tau, and u and sum v do not depend on c_j) must
    trigger the clip and renormalisation on the compiled engines exactly as on the numpy one."""
    rng = np.random.default_rng(4)
    n, tau = 64, 1.0
    c = 1e-3 * rng.normal(size=(1, n))
    c -= c.mean()
    qp = np.zeros(n)
    qp[:32] = rng.dirichlet(np.ones(32))
    probe = rt.FirstOrderCovarianceKernel.from_factor(c, tau, engine="numpy")
    v = qp * probe.inv_z
    u, sv = float(c[0] @ v), float(v.sum())
    j, k = 40, 41
    keep = c[0, j] + c[0, k]
    c[0, j] = (-1e-10 - sv) * tau / u
    c[0, k] = keep - c[0, j]
    numpy_engine = rt.FirstOrderCovarianceKernel.from_factor(c, tau, engine="numpy")
    fused = rt.FirstOrderCovarianceKernel.from_factor(c, tau, engine=engine)
    raw = numpy_engine.transport_unclipped(qp)
    assert -1e-9 < raw[j] < 0 and np.sum(raw < 0) == 1  # the one entry under test
    want = numpy_engine.transport(qp)
    got, alpha = fused.transport_with_acceptance(qp, np.full(n, 1.0 / n))
    assert want.min() == 0.0 and got.min() == 0.0
    assert_close(got, want, err_msg=f"{engine} vs numpy after the clip")
    assert_close(alpha, np.minimum(want, 1.0 / n).sum(), err_msg="acceptance after the clip")


@pytest.mark.parametrize("normalise", [False, True])
@pytest.mark.parametrize("engine", ["numpy", "fused", "blas", "auto", "torch"])
def test_a_nan_in_q_prime_gives_a_nan_acceptance_on_every_engine(engine, normalise):
    """The compiled engines summed min(p, q'') with a select that took p where q'' was NaN:
    a NaN proposal reported an acceptance of exactly 1.0, where the numpy engine gave NaN.
    With ``normalise=True`` the numpy path divided by a NaN row sum as if it were 0 and
    returned a row of zeros (acceptance 0), and torch gave a row half NaN, half 0."""
    cal, q, p = _case(9, seed=4, s=4, batch=(3,))
    q[1, 0] = np.nan
    if engine == "torch":
        torch = pytest.importorskip("torch")
        kernel = rt.FirstOrderCovarianceKernel(cal, 0.1)
        q, p = torch.from_numpy(q), torch.from_numpy(p)
    else:
        kernel = rt.FirstOrderCovarianceKernel(cal, 0.1, engine=engine)
    out, alpha = kernel.transport_with_acceptance(q, p, normalise=normalise)
    out, alpha = np.asarray(out), np.asarray(alpha)
    assert np.isnan(alpha[1]) and np.isnan(out[1]).all()
    assert np.isfinite(alpha[[0, 2]]).all()


@pytest.mark.parametrize("engine", ["numpy", "fused", "blas"])
def test_lists_are_read_as_float64_and_complex_input_is_refused(engine):
    """A list with normalise=True, or a list of rows with a target, was a raw AttributeError
    ('list' object has no attribute 'sum' / 'shape'); complex q' ran as complex."""
    cal, q, p = _case(6, seed=5, s=3, batch=(2,))
    k = rt.FirstOrderCovarianceKernel(cal, 0.1, engine=engine)
    assert_close(k.transport(q[0].tolist(), normalise=True), k.transport(q[0], normalise=True))
    got = k.transport_with_acceptance(q.tolist(), p[0])
    want = k.transport_with_acceptance(q, p[0])
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])
    with pytest.raises(rt.InputError, match="q_prime must hold real numbers"):
        k.transport(q[0] + 0j)


def test_a_factor_beyond_float32_range_is_named_as_such():
    """A factor entry of 1e39 with factor_dtype='float32' overflowed the cast (RuntimeWarnings)
    and was then refused as 'Omega / tau overflows', at a tau where float64 holds it."""
    import warnings

    factor = np.array([[1e39, -1e39], [0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(rt.InputError, match="beyond float32's range"):
            rt.FirstOrderCovarianceKernel.from_factor(factor, 1e90, factor_dtype="float32")
        assert rt.FirstOrderCovarianceKernel.from_factor(factor, 1e90).factor_dtype == "float64"


@pytest.mark.parametrize("engine", ["fused", "blas"])
@pytest.mark.parametrize("p_shape", ["(N,)", "(4, 1, N)", "(1, 3, N)", "view (4, 3, N)", "(4, 3, N) reversed"])
def test_a_broadcast_target_is_read_through_its_own_rows_not_copied_out(engine, p_shape):
    """Both compiled engines copied a target broadcast over the batch out to q''s full size
    (batch x N float64: 134 MB at batch 64, N = 262K, for one shared row). They now read each
    row of q' against its own row of the compact target (``rows_of``'s row map), with the
    same proposal and acceptance as the materialised target, on rows that need the clip and
    on a row of normalising input so small that it is divided first and redone."""
    cal, q, _ = _case(25, seed=3, batch=(4, 3))
    rng = np.random.default_rng(7)
    p_full = {"(N,)": lambda: rng.dirichlet(np.ones(25)),
              "(4, 1, N)": lambda: rng.dirichlet(np.ones(25), size=(4, 1)),
              "(1, 3, N)": lambda: rng.dirichlet(np.ones(25), size=(1, 3)),
              "view (4, 3, N)": lambda: np.broadcast_to(rng.dirichlet(np.ones(25)), (4, 3, 25)),
              "(4, 3, N) reversed": lambda: rng.dirichlet(np.ones(25), size=(4, 3))[::-1]}[p_shape]()
    ref = rt.FirstOrderCovarianceKernel(cal, 3e-4, engine="numpy")
    kern = rt.FirstOrderCovarianceKernel(cal, 3e-4, engine=engine)
    assert (ref.transport_unclipped(q).min(axis=-1) < 0).any()  # the clip is reached
    r = q.copy()
    r[1, 2] *= 1e-300  # below the engines' smallest scaled sum: divided first, redone
    dense = np.ascontiguousarray(np.broadcast_to(p_full, q.shape))
    want, want_alpha = ref.transport(q), rt.acceptance_rate(dense, ref.transport(q))
    for normalise, given in ((False, q), (True, r)):
        got, alpha = kern.transport_with_acceptance(given, p_full, normalise=normalise)
        assert_close(got, want)
        assert_close(alpha, want_alpha)
    _, _, p2, prow, _ = _fused.rows_of(q, p_full, 25)
    distinct = {"(N,)": 1, "(4, 1, N)": 4, "(1, 3, N)": 3, "view (4, 3, N)": 1,
                "(4, 3, N) reversed": 12}[p_shape]
    assert p2.shape == (distinct, 25) and prow.shape == (12,)
    assert np.array_equal(p2[prow], dense.reshape(12, 25))


@pytest.mark.parametrize("engine", ["fused", "blas"])
def test_every_target_form_runs_on_one_compiled_signature(engine):
    """The row map of a whole, a broadcast or an absent target has one numba type: a read-only
    row map (or any other variant) would compile the engine again, some 40 s each."""
    from rdk_theory import _blocked

    cal, q, p = _case(25, seed=5, batch=(4, 3))
    kern = rt.FirstOrderCovarianceKernel(cal, 0.05, engine=engine)
    kern.transport_with_acceptance(q, p)
    compiled = (_fused._compiled["first_order_serial"] if engine == "fused"
                else _blocked._compiled["epilogue"])
    before = len(compiled.signatures)
    wide = np.concatenate([p, p], axis=-1)
    for target in (p[0], np.broadcast_to(p[:, :1], q.shape), np.broadcast_to(p[0, 0], q.shape),
                   wide[..., :25], p[::-1], np.asfortranarray(p.reshape(12, 25)).reshape(4, 3, 25)):
        # a row, stride-0 views (the second one read-only row by row), a column slice, a
        # reversed and a Fortran-ordered target: none may add a compiled signature
        kern.transport_with_acceptance(q, target)
    kern.transport(q)
    assert len(compiled.signatures) == before
