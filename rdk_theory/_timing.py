"""Side-by-side wall-clock medians, shared by ``benchmarks/`` and ``gpu_validation.timing``.

Speed claims in this project are ratios measured in one process, never absolute timed tests:
the functions of one comparison are warmed up, then timed interleaved, round-robin, so that
a slow phase of a shared machine hits all of them alike; each gets the median of its runs.
"""
from __future__ import annotations

import statistics
import time


def median_times(fns: dict, repeats: int, *, sync=None, before=None,
                 warm_each: bool = False) -> dict:
    """``{name: median seconds}`` of ``repeats`` round-robin runs of each zero-argument callable.

    ``sync`` (e.g. ``torch.cuda.synchronize``) is called after the warm-up and after each run,
    inside the timed interval, so asynchronous device work is counted. ``before`` is called
    before each timed run, outside the timed interval (e.g. :func:`cache_evictor`'s function,
    to time every run from cold caches). ``warm_each`` runs each callable once more, untimed,
    right before each of its timed runs (after ``before``): every timed run then finds its own
    data in the caches, whatever the callable before it evicted (interleaving a small function
    with one that reads a large array would otherwise time the small one cold).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    sync = sync or (lambda: None)
    before = before or (lambda: None)
    for fn in fns.values():
        fn()
    sync()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            before()
            if warm_each:
                fn()
                sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def cache_evictor(nbytes: int = 96 << 20):
    """A zero-argument function that evicts this core's caches by reading ``nbytes`` (default
    96 MiB, three times the largest last-level cache of the machines measured here) of an array
    of its own. Reading, not writing, leaves the evicted lines clean, so the timed run that
    follows pays no write-back of the evictor's data."""
    import numpy as np

    junk = np.ones(max(1, nbytes // 8))
    return lambda: float(junk.sum())
