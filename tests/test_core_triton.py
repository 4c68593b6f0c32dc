"""The Triton engine of first-order RDK (rdk_theory._triton) against the float64 reference.

The engine runs only on CUDA: those tests are marked ``gpu`` and skip without a CUDA device or
triton (CI has neither). The routing tests at the end run everywhere.
"""
import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import _triton
from tests.tolerances import FLOAT32_ATOL, assert_close

torch = pytest.importorskip("torch")

CUDA = torch.cuda.is_available() and _triton.available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device and triton")


def _laws(rng, shape, sharp=2.0):
    x = np.exp(rng.standard_normal(shape) * sharp)
    return x / x.sum(-1, keepdims=True)


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls that reach the Triton engine, and sends calls of any size there (by
    default small ones take the torch path, test_small_calls_keep_the_torch_path)."""
    monkeypatch.setattr(_triton, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(_triton, "MIN_ELEMENTS_DECODE", 0)
    calls = []
    real = _triton.first_order

    def counted(*args, **kwargs):
        calls.append(args[1].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(_triton, "first_order", counted)
    return calls


def _cuda32(a):
    return torch.as_tensor(a, dtype=torch.float32, device="cuda")


# (batch shape, N, calibration rows S, tau): a batch of 1 and ones that are not multiples of the
# 16-row step, vocabularies not multiples of a block (and one below a block), S from 1 to 300
# (K = 16, 64, 512 and BLOCK_N = 128, 128, 16), tau from the smooth to the clipping regime
CASES = [((1,), 5, 1, 1.0), ((3,), 130, 3, 0.01), ((17,), 200, 20, 0.05), ((40,), 1000, 64, 1e-3),
         ((2, 9), 257, 8, 10.0), ((5,), 3000, 300, 1e-2), ((21,), 25, 30, 1e-4),
         ((33,), 1000, 64, 1e-6)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("normalise", [True, False])
@pytest.mark.parametrize("batch, n, s, tau", CASES)
def test_triton_engine_matches_the_float64_reference(spy, batch, n, s, tau, normalise):
    rng = np.random.default_rng(n + s)
    cal = _laws(rng, (s, n))
    fo, ref = rt.FirstOrderCovarianceKernel(cal, tau), rt.FirstOrderCovarianceKernel(
        cal, tau, engine="numpy")
    r = _laws(rng, (*batch, n)) * rng.uniform(0.5, 2.0, (*batch, 1))
    r.reshape(-1, n)[0, : n // 2] = 0  # a row with zeros
    if r.reshape(-1, n).shape[0] > 2:
        r.reshape(-1, n)[1] = 0  # a row of zeros: zero proposal, zero acceptance
    p = _laws(rng, (*batch, n))
    want_out, want_alpha = ref.transport_with_acceptance(r, p, normalise=normalise)
    got_out, got_alpha = fo.transport_with_acceptance(_cuda32(r), _cuda32(p), normalise=normalise)
    only_out = fo.transport(_cuda32(r), normalise=normalise)
    assert len(spy) == 2  # both calls ran on the Triton engine
    assert got_out.shape == r.shape and got_alpha.shape == batch and got_out.is_cuda
    assert_close(got_out.double().cpu().numpy(), want_out, rtol=0, atol=FLOAT32_ATOL)
    assert_close(only_out.double().cpu().numpy(), want_out, rtol=0, atol=FLOAT32_ATOL)
    assert_close(got_alpha.double().cpu().numpy(), want_alpha, rtol=0, atol=FLOAT32_ATOL)
    assert float(got_out.min()) >= 0
    sums = got_out.double().sum(-1).cpu().numpy()
    assert_close(sums, (r.sum(-1) > 0) if normalise else r.sum(-1), rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_the_clip_is_exercised_and_matches(spy):
    """A tau that makes negative entries in most rows: the rows are clipped and rescaled and
    their acceptance recomputed, as on the torch path (which runs with engine="numpy")."""
    rng = np.random.default_rng(5)
    cal, r, p = _laws(rng, (64, 1000)), _laws(rng, (50, 1000)), _laws(rng, (50, 1000))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-6)
    torch_path = rt.FirstOrderCovarianceKernel(cal, 1e-6, engine="numpy")
    raw = torch_path.transport_unclipped(r / r.sum(-1, keepdims=True))
    assert (raw < 0).any(-1).sum() >= 25
    got = fo.transport_with_acceptance(_cuda32(r), _cuda32(p), normalise=True)
    want = torch_path.transport_with_acceptance(_cuda32(r), _cuda32(p), normalise=True)
    assert len(spy) == 1
    for g, w in zip(got, want):
        assert_close(g.double().cpu().numpy(), w.double().cpu().numpy(), rtol=0,
                     atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_the_decode_call_runs_on_triton_and_agrees(spy):
    """rdk_proposal_with_acceptance from the drafter's q on CUDA float32 tensors (TLI's division
    folded into the engine) against the numpy float64 call."""
    rng = np.random.default_rng(7)
    n, kept = 4000, 1500
    vm = rt.VocabMap.from_kept_ids(np.sort(rng.choice(n, kept, replace=False)), n)
    cal, p, q = _laws(rng, (64, n)), _laws(rng, (64, n)), _laws(rng, (64, kept))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.01)
    want = rt.rdk_proposal_with_acceptance(p, q, vm, fo)
    got = rt.rdk_proposal_with_acceptance(_cuda32(p), _cuda32(q), vm, fo)
    assert len(spy) == 1
    for g, w in zip(got, want):
        assert_close(g.double().cpu().numpy(), w, rtol=0, atol=FLOAT32_ATOL)


def _map(rng, kind, n):
    """Drafter-to-target maps: a pruned drafter (sorted kept ids), a mismatched one (ids in
    no order, some drafter tokens absent from the target) and a drafter larger than the
    target (most of its tokens absent)."""
    if kind == "pruned":
        return rt.VocabMap.from_kept_ids(np.sort(rng.choice(n, n // 3, replace=False)), n)
    ids = rng.choice(n, n // 2 if kind == "mismatched" else n // 4, replace=False)
    absent = np.full(ids.size // 5 if kind == "mismatched" else 3 * n, -1)
    return rt.VocabMap(n, rng.permutation(np.concatenate([ids, absent])))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("kind", ["pruned", "mismatched", "larger drafter"])
@pytest.mark.parametrize("batch, n, s, tau", [((40,), 1000, 64, 0.01), ((2, 9), 257, 8, 1e-6),
                                              ((3,), 3000, 300, 1e-3)])
def test_the_decode_call_reads_q_through_the_map(spy, kind, batch, n, s, tau):
    """rdk_proposal_with_acceptance gives the Triton engine the drafter's q itself (TLI's
    scatter fused into its passes: the spy sees q's width, not N): the float64 numbers, and
    those of the engine run on the scattered r, with a row that has no mass on the target's
    tokens (zero proposal, zero acceptance) and clipped rows at tau = 1e-6."""
    rng = np.random.default_rng(n + s)
    vm = _map(rng, kind, n)
    cal, p = _laws(rng, (s, n)), _laws(rng, (*batch, n))
    q = _laws(rng, (*batch, vm.n_draft))
    flat = q.reshape(-1, vm.n_draft)
    flat[1] = np.where(vm.draft_to_target < 0, 1.0, 0.0) if kind != "pruned" else flat[1]
    flat[1] /= flat[1].sum()
    fo = rt.FirstOrderCovarianceKernel(cal, tau)
    want_out, want_alpha = rt.rdk_proposal_with_acceptance(
        p, q, vm, rt.FirstOrderCovarianceKernel(cal, tau, engine="numpy"))
    got_out, got_alpha = rt.rdk_proposal_with_acceptance(_cuda32(p), _cuda32(q), vm, fo)
    assert spy == [q.shape]  # fused: the engine got q, not r
    scattered = fo.transport_with_acceptance(rt.vanilla_proposal(_cuda32(q), vm), _cuda32(p),
                                             normalise=True)
    assert spy[1] == (*batch, n)
    assert got_out.shape == (*batch, n) and got_alpha.shape == batch
    for got, want, other in ((got_out, want_out, scattered[0]),
                             (got_alpha, want_alpha, scattered[1])):
        got = got.double().cpu().numpy()
        assert_close(got, want, rtol=0, atol=FLOAT32_ATOL)
        assert_close(got, other.double().cpu().numpy(), rtol=0, atol=FLOAT32_ATOL)
    if kind != "pruned":
        assert float(got_alpha.reshape(-1)[1]) == 0
        assert float(got_out.reshape(-1, n)[1].abs().sum()) == 0


@pytest.mark.gpu
@needs_cuda
def test_the_fused_decode_call_is_captured_in_a_cuda_graph(spy):
    """The decode call from q, captured after one eager call: the replay on new drafter rows
    gives the float64 numbers (the map's index and the gathered L are built by the eager
    call)."""
    rng = np.random.default_rng(12)
    n = 600
    vm = _map(rng, "mismatched", n)
    cal = _laws(rng, (16, n))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-5)
    ref = rt.FirstOrderCovarianceKernel(cal, 1e-5, engine="numpy")
    x, y = _cuda32(_laws(rng, (24, n))), _cuda32(_laws(rng, (24, vm.n_draft)))
    rt.rdk_proposal_with_acceptance(x, y, vm, fo, check=False)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        rt.rdk_proposal_with_acceptance(x, y, vm, fo, check=False)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, alpha = rt.rdk_proposal_with_acceptance(x, y, vm, fo, check=False)
    assert spy == [(24, vm.n_draft)] * 3
    p, q = _laws(rng, (24, n)), _laws(rng, (24, vm.n_draft), 3.0)
    x.copy_(_cuda32(p))
    y.copy_(_cuda32(q))
    graph.replay()
    torch.cuda.synchronize()
    want_out, want_alpha = rt.rdk_proposal_with_acceptance(p, q, vm, ref)
    assert_close(out.double().cpu().numpy(), want_out, rtol=0, atol=FLOAT32_ATOL)
    assert_close(alpha.double().cpu().numpy(), want_alpha, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_rows_with_tiny_mass_on_the_targets_tokens(spy):
    """The engine folds TLI's division into its passes, so a row whose mass on the target's
    tokens is tiny had w, sum v and sum r below float32's normal range: at 1e-41 an
    acceptance of 0.148 for 0.444 (Triton's interpreter). L and the r * coef term are scaled by
    _triton.SCALE, and these rows get the float64 numbers of the float32 q, fused or not
    (masses 1e-25 to 1e-41; the entries of the last rows are float32 subnormals, which carry a
    few bits: at 1e-41 the float32 q itself is 2 % off the float64 one)."""
    rng = np.random.default_rng(18)
    n = 500
    cal = _laws(rng, (16, n))
    vm = rt.VocabMap(n, np.concatenate([rng.permutation(n)[:200], -np.ones(50, int)]))
    masses = [1e-25, 1e-30, 1e-34, 1e-37, 1e-41]
    q, p = np.empty((len(masses), 250)), _laws(rng, (len(masses), n))
    for i, m in enumerate(masses):
        q[i, :200] = _laws(rng, (200,)) * m
        q[i, 200:] = (1 - m) / 50
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-4)
    want = rt.rdk_proposal_with_acceptance(
        p, q.astype(np.float32).astype(np.float64), vm,
        rt.FirstOrderCovarianceKernel(cal, 1e-4, engine="numpy"))
    fused = rt.rdk_proposal_with_acceptance(_cuda32(p), _cuda32(q), vm, fo)
    scattered = fo.transport_with_acceptance(rt.vanilla_proposal(_cuda32(q), vm), _cuda32(p),
                                             normalise=True)
    assert spy == [q.shape, (len(masses), n)]
    for got in (*fused, *scattered):
        assert bool(torch.isfinite(got).all())
    for got, w in zip((*fused, *scattered), (*want, *want)):
        assert_close(got.double().cpu().numpy(), w, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_a_kernel_beyond_the_scaled_range_keeps_the_torch_path(spy):
    """At tau = 1e-30 the scaled pass could overflow float32 (in_range is False): the call
    takes the torch path and gets the float64 numbers, where the engine would give inf."""
    rng = np.random.default_rng(19)
    n = 300
    cal, r, p = _laws(rng, (8, n)), _laws(rng, (6, n)), _laws(rng, (6, n))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-30)
    assert not _triton.in_range(fo)
    got = fo.transport_with_acceptance(_cuda32(r), _cuda32(p), normalise=True)
    want = rt.FirstOrderCovarianceKernel(cal, 1e-30, engine="numpy").transport_with_acceptance(
        r, p, normalise=True)
    assert spy == []
    for g, w in zip(got, want):
        assert_close(g.double().cpu().numpy(), w, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_a_decode_call_whose_target_broadcasts_takes_the_scattered_path(spy):
    """A (N,) target for a batch of q: not the fused engine (it reads p row by row), but the
    engine's transport of the scattered r and acceptance_rate, with the float64 numbers."""
    rng = np.random.default_rng(17)
    n = 700
    vm = _map(rng, "mismatched", n)
    cal, p, q = _laws(rng, (16, n)), _laws(rng, (n,)), _laws(rng, (12, vm.n_draft))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-3)
    want = rt.rdk_proposal_with_acceptance(
        p, q, vm, rt.FirstOrderCovarianceKernel(cal, 1e-3, engine="numpy"))
    got = rt.rdk_proposal_with_acceptance(_cuda32(p), _cuda32(q), vm, fo)
    assert spy == [(12, n)]  # the transport of r, not the decode call from q
    assert got[1].shape == (12,)
    for g, w in zip(got, want):
        assert_close(g.double().cpu().numpy(), w, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
def test_a_tensor_that_requires_grad_keeps_the_torch_path(spy):
    """The Triton kernels have no backward pass: their output had no gradient, silently. A
    q' (or q, in the decode call) that requires grad takes the torch path, and the gradient
    flows; under no_grad the engine runs."""
    rng = np.random.default_rng(13)
    n = 500
    vm = _map(rng, "pruned", n)
    fo = rt.FirstOrderCovarianceKernel(_laws(rng, (8, n)), 0.01)
    p = _cuda32(_laws(rng, (4, n)))
    r = _cuda32(_laws(rng, (4, n))).requires_grad_()
    out, alpha = fo.transport_with_acceptance(r, p, normalise=True)
    alpha.sum().backward()
    assert spy == [] and r.grad is not None and bool(torch.isfinite(r.grad).all())
    q = _cuda32(_laws(rng, (4, vm.n_draft))).requires_grad_()
    _, alpha = rt.rdk_proposal_with_acceptance(p, q, vm, fo)
    alpha.sum().backward()
    assert spy == [] and q.grad is not None
    with torch.no_grad():
        rt.rdk_proposal_with_acceptance(p, q, vm, fo)
    assert spy == [q.shape]


@pytest.mark.gpu
@needs_cuda
def test_other_cuda_calls_keep_the_torch_path(spy):
    """float64 tensors and engine="numpy" do not reach the kernel; with a target that
    broadcasts, the proposal comes from the kernel and the acceptance from acceptance_rate; an
    empty batch gets empty results."""
    rng = np.random.default_rng(8)
    cal, r, p = _laws(rng, (16, 500)), _laws(rng, (8, 500)), _laws(rng, (8, 500))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-5)
    ref = rt.FirstOrderCovarianceKernel(cal, 1e-5, engine="numpy").transport(r, normalise=True)
    out64 = fo.transport(torch.as_tensor(r, device="cuda"), normalise=True)
    assert_close(out64.cpu().numpy(), ref, rtol=0, atol=FLOAT32_ATOL)
    torch_path = rt.FirstOrderCovarianceKernel(cal, 1e-5, engine="numpy")
    torch_path.transport(_cuda32(r), normalise=True)
    assert spy == []
    _, alpha = fo.transport_with_acceptance(_cuda32(r), _cuda32(p[0]), normalise=True)
    assert spy == [(8, 500)]  # transport only: the target is not of the proposal's shape
    assert_close(alpha.double().cpu().numpy(),
                 [float(np.minimum(p[0], x).sum()) for x in ref], rtol=0, atol=FLOAT32_ATOL)
    out, alpha = fo.transport_with_acceptance(_cuda32(r[:0]), _cuda32(p[:0]), normalise=True)
    assert out.shape == (0, 500) and alpha.shape == (0,) and len(spy) == 2


@pytest.mark.gpu
@needs_cuda
def test_a_cuda_graph_captures_the_kernel_and_its_sync_free_clip(spy):
    """After one eager call, the call is captured (the kernel and a clip with no host sync) and
    the replay, on new inputs copied into the captured tensors, gives the float64 numbers;
    some rows need the clip and some do not."""
    rng = np.random.default_rng(10)
    cal = _laws(rng, (16, 500))
    fo = rt.FirstOrderCovarianceKernel(cal, 1e-5)
    ref = rt.FirstOrderCovarianceKernel(cal, 1e-5, engine="numpy")
    x, y = _cuda32(_laws(rng, (24, 500))), _cuda32(_laws(rng, (24, 500)))
    fo.transport_with_acceptance(x, y, normalise=True)  # compiles the kernel, builds the arrays
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fo.transport_with_acceptance(x, y, normalise=True)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, alpha = fo.transport_with_acceptance(x, y, normalise=True)
    assert len(spy) == 3  # eager, side stream, capture: all on the kernel
    r, p = _laws(rng, (24, 500), 3.0), _laws(rng, (24, 500))
    r[5] = 0
    clipped = (ref.transport_unclipped(r / np.maximum(r.sum(-1, keepdims=True), 1e-300)) < 0)
    assert 0 < clipped.any(-1).sum() < 23
    x.copy_(_cuda32(r))
    y.copy_(_cuda32(p))
    graph.replay()
    torch.cuda.synchronize()
    want_out, want_alpha = ref.transport_with_acceptance(r, p, normalise=True)
    assert_close(out.double().cpu().numpy(), want_out, rtol=0, atol=FLOAT32_ATOL)
    assert_close(alpha.double().cpu().numpy(), want_alpha, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("call", ["transport", "decode"])
def test_small_calls_keep_the_torch_path(monkeypatch, call):
    """By default a call under its threshold takes the torch path and one at it takes the
    kernel, with the same numbers: 15 and 16 rows of MIN_ELEMENTS / 16 ids for the transport of
    r, and of MIN_ELEMENTS_DECODE / 16 (2^22, under MIN_ELEMENTS) for the decode call from q."""
    calls = []
    real = _triton.first_order
    monkeypatch.setattr(_triton, "first_order",
                        lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    assert _triton.MIN_ELEMENTS_DECODE == 1 << 22 < _triton.MIN_ELEMENTS
    rng = np.random.default_rng(11)
    n = (_triton.MIN_ELEMENTS if call == "transport" else _triton.MIN_ELEMENTS_DECODE) // 16
    fo = rt.FirstOrderCovarianceKernel(_laws(rng, (4, n)), 0.01)
    p = _cuda32(_laws(rng, (16, n)))
    if call == "transport":
        x = _cuda32(_laws(rng, (16, n)))

        def run(rows):
            return fo.transport_with_acceptance(x[:rows], p[:rows], normalise=True)
    else:
        vm = rt.VocabMap.from_kept_ids(np.arange(0, n, 2), n)
        x = _cuda32(_laws(rng, (16, n // 2)))

        def run(rows):
            return rt.rdk_proposal_with_acceptance(p[:rows], x[:rows], vm, fo)
    small = run(15)
    assert calls == []
    big = run(16)
    assert calls == [x.shape]
    for s, b in zip(small, big):
        assert_close(s.double().cpu().numpy(), b[:15].double().cpu().numpy(), rtol=0,
                     atol=FLOAT32_ATOL)


def test_cpu_tensors_and_arrays_never_route_to_triton(spy):
    """Runs everywhere: CPU tensors (float32 too) and numpy arrays take their own paths."""
    rng = np.random.default_rng(9)
    cal, r = _laws(rng, (8, 50)), _laws(rng, (3, 50))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1)
    for x in (r, torch.tensor(r), torch.tensor(r, dtype=torch.float32)):
        assert not _triton.usable(fo, x, None)
        fo.transport(x)
    assert spy == []


def test_the_decode_call_from_q_routes_only_where_the_engine_can_run(monkeypatch):
    """Runs everywhere: with ``usable`` (device, dtype, size, grad) answering yes, usable_draft
    itself refuses numpy arrays, the identity map (its q is already r), a target not of the
    proposal's shape (one that broadcasts: the engine would read p out of its bounds), a
    dtype or device mismatch, a subclass that overrides transport_with_acceptance and a
    user's kernel with fuses_normalisation and engine="auto" (which gets its own method)."""
    monkeypatch.setattr(_triton, "usable", lambda kernel, x, target, least=None: True)
    rng = np.random.default_rng(14)
    n = 60
    vm, ident = _map(rng, "pruned", n), rt.VocabMap.identity(n)
    cal = _laws(rng, (8, n))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1)
    q = torch.tensor(_laws(rng, (3, vm.n_draft)), dtype=torch.float32)
    p = torch.tensor(_laws(rng, (3, n)), dtype=torch.float32)
    assert _triton.usable_draft(fo, q, vm, p)  # the one that goes
    assert not _triton.usable_draft(fo, q.numpy(), vm, p.numpy())
    assert not _triton.usable_draft(fo, p, ident, p)
    assert not _triton.usable_draft(fo, q, vm, p[0])  # broadcasts
    assert not _triton.usable_draft(fo, q, vm, p.double())
    assert not _triton.usable_draft(fo, q, vm, p.to("meta"))

    class Logged(rt.FirstOrderCovarianceKernel):
        def transport_with_acceptance(self, q_prime, target_probs, *, normalise=False):
            return "logged"

    class Plain(rt.FirstOrderCovarianceKernel):  # a subclass that keeps the method: engine
        pass

    assert not _triton.usable_draft(Logged(cal, 0.1), q, vm, p)
    assert _triton.usable_draft(Plain(cal, 0.1), q, vm, p)
    assert rt.rdk_proposal_with_acceptance(p, q, vm, Logged(cal, 0.1), check=False) == "logged"
    width = n

    class Mine:
        fuses_normalisation, n, engine = True, width, "auto"

        def transport(self, q_prime):
            return q_prime

        def transport_with_acceptance(self, q_prime, target_probs, *, normalise):
            return "mine"

    assert not _triton.usable_draft(Mine(), q, vm, p)
    assert rt.rdk_proposal_with_acceptance(p, q, vm, Mine(), check=False) == "mine"


def test_the_gathered_factor_is_the_maps_columns_and_goes_with_the_map():
    """Runs everywhere (torch only): the decode call's L in the drafter's order is L's column
    of each drafter token's target id, zero for a token the target lacks; it is kept per map,
    and dropped from the kernel's cache when the map is collected (a map built per decode
    call kept one (K + 2, N_D) array per map on the device for the kernel's lifetime)."""
    import gc

    rng = np.random.default_rng(16)
    n = 40
    fo = rt.FirstOrderCovarianceKernel(_laws(rng, (5, n)), 0.1)
    like = torch.zeros(1, dtype=torch.float32)
    full = _triton.arrays(fo, like)[0]
    vm = rt.VocabMap(n, np.array([7, -1, 3, 39, -1, 0]))
    left = _triton.arrays(fo, like, vm)[0]
    want = torch.zeros((full.shape[0], 6))
    want[:, [0, 2, 3, 5]] = full[:, [7, 3, 39, 0]]
    assert left.shape == (_triton.padded_rows(5) + 2, 6) and torch.equal(left, want)
    assert _triton.arrays(fo, like, vm)[0] is left  # kept
    other = rt.VocabMap(n, np.array([1, 2]))
    assert _triton.arrays(fo, like, other)[0].shape[1] == 2
    drafted = [k for k in fo._torch._cache if k[0][0] == "triton_left_draft"]
    assert len(drafted) == 2
    del vm, left
    gc.collect()
    assert [k for k in fo._torch._cache if k[0][0] == "triton_left_draft"] == \
        [k for k in drafted if k[0][1] is other._device_indices["triton token"]]


def test_the_scaled_range_is_checked_once_per_kernel():
    """Runs everywhere: in_range is SCALE * K * max|L| * max|[C / tau ; 1]| < RANGE_BOUND, read
    once and kept on the kernel."""
    rng = np.random.default_rng(20)
    cal = _laws(rng, (16, 200))
    for tau, fits in ((1e-2, True), (1e-6, True), (1e-30, False)):
        fo = rt.FirstOrderCovarianceKernel(cal, tau)
        left, right = fo._float64_products()
        bound = (_triton.SCALE * _triton.padded_rows(16) * np.abs(left).max()
                 * np.abs(right).max())
        assert _triton.in_range(fo) is fits is bool(bound < _triton.RANGE_BOUND)
        fo._products = None  # kept: not read again
        assert _triton.in_range(fo) is fits and fo._products is None


def test_the_map_gives_each_target_id_its_drafter_column():
    """VocabMap.on_device("source"): the inverse of draft_to_target, -1 where no drafter token
    maps (what the engine reads r through)."""
    vm = rt.VocabMap(6, np.array([4, -1, 0, 2]))
    source = vm.on_device("source", "cpu")
    assert source.dtype == torch.int64 and source.tolist() == [2, -1, 3, -1, 0, -1]
    assert vm.on_device("source", "cpu") is source  # once per device


@pytest.mark.parametrize("s, k, block", [(1, 16, 128), (16, 16, 128), (17, 32, 128),
                                         (64, 64, 128), (65, 128, 64), (300, 512, 16)])
def test_padding_and_block_sizes(s, k, block):
    """K is a power of two of at least 16 (tl.dot), and K * BLOCK_N stays at 8192 floats of
    registers (BLOCK_N between 16 and 128)."""
    assert _triton.padded_rows(s) == k and _triton.block_n(k) == block
