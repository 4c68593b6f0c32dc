"""The blocked BLAS engine (``engine="blas"``, numba epilogue) against the numpy reference engine.

With a float64 factor both engines do the same two BLAS products, the blas engine chunk by chunk
of the vocabulary, so they agree to float64 round-off (``tests.tolerances``), including rows that
need the clip, ragged last chunks and blocks. With a float32 factor and ``engine="blas"`` the
products are float32 arithmetic: the test asserts the proven error bound of
:func:`rdk_theory._blocked.float32_error_bound` entry by entry, and that the bound is tight enough
to mean something.
"""
import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import _blocked, _fused
from tests.test_core_fused import _case as fused_case
from tests.tolerances import FLOAT32_ATOL, FLOAT64_ATOL, FLOAT64_RTOL, assert_close, assert_leq

pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba not installed (extra 'fast')")


def _case(n, seed=0, s=24, batch=(5,), conc=0.3):
    """The fused engine tests' case, with more calibration rows (24 > ``AUTO_MAX_ROWS``)."""
    return fused_case(n, seed=seed, s=s, batch=batch, conc=conc)


def _clipping_case():
    """n = 2500, 7 rows, every other one supported on 20 tokens (a pruned drafter): at
    tau = 1e-7 the first-order vector is negative outside that support in those rows only."""
    cal, q, p = _case(2500, seed=3, batch=(7,), conc=0.05)
    q[::2, 20:] = 0
    q /= q.sum(axis=-1, keepdims=True)
    return cal, q, p, 1e-7


def _pair(cal, tau, factor_dtype="float64", rank=None):
    return tuple(rt.FirstOrderCovarianceKernel(cal, tau, rank=rank, engine=e,
                                               factor_dtype=factor_dtype) for e in ("numpy", "blas"))


@pytest.mark.parametrize("batch", [(), (1,), (5,), (2, 3)])
@pytest.mark.parametrize("n", [7, 2048, 2500])
def test_float64_factor_agrees_with_numpy_engine(n, batch):
    cal, q, p = _case(n, seed=n, batch=batch)
    ref, blas = _pair(cal, 0.02)
    r_ref = ref.transport(q)
    r_bl, alpha = blas.transport_with_acceptance(q, p)
    assert r_bl.shape == q.shape and np.shape(alpha) == batch
    assert_close(r_bl, r_ref)
    assert_close(blas.transport(q), r_ref)
    assert_close(alpha, rt.acceptance_rate(p, r_ref))
    # a target of shape (N,) is broadcast over the batch
    _, a1 = blas.transport_with_acceptance(q, p.reshape(-1, n)[0])
    assert_close(a1, rt.acceptance_rate(p.reshape(-1, n)[0], r_ref))


@pytest.mark.parametrize("chunk_bytes", [1, 8 * 1024 * 3, 1 << 22])
@pytest.mark.parametrize("rows", [1, 2, 3, 64])
def test_every_block_and_chunk_size_agrees_and_clipped_rows_too(rows, chunk_bytes):
    """n = 2500 walks one, two or three chunks (the last one ragged: at least 1024 elements per
    chunk), 7 rows make ragged blocks, and some rows need the clip while others do not."""
    cal, q, p, tau = _clipping_case()
    ref, blas = _pair(cal, tau)
    neg = ref.transport_unclipped(q).min(axis=-1) < 0
    assert neg.any() and not neg.all(), neg
    sizes = dict(rows=rows, chunk_bytes=chunk_bytes)
    r_bl, alpha = _blocked.first_order(q, p, blas._blas_arrays(), **sizes)
    want = ref.transport(q)
    assert r_bl.min() >= 0
    assert_close(r_bl, want)
    assert_close(r_bl.sum(axis=-1), q.sum(axis=-1))
    assert_close(alpha, rt.acceptance_rate(p, want))
    r_only, none = _blocked.first_order(q, None, blas._blas_arrays(), **sizes)
    assert none is None and np.array_equal(r_only, r_bl)


def test_chunk_size_is_the_byte_budget_within_bounds():
    assert _blocked.chunk_size(64, 262_144, 4) == (4 << 20) // 256  # 16K float32 columns
    assert _blocked.chunk_size(64, 262_144, 8) == (4 << 20) // 512
    assert _blocked.chunk_size(4096, 262_144, 8) == _blocked.MIN_CHUNK  # large batches
    assert _blocked.chunk_size(1, 100, 8) == 100  # never more than N


@pytest.mark.parametrize("n,s,tau", [(3000, 64, 0.02), (2049, 20, 0.005)])
def test_float32_products_stay_within_the_proven_error_bound(n, s, tau):
    cal, q, p = _case(n, seed=11, s=s, batch=(6,))
    ref, blas = _pair(cal, tau, factor_dtype="float32")
    exact = ref.transport_unclipped(q)  # float64 arithmetic on the same (float32-stored) kernel
    assert exact.min() > 0  # no clip: the bound is on the unclipped vector
    left, right = ref._arrays(q)[:2]
    bound = _blocked.float32_error_bound(q, left, right)
    got, alpha = blas.transport_with_acceptance(q, p)
    err = np.abs(got - exact)
    # slack: the float64 reference's own round-off, relative to each entry
    assert_leq(err, bound + FLOAT64_RTOL * exact, slack=0.0)
    assert err.max() > 1e-13  # float32 arithmetic really ran (float64 would be ~1e-18 here)
    # and the bound means something: a relative 1e-3 of every entry at most
    assert np.all(bound <= 1e-3 * exact), (bound / exact).max()
    # what a user sees: the proposal and its acceptance within float32 tolerance
    assert_close(got, ref.transport(q), rtol=0, atol=FLOAT32_ATOL)
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)), rtol=0, atol=FLOAT32_ATOL)
    assert np.abs(got.sum(axis=-1) - q.sum(axis=-1)).max() <= bound.sum(axis=-1).max()


@pytest.mark.parametrize("scale", [1e-20, 1e-38, 1e-44])
def test_float32_error_bound_holds_when_q_underflows(scale):
    """q' scaled down until its entries are subnormal or zero in float32 (below 2^-126 = 1.2e-38):
    the relative part of the bound alone fails there (the review that prompted the absolute
    underflow terms measured 399 times over it at 1e-38); the full bound must hold."""
    cal, q, _ = _case(3000, seed=11, s=64, batch=(3,))
    ref, blas = _pair(cal, 0.02, factor_dtype="float32")
    tiny = q * scale
    exact = ref.transport_unclipped(tiny)
    left, right = ref._arrays(tiny)[:2]
    got = blas.transport(tiny)
    assert_leq(np.abs(got - exact), _blocked.float32_error_bound(tiny, left, right)
               + FLOAT64_RTOL * np.abs(exact), slack=0.0)


def test_float32_error_bound_covers_the_rounding_of_q_prime():
    """Mutation pass: the bound's unit roundoff is float32's 2^-24. With one-entry matrices
    that make ``q'' = q'`` (S = N = 1, ``C v`` row 1, ``1 / Z`` row 0, coef 0), the float32
    engine's whole error is the rounding of ``q' = 1/2 + 2^-25``, halfway between two float32
    numbers (ties to even: 1/2, an error of 2^-25); the bound must cover it (built on 2^-30
    it did not)."""
    left = np.array([[1.0], [0.0], [1.0]])  # [C / Z ; 1 / Z ; 1]
    right = np.array([[1.0], [0.0]])  # [C / tau ; 1]
    arrays = (left.astype(np.float32), right.astype(np.float32), np.zeros(1))
    q = np.array([[0.5 + 2.0 ** -25]])
    got, _ = _blocked.first_order(q, None, arrays)
    assert np.abs(got - q).item() == 2.0 ** -25  # the rounding of q' really happened
    assert_leq(np.abs(got - q), _blocked.float32_error_bound(q, left[:-1], right), slack=0.0)


@pytest.mark.parametrize("engine, threads", [("blas", None), ("fused", None), ("fused", 2),
                                            ("numpy", None), ("torch", None)])
@pytest.mark.parametrize("drift", [1e-12, 2.0 ** -50])
def test_a_negative_entry_smaller_than_round_off_is_still_clipped(engine, threads, drift):
    """Mutation pass: a proposal is a law, so any negative entry is clipped, however small.
    One factor row ``[1, -(1 + d), d]`` at tau = 1 puts about -0.27 d on token 1 for
    ``q' = e_0`` (-2.7e-13 and -2.2e-16, below the suite's float64 tolerance); every engine
    (the fused one also split between threads, and the numpy engine on torch tensors) must
    return exactly 0 there and renormalise (thresholds ``low < -1e-12`` in the fused engine
    and ``low < -1e-15`` in the blas engine passed the tests' tolerance; a second pass found
    the same of the numpy engine, the reference the others are checked against, and of its
    torch path)."""
    if engine == "fused" and not _fused.available():
        pytest.skip("needs numba")
    factor = np.array([[1.0, -(1 + drift), drift]])
    ref = rt.FirstOrderCovarianceKernel.from_factor(factor, 1.0, engine="numpy")
    kernel = rt.FirstOrderCovarianceKernel.from_factor(
        factor, 1.0, engine="numpy" if engine == "torch" else engine)
    q = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    p = np.array([0.2, 0.3, 0.5])
    assert -FLOAT64_ATOL < ref.transport_unclipped(q)[0, 1] < 0
    if threads:  # the 3-token vocabulary split in 3 segments between the threads
        got, alpha = _fused.first_order(q, p, kernel._fused_arrays, chunk=1, segments=3,
                                        threads=threads)
    elif engine == "torch":
        torch = pytest.importorskip("torch")
        got, alpha = (t.numpy() for t in kernel.transport_with_acceptance(
            torch.tensor(q), torch.tensor(p)))
        assert kernel.transport(torch.tensor(q))[0, 1].item() == 0.0
    else:
        got, alpha = kernel.transport_with_acceptance(q, p)
        assert kernel.transport(q)[0, 1] == 0.0
    assert got[0, 1] == 0.0 and got.min() >= 0
    assert_close(got, ref.transport(q))
    assert_close(got.sum(axis=-1), 1.0)
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)))


def test_float32_products_with_clipped_rows():
    cal, q, p, tau = _clipping_case()
    ref, blas = _pair(cal, tau, factor_dtype="float32")
    assert (ref.transport_unclipped(q).min(axis=-1) < 0).any()
    clipped = ref.transport_unclipped(q).min(axis=-1) < 0
    got, alpha = blas.transport_with_acceptance(q, p)
    want = ref.transport(q)
    assert got.min() >= 0
    # a clipped row is renormalised to sum q' in float64; the others keep float32's error
    assert_close(got[clipped].sum(axis=-1), q[clipped].sum(axis=-1))
    assert_close(got.sum(axis=-1), q.sum(axis=-1), rtol=0, atol=FLOAT32_ATOL)
    assert_close(got, want, rtol=0, atol=FLOAT32_ATOL)
    assert_close(alpha, rt.acceptance_rate(p, got))


def test_float32_matrices_replace_the_float64_ones():
    cal, q, _ = _case(300, seed=5, s=20, batch=(2,))
    blas = rt.FirstOrderCovarianceKernel(cal, 0.02, factor_dtype="float32", engine="blas")
    blas.transport(q)
    left, right, _ = blas._blas_arrays()
    assert left.dtype == right.dtype == np.float32 and blas._products is None
    # built from the float64 ones when those exist (a torch call builds them), same values
    other = rt.FirstOrderCovarianceKernel(cal, 0.02, factor_dtype="float32", engine="blas")
    other._arrays(q)
    l2, r2, _ = other._blas_arrays()
    assert np.array_equal(l2, left) and np.array_equal(r2, right)


def test_targets_the_engine_cannot_take_go_to_the_array_path():
    """A list, a target with more leading axes than q', or an integer array: the acceptance is
    the one :func:`rt.acceptance_rate` gives, broadcast as it broadcasts."""
    cal, q, p = _case(30, seed=4, batch=(3,))
    blas = rt.FirstOrderCovarianceKernel(cal, 0.05)  # auto: 24 factor rows -> blas
    assert blas._route(q) == "blas"
    r1 = blas.transport(q[0])
    for target in (list(p[0]), np.broadcast_to(p[0], (2, 3, 30)), p[:1]):
        got, alpha = blas.transport_with_acceptance(q[0], target)
        assert_close(got, r1)
        assert_close(alpha, rt.acceptance_rate(np.asarray(target), r1))
        assert np.shape(alpha) == np.shape(rt.acceptance_rate(np.asarray(target), r1))
    ones = np.zeros((3, 30), dtype=np.int64)
    ones[:, 0] = 1  # integer point masses broadcast to q's shape: the compiled engine
    _, alpha = blas.transport_with_acceptance(q, ones)
    assert_close(alpha, np.minimum(blas.transport(q)[:, 0], 1.0))


def test_float32_products_refuse_a_tau_that_overflows_float32():
    cal, q, _ = _case(30, seed=4, batch=(2,))
    with pytest.raises(rt.InputError, match="beyond float32's range"):
        rt.FirstOrderCovarianceKernel(cal, 1e-300, engine="blas", factor_dtype="float32")
    # float64 products (auto, or a float64 factor) take it
    ok = rt.FirstOrderCovarianceKernel(cal, 1e-300, factor_dtype="float32")
    assert np.all(np.isfinite(ok.transport(q)))


def test_zero_rows_sub_stochastic_input_and_no_writes():
    cal, q, p = _case(50, seed=1, batch=(2, 3))
    ref, blas = _pair(cal, 0.05)
    z = np.zeros((2, 50))
    rz, az = blas.transport_with_acceptance(z, p[0, :2])
    assert np.all(rz == 0) and np.all(az == 0)  # q(I) = 0: no proposal, alpha = 0
    half = q[0] * 0.5
    assert_close(blas.transport(half), ref.transport(half))
    assert_close(blas.transport(half).sum(axis=-1), 0.5)
    before, p_before = q.copy(), p.copy()
    blas.transport_with_acceptance(q, p)
    assert np.array_equal(q, before) and np.array_equal(p, p_before)
    with pytest.raises(ValueError, match="entries per row"):
        _blocked.first_order(q[..., :49], None, blas._blas_arrays())


def test_the_epilogue_runs_as_plain_python_too():
    """The loop un-jitted gives the same numbers: the engine's logic, not numba's."""
    cal, q, p = _case(40, seed=9, batch=(3,))
    ref, blas = _pair(cal, 0.02)
    left, right, coef = blas._blas_arrays()
    assert np.array_equal(left[-1], np.ones(40))  # the row-sum row (normalising input)
    out, alpha, low = np.empty_like(q), np.zeros(3), np.zeros(3)
    given = q * np.array([[1.0], [0.5], [3.0]])  # unnormalised rows, scaled back in the loop
    buf = (given @ left[:-1].T) @ right
    for j0 in (0, 16, 32):  # three chunks, the last one short
        _blocked._epilogue_py(buf[:, j0:j0 + 16], given, p, np.arange(len(p)), True, coef,
                              np.array([1.0, 2.0, 1 / 3]), out, 0, j0, alpha, low)
    assert_close(out, ref.transport(q))
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(q)))
    assert np.all(low == 0)


def test_without_numba_the_engine_says_so(monkeypatch):
    cal, q, _ = _case(10, seed=6, batch=(2,))
    blas = rt.FirstOrderCovarianceKernel(cal, 0.05, engine="blas")
    monkeypatch.setattr(_fused, "available", lambda: False)
    monkeypatch.setattr(_blocked, "_compiled", {})
    with pytest.raises(ImportError, match="numba"):
        _blocked.first_order(q, None, blas._blas_arrays())


def test_a_tiny_row_at_a_tiny_tau_is_divided_first_as_on_the_fused_engine():
    """At tau = 1e-300 the blas engine (auto's pick for 17 calibration rows) multiplied an
    unnormalised r of 1e-200 by C / Z, which underflowed to 0 before the scale by 1 / sum r:
    the proposal was uniform, (1/3, 1/3, 1/3) against the numpy engine's (0.278, 0.389,
    0.333), and the acceptance 0.833 against 0.889. Such rows are now divided first below the
    fused engine's own threshold for that tau."""
    cal = np.array([[1.0, 0, 0]] * 9 + [[0, 1, 1e-300]] * 8)
    vm, q, p = rt.VocabMap(3, [-1, 2]), np.array([1.0, 1e-200]), np.array([0.25, 0.5, 0.25])
    auto = rt.FirstOrderCovarianceKernel(cal, tau=1e-300)
    ref = rt.FirstOrderCovarianceKernel(cal, tau=1e-300, engine="numpy")
    assert auto._route(q[None]) == "blas"
    want, want_alpha = rt.rdk_proposal_with_acceptance(p, q, vm, ref)
    got, alpha = rt.rdk_proposal_with_acceptance(p, q, vm, auto)
    assert_close(got, want)
    assert_close(alpha, want_alpha)
    assert abs(want[0] - 0.278) < 1e-3  # not the uniform vector
