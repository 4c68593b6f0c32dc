"""numpy float64 and torch (CPU, and CUDA when present) give the same numbers."""
import numpy as np
import pytest

import rdk_theory as rt
from tests.stats import assert_matches_law, assert_pvalue, binomial_pvalue
from tests.test_mc_samplers import _case as mc_case
from tests.tolerances import FLOAT32_ATOL, TORCH_FLOAT64_ATOL, assert_close

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _case(seed=0, n=300, kept=60, c=16):
    rng = np.random.default_rng(seed)
    cal = rng.dirichlet(np.full(n, 0.2), size=40)
    p = rng.dirichlet(np.full(n, 0.2), size=c)
    ids = rng.choice(n, kept, replace=False)
    ids[:5] = -1  # heterogeneous: five drafter tokens absent from the target
    vm = rt.VocabMap(n, ids)
    q = rng.dirichlet(np.full(kept, 0.3), size=c)
    return cal, p, q, vm


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_all_proposals_and_acceptances_agree(device):
    cal, p, q, vm = _case()
    kernels = {
        "covariance": rt.covariance_softmax_kernel(cal, 0.01),
        "marginal": rt.MarginalKernel.from_calibration(cal, vm),
        "sparse": rt.sparse_topk_kernel(rt.covariance_affinity(cal), 8, 0.01, n=300),
    }
    fo = rt.FirstOrderCovarianceKernel(cal, 0.01)
    tp = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    for name, ker in kernels.items():
        ref = rt.build_proposals(q, vm, kernel=ker, first_order=fo)
        got = rt.build_proposals(tp(q), vm, kernel=ker, first_order=fo)
        for k in ref:
            assert_close(got[k].cpu().numpy(), ref[k], atol=TORCH_FLOAT64_ATOL, err_msg=f"{name}/{k}")
            assert_close(rt.acceptance_rate(tp(p), got[k]).cpu().numpy(),
                         rt.acceptance_rate(p, ref[k]), atol=TORCH_FLOAT64_ATOL)
            assert_close(rt.residual(tp(p), got[k]).cpu().numpy(), rt.residual(p, ref[k]),
                         atol=TORCH_FLOAT64_ATOL)
            assert_close(rt.step_output_law(tp(p), got[k]).cpu().numpy(), p,
                         atol=TORCH_FLOAT64_ATOL)
    assert_close(rt.oov_cap(tp(p), vm).cpu().numpy(), rt.oov_cap(p, vm), atol=TORCH_FLOAT64_ATOL)


@pytest.mark.mc
@pytest.mark.parametrize("sampler", rt.SAMPLERS)
@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_torch_sampler_emits_the_target_law(device, sampler):
    """Monte Carlo, per sampler: n = 200,000 torch steps on the numpy tier's case (exact zeros
    in p, a heterogeneous drafter whose vanilla proposal is sub-stochastic); proposals built on
    the torch path; chi-square against p and the accepted count against Binomial(n, alpha),
    each at the suite's per-test false-alarm rate FALSE_ALARM_PER_TEST = 4e-6; no
    zero-probability token emitted."""
    p, q, vm, cal = mc_case()
    tau = 0.05
    tp = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    props = rt.build_proposals(tp(q), vm, kernel=rt.covariance_softmax_kernel(cal, tau),
                               first_order=rt.FirstOrderCovarianceKernel(cal, tau))
    r = props[sampler]
    if sampler == "vanilla":
        assert float(r.sum()) < 1 - 1e-3  # the drafter's mass off the target is never accepted
    gen = torch.Generator(device=device).manual_seed(7 + rt.SAMPLERS.index(sampler))
    tokens, accepted = rt.sample_steps(tp(p), r, 200_000, gen)
    counts = rt.emitted_counts(tokens.cpu().numpy(), p.size)
    assert_matches_law(counts, p, f"torch {sampler} on {device}, n = 200000")
    alpha = float(rt.acceptance_rate(tp(p), r))
    assert_pvalue(binomial_pvalue(int(accepted.sum()), 200_000, alpha),
                  f"torch {sampler}: accepted count vs Binomial(200000, {alpha:.4f})")


def test_torch_input_validation_names_the_problem():
    with pytest.raises(rt.InputError, match="non-finite"):
        rt.acceptance_rate(torch.tensor([float("nan"), 1.0]), torch.tensor([0.5, 0.5]))
    with pytest.raises(rt.InputError, match="sum to 1"):
        rt.acceptance_rate(torch.tensor([0.2, 0.2]), torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_first_order_clip_and_renormalise_agree_with_numpy(device):
    """At tau = 1e-6 the first-order vector has negative entries on every row: torch must clip
    them and renormalise to sum q' exactly as numpy does (the clip path, not only the sum)."""
    cal, p, q, vm = _case(seed=2)
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-6, engine="numpy")
    qp = rt.tli_proposal(q, vm)
    assert np.mean(fo.transport_unclipped(qp).min(axis=-1) < 0) > 0.5  # the regime under test
    ref = fo.transport(qp)
    got = fo.transport(torch.as_tensor(qp, dtype=torch.float64, device=device)).cpu().numpy()
    assert_close(got, ref, atol=TORCH_FLOAT64_ATOL, err_msg="clipped first-order proposal")
    assert got.min() >= 0
    assert_close(got.sum(-1), qp.sum(-1), atol=TORCH_FLOAT64_ATOL, err_msg="sum q'")


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_torch_safe_divide_and_the_clip_check_at_the_edges(device):
    """``safe_divide`` on torch gives 0 where the denominator is 0 (a drafter row with no mass
    on the target's tokens) and the plain quotient for a subnormal one, as numpy does; the
    first-order transport of an empty batch is an empty batch (its negativity check reads
    the whole tensor at once, which must not fail on zero elements)."""
    tiny = 2.0 ** -1070  # subnormal: the sum 4 * tiny is exact, so are the quotients
    num = np.array([[0.25, 0.75], [0.0, 0.0], [tiny, 3 * tiny]])
    den = num.sum(-1, keepdims=True)
    tp = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    want = np.array([[0.25, 0.75], [0.0, 0.0], [0.25, 0.75]])
    np.testing.assert_array_equal(rt._backend.safe_divide(num, den), want)
    np.testing.assert_array_equal(rt._backend.safe_divide(tp(num), tp(den)).cpu().numpy(), want)
    counts = torch.tensor([[0, 2, 2], [0, 0, 0]], device=device)  # integer tensors: true division
    np.testing.assert_array_equal(
        rt._backend.safe_divide(counts, counts.sum(-1, keepdim=True)).cpu().numpy(),
        [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])
    vm = rt.VocabMap(4, np.array([0, 1, -1]))
    q = tp([[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])  # the second row's mass is all off the target
    np.testing.assert_array_equal(rt.tli_proposal(q, vm).cpu().numpy(),
                                  [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    cal, _, _, _ = _case(seed=4)
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-6)
    assert tuple(fo.transport(tp(np.zeros((0, cal.shape[1])))).shape) == (0, cal.shape[1])


@pytest.mark.parametrize("tau", [1e-6, 1.0])  # clipped rows, and none
def test_the_clip_without_host_sync_gives_the_eager_numbers(monkeypatch, tau):
    """Inside a CUDA graph capture the first-order clip runs without a host sync; here that
    path is forced on CPU tensors and must give the eager clip's numbers exactly, for a batch
    with negative entries (every step applied) and one without (the rescale is by exactly 1)."""
    from rdk_theory import first_order

    cal, _, q, vm = _case(seed=5)
    fo = rt.FirstOrderCovarianceKernel(cal, tau)
    qp = torch.as_tensor(rt.tli_proposal(q, vm))
    negative = bool((fo.transport_unclipped(qp) < 0).any())
    assert negative == (tau < 1)  # the regime under test
    eager = fo.transport(qp.clone())
    monkeypatch.setattr(first_order, "_capturing", lambda t: True)
    np.testing.assert_array_equal(fo.transport(qp.clone()).numpy(), eager.numpy())
    assert tuple(fo.transport(qp[:0].clone()).shape) == (0, qp.shape[1])


@pytest.mark.gpu
def test_first_order_proposal_and_acceptance_replay_in_a_cuda_graph():
    """``rdk_proposal_with_acceptance(..., check=False)`` on CUDA tensors can be captured in a
    CUDA graph after one warm-up call (device copies of the kernel and the map made there);
    replayed on new drafter rows it gives the eager numbers, clipped rows included."""
    cal, p, q, vm = _case(seed=6)
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-6)
    tp = lambda a: torch.as_tensor(a, dtype=torch.float64, device="cuda")  # noqa: E731
    static_p, static_q = tp(p), tp(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graphs asks
        rt.rdk_proposal_with_acceptance(static_p, static_q, vm, fo, check=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, alpha = rt.rdk_proposal_with_acceptance(static_p, static_q, vm, fo, check=False)
    q2 = np.random.default_rng(7).dirichlet(np.full(q.shape[1], 0.3), size=q.shape[0])
    static_q.copy_(tp(q2))
    graph.replay()
    want, a_want = rt.rdk_proposal_with_acceptance(p, q2, vm, fo)
    assert np.mean(fo.transport_unclipped(rt.tli_proposal(q2, vm)).min(-1) < 0) > 0.5
    assert_close(out.cpu().numpy(), want, atol=TORCH_FLOAT64_ATOL)
    assert_close(alpha.cpu().numpy(), a_want, atol=TORCH_FLOAT64_ATOL)


def test_torch_input_follows_the_numpy_validation_rules():
    """Round-off negatives down to -1e-12 read as 0 (in a copy); complex tensors are refused
    with an InputError, as for numpy."""
    x = torch.tensor([0.5, 0.5 + 1e-13, -1e-13], dtype=torch.float64)
    assert rt.acceptance_rate(x, x).item() == rt.acceptance_rate(x.numpy(), x.numpy())
    assert x[2].item() == -1e-13
    with pytest.raises(rt.InputError, match="negative probability"):
        rt.acceptance_rate(torch.tensor([0.5, 0.5 + 2e-12, -2e-12], dtype=torch.float64), x)
    with pytest.raises(rt.InputError, match="real numbers"):
        rt.acceptance_rate(torch.tensor([0.5, 0.5], dtype=torch.complex128),
                           torch.tensor([0.5, 0.5], dtype=torch.float64))


@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "meta"])
def test_sparse_and_meta_tensors_are_input_errors(layout):
    """A sparse tensor (no elementwise minimum on it) or a meta tensor (a shape without values)
    was a raw NotImplementedError or RuntimeError from torch inside the checks; now every
    entry point names the input and what to do (beside a CPU tensor, a meta one is on the
    wrong device)."""
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    q2 = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    convert = {"sparse_coo": lambda t: t.to_sparse(), "sparse_csr": _to_csr,
               "meta": lambda t: t.to("meta")}[layout]
    vm = rt.VocabMap(3, [0, 1])
    cal = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1)
    calls = {
        "target_probs": [lambda b: rt.acceptance_rate(b, p), lambda b: rt.oov_cap(b, vm),
                         lambda b: fo.transport_with_acceptance(p, b)],
        "proposal": [lambda b: rt.step_output_law(p, b), lambda b: rt.residual(p, b),
                     lambda b: rt.sample_counts(p, b, 10, np.random.default_rng(0))],
        "draft_probs": [lambda b: rt.tli_proposal(b, vm), lambda b: rt.vanilla_proposal(b, vm)],
        "q_prime": [lambda b: fo.transport(b)],
        "calibration_probs": [lambda b: rt.FirstOrderCovarianceKernel(b, 0.1)],
    }
    inputs = {"draft_probs": q2, "calibration_probs": torch.as_tensor(cal)}
    want = "(meta device|on meta)" if layout == "meta" else "must be a dense tensor"
    for name, fns in calls.items():
        bad = convert(inputs.get(name, p))
        for fn in fns:
            with pytest.raises(rt.InputError, match=f"{name} .*{want}|{name} {want}"):
                fn(bad)


def _to_csr(t):
    import warnings

    with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return t.to_sparse_csr()


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_rdk_proposal_with_acceptance_agrees_on_torch(device):
    """The first-order kernel's fused path (``normalise=True``) on a tensor divides first on
    the torch path: the same proposal and acceptance as numpy, for a heterogeneous map (some
    drafter mass unplaced, so ``sum r < 1``), and with ``p`` given as a numpy array beside
    a tensor ``q`` (moved to the tensor's device)."""
    cal, p, q, vm = _case(seed=3)
    tp = lambda a: torch.as_tensor(a, dtype=torch.float64, device=device)  # noqa: E731
    for ker in (rt.FirstOrderCovarianceKernel(cal, 0.01), rt.MarginalKernel.from_calibration(cal, vm)):
        want, a_want = rt.rdk_proposal_with_acceptance(p, q, vm, ker)
        assert_close(want, ker.transport(rt.tli_proposal(q, vm)))
        for pp in (tp(p), p):
            got, a_got = rt.rdk_proposal_with_acceptance(pp, tp(q), vm, ker)
            assert rt._backend.is_torch(got) and got.device.type == device
            assert_close(got.cpu().numpy(), want, atol=TORCH_FLOAT64_ATOL)
            assert_close(a_got.cpu().numpy(), a_want, atol=TORCH_FLOAT64_ATOL)
        assert_close(rt.rdk_proposal(tp(q), vm, ker).cpu().numpy(), want, atol=TORCH_FLOAT64_ATOL)


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_blockwise_covariance_kernel_runs_on_the_tensors_device_and_is_differentiable(device):
    """``CovarianceSoftmaxKernel.transport`` of a tensor: on its device, in its dtype, equal
    to the dense kernel's ``q' M`` to float64 round-off over several row blocks, and
    differentiable: the gradient of ``(q' M) . w`` is ``M w`` in every entry of ``q'``, the
    zero entries (outside the support the forward pass needs) included, without autograd
    keeping the rows of ``M`` for the backward pass. Integer input gives float64."""
    cal, _, q, vm = _case(seed=5)
    qp = rt.tli_proposal(q, vm)
    assert (qp == 0).any(axis=0).any()
    n = qp.shape[-1]
    dense = rt.covariance_softmax_kernel(cal, 0.01).matrix
    blockwise = rt.CovarianceSoftmaxKernel(cal, 0.01, block_bytes=8 * n * 7)  # 7 rows a block
    x = torch.tensor(qp, device=device, requires_grad=True)
    saved = []  # entries autograd keeps for the backward pass
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        out = blockwise.transport(x)
    assert sum(saved) < n * n / 4, sum(saved)  # not M's n^2 entries: blocks are formed again
    assert out.device.type == device and out.dtype == torch.float64
    assert_close(out.detach().cpu().numpy(), qp @ dense, atol=TORCH_FLOAT64_ATOL)
    w = np.random.default_rng(0).random(n)
    (out @ torch.tensor(w, device=device)).sum().backward()
    assert_close(x.grad.cpu().numpy(), np.broadcast_to(dense @ w, qp.shape), atol=TORCH_FLOAT64_ATOL)
    out32 = blockwise.transport(torch.tensor(qp, dtype=torch.float32, device=device))
    assert out32.dtype == torch.float32 and out32.device.type == device
    hits = blockwise.transport(torch.tensor((qp > 0.05).astype(np.int64), device=device))
    assert hits.dtype == torch.float64
    assert_close(hits.cpu().numpy(), (qp > 0.05) @ dense, atol=TORCH_FLOAT64_ATOL)
    assert_close(out32.cpu().numpy(), qp @ dense, atol=FLOAT32_ATOL)


@pytest.mark.parametrize("device", [pytest.param(d, marks=pytest.mark.gpu if d == "cuda" else ())
                                    for d in DEVICES])
def test_every_kernel_transports_an_integer_tensor_as_numpy_does(device):
    """An integer (or boolean) tensor is promoted to float64, as numpy promotes an integer
    array: the kernels' matrices were cast to the input's dtype, so every entry below 1
    became 0 (the marginal kernel lost 59% of the mass, the covariance kernels returned 0)."""
    import scipy.sparse as sp

    cal = np.random.default_rng(4).dirichlet(np.ones(4), size=5)
    kernels = [rt.MarginalKernel.from_calibration(cal, rt.VocabMap(4, [0, 1])),
               rt.covariance_softmax_kernel(cal, 0.5), rt.CovarianceSoftmaxKernel(cal, 0.5),
               rt.FirstOrderCovarianceKernel(cal, 0.5),
               rt.SparseKernel(sp.csr_matrix(rt.covariance_softmax_kernel(cal, 0.5).matrix))]
    q = np.array([[0, 0, 1, 0], [1, 0, 1, 0]])
    for kernel in kernels:
        for t in (torch.tensor(q, device=device), torch.tensor(q > 0, device=device)):
            out = kernel.transport(t)
            assert out.dtype == torch.float64, type(kernel).__name__
            assert_close(out.cpu().numpy(), kernel.transport(q), atol=TORCH_FLOAT64_ATOL)
    fo = kernels[3]
    assert_close(fo.transport_unclipped(torch.tensor(q)).numpy(), fo.transport_unclipped(q),
                 atol=TORCH_FLOAT64_ATOL)


@pytest.mark.parametrize("dtype, tau, wider", [
    ("float16", 1e-6, "float32 or float64"), ("bfloat16", 1e-40, "float32 or float64"),
    ("float32", 1e-40, "float64")])
def test_first_order_refuses_a_tau_whose_c_over_tau_the_tensors_dtype_cannot_hold(dtype, tau, wider):
    """The torch path computes in the input's dtype with C / tau rounded to it: past the
    dtype's largest value that was inf, and inf * 0 a NaN proposal and acceptance with no
    word (float16 from tau ~ max|C| / 65504: the README example's LM gave NaN in every row at
    tau = 1e-7). Now an InputError naming the dtype, while float64 tensors at the same tau
    give the numpy numbers."""
    cal = np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1]])
    q, p = np.array([0.4, 0.3, 0.2, 0.1]), np.full(4, 0.25)
    fo = rt.FirstOrderCovarianceKernel(cal, tau=tau)
    want, want_alpha = fo.transport_with_acceptance(q, p)
    assert_close(want, [0.475, 0.375, 0.075, 0.075])
    assert_close(want_alpha, 0.65)
    dt = getattr(torch, dtype)
    for call in (lambda: fo.transport_with_acceptance(torch.tensor(q, dtype=dt), torch.tensor(p, dtype=dt)),
                 lambda: fo.transport(torch.tensor(q, dtype=dt)),
                 lambda: rt.rdk_proposal(torch.tensor(q, dtype=dt), rt.VocabMap(4, np.arange(4)), fo)):
        with pytest.raises(rt.InputError, match=rf"C / tau at tau = {tau:g} holds 2\.121e\+\d\d, "
                           rf"beyond the range of torch\.{dtype} .* pass {wider} tensors, or "
                           "choose a larger tau"):
            call()
    got, alpha = fo.transport_with_acceptance(torch.tensor(q), torch.tensor(p))
    assert_close(got.numpy(), want) and assert_close(float(alpha), want_alpha)


def test_a_numpy_array_of_any_layout_pairs_with_a_tensor():
    """A numpy array with a negative stride (``p[::-1]``) paired with a tensor was torch's raw
    ValueError in every function that moves it to the tensor's device; it now gives the
    numbers of a contiguous copy, as a read-only one (a ``np.broadcast_to`` view) does. The
    process's warning filters are left as they were (silencing torch's warning about a
    read-only array changed them on every call: a warning meant to show once showed on each)."""
    import warnings

    p = np.array([0.2, 0.3, 0.5])[::-1]
    r = torch.tensor([0.5, 0.2, 0.3], dtype=torch.float64)
    vm = rt.VocabMap(3, np.array([0, 2]))
    q = torch.tensor([0.25, 0.75], dtype=torch.float64)
    filters = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        warnings.filterwarnings("error")
        assert float(rt.acceptance_rate(p, r)) == pytest.approx(0.9)
        assert float(rt.acceptance_rate(np.broadcast_to(p, (4, 3)), r)[3]) == pytest.approx(0.9)
        got = rt.rdk_proposal_with_acceptance(p, q, vm, rt.IdentityKernel())
        want = rt.rdk_proposal_with_acceptance(p.copy(), q, vm, rt.IdentityKernel())
        for g, w in zip(got, want):
            assert torch.equal(g, w)
        counts, _ = rt.sample_counts(p, r, 50, torch.Generator().manual_seed(0))
        assert int(counts.sum()) == 50
        flipped = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])[::-1]
        moved = rt.DenseKernel(flipped, copy=False).transport(r)
        assert moved.tolist() == [0.3, 0.2, 0.5]
    assert warnings.filters == filters
    with warnings.catch_warnings():  # reading the flags of a broadcast_arrays output warns
        warnings.filterwarnings("error", category=FutureWarning)
        both = np.broadcast_arrays(np.full(3, 1 / 3), np.zeros((2, 3)))[0]
        assert rt.acceptance_rate(both, r).tolist() == pytest.approx([5 / 6, 5 / 6])
    seen = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):  # one warning site: shown once, the calls between reset nothing
            warnings.warn("once per site", UserWarning)
            rt.acceptance_rate(p, r)
    assert [str(w.message) for w in seen] == ["once per site"]
