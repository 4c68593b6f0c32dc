"""Torch input on a device numpy cannot read (CUDA), checked without a GPU.

No GPU is available to CI, so the CUDA-only failure that matters most, numpy reading a device
tensor (``np.asarray(t)``, ``t.numpy()``: both raise for a CUDA tensor), is reproduced on the CPU
by the ``device_tensors`` fixture: while it is active, a tensor converts to numpy only after an
explicit ``.cpu()``, exactly as a CUDA tensor does. Every public entry point that takes tensors
is run under it and compared with the numpy reference. Device placement itself (a tensor made on
the wrong device) cannot be reproduced this way; ``tests/test_core_torch.py`` covers it on CUDA
when a GPU is present.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import sampling
from rdk_theory.validation import same_backend
from tests.tolerances import TORCH_FLOAT64_ATOL, assert_close

torch = pytest.importorskip("torch")


@pytest.fixture
def device_tensors(monkeypatch):
    """Tensors behave like CUDA tensors towards numpy: ``.numpy()`` and ``np.asarray`` raise
    unless the tensor came out of ``.cpu()`` or ``.to("cpu", ...)``."""
    cpu, to, to_numpy, to_array = torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.numpy, torch.Tensor.__array__

    def host_copy(self, *args, **kwargs):
        out = cpu(self, *args, **kwargs).clone()
        out._on_host = True
        return out

    def moved(self, *args, **kwargs):
        out = to(self, *args, **kwargs)
        if "cpu" in [str(a) for a in args] + [str(kwargs.get("device"))]:
            out = out.clone() if out is self else out
            out._on_host = True
        return out

    def guarded(convert):
        def method(self, *args, **kwargs):
            if not getattr(self, "_on_host", False):
                raise TypeError("can't convert cuda:0 device type tensor to numpy "
                                "(simulated): use Tensor.cpu() to copy it to host memory first")
            return convert(self, *args, **kwargs)
        return method

    monkeypatch.setattr(torch.Tensor, "cpu", host_copy)
    monkeypatch.setattr(torch.Tensor, "to", moved)
    monkeypatch.setattr(torch.Tensor, "numpy", guarded(to_numpy))
    monkeypatch.setattr(torch.Tensor, "__array__", guarded(to_array))


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=torch.float64) if np.asarray(a).dtype.kind == "f" \
        else torch.as_tensor(np.asarray(a))


def _case(seed=3, n=120, kept=40, c=6, s=20):
    rng = np.random.default_rng(seed)
    cal = rng.dirichlet(np.full(n, 0.3), size=s)
    p = rng.dirichlet(np.full(n, 0.3), size=c)
    ids = np.sort(rng.choice(n, kept, replace=False))
    q = rng.dirichlet(np.full(kept, 0.3), size=c)
    return cal, p, q, rt.VocabMap.from_kept_ids(ids, n)


def _host(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def test_the_simulation_is_not_vacuous(device_tensors):
    t = torch.ones(3, dtype=torch.float64)
    with pytest.raises(TypeError, match="cuda"):
        np.asarray(t)
    with pytest.raises(TypeError, match="cuda"):
        t.numpy()
    with pytest.raises(TypeError, match="cuda"):
        np.minimum(np.ones(3), t)
    assert t.detach().cpu().numpy().tolist() == [1.0, 1.0, 1.0]


def test_kernels_build_from_device_tensors(device_tensors):
    """Every kernel constructor takes its calibration rows, weights, matrix, factor,
    embeddings or affinity as a device tensor and builds the same kernel as from numpy."""
    cal, p, q, vm = _case()
    n = vm.n_target
    qp = rt.tli_proposal(q, vm)
    fo_ref = rt.FirstOrderCovarianceKernel(cal, 0.01, engine="numpy")
    emb = np.random.default_rng(0).normal(size=(n, 8))
    pairs = {
        "first_order": (rt.FirstOrderCovarianceKernel(_t(cal), 0.01, engine="numpy"), fo_ref),
        "first_order rank 2": (rt.FirstOrderCovarianceKernel(_t(cal), 0.01, rank=2, engine="numpy"),
                               rt.FirstOrderCovarianceKernel(cal, 0.01, rank=2, engine="numpy")),
        "first_order float32": (
            rt.FirstOrderCovarianceKernel(_t(cal), 0.01, factor_dtype="float32", engine="numpy"),
            rt.FirstOrderCovarianceKernel(cal, 0.01, factor_dtype="float32", engine="numpy")),
        "from_factor": (rt.FirstOrderCovarianceKernel.from_factor(_t(fo_ref.factor), 0.01,
                                                                  engine="numpy"), fo_ref),
        "marginal": (rt.MarginalKernel.from_calibration(_t(cal), vm),
                     rt.MarginalKernel.from_calibration(cal, vm)),
        "marginal w": (rt.MarginalKernel(_t(cal[0]), 0.3), rt.MarginalKernel(cal[0], 0.3)),
        "covariance": (rt.covariance_softmax_kernel(_t(cal), 0.01),
                       rt.covariance_softmax_kernel(cal, 0.01)),
        "covariance blockwise": (rt.CovarianceSoftmaxKernel(_t(cal), 0.01),
                                 rt.CovarianceSoftmaxKernel(cal, 0.01)),
        "dense": (rt.DenseKernel(_t(np.full((n, n), 1.0 / n))), rt.DenseKernel(np.full((n, n), 1.0 / n))),
        "sparse covariance": (rt.sparse_topk_kernel(rt.covariance_affinity(_t(cal)), 5, 0.01, n=n),
                              rt.sparse_topk_kernel(rt.covariance_affinity(cal), 5, 0.01, n=n)),
        "sparse cosine": (rt.sparse_topk_kernel(rt.cosine_affinity(_t(emb)), 5, 0.5, n=n),
                          rt.sparse_topk_kernel(rt.cosine_affinity(emb), 5, 0.5, n=n)),
        "sparse dense affinity": (rt.sparse_topk_kernel(_t(emb @ emb.T), 5, 0.5),
                                  rt.sparse_topk_kernel(emb @ emb.T, 5, 0.5)),
    }
    for name, (from_tensor, from_numpy) in pairs.items():
        assert_close(_host(from_tensor.transport(qp)), from_numpy.transport(qp),
                     atol=TORCH_FLOAT64_ATOL, err_msg=name)
        assert_close(_host(from_tensor.transport(_t(qp))), from_numpy.transport(qp),
                     atol=TORCH_FLOAT64_ATOL, err_msg=f"{name}, tensor input")


def test_vocab_builders_take_device_tensors(device_tensors):
    cal, p, q_full, _ = _case(kept=120)
    counts = np.random.default_rng(1).integers(0, 50, size=120)
    ids = rt.keep_most_frequent(_t(counts), 30)
    assert ids.tolist() == rt.keep_most_frequent(counts, 30).tolist()
    vm = rt.VocabMap.from_kept_ids(_t(ids), 120)
    assert vm.draft_to_target.tolist() == ids.tolist()
    assert rt.VocabMap(120, _t(ids)).draft_to_target.tolist() == ids.tolist()
    got = rt.pruned_draft_probs(_t(q_full), vm)
    assert isinstance(got, torch.Tensor)
    assert_close(_host(got), rt.pruned_draft_probs(q_full, vm), atol=TORCH_FLOAT64_ATOL)


def test_mixed_numpy_and_tensor_inputs_compute_on_the_tensors_device(device_tensors):
    """One argument a numpy array, the other a device tensor: the result is a tensor and
    equals the all-numpy result."""
    cal, p, q, vm = _case()
    qp = rt.tli_proposal(q, vm)
    fo = rt.FirstOrderCovarianceKernel(cal, 0.01)
    r = fo.transport(qp)
    for got in (rt.acceptance_rate(p, _t(r)), rt.acceptance_rate(_t(p), r)):
        assert isinstance(got, torch.Tensor)
        assert_close(_host(got), rt.acceptance_rate(p, r), atol=TORCH_FLOAT64_ATOL)
    assert_close(_host(rt.residual(_t(p), r)), rt.residual(p, r), atol=TORCH_FLOAT64_ATOL)
    assert_close(_host(rt.total_variation(p, _t(r))), rt.total_variation(p, r),
                 atol=TORCH_FLOAT64_ATOL)
    out, alpha = fo.transport_with_acceptance(_t(qp), p)
    assert_close(_host(out), r, atol=TORCH_FLOAT64_ATOL)
    assert_close(_host(alpha), rt.acceptance_rate(p, r), atol=TORCH_FLOAT64_ATOL)
    out, alpha = fo.transport_with_acceptance(qp, _t(p))
    assert_close(_host(alpha), rt.acceptance_rate(p, r), atol=TORCH_FLOAT64_ATOL)


def test_samplers_take_device_tensors(device_tensors):
    """The step functions read device tensors; the emitted law is checked exactly on a
    point mass (every step must emit the one token of p)."""
    n = 50
    p = np.zeros(n)
    p[7] = 1.0
    r = np.full(n, 1.0 / n)
    gen = torch.Generator().manual_seed(0)
    tokens, accepted = rt.sample_steps(_t(p), _t(r), 500, gen)
    assert rt.emitted_counts(tokens, n)[7] == 500
    tokens, _ = rt.sample_steps(p, _t(r), 100, gen)  # mixed input
    assert isinstance(tokens, torch.Tensor) and rt.emitted_counts(tokens, n)[7] == 100
    rng = np.random.default_rng(0)
    assert rt.verify_draft(_t(p), _t(r), 3, rng)[0] == 7
    assert rt.draw(_t(p), rng) == 7
    assert sampling.InverseCdf(_t(p))(np.array([0.0, 0.5, 0.999]))[0] == 7


def test_generator_on_another_device_or_of_another_kind_is_refused():
    p = torch.full((4,), 0.25, dtype=torch.float64)
    # numpy's and torch's generators are both named Generator: the message names which
    with pytest.raises(rt.InputError, match=r"need a torch.Generator \(or None\), got "
                                            r"numpy.random.Generator$"):
        rt.sample_steps(p, p, 10, np.random.default_rng(0))
    with pytest.raises(rt.InputError, match=r"got torch.Generator$"):
        rt.sample_steps(p.numpy(), p.numpy(), 10, torch.Generator())
    # tensors on CUDA with the default (CPU) generator: the check the step runs first
    with pytest.raises(rt.InputError, match=r"Generator is on cpu but the tensors are on cuda"):
        sampling._check_generator(torch.Generator(), torch.device("cuda"))
    sampling._check_generator(torch.Generator(), torch.device("cpu"))
    sampling._check_generator(None, torch.device("cuda"))


def test_mixed_inputs_promote_to_float64_and_pickles_drop_device_copies():
    """A float32 or integer tensor paired with float64 numpy computes in float64, as numpy
    would (casting the numpy side to the tensor's dtype lost precision, or truncated to 0); a
    pickled map leaves its per-device index tensors behind."""
    import pickle

    got = rt.acceptance_rate(torch.tensor([0, 1, 0]), np.array([0.2, 0.5, 0.3]))
    assert got.dtype == torch.float64 and float(got) == 0.5
    p32 = torch.tensor([1 / 3, 2 / 3], dtype=torch.float32)
    got = rt.acceptance_rate(p32, np.array([0.1, 0.9]))
    assert got.dtype == torch.float64 and float(got) == float(p32[1].double()) + 0.1
    vm = rt.VocabMap.from_kept_ids([0, 2], 3)
    rt.oov_cap(torch.full((3,), 1 / 3, dtype=torch.float64), vm)
    assert "_device_indices" in vm.__dict__
    back = pickle.loads(pickle.dumps(vm))
    assert "_device_indices" not in back.__dict__ and back.draft_to_target.tolist() == [0, 2]


def test_kernels_pickle_and_copy_without_their_device_copies():
    """A kernel's torch copies (one per device and dtype) were pickled with it: a dense
    kernel used on float64 and float32 tensors pickled at 2.5x its own size (the float64
    host copy shares the kernel's array, and the pickle wrote it twice), and on CUDA the
    pickle would hold CUDA tensors. Every kernel now leaves them behind, as a map does, and
    its copy computes the same numbers."""
    import copy
    import pickle

    rng = np.random.default_rng(3)
    cal = rng.dirichlet(np.ones(200), size=6)
    dense = rt.DenseKernel(rng.dirichlet(np.ones(200), size=200))
    bare = len(pickle.dumps(dense))
    kernels = [dense, rt.MarginalKernel(np.full(200, 1 / 200), 0.5),
               rt.CovarianceSoftmaxKernel(cal, 0.1), rt.FirstOrderCovarianceKernel(cal, 0.1),
               rt.sparse_topk_kernel(rt.covariance_affinity(cal), 4, 0.1, n=200)]
    q = torch.tensor(rng.dirichlet(np.ones(200)))
    for kernel in kernels:
        want = kernel.transport(q)
        kernel.transport(q.float())
        for back in (pickle.loads(pickle.dumps(kernel)), copy.deepcopy(kernel)):
            assert type(back._torch) is type(kernel._torch) and not getattr(
                back._torch, "_cache", back._torch), type(kernel).__name__
            assert torch.equal(back.transport(q), want), type(kernel).__name__
    assert len(pickle.dumps(dense)) == bare


def test_a_maps_scatter_plan_and_a_kernels_own_arrays_are_read_only():
    """The ids are read-only so that no one can edit a map into sending two drafter tokens
    to one target id, but the scatter plan every proposal reads was writable (an edit lost a
    token's mass in numpy and not in torch, while the map still compared equal); so were a
    marginal kernel's ``w`` and a dense kernel's own copy, where an edit reached numpy and
    float64 torch but not a float32 tensor's copy."""
    import pickle

    vm = rt.VocabMap(4, np.array([0, 1, 2]))
    for plan in (vm.scatter_plan, pickle.loads(pickle.dumps(vm)).scatter_plan):
        for arr in plan[:2]:
            with pytest.raises(ValueError, match="read-only"):
                arr[0] = 3
    t = vm.on_device("dst", "cpu")
    assert not np.shares_memory(t.numpy(), vm.scatter_plan[1])
    with pytest.raises(ValueError, match="read-only"):
        rt.MarginalKernel(np.array([0, 0, 0.5, 0.5]), 0.5).w[0] = 1
    with pytest.raises(ValueError, match="read-only"):
        rt.DenseKernel(np.eye(3)).matrix[0, 0] = 0
    import copy

    for kernel in (rt.DenseKernel(np.eye(3)), rt.MarginalKernel(np.array([0.5, 0.5]), 0.5)):
        for back in (pickle.loads(pickle.dumps(kernel)), copy.deepcopy(kernel)):
            for arr in (getattr(back, "matrix", None), getattr(back, "w", None)):
                if arr is not None:  # numpy unpickles arrays writable: made read-only again
                    assert not arr.flags.writeable
    mine = np.eye(3)
    rt.DenseKernel(mine, copy=False)
    assert mine.flags.writeable  # the caller's array is left as it was


def test_a_torch_transport_of_a_kernels_read_only_arrays_warns_nothing():
    """Read-only, a kernel's own ``w`` and matrix made torch warn, on the first torch transport
    of the process, that writing to a non-writable array is undefined. In a fresh process
    (torch shows that warning once per process), under ``-W error``."""
    import subprocess
    import sys

    code = ("import numpy as np, torch, rdk_theory as rt\n"
            "q = torch.tensor([1.0, 0.0], dtype=torch.float64)\n"
            "for k in (rt.MarginalKernel(np.array([0.5, 0.5]), 0.5), rt.DenseKernel(np.eye(2))):\n"
            "    k.transport(q)\n"
            "    assert not (getattr(k, 'w', None) if hasattr(k, 'w') else k.matrix).flags.writeable\n")
    run = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_pruned_draft_probs_refuses_a_too_narrow_vocabulary():
    vm = rt.VocabMap.from_kept_ids([0, 5], 6)
    for q in (np.full(4, 0.25), torch.full((4,), 0.25)):
        with pytest.raises(rt.InputError, match="keeps id 5"):
            rt.pruned_draft_probs(q, vm)


def test_inputs_on_two_devices_or_exact_with_tensor_are_refused():
    a = torch.zeros(2)
    with pytest.raises(rt.InputError, match="on cpu and b on meta"):
        same_backend(a, torch.zeros(2, device="meta"))
    exact = np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)
    with pytest.raises(rt.InputError, match="exact Fractions"):
        rt.acceptance_rate(exact, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_a_zero_weight_is_never_drawn_even_if_cumsum_rounds_like_a_parallel_scan(monkeypatch):
    """A CUDA cumsum groups additions differently per prefix, so the prefix sum at a zero
    weight may exceed its neighbour's. Simulated here by a cumsum that inflates every prefix
    after the first by a relative 1e-9: the sampler must still never return the zero-weight
    index (it searches the positive weights only)."""
    cumsum = torch.cumsum

    def scan_like(x, dim, **kwargs):
        out = cumsum(x, dim, **kwargs)
        out[1:] *= 1 + 1e-9
        return out

    monkeypatch.setattr(torch, "cumsum", scan_like)
    weights = torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)
    assert scan_like(weights, 0)[1] > scan_like(weights, 0)[0]  # the rounding is in effect
    u = torch.linspace(0.5 - 1e-8, 0.5 + 1e-8, 2001, dtype=torch.float64)
    drawn = sampling._inverse_cdf_torch(weights, u)
    assert set(drawn.tolist()) == {0, 2}


def test_host_side_reference_helpers_take_device_tensors(device_tensors):
    """The bounds, multi-draft and string-level helpers are host-side reference maths: given
    device tensors they copy them to the host and return exactly what the same numpy input
    gives (``==``: the same float64 arithmetic on the same values)."""
    from rdk_theory import bounds, multidraft, string_level

    _, p, q, vm = _case()
    qp = rt.tli_proposal(q, vm)
    w = p.mean(axis=0)
    small_p, small_q = np.array([0.5, 0.3, 0.2]), np.array([0.6, 0.4, 0.0])
    cases = {
        "tv_upper_bound": (bounds.tv_upper_bound, (p, qp)),
        "best_mixing_lambda": (bounds.best_mixing_lambda, (p, qp, w)),
        "best_static_kernel_lp": (lambda a, b: bounds.best_static_kernel_lp(a, b)[1],
                                  (p[:2, :6] / p[:2, :6].sum(-1, keepdims=True),
                                   qp[:2, :6] / qp[:2, :6].sum(-1, keepdims=True))),
        "expected_tokens_per_call": (bounds.expected_tokens_per_call, (np.array([0.5, 0.25]),)),
        "beta": (lambda a, b: multidraft.beta(a, b, 1.5), (small_p, small_q)),
        "kseq_is_valid": (lambda a, b: multidraft.kseq_is_valid(a, b, 1.5, 2), (small_p, small_q)),
        "kseq_acceptance": (lambda a, b: multidraft.kseq_acceptance(a, b, 1.5, 2), (small_p, small_q)),
        "kseq_output_law": (lambda a, b: multidraft.kseq_output_law(a, b, 1.5, 2), (small_p, small_q)),
        "kseq_best_rho": (lambda a, b: multidraft.kseq_best_rho(a, b, 2), (small_p, small_q)),
        "optimal_acceptance_lp": (lambda a, b: multidraft.optimal_acceptance_lp(a, b, 2),
                                  (small_p, small_q)),
        "optimal_acceptance_cut": (lambda a, b: multidraft.optimal_acceptance_cut(a, b, 2),
                                   (small_p, small_q)),
        "slem_acceptance": (string_level.slem_acceptance, (small_p, small_q)),
        "slrs_acceptance": (string_level.slrs_acceptance, (small_p, small_q)),
    }
    for name, (fn, args) in cases.items():
        want = fn(*args)
        got = fn(*(_t(a) for a in args))
        assert not isinstance(got, torch.Tensor), name
        assert np.array_equal(np.asarray(got), np.asarray(want)), (name, got, want)


def test_sample_counts_takes_device_tensors(device_tensors):
    """sample_counts on tensors (a CUDA-like device) draws with the torch generator exactly
    what sample_steps draws, chunk by chunk on the same generator, and counts on the host."""
    p = _t([0.5, 0.0, 0.3, 0.2])
    r = _t([0.1, 0.0, 0.6, 0.1])  # sub-stochastic: a drafter token the target lacks
    g = torch.Generator().manual_seed(7)
    parts = [rt.sample_steps(p, r, size, g) for size in (300, 300, 100)]
    counts, accepted = rt.sample_counts(p, r, 700, torch.Generator().manual_seed(7), chunk=300)
    assert isinstance(counts, np.ndarray) and counts.dtype == np.int64
    want = rt.emitted_counts(torch.cat([t for t, _ in parts]), 4)
    assert np.array_equal(counts, want) and counts.sum() == 700 and counts[1] == 0
    assert accepted == sum(int(a.sum()) for _, a in parts)


def test_host_side_helpers_read_half_precision_tensors_as_numpy_float16(device_tensors):
    """A float16 row that misses 1 by its rounding (4.9e-4 here, beyond the float64 1e-4) is
    read by the host-side helpers from a tensor as from a numpy float16 array: the tensor is
    checked on its device in its own precision, then copied (it was refused)."""
    p16 = (np.full(12, 1 / 12) * 1.0008).astype(np.float16)
    r = np.random.default_rng(0).dirichlet(np.ones(12))
    assert abs(p16.astype(np.float64).sum() - 1) > rt.validation.PROB_ATOL
    from rdk_theory.bounds import tv_upper_bound

    assert tv_upper_bound(torch.from_numpy(p16), _t(r)) == tv_upper_bound(p16, r)
    from rdk_theory.multidraft import kseq_acceptance

    assert kseq_acceptance(torch.from_numpy(p16), _t(r), 1.0, 2) == kseq_acceptance(p16, r, 1.0, 2)


@pytest.mark.parametrize("scale", [2.0 ** -1074, 2.0 ** -1060, 2.0 ** -1000, 1.0])
def test_the_torch_inverse_cdf_draws_the_same_indices_whatever_the_scale_of_the_weights(scale):
    """The torch twin of the InverseCdf scale test: weights (5e-324, 5e-324) drew 1/4 : 3/4,
    because ``u * total`` rounded to multiples of 2^-1074."""
    from tests.test_core_robustness import SCALE_TEST_UNIFORMS, SCALE_TEST_WEIGHTS

    u = torch.tensor(SCALE_TEST_UNIFORMS)
    for w in SCALE_TEST_WEIGHTS:
        w = np.array(w)
        got = sampling._inverse_cdf_torch(torch.tensor(w * scale), u)
        assert np.array_equal(got.numpy(), rt.InverseCdf(w)(u.numpy())), (w, scale)
