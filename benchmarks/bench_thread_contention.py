"""Why the fused engine runs on one thread by default: spinning thread pools on shared cores.

Times a BLAS product (numpy's ``a @ b.T``, on all BLAS threads) and the fused first-order engine
(rank 4, N = 32K, batch 1) round-robin, once with the engine on one thread and once on all of
numba's threads, and prints both medians per setting. After each call the BLAS workers and
numba's OpenMP workers spin for a while; when both pools spin on the same few cores, each call
waits for the other pool's spinners and both slow down. The output names the ratio of each
median to its one-thread setting.

Run:  .venv/bin/python benchmarks/bench_thread_contention.py [--repeats 31]
"""
from __future__ import annotations

import argparse

import numpy as np

import rdk_theory as rt
from rdk_theory import _fused
from rdk_theory._timing import median_times
from rdk_theory.validation import int_at_least


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int_at_least(1), default=31, help="runs per method (default 31)")
    args = ap.parse_args(argv)
    if not _fused.available():
        raise SystemExit("numba is not installed: pip install 'rdk-theory[fast]'")
    rng = np.random.default_rng(0)
    n = 32_768
    p, q = rng.dirichlet(np.full(n, 0.05), size=(2, 1))
    cal = rng.dirichlet(np.full(n, 0.05), size=16)
    a, b = rng.normal(size=(64, 4096)), rng.normal(size=(8, 4096))
    base = None
    for threads in (1, _fused.default_threads()):
        fo = rt.FirstOrderCovarianceKernel(cal, 1.0, rank=4, engine="fused", threads=threads)
        t = median_times({"blas": lambda: a @ b.T,
                          "fused": lambda fo=fo: fo.transport_with_acceptance(q, p)}, args.repeats)
        base = base or t
        print(f"fused engine on {threads} thread(s): BLAS product {1e6 * t['blas']:8.1f} us "
              f"({t['blas'] / base['blas']:.1f}x), fused {1e6 * t['fused']:8.1f} us "
              f"({t['fused'] / base['fused']:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
