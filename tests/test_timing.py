"""The shared side-by-side timer and the O(N) timing sweep (structure, not speed: no timed test)."""
import time

import numpy as np
import pytest

from gpu_validation import timing
from rdk_theory._timing import cache_evictor, median_times
from tests.tolerances import assert_close


def _fake_clock(monkeypatch):
    """``time.perf_counter`` reads ``clock[0]``, which only the test advances (no wall time)."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    return clock


def test_median_times_is_round_robin_after_one_warm_up_each():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    syncs = []
    t = median_times(fns, 3, sync=lambda: syncs.append(1))
    assert calls == list("abc") + list("abc") * 3  # warm-up, then interleaved
    assert len(syncs) == 1 + 9
    assert set(t) == set("abc") and all(v >= 0 for v in t.values())
    with pytest.raises(ValueError, match="repeats"):
        median_times(fns, 0)


def test_before_runs_ahead_of_every_timed_run_and_outside_the_timing(monkeypatch):
    """A fake clock (no wall time): each run advances it by 1 s ('a') or 2 s ('b'), 'before'
    by 1000 s; the medians must be exactly 1 and 2, so 'before' is outside the interval."""
    clock = _fake_clock(monkeypatch)

    def tick(dt, name):
        calls.append(name)
        clock[0] += dt

    calls = []
    fns = {"a": lambda: tick(1.0, "a"), "b": lambda: tick(2.0, "b")}
    t = median_times(fns, 2, before=lambda: tick(1000.0, "-"))
    assert calls == list("ab") + list("-a-b") * 2  # no eviction before the warm-up
    assert t == {"a": 1.0, "b": 2.0}


def test_warm_each_runs_each_function_untimed_right_before_its_timed_run(monkeypatch):
    """The hot regime: 'b' runs once untimed right before each timed 'b' (after 'before'), so
    an 'a' that evicts b's data cannot make b's timed run a cold one; the untimed runs are not
    in the times (fake clock: 'a' 1 s, 'b' 2 s)."""
    clock = _fake_clock(monkeypatch)
    calls = []

    def tick(dt, name):
        calls.append(name)
        clock[0] += dt

    fns = {"a": lambda: tick(1.0, "a"), "b": lambda: tick(2.0, "b")}
    t = median_times(fns, 2, before=lambda: tick(1000.0, "-"), warm_each=True)
    assert calls == list("ab") + list("-aa-bb") * 2
    assert t == {"a": 1.0, "b": 2.0}


def test_cache_evictor_reads_its_own_buffer():
    evict = cache_evictor(1 << 20)
    assert evict() == (1 << 20) // 8  # the sum of 128K ones: every element was read


def test_sweep_reports_every_cell_ratio_and_slope():
    out = timing.sweep(sizes=(256, 512, 1024), batches=(1, 2), dense_max=512, repeats=1)
    assert [(r["n"], r["batch"]) for r in out["rows"]] == [
        (n, b) for n in (256, 512, 1024) for b in (1, 2)]
    for r in out["rows"]:
        assert r["floor_s"] > 0 and r["first_order_ratio_to_floor"] > 0
        assert (r["dense_exact_s"] is None) == (r["n"] > 512)
    assert set(out["slopes"]) == {f"{k}@batch{b}" for k in ("first_order", "dense_exact", "floor")
                                  for b in (1, 2)}


@pytest.mark.gpu
def test_sweep_on_cuda_reports_every_cell():
    """On a GPU (skipped without one, by the ``gpu`` marker): the CUDA sweep times torch
    tensors on the device and reports a positive ratio for every cell."""
    import torch

    assert torch.cuda.is_available()
    out = timing.sweep(device="cuda", sizes=(4096, 8192), batches=(1, 4), dense_max=4096, repeats=2)
    assert [(r["n"], r["batch"]) for r in out["rows"]] == [(n, b) for n in (4096, 8192) for b in (1, 4)]
    for r in out["rows"]:
        assert r["floor_s"] > 0 and r["first_order_ratio_to_floor"] > 0


def test_sweep_ratios_repeats_and_per_batch_slopes_from_a_fake_timer(monkeypatch):
    """Fake medians: floor n us, first-order 3 n us at batch 1 and 3 sqrt(n) b us at batch 4,
    dense exact n^2 / b ns. Each ratio is the method's median over the floor's (not the
    inverse), ``repeats`` reaches the timer and the report unchanged, and each slope is fitted
    on its own batch's rows only: first-order's is 1 at batch 1 and 0.5 at batch 4 (a fit over
    both batches' rows gives 0.75)."""
    state = {}
    orig = timing._laws

    def laws(rng, shape, sharp=3.0):  # the cell's (n, batch), read off the laws drawn for it
        if shape[0] == 64:  # the calibration rows (calib_rows = 64): a new N
            state["n"] = shape[1]
        elif shape[1] == state["n"]:  # the target laws p, (batch, N): a new cell
            state["b"] = shape[0]
        return orig(rng, shape, sharp)

    monkeypatch.setattr(timing, "_laws", laws)
    calls = []

    def fake(fns, repeats, *, sync=None, before=None, warm_each=False):
        calls.append({"names": sorted(fns), "repeats": repeats, "sync": sync})
        n, b = state["n"], state["b"]
        law = {"floor": n * 1e-6, "first_order": 3 * (n if b == 1 else np.sqrt(n) * b) * 1e-6,
               "dense_exact": n * n / b * 1e-9}
        return {k: law[k] for k in fns}

    monkeypatch.setattr(timing, "median_times", fake)
    out = timing.sweep(sizes=(256, 512, 1024), batches=(1, 4), dense_max=512, repeats=7)
    assert [c["repeats"] for c in calls] == [7] * 6 and out["repeats"] == 7
    assert all(c["sync"] is None for c in calls)  # CPU: nothing to synchronise
    assert [c["names"] for c in calls] == [["dense_exact", "first_order", "floor"]] * 4 + [
        ["first_order", "floor"]] * 2
    for r in out["rows"]:
        b, n = r["batch"], r["n"]
        assert_close(r["floor_s"], n * 1e-6)
        assert_close(r["first_order_ratio_to_floor"], 3 if b == 1 else 3 * b / np.sqrt(n))
        if n <= 512:
            assert_close(r["dense_exact_ratio_to_floor"], n / b * 1e-3)
        else:
            assert r["dense_exact_s"] is None and "dense_exact_ratio_to_floor" not in r
    want = {"floor@batch1": 1.0, "floor@batch4": 1.0, "first_order@batch1": 1.0,
            "first_order@batch4": 0.5, "dense_exact@batch1": 2.0, "dense_exact@batch4": 2.0}
    assert set(out["slopes"]) == set(want)
    for key, v in out["slopes"].items():
        assert_close(v, want[key], err_msg=key)


def test_sweep_times_the_documented_operations(monkeypatch):
    """What each timed callable does (the module docstring): the floor is one
    ``sum(min(p, q))`` of the target law against the drafter law embedded in the target's
    ids; each method is ``tli_proposal -> kernel.transport -> acceptance_rate`` with the
    drafter pruned to half the vocabulary (every other id) and the kernels built from
    ``calib_rows`` calibration rows."""
    seen = {"acc": [], "tli": [], "transport": [], "cal": []}
    orig_acc, orig_tli = timing.acceptance_rate, timing.tli_proposal

    def acc(p, r, check=True):
        seen["acc"].append((p, r))
        return orig_acc(p, r, check=check)

    def tli(q, vm, check=True):
        seen["tli"].append((q, vm))
        return orig_tli(q, vm, check=check)

    class FO(timing.FirstOrderCovarianceKernel):
        def __init__(self, cal, tau):
            seen["cal"].append(np.asarray(cal).shape)
            super().__init__(cal, tau=tau)

        def transport(self, r):
            out = super().transport(r)
            seen["transport"].append((r, out))
            return out

    monkeypatch.setattr(timing, "acceptance_rate", acc)
    monkeypatch.setattr(timing, "tli_proposal", tli)
    monkeypatch.setattr(timing, "FirstOrderCovarianceKernel", FO)
    timed = []

    def fake(fns, repeats, **kw):  # runs the floor, then first-order, once each
        timed.append(sorted(fns))
        return {k: (fns[k](), 1.0)[1] for k in ("floor", "first_order")}

    monkeypatch.setattr(timing, "median_times", fake)
    timing.sweep(sizes=(64,), batches=(3,), calib_rows=40, dense_max=0, repeats=1)
    assert timed == [["first_order", "floor"]] and seen["cal"] == [(40, 64)]
    (p, qf), (p2, r) = seen["acc"]
    assert p.shape == qf.shape == (3, 64) and p2 is p
    ((q, vm),) = seen["tli"]
    assert vm.n_draft == 32 and vm.draft_to_target.tolist() == list(range(0, 64, 2))
    assert q.shape == (3, 32)
    # floor: p against the drafter law placed on the kept (even) target ids, zero elsewhere
    assert np.all(qf[:, 1::2] == 0) and np.array_equal(qf[:, 0::2], q)
    # first-order: the acceptance of the transported TLI proposal
    ((r_in, r_out),) = seen["transport"]
    assert r is r_out
    assert_close(r_in, orig_tli(q, vm, check=False))


def test_sweep_counts_each_cell_once_in_progress_and_is_seeded(monkeypatch):
    """``progress.update(1)`` per (N, batch) cell, and the inputs come from ``seed``: the same
    seed draws the same laws, another seed other laws (``--seed`` covers the timing inputs)."""
    drawn = []

    def fake(fns, repeats, **kw):
        return {k: 1.0 for k in fns}

    orig = timing._laws
    monkeypatch.setattr(timing, "_laws", lambda rng, shape, sharp=3.0: drawn.append(
        orig(rng, shape, sharp)) or drawn[-1])
    monkeypatch.setattr(timing, "median_times", fake)

    class Progress:
        updates = []

        def update(self, k):
            self.updates.append(k)

    prog = Progress()
    timing.sweep(sizes=(32, 64), batches=(1, 5), dense_max=0, repeats=1, seed=3, progress=prog)
    assert prog.updates == [1, 1, 1, 1]
    first = [d.copy() for d in drawn]
    drawn.clear()
    timing.sweep(sizes=(32, 64), batches=(1, 5), dense_max=0, repeats=1, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(first, drawn)) and len(first) == len(drawn)
    drawn.clear()
    timing.sweep(sizes=(32, 64), batches=(1, 5), dense_max=0, repeats=1, seed=4)
    assert not np.array_equal(first[0], drawn[0])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_sweep_defaults_per_device(monkeypatch, device):
    """The defaults of the docstring and README, without a GPU: sizes 2K..152K and dense
    exact up to 8192 on the CPU, 4K..262K and up to 32768 on CUDA; batches 1 and 64; on CUDA
    every timing gets ``torch.cuda.synchronize`` (here a stand-in: torch is told the tensors
    go to the CPU). The kernels and timer are stand-ins: nothing is built at 262K."""
    torch = pytest.importorskip("torch")
    built = {"fo": [], "dense": []}

    class Kernel:
        def __init__(self, cal, tau=None, kind="fo"):
            built[kind].append(np.asarray(cal).shape[1])

        def transport(self, r):
            return r

    import rdk_theory.kernels as kernels

    monkeypatch.setattr(timing, "FirstOrderCovarianceKernel", Kernel)
    monkeypatch.setattr(kernels, "covariance_softmax_kernel",
                        lambda cal, tau: Kernel(cal, tau, kind="dense"))
    monkeypatch.setattr(timing, "_laws", lambda rng, shape, sharp=3.0: np.full(shape, 1.0 / shape[-1]))
    sync = object()
    if device == "cuda":
        orig = torch.as_tensor
        monkeypatch.setattr(torch.cuda, "synchronize", sync)
        monkeypatch.setattr(torch, "as_tensor", lambda a, dtype=None, device=None: orig(a, dtype=dtype))
    syncs = []
    monkeypatch.setattr(timing, "median_times",
                        lambda fns, repeats, sync=None, **kw: syncs.append(sync) or
                        {k: 1.0 for k in fns})
    out = timing.sweep(device=device)
    sizes = timing.GPU_SIZES if device == "cuda" else timing.CPU_SIZES
    dense_max = timing.GPU_DENSE_MAX if device == "cuda" else timing.CPU_DENSE_MAX
    assert sizes == ((4096, 8192, 16384, 32768, 65536, 131_072, 151_936, 262_144)
                     if device == "cuda" else (2048, 4096, 8192, 16384, 32768, 65536, 151_936))
    assert dense_max == (32768 if device == "cuda" else 8192)
    assert [(r["n"], r["batch"]) for r in out["rows"]] == [(n, b) for n in sizes for b in (1, 64)]
    assert built["fo"] == list(sizes)
    assert built["dense"] == [n for n in sizes if n <= dense_max]
    assert syncs == [sync if device == "cuda" else None] * (2 * len(sizes))
    assert out["device"] == device and out["calib_rows"] == 64 and out["repeats"] == 5


def test_each_function_gets_the_median_of_its_runs(monkeypatch):
    """Run times 1, 5, 2 s ('a') and 4, 3, 9 s ('b'): the medians are 2 and 4, not the means
    (2.67, 5.33) nor the minima (1, 3). The warm-up takes 100 s and is not counted."""
    clock = _fake_clock(monkeypatch)
    durations = {"a": iter([100.0, 1.0, 5.0, 2.0]), "b": iter([100.0, 4.0, 3.0, 9.0])}

    def run(name):
        clock[0] += next(durations[name])

    t = median_times({"a": lambda: run("a"), "b": lambda: run("b")}, 3)
    assert t == {"a": 2.0, "b": 4.0}


def test_warm_each_syncs_its_untimed_run_before_the_timed_one_starts(monkeypatch):
    """Device work of the untimed warm run must be finished (sync) before the clock starts;
    otherwise it spills into the timed run. Events in order: 'S' is sync."""
    _fake_clock(monkeypatch)
    events = []
    fns = {"a": lambda: events.append("a"), "b": lambda: events.append("b")}
    median_times(fns, 2, sync=lambda: events.append("S"), before=lambda: events.append("-"),
                 warm_each=True)
    assert "".join(events) == "abS" + "-aSaS-bSbS" * 2


def test_cache_evictor_reads_at_least_one_element_and_96_mib_by_default():
    assert cache_evictor(0)() == 1.0 and cache_evictor(4)() == 1.0
    assert cache_evictor()() == (96 << 20) // 8  # 96 MiB of float64 ones
