"""TLI's division folded into the first-order engines (``normalise=True``).

``transport(r, normalise=True)`` must be ``transport(r / sum r)`` (zeros where ``sum r = 0``) on
every engine, for rows the clip touches and rows it does not, for every block, chunk and
vocabulary split, and for rows whose sum is too small to scale by (redone by dividing first).
:func:`rdk_theory.rdk_proposal` and :func:`rdk_theory.rdk_proposal_with_acceptance` take that
path for the first-order kernel and must equal the unfused definition ``kernel.transport(
tli_proposal(q))`` for pruned drafters; every other kernel keeps the unfused path.
"""
from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import _blocked, _fused
from rdk_theory._backend import safe_divide
from tests.test_core_blocked import _clipping_case
from tests.test_core_fused import _case
from tests.tolerances import FLOAT32_ATOL, FLOAT64_RTOL, assert_close, assert_leq

pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba not installed (extra 'fast')")

#: (engine, factor_dtype, rank) of every engine configuration with float64 arithmetic: the fused
#: engine's single-loop path (rank <= 4), its extra-sweep path (rank 6), a float32 factor, and
#: the blas engine.
CONFIGS = [("numpy", "float64", None), ("fused", "float64", 3), ("fused", "float64", 6),
           ("fused", "float64", None), ("fused", "float32", None), ("blas", "float64", None)]


def _unnormalised(q):
    """Rows of ``q`` at several scales, as TLI's ``r`` is: sums 1, 0.3, 1e3 (counts), 0 (no
    mass on the target's tokens), 1e-290 (below ``_fused.TINY``: redone by dividing first) and
    2^-880 (just above it: scaled in the kernel)."""
    scales = np.array([1.0, 0.3, 1e3, 0.0, 1e-290, 2.0 ** -880, 1.0])[:q.shape[0], None]
    return q * scales


def _tli(r):
    return safe_divide(r, r.sum(axis=-1, keepdims=True))


def _kernels(cal, tau, engine, dtype, rank):
    return (rt.FirstOrderCovarianceKernel(cal, tau, rank=rank, engine="numpy", factor_dtype=dtype),
            rt.FirstOrderCovarianceKernel(cal, tau, rank=rank, engine=engine, factor_dtype=dtype))


@pytest.mark.parametrize("engine,dtype,rank", CONFIGS)
@pytest.mark.parametrize("clipping", [False, True])
def test_normalise_equals_dividing_first(engine, dtype, rank, clipping):
    if clipping:
        cal, q, p, tau = _clipping_case()  # every other row is clipped
    else:
        (cal, q, p), tau = _case(2500, seed=5, s=24, batch=(7,)), 0.02
    ref, k = _kernels(cal, tau, engine, dtype, rank)
    r = _unnormalised(q)
    want = ref.transport(_tli(r))
    if clipping:
        neg = ref.transport_unclipped(_tli(r)).min(axis=-1) < 0
        assert neg[[0, 2, 4]].all(), neg  # the clip meets the scaled and the tiny-sum rows
    got, alpha = k.transport_with_acceptance(r, p, normalise=True)
    assert_close(got, want)
    assert_close(alpha, rt.acceptance_rate(p, want))
    assert_close(k.transport(r, normalise=True), want)
    assert np.all(got[3] == 0) and alpha[3] == 0  # TLI's zero proposal for a row without mass
    assert_close(got.sum(axis=-1), [1, 1, 1, 0, 1, 1, 1])
    assert np.array_equal(r, _unnormalised(q))  # the input is not written to


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,segments,chunk", [(1, None, 7), (3, None, 256), (64, None, 4),
                                                 (1, 2, 7), (2, 3, 7), (7, 4, 7)])
@pytest.mark.parametrize("rank", [None, 2])
def test_fused_normalise_in_every_block_and_vocabulary_split(rows, segments, chunk, threads,
                                                             rank):
    """Block sizes, chunk sizes and the batch-1 split (partial sums of ``r`` reduced between
    the passes, as ``C v`` is), with clipped rows and the tiny-sum row."""
    cal, q, p = _case(25, seed=3, batch=(7,))
    ref, k = _kernels(cal, 3e-4, "fused", "float64", rank)
    r = _unnormalised(q)
    want = ref.transport(_tli(r))
    assert (ref.transport_unclipped(_tli(r)).min(axis=-1) < 0).any()
    got, alpha = _fused.first_order(r, p, k._fused_arrays, normalise=True, rows=rows,
                                    chunk=chunk, segments=segments, threads=threads)
    assert_close(got, want)
    assert_close(alpha, rt.acceptance_rate(p, want))


@pytest.mark.parametrize("chunk_bytes", [1, 8 * 1024 * 3])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_blas_normalise_in_every_block_and_chunk(rows, chunk_bytes):
    cal, q, p, tau = _clipping_case()
    ref, k = _kernels(cal, tau, "blas", "float64", None)
    r = _unnormalised(q)
    want = ref.transport(_tli(r))
    got, alpha = _blocked.first_order(r, p, k._blas_arrays(), normalise=True, rows=rows,
                                      chunk_bytes=chunk_bytes)
    assert_close(got, want)
    assert_close(alpha, rt.acceptance_rate(p, want))
    alone, none = _blocked.first_order(r, None, k._blas_arrays(), normalise=True, rows=rows,
                                       chunk_bytes=chunk_bytes)
    assert none is None and np.array_equal(alone, got)


def test_blas_float32_products_normalised_stay_within_the_scaled_bound():
    """Float32 products from ``r``, scaled by ``1 / sum r`` in float64 afterwards: the error is
    within ``float32_error_bound(r) / sum r`` (the bound of the products the engine ran), and
    ``sum r`` is the float64 sum (a float32 one would be off by up to ``N 2^-24``)."""
    cal, q, p = _case(3000, seed=11, s=64, batch=(4,))
    ref, k = _kernels(cal, 0.02, "blas", "float32", None)
    r = q * np.array([[1.0], [0.3], [1e3], [1e-3]])
    exact = ref.transport_unclipped(_tli(r))
    assert exact.min() > 0  # no clip: the bound is on the unclipped vector
    left, right = ref._arrays(q)[:2]
    bound = _blocked.float32_error_bound(r, left, right) / r.sum(axis=-1, keepdims=True)
    got, alpha = k.transport_with_acceptance(r, p, normalise=True)
    err = np.abs(got - exact)
    assert_leq(err, bound + FLOAT64_RTOL * exact, slack=0.0)
    assert err.max() > 1e-13  # float32 arithmetic really ran
    assert_close(alpha, rt.acceptance_rate(p, ref.transport(_tli(r))), rtol=0, atol=FLOAT32_ATOL)
    # the scale's sum is float64's, taken while r is rounded (a float32 sum: ~1e-7 relative)
    r32, sums = np.empty(r.shape, dtype=np.float32), np.empty(r.shape[0])
    _blocked._compiled["to_f32"](r, r32, sums)
    assert np.array_equal(r32, r.astype(np.float32))
    assert_close(sums, r.sum(axis=-1))


@pytest.mark.parametrize("scale", [1e-40, 2.0 ** -880, 1e42, 1e300])
def test_blas_float32_products_divide_first_where_rounding_r_would_under_or_overflow(scale):
    """Float32 products round ``r`` before scaling it: a sum outside ``_blocked.F32_SUMS``
    would lose the row to float32 underflow (an error of 0.07 on entries of 4e-4 at 1e-40,
    before the fix) or turn it into inf and NaN (1e42). Such rows are divided first, so every
    row is within the float32 bound of ``q' = r / sum r`` (sums in range: of ``r``, scaled), and
    no floating-point warning is raised."""
    cal, q, p = _case(2500, seed=5, s=24, batch=(3,))
    ref, k = _kernels(cal, 0.02, "blas", "float32", None)
    r = q * np.array([[1.0], [scale], [0.5]])
    qp = _tli(r)
    exact = ref.transport_unclipped(qp)
    assert exact.min() > 0  # no clip: the bound is on the unclipped vector
    left, right = ref._arrays(q)[:2]
    bound = np.where(np.arange(3)[:, None] == 1, _blocked.float32_error_bound(qp, left, right),
                     _blocked.float32_error_bound(r, left, right) / r.sum(axis=-1, keepdims=True))
    with np.errstate(all="raise"):
        got, alpha = k.transport_with_acceptance(r, p, normalise=True)
    assert_leq(np.abs(got - exact), bound + FLOAT64_RTOL * exact, slack=0.0)
    assert np.all(bound <= 1e-3 * exact)  # and the bound is tight enough to mean something
    assert_close(alpha, rt.acceptance_rate(p, exact), rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.parametrize("engine,dtype,rank", CONFIGS + [("blas", "float32", None)])
@pytest.mark.parametrize("tau", [1e-200, 1e-300])
def test_a_tiny_tau_with_a_tiny_sum_is_finite(engine, dtype, rank, tau):
    """(1 / sum r) / tau must stay finite: tau 1e-200 with sum r 1e-120 gave NaN on the fused
    engine (its fast-math formed that product, inf, then 0 * inf). Such rows are now redone by
    dividing first (``_fused.smallest_scaled_sum``); rows of sum 1 and 1e-50 on either side."""
    rng = np.random.default_rng(8)
    cal = rng.dirichlet(np.ones(8), size=10)  # rank up to 8: every configuration's rank
    f32_products = engine == "blas" and dtype == "float32"
    if f32_products:  # C / tau must fit float32 (else an InputError): near the smallest such
        tau = 1e-36
    ref, k = _kernels(cal, tau, engine, dtype, rank)
    vm = rt.VocabMap(8, [0, 1, 2, 5, -1])  # the last drafter token is not in the target's
    q = np.array([[1e-120, 0.0, 2e-120, 0.0, 1 - 3e-120], [0.3, 0.2, 0.1, 0.1, 0.3],
                  [1e-50, 1e-50, 0.0, 1e-50, 1 - 3e-50]])
    p = rng.dirichlet(np.ones(8))
    want = ref.transport(rt.tli_proposal(q, vm))
    with np.errstate(all="raise"):
        got, alpha = rt.rdk_proposal_with_acceptance(p, q, vm, k)
        alone = rt.rdk_proposal(q, vm, k)
    tol = {"atol": FLOAT32_ATOL} if f32_products else {}
    assert np.isfinite(got).all() and np.isfinite(alpha).all()
    assert_close(got, want, **tol)
    assert_close(alone, want, **tol)
    assert_close(alpha, rt.acceptance_rate(p, want), **tol)


@pytest.mark.parametrize("with_target", [False, True])
def test_rdk_proposal_hands_the_first_order_kernel_the_unnormalised_r(monkeypatch, with_target):
    """The fused path is really taken: the kernel receives TLI's ``r`` (here with 30 % of the
    drafter's mass outside the target) and ``normalise=True``, never ``q'``."""
    vm, q, p, cal = _pruned()
    k = rt.FirstOrderCovarianceKernel(cal, 0.02)
    seen = []
    for name in ("transport", "transport_with_acceptance"):
        real = getattr(rt.FirstOrderCovarianceKernel, name)

        def spy(self, x, *args, _real=real, **kw):
            seen.append((x, kw.get("normalise", False)))
            return _real(self, x, *args, **kw)
        monkeypatch.setattr(rt.FirstOrderCovarianceKernel, name, spy)
    if with_target:
        rt.rdk_proposal_with_acceptance(p, q, vm, k)
    else:
        rt.rdk_proposal(q, vm, k)
    (given, normalise), *_ = seen
    assert normalise is True
    assert np.array_equal(given, rt.vanilla_proposal(q, vm))


def _pruned(n_t=3000, keep=700, batch=(2, 3), seed=2):
    """A pruned drafter: ``keep`` of the target's ids, so ``q(I) < 1`` for the scattered rows."""
    rng = np.random.default_rng(seed)
    vm = rt.VocabMap.from_kept_ids(rng.choice(n_t, size=keep, replace=False), n_t)
    q = rng.dirichlet(np.full(keep, 0.5), size=batch)
    p = rng.dirichlet(np.full(n_t, 0.5), size=batch)
    cal = rng.dirichlet(np.full(n_t, 0.3), size=24)
    return vm, q, p, cal


@pytest.mark.parametrize("engine,dtype,rank", CONFIGS)
def test_rdk_proposal_takes_the_fused_path_with_the_same_numbers(engine, dtype, rank):
    vm, q, p, cal = _pruned()
    ref, k = _kernels(cal, 0.02, engine, dtype, rank)
    want = ref.transport(rt.tli_proposal(q, vm))  # the definition, unfused
    assert_close(rt.rdk_proposal(q, vm, k), want)
    got, alpha = rt.rdk_proposal_with_acceptance(p, q, vm, k)
    assert got.shape == p.shape and alpha.shape == (2, 3)
    assert_close(got, want)
    assert_close(alpha, rt.acceptance_rate(p, want))
    # one target broadcast over the batch
    _, a1 = rt.rdk_proposal_with_acceptance(p[0, 0], q, vm, k)
    assert_close(a1, rt.acceptance_rate(p[0, 0], want))


@pytest.mark.parametrize("kernel", ["identity", "dense", "marginal"])
def test_rdk_proposal_with_acceptance_for_exact_kernels(kernel):
    vm, q, p, _ = _pruned(n_t=60, keep=20)
    rng = np.random.default_rng(7)
    k = {"identity": rt.IdentityKernel,
         "dense": lambda: rt.DenseKernel(rng.dirichlet(np.ones(60), size=60)),
         "marginal": lambda: rt.MarginalKernel(rng.dirichlet(np.ones(60)), 0.3)}[kernel]()
    want = rt.rdk_proposal(q, vm, k)
    assert_close(want, k.transport(rt.tli_proposal(q, vm)))
    got, alpha = rt.rdk_proposal_with_acceptance(p, q, vm, k)
    assert_close(got, want)
    assert_close(alpha, rt.acceptance_rate(p, want))


def test_rdk_proposal_with_acceptance_rejects_bad_input_by_name():
    vm, q, p, cal = _pruned(n_t=60, keep=20)
    k = rt.FirstOrderCovarianceKernel(cal, 0.02)
    short = p[..., :59] / p[..., :59].sum(axis=-1, keepdims=True)
    with pytest.raises(rt.InputError, match="target_probs has 59 columns"):
        rt.rdk_proposal_with_acceptance(short, q, vm, k)
    with pytest.raises(rt.InputError, match="target_probs"):
        rt.rdk_proposal_with_acceptance(-p, q, vm, k)
    with pytest.raises(rt.InputError, match="draft_probs"):
        rt.rdk_proposal_with_acceptance(p, q * 2, vm, k)
    with pytest.raises(rt.InputError, match=r"leading shape \(2, 2\), draft_probs \(2, 3\)"):
        rt.rdk_proposal_with_acceptance(p[:, :2], q, vm, k)  # batch shapes that do not broadcast
    with pytest.raises(rt.InputError, match="kernel is over 61 tokens"):
        rt.rdk_proposal_with_acceptance(p, q, vm, rt.DenseKernel(np.eye(61)))


def test_a_row_summing_to_exactly_the_smallest_scaled_sum_is_redone():
    """Mutation pass: the redo test is ``sum >= TINY`` (2^-900); with ``>`` a row summing to
    exactly 2^-900 got scale 0 and was not redone: an all-zero proposal."""
    cal = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    fo = rt.FirstOrderCovarianceKernel(cal, 0.5, engine="fused")
    r = np.array([2.0 ** -901, 2.0 ** -901, 0.0])
    assert r.sum() == _fused.TINY
    assert_close(fo.transport(r, normalise=True), fo.transport(np.array([0.5, 0.5, 0.0])))


def test_safe_divide_is_zero_wherever_den_is_not_positive_on_numpy_and_fractions():
    """safe_divide's contract (num / den where den > 0, else 0), tested on torch before, now
    on numpy and Fractions too. Today's callers never pass a negative den, so a break
    here would not show elsewhere."""

    got = safe_divide(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[2.0], [0.0]]))
    assert got.tolist() == [[0.5, 1.0], [0.0, 0.0]]
    fr = np.array([Fraction(1), Fraction(2)], dtype=object)
    assert safe_divide(fr, np.array(Fraction(-1), dtype=object)).tolist() == [0, 0]
    assert safe_divide(fr, np.array(Fraction(4), dtype=object)).tolist() == [Fraction(1, 4), Fraction(1, 2)]
