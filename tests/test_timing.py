"""The shared side-by-side timer and the O(N) timing sweep (structure, not speed: no timed test)."""
import time

import pytest

from gpu_validation import timing
from rdk_theory._timing import cache_evictor, median_times


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
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

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
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
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
