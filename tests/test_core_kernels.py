from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

import rdk_theory as rt
from tests.tolerances import assert_close, assert_leq


def _cal(rng, s=40, n=12):
    return rng.dirichlet(np.full(n, 0.5), size=s)


def test_dense_kernel_rejects_non_stochastic_and_negative():
    with pytest.raises(rt.InputError, match="row 1 sums to"):
        rt.DenseKernel(np.array([[1.0, 0.0], [0.3, 0.3]]))
    with pytest.raises(rt.InputError, match="negative"):
        rt.DenseKernel(np.array([[1.5, -0.5], [0.0, 1.0]]))
    with pytest.raises(rt.InputError, match="square"):
        rt.DenseKernel(np.ones((2, 3)) / 3)
    with pytest.raises(rt.InputError, match="row-stochastic"):
        rt.SparseKernel(sp.csr_matrix(np.array([[0.5, 0.0], [0.0, 1.0]])))


def test_covariance_rows_sum_to_zero_and_softmax_kernel_is_stochastic():
    rng = np.random.default_rng(0)
    cal = _cal(rng)
    om = rt.calibration_covariance(cal)
    assert_close(om.sum(axis=1), 0.0)
    assert_close(om, np.cov(cal.T, bias=True))
    ker = rt.covariance_softmax_kernel(cal, tau=0.01)
    assert_close(ker.row_sums(), 1.0)
    expected = np.exp(om[3] / 0.01) / np.exp(om[3] / 0.01).sum()
    assert_close(ker.matrix[3], expected)


def test_marginal_kernel_definition_and_identity_fallback():
    rng = np.random.default_rng(1)
    cal = _cal(rng)
    vm = rt.VocabMap.from_kept_ids([0, 1, 2, 3], 12)
    mk = rt.MarginalKernel.from_calibration(cal, vm)
    mu = cal.mean(axis=0)
    w = np.zeros(12)
    w[4:] = mu[4:] / mu[4:].sum()
    assert_close(mk.w, w)
    assert_close(mk.lam, mu[4:].sum())
    q = rng.dirichlet(np.ones(12), size=3)
    assert_close(mk.transport(q), q @ mk.dense())
    full = rt.MarginalKernel.from_calibration(cal, rt.VocabMap.identity(12))
    assert full.lam == 0.0
    assert_close(full.transport(q), q)
    assert rt.MarginalKernel.from_calibration(cal, vm, lam=0.25).lam == 0.25
    # tokens outside I exist but the calibration puts no mass there: the identity too
    # (a fallback only for an empty complement passed w = 0/0 on)
    cal0, vm0 = np.array([[0.5, 0.5, 0, 0], [0.2, 0.8, 0, 0]]), rt.VocabMap(4, [0, 1, -1])
    mk0 = rt.MarginalKernel.from_calibration(cal0, vm0)
    qp = rt.tli_proposal(np.array([0.3, 0.5, 0.2]), vm0)
    assert mk0.lam == 0.0 and np.array_equal(mk0.transport(qp), qp)


def test_marginal_kernel_default_weight_is_capped_at_one():
    # all calibration mass outside I: mu(OOV) sums to 1 + 2^-52 in float64 (and up to 1 + the
    # input tolerance for rows normalised within it); the default lam is all of it, 1, not an
    # InputError the user never asked for
    cal = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.3, 0.3, 0.3, 0.1]])
    cal = np.vstack([cal, cal[::-1] * (1 + 5e-5)])
    vm = rt.VocabMap(4, [-1, -1])  # a drafter none of whose tokens the target has
    assert cal.mean(axis=0).sum() > 1
    mk = rt.MarginalKernel.from_calibration(cal, vm)
    assert mk.lam == 1.0
    assert_close(mk.w, cal.mean(axis=0) / cal.mean(axis=0).sum())


def test_sparse_topk_kernel_at_a_tau_where_affinity_over_tau_overflows():
    # 2 / 1e-308 overflows: the kernel is the softmax's limit (all weight on each row's
    # largest kept affinity), not NaN
    a = np.array([[2.0, 1.0, -1e308], [1.0, 2.0, 0.5], [1e308, -1e308, 3.0]])
    with np.errstate(all="raise"):
        ker = rt.sparse_topk_kernel(a, 3, tau=1e-308)
    assert np.array_equal(ker.matrix.toarray(), [[1, 0, 0], [0, 1, 0], [1, 0, 0]])
    moderate = rt.sparse_topk_kernel(a[:2, :2], 2, tau=0.7).matrix.toarray()
    assert_close(moderate, np.exp(a[:2, :2] / 0.7) / np.exp(a[:2, :2] / 0.7).sum(1, keepdims=True))


def test_an_object_kernel_holds_real_numbers_or_fractions_only():
    with pytest.raises(rt.InputError, match="real numbers or Fractions, got a str"):
        rt.as_kernel(np.array([["a", "b"], ["c", "d"]], dtype=object))
    exact = rt.as_kernel(np.array([[Fraction(1), 0], [Fraction(1, 3), Fraction(2, 3)]], dtype=object))
    assert exact.transport(np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)).tolist() == [
        Fraction(2, 3), Fraction(1, 3)]


def test_sparse_topk_keeps_diagonal_and_k_largest_and_matches_dense_transport():
    rng = np.random.default_rng(2)
    cal = _cal(rng, n=30)
    n, k, tau = 30, 4, 0.02
    om = rt.calibration_covariance(cal)
    ker = rt.sparse_topk_kernel(rt.covariance_affinity(cal), k, tau, n=n, block=7)
    dense_from_matrix = rt.sparse_topk_kernel(om, k, tau)
    m = ker.matrix.toarray()
    assert_close(m, dense_from_matrix.matrix.toarray())
    assert_close(m.sum(axis=1), 1.0)
    assert np.all((m > 0).sum(axis=1) == k)
    assert np.all(np.diag(m) > 0)
    i = 5
    off = np.delete(np.arange(n), i)
    top_off = set(off[np.argsort(-om[i, off])[: k - 1]])
    assert set(np.flatnonzero(m[i])) == top_off | {i}
    q = rng.dirichlet(np.ones(n), size=5)
    assert_close(ker.transport(q), q @ m)
    assert_close(rt.as_kernel(sp.csr_matrix(m)).transport(q), q @ m)


def test_rdk_can_exceed_the_oov_cap():
    """O2/O4 in one example: TLI is capped by p(I); a kernel moving mass to OOV is not."""
    p = np.array([0.4, 0.1, 0.5])
    vm = rt.VocabMap.from_kept_ids([0, 1], 3)
    q = np.array([0.5, 0.5])
    ker = rt.DenseKernel(np.array([[0.5, 0.0, 0.5], [0.0, 0.2, 0.8], [0, 0, 1.0]]))
    props = rt.build_proposals(q, vm, kernel=ker)
    cap = rt.oov_cap(p, vm)
    assert_leq(rt.acceptance_rate(p, props["tli"]), cap)
    assert rt.acceptance_rate(p, props["rdk_exact"]) > cap + 0.1


def test_sparse_topk_values_are_the_softmax_of_the_kept_affinities_with_the_diagonal_forced():
    """Row i keeps its diagonal (even when it is the row's smallest affinity) and its k - 1
    largest others; the kept values are softmax(a / tau) over exactly those entries."""
    rng = np.random.default_rng(7)
    n, k, tau = 9, 3, 0.3
    a = rng.normal(size=(n, n))
    np.fill_diagonal(a, a.min() - 1.0)  # the diagonal is never among the top k by value
    m = rt.sparse_topk_kernel(a, k, tau).matrix.toarray()
    for i in range(n):
        others = [j for j in np.argsort(-a[i]) if j != i][: k - 1]
        kept = sorted([i, *others])
        assert list(np.flatnonzero(m[i])) == kept
        e = np.exp(a[i, kept] / tau)
        assert_close(m[i, kept], e / e.sum(), err_msg=f"row {i}")


def test_marginal_kernel_takes_an_explicit_zero_weight_and_has_no_proposal_without_mass():
    """lam = 0 given explicitly is the identity (not the default weight); and when the drafter
    puts no mass on I (q' = 0) the rank-one kernel proposes nothing ([definition])."""
    rng = np.random.default_rng(1)
    cal = rng.dirichlet(np.ones(6), size=5)
    vm = rt.VocabMap(6, [0, 1, 2, -1])
    zero = rt.MarginalKernel.from_calibration(cal, vm, lam=0.0)
    assert zero.lam == 0.0
    q = rng.dirichlet(np.ones(4), size=2)
    qp = rt.tli_proposal(q, vm)
    assert_close(zero.transport(qp), qp, err_msg="lam = 0 is the identity")
    mk = rt.MarginalKernel.from_calibration(cal, vm)
    assert mk.lam > 0
    no_mass = np.array([0.0, 0.0, 0.0, 1.0])  # all drafter mass on the token absent from T
    r = rt.rdk_proposal(no_mass, vm, mk)
    assert np.all(r == 0.0) and rt.acceptance_rate(rng.dirichlet(np.ones(6)), r) == 0.0


@pytest.mark.parametrize("excess, ok", [(0.9e-6, True), (1.1e-6, False)])
def test_kernel_row_sum_tolerance_is_the_stated_one(excess, ok):
    m = np.full((4, 4), 0.25)
    m[2, 1] += excess
    if ok:
        rt.DenseKernel(m)
    else:
        with pytest.raises(rt.InputError, match="not row-stochastic"):
            rt.DenseKernel(m)


def _nearly_stochastic(rng, n=6, miss=8e-7):
    """A dense kernel whose rows miss 1 by up to ``miss`` (within KERNEL_ATOL), every row off."""
    m = rng.dirichlet(np.ones(n), size=n)
    return m * (1 + rng.uniform(-miss, miss, size=(n, 1)))


@pytest.mark.parametrize("copy", [True, False])
def test_a_kernel_accepted_within_tolerance_is_renormalised_and_the_callers_array_kept(copy):
    """Rows within KERNEL_ATOL of 1 are accepted and then divided by their sums: a kernel left
    at 1 + 8e-7 would make the RDK proposal sum to 1 + 8e-7 (mass out of thin air) and its
    acceptance be off by as much. The caller's array is never written, even with copy=False."""
    rng = np.random.default_rng(0)
    m = _nearly_stochastic(rng)
    given = m.copy()
    assert np.abs(m.sum(axis=1) - 1).min() > 1e-7  # every row is off by more than round-off
    for k in (rt.DenseKernel(m, copy=copy), rt.SparseKernel(sp.csr_matrix(m))):
        stored = k.matrix.toarray() if sp.issparse(k.matrix) else k.matrix
        assert_close(stored, m / m.sum(axis=1, keepdims=True))
        assert_close(stored.sum(axis=1), np.ones(6))
        p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
        r = k.transport(q)
        assert_close(r.sum(), 1.0)
        assert_close(rt.step_output_law(p, r), p)  # lossless to round-off, not to 8e-7
    assert np.array_equal(m, given)


def test_a_kernel_never_writes_into_an_array_numpy_reads_in_place():
    """numpy reads a memoryview, an object with ``__array__`` and a CPU float64 tensor in
    place: renormalising the rows must not divide the caller's buffer (nor fail on a read-only
    one), with or without copy=False."""
    torch = pytest.importorskip("torch")

    class Lazy:  # hands numpy the caller's own array
        def __init__(self, x):
            self.x = x

        def __array__(self, dtype=None, copy=None):
            return self.x

    m = _nearly_stochastic(np.random.default_rng(2), n=4)
    given = m.copy()
    frozen = m.copy()
    frozen.flags.writeable = False
    tensor = torch.from_numpy(m)  # shares m's memory
    for copy in (True, False):
        for source in (memoryview(m), Lazy(m), Lazy(frozen), tensor):
            k = rt.DenseKernel(source, copy=copy)
            assert_close(k.matrix.sum(axis=1), np.ones(4))
            assert np.array_equal(m, given) and np.array_equal(frozen, given)


def test_an_object_kernel_with_a_float_is_read_as_floats():
    """An object array of Fractions and ints is the exact tier (checked with ==); one holding a
    float is floats, checked within KERNEL_ATOL and renormalised as a float array is (it was
    checked exactly: rows of ten 0.1 were refused at 'tolerance 1e-06')."""
    tenths = np.array([[0.1] * 10] * 10, dtype=object)
    k = rt.DenseKernel(tenths)
    assert k.matrix.dtype == np.float64
    assert_close(k.matrix, np.full((10, 10), 0.1))
    mixed = np.array([[Fraction(1, 2), 0.5 + 4e-7], [0, 1]], dtype=object)
    row = np.array([0.5, 0.5 + 4e-7])
    assert_close(rt.DenseKernel(mixed).matrix, [row / row.sum(), [0.0, 1.0]])
    exact = np.array([[Fraction(1, 2), Fraction(1, 2)], [0, 1]], dtype=object)
    assert rt.DenseKernel(exact).matrix.dtype == object
    with pytest.raises(rt.InputError, match="not row-stochastic"):
        rt.DenseKernel(np.array([[Fraction(1, 2), Fraction(1, 2) + Fraction(1, 10**9)], [0, 1]],
                                dtype=object))  # exact: 1e-9 over is refused


@pytest.mark.parametrize("atol", [float("nan"), -1e-6, float("inf"), "1e-3", None])
def test_a_kernels_atol_is_a_finite_non_negative_number(atol):
    m = np.array([[5.0, 0.0], [0.0, 1.0]])
    if atol is None:  # the default: refused, as a NaN atol let it through rescaled to the identity
        with pytest.raises(rt.InputError, match="not row-stochastic"):
            rt.DenseKernel(m, atol=atol)
    else:
        with pytest.raises(rt.InputError, match="atol must be a finite real number >= 0"):
            rt.DenseKernel(m, atol=atol)


def test_a_kernel_exactly_stochastic_in_float_is_kept_as_given():
    """Rows within the round-off of a float64 sum are not divided: copy=False keeps the
    caller's array itself (no copy of a large kernel), and a kernel built again from a
    renormalised matrix is not renormalised a second time."""
    m = np.eye(5)
    assert rt.DenseKernel(m, copy=False).matrix is m
    once = rt.DenseKernel(_nearly_stochastic(np.random.default_rng(1), n=300)).matrix
    assert rt.DenseKernel(once, copy=False).matrix is once


def test_half_precision_kernels_get_their_rounding_as_tolerance():
    """A float16 kernel's rows miss 1 by their rounding (3.7e-4 here, beyond KERNEL_ATOL): its
    eps, 9.8e-4, is the tolerance, as for float16 probability rows; beyond it the kernel is
    refused. A torch bfloat16 matrix gets bfloat16's eps, 7.8e-3. (scipy.sparse holds no
    float16.)"""
    ok = (np.full((5, 5), 0.2) * 1.0004).astype(np.float16)
    assert 1e-6 < ok.astype(np.float64).sum(axis=1).max() - 1 < np.finfo(np.float16).eps
    k = rt.DenseKernel(ok)
    assert k.matrix.dtype == np.float64
    assert_close(k.matrix.sum(axis=1), np.ones(5))
    with pytest.raises(rt.InputError, match=r"not row-stochastic.*tolerance 0.000976562"):
        rt.DenseKernel((np.full((5, 5), 0.2) * 1.002).astype(np.float16))
    with pytest.raises(rt.InputError, match=r"not row-stochastic.*tolerance 1e-06"):
        rt.DenseKernel(ok.astype(np.float64))  # the same numbers as float64: 1e-6 holds
    torch = pytest.importorskip("torch")
    half = torch.full((5, 5), 0.2 * 1.005, dtype=torch.bfloat16)  # rows 1.0059: within 7.8e-3
    assert_close(rt.DenseKernel(half).matrix.sum(axis=1), np.ones(5))
    with pytest.raises(rt.InputError, match=r"not row-stochastic.*tolerance 0.0078125"):
        rt.DenseKernel(torch.full((5, 5), 0.2 * 1.01, dtype=torch.bfloat16))


@pytest.mark.parametrize("excess, ok", [(0.9e-4, True), (1.1e-4, False)])
def test_probability_sum_tolerance_is_the_stated_one(excess, ok):
    p = np.array([0.25, 0.25, 0.5 + excess])
    if ok:
        rt.acceptance_rate(p, p)
    else:
        with pytest.raises(rt.InputError, match="must sum to 1"):
            rt.acceptance_rate(p, p)


def test_cosine_affinity_values():
    """Mutation pass: no test read cosine_affinity's values (a norm over the wrong axis gave
    1.7 on the diagonal). Rows (3, 4), (1, 0), (0, 2): cosines by hand."""
    emb = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, 2.0]])
    want = np.array([[1.0, 0.6, 0.8], [0.6, 1.0, 0.0], [0.8, 0.0, 1.0]])
    assert_close(rt.cosine_affinity(emb)(np.arange(3)), want, rtol=0)


def test_covariance_softmax_kernel_where_omega_over_tau_overflows_exp():
    """Mutation pass: without the row maximum subtracted before exp, Omega / tau = +-2500
    gave NaN kernels. Calibration rows e_0, e_1: Omega = (1/4) [[1, -1], [-1, 1]], so each row
    puts all but exp(-5000) of its mass on the diagonal."""
    cal = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert np.array_equal(rt.covariance_softmax_kernel(cal, 1e-4).matrix, np.eye(2))
    got = rt.CovarianceSoftmaxKernel(cal, 1e-4).transport(np.array([0.3, 0.7]))
    assert np.array_equal(got, [0.3, 0.7])


def test_covariance_softmax_kernel_refuses_a_tau_its_product_form_overflows():
    """The overflow check summed the factor's squares (1.7977e308 at this tau, finite) where
    rows() forms Omega by a BLAS product, an ulp above it, to inf; inf - inf then made a NaN
    row of M (and a NaN proposal from 'sample', which blamed the proposal). Subnormal tau from
    a random search (1 case in 2,000). The check keeps a factor 2 of margin: twice the tau is
    taken, with finite rows that sum to 1."""
    cal = np.array([[0.47585204021660327, 0.47585204021660327, 0.006413774619039565, 0.04188214494775399],
                    [0.1627473942045585, 0.1627473942045585, 0.6042559531730974, 0.0702492584177856],
                    [0.3913933150705872, 0.3913933150705872, 0.16695374894699386, 0.05025962091183161]])
    tau = 3.55036228558605e-310
    with pytest.raises(rt.InputError, match="Omega / tau overflows at tau = 3.55036e-310"):
        rt.CovarianceSoftmaxKernel(cal, tau)
    with pytest.raises(rt.InputError, match="Omega / tau overflows"):
        rt.covariance_softmax_kernel(cal, tau)
    m = rt.covariance_softmax_kernel(cal, 2 * tau).matrix
    assert np.all(np.isfinite(m)) and np.all(m >= 0)
    assert_close(m.sum(axis=1), 1.0)


@pytest.mark.parametrize("block", [-1, 0, 2.5, "8", None])
def test_sparse_topk_refuses_a_block_that_is_not_a_positive_integer(block):
    """block=-1 made range(0, n, block) empty: the column ids, from np.empty, were never
    written and went to scipy unchecked (check=False), a segfault; block=0 was range()'s raw
    ValueError and block=2.5 its TypeError."""
    with pytest.raises(rt.InputError, match="block must be an integer >= 1"):
        rt.sparse_topk_kernel(np.eye(6), 2, block=block)
    assert rt.sparse_topk_kernel(np.eye(6), 2, block=4.0).matrix.nnz == 12  # a whole float


def test_sparse_topk_checks_n_and_the_blocks_a_callable_returns():
    """A callable's n = 2.5 was numpy's TypeError; an n beside a dense affinity of another size
    was silently ignored; a callable returning wider rows put column ids >= n into a matrix
    that skips scipy's checks."""
    a = np.random.default_rng(3).normal(size=(6, 6))
    with pytest.raises(rt.InputError, match="n must be an integer >= 1, got 2.5"):
        rt.sparse_topk_kernel(lambda rows: a[rows], 2, n=2.5)
    with pytest.raises(rt.InputError, match=r"n = 5 disagrees with the \(6, 6\) affinity"):
        rt.sparse_topk_kernel(a, 2, n=5)
    assert_close(rt.sparse_topk_kernel(a, 2, n=6).matrix.toarray(),
                 rt.sparse_topk_kernel(a, 2).matrix.toarray())
    wide = np.hstack([a, a])
    with pytest.raises(rt.InputError, match=r"must return a \(len\(rows\), 6\) block, got "
                                            r"shape \(6, 12\)"):
        rt.sparse_topk_kernel(lambda rows: wide[rows], 2, n=6)


@pytest.mark.parametrize("atol", [1.0, 5.0])
def test_a_kernel_row_without_mass_is_refused_whatever_atol(atol):
    """atol >= 1 accepted an all-zero row, whose sum is within 1 of 1; dividing it by its
    sum then made the row, and every transport through it, NaN."""
    m = np.array([[0.0, 0.0], [0.0, 1.0]])
    with pytest.raises(rt.InputError, match=r"row 0 sums to 0.0, and a row must sum to more "
                                            r"than 0"):
        rt.DenseKernel(m, atol=atol)
    loose = rt.DenseKernel(np.array([[0.25, 0.25], [0.0, 1.0]]), atol=atol)  # still accepted
    assert_close(loose.matrix, [[0.5, 0.5], [0.0, 1.0]])


def test_a_sparse_kernel_with_duplicate_entries_is_the_matrix_scipy_reads():
    """A non-canonical CSR (or CSC) storing (0, 0) as -0.5 + 1.0 was checked entry by entry
    and refused as negative, while the same matrix given as COO (whose conversion sums the
    duplicates) was accepted: the duplicates are now summed before any check."""
    data, rows, cols = (np.array([-0.5, 1.0, 0.5, 1.0]), np.array([0, 0, 0, 1]),
                        np.array([0, 0, 1, 1]))
    coo = sp.coo_matrix((data, (rows, cols)), shape=(2, 2))
    csr = sp.csr_matrix((data, cols, np.array([0, 3, 4])), shape=(2, 2))
    csc = sp.csc_matrix((data, rows, np.array([0, 2, 4])), shape=(2, 2))
    want = np.array([[0.5, 0.5], [0.0, 1.0]])
    q = np.array([0.3, 0.7])
    for given in (coo, csr, csc):
        assert np.array_equal(given.toarray(), want)
        k = rt.SparseKernel(given)
        assert np.array_equal(k.matrix.toarray(), want)
        assert_close(k.transport(q), q @ want)
    with pytest.raises(rt.InputError, match="negative"):  # a negative sum is still refused
        rt.SparseKernel(sp.csr_matrix((np.array([-0.5, 0.25, 1.0]), np.array([0, 0, 1]),
                                       np.array([0, 2, 3])), shape=(2, 2)))


def _kernels_over_3():
    cal = np.random.default_rng(4).dirichlet(np.ones(3), size=5)
    m = rt.covariance_softmax_kernel(cal, 0.5).matrix
    return {"dense": rt.DenseKernel(m), "sparse": rt.SparseKernel(sp.csr_matrix(m)),
            "covariance": rt.CovarianceSoftmaxKernel(cal, 0.5),
            "marginal": rt.MarginalKernel(np.array([0.2, 0.3, 0.5]), 0.5)}


@pytest.mark.parametrize("name", ["dense", "sparse", "covariance", "marginal"])
def test_every_kernel_refuses_q_prime_that_is_not_real_numbers(name):
    """The exact covariance kernel parsed strings ('0.5') and dropped imaginary parts; the
    dense, sparse and marginal kernels passed complex numbers through to a complex proposal.
    The first-order kernel already refused both: every kernel now does, by name, and real
    input (float, integer, list, torch) gives the numbers it gave."""
    kernel = _kernels_over_3()[name]
    for bad, what in ((np.array(["0.2", "0.3", "0.5"]), "strings"),
                      (np.array([0.2 + 1j, 0.3, 0.5]), "complex numbers"),
                      ([0.2 + 0j, 0.3, 0.5], "complex numbers"),
                      (np.array([0.2, "x", 0.5], dtype=object), "Python objects")):
        with pytest.raises(rt.InputError, match=f"q' must hold real numbers, got {what}"):
            kernel.transport(bad)
    q = np.array([0.2, 0.3, 0.5])
    dense = kernel.dense() if name == "marginal" else (
        kernel.rows(np.arange(3)) if name == "covariance" else
        kernel.matrix.toarray() if name == "sparse" else kernel.matrix)
    assert_close(kernel.transport(q), q @ dense)
    assert_close(kernel.transport(q.tolist()), q @ dense)
    assert_close(kernel.transport(np.array([0, 1, 0])), dense[1])
    torch = pytest.importorskip("torch")
    got = kernel.transport(torch.tensor(q))
    assert torch.is_tensor(got) and got.dtype == torch.float64
    assert_close(got.numpy(), q @ dense)
    with pytest.raises(rt.InputError, match="q' must hold real numbers, got torch.complex128"):
        kernel.transport(torch.tensor([0.2 + 1j, 0.3, 0.5], dtype=torch.complex128))


def test_exact_q_prime_stays_exact_through_the_dense_and_marginal_kernels():
    """The real-number check must leave the exact tier as it was: Fractions in, Fractions out
    (and Fractions mixed with a float: float64)."""
    F = Fraction
    m = np.array([[F(1, 2), F(1, 2)], [F(0), F(1)]], dtype=object)
    q = np.array([F(1, 3), F(2, 3)], dtype=object)
    assert rt.DenseKernel(m).transport(q).tolist() == [F(1, 6), F(5, 6)]
    mixed = rt.DenseKernel(m).transport(np.array([F(1, 3), 2 / 3], dtype=object))
    assert mixed.dtype == np.float64
    assert_close(mixed, [1 / 6, 5 / 6])
    mk = rt.MarginalKernel(np.array([F(1, 2), F(1, 2)], dtype=object), F(1, 2))
    assert mk.transport(q).tolist() == [F(5, 12), F(7, 12)]


def test_cosine_affinity_at_extreme_scales_and_for_a_zero_row():
    """The norm was taken of the raw rows: rows near 1e160 overflowed (inf norms, cosines 0)
    and rows near 1e-170 underflowed (norm floored at 1e-300, cosines ~1e-40 or 1e260 ...).
    Each row is now scaled by its largest entry first; an all-zero row keeps cosine 0."""
    e = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    want = rt.cosine_affinity(e)(np.arange(3))
    assert_close(np.diag(want), 1.0)
    for s in (1e160, 1e-170, 1e300, 5e-324):
        assert_close(rt.cosine_affinity(e * s)(np.arange(3)), want, err_msg=f"scale {s:g}")
    mixed = np.vstack([e[:1] * 1e200, e[1:2] * 1e-200, e[2:] * 1e-310, np.zeros((1, 2))])
    got = rt.cosine_affinity(mixed)(np.arange(4))
    assert_close(got[:3, :3], want)
    assert np.array_equal(got[3], np.zeros(4)) and np.array_equal(got[:, 3], np.zeros(4))
    with pytest.raises(rt.InputError, match="embeddings has a non-finite value"):
        rt.cosine_affinity(np.array([[1.0, np.nan], [0.0, 1.0]]))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix's own warning
def test_every_kernel_reads_an_ndarray_subclass_as_a_plain_array():
    """real_input passed ndarray subclasses through: the marginal kernel raised matrix.sum()'s
    keepdims TypeError, the dense and covariance kernels a broadcasting ValueError on a masked
    array, and the identity, dense and covariance kernels returned an np.matrix. Now each
    reads np.matrix and masked arrays as their plain data and returns an ndarray."""
    rng = np.random.default_rng(0)
    cal, q = rng.dirichlet(np.ones(6), 8), rng.dirichlet(np.ones(6), 2)
    for k in (rt.DenseKernel(np.eye(6)), rt.covariance_softmax_kernel(cal, 1.0), rt.IdentityKernel(),
              rt.MarginalKernel.from_calibration(cal, rt.VocabMap(6, [0, 1, 2, 3]))):
        want = k.transport(q)
        for x in (np.asmatrix(q), np.ma.masked_array(q)):
            got = k.transport(x)
            assert type(got) is np.ndarray and np.array_equal(got, want), type(k).__name__


def test_sparse_kernel_row_sums_are_the_sums_of_its_rows():
    """SparseKernel.row_sums (never called): per row, not per column (the columns of this
    kernel sum to 0.75 and 1.25)."""
    k = rt.SparseKernel(sp.csr_matrix(np.array([[0.5, 0.5], [0.25, 0.75]])))
    assert k.row_sums().tolist() == [1.0, 1.0]
    assert np.asarray(k.matrix.sum(axis=0)).ravel().tolist() == [0.75, 1.25]


def test_calibration_covariance_of_a_tensor_is_a_float64_tensor_of_the_host_result():
    """A torch calibration set (never given) gets the host float64 covariance back as a
    float64 tensor on its device, whatever its own dtype."""
    torch = pytest.importorskip("torch")
    cal = np.array([[0.5, 0.5], [0.25, 0.75]])
    want = torch.from_numpy(rt.calibration_covariance(cal))
    for dtype in (torch.float64, torch.float32):
        got = rt.calibration_covariance(torch.tensor(cal, dtype=dtype))
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
        assert got.device == torch.device("cpu") and torch.equal(got, want)


def test_sparse_topk_names_the_block_of_rows_holding_a_non_finite_affinity():
    """A NaN or infinite affinity is refused naming the rows of the block that holds it
    (block = 2: rows 2..3 of 4), before any softmax."""
    for bad in (np.nan, np.inf, -np.inf):
        a = np.eye(4)
        a[3, 1] = bad
        with pytest.raises(rt.InputError, match=r"^affinity has a non-finite value in rows 2\.\.3$"):
            rt.sparse_topk_kernel(a, 1, block=2)
        with pytest.raises(rt.InputError, match=r"^affinity has a non-finite value in rows 0\.\.3$"):
            rt.sparse_topk_kernel(a, 1)
