"""Side-by-side wall-clock medians, shared by ``benchmarks/`` and ``gpu_validation.timing``.

Speed claims in this project are ratios measured in one process, never absolute timed tests:
the functions of one comparison are warmed up, then timed interleaved, round-robin, so that
a slow phase of a shared machine hits all of them alike; each gets the median of its runs.
"""
from __future__ import annotations

import statistics
import time


def median_times(fns: dict, repeats: int, *, sync=None) -> dict:
    """``{name: median seconds}`` of ``repeats`` round-robin runs of each zero-argument callable.

    ``sync`` (e.g. ``torch.cuda.synchronize``) is called after the warm-up and after each run,
    inside the timed interval, so asynchronous device work is counted.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    sync = sync or (lambda: None)
    for fn in fns.values():
        fn()
    sync()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}
