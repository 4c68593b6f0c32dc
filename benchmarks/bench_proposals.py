"""Benchmark: one proposal + acceptance per sampler, as a ratio to the memory-bound floor.

The floor is ``np.minimum(p, q).sum(-1)`` over the same (batch, N) float64 arrays: reading p and
q once. Every timing is the median of ``--repeats`` runs, and the methods of one (N, batch) cell
are timed interleaved, round-robin, in the same process, so that the ratios compare like with
like on a shared, noisy machine. Reported:

* ratio of TLI, first-order RDK (covariance factor of S calibration rows, or a truncated rank)
  and the rank-one marginal kernel to the floor, at N = 32K, 128K, 152K, 262K, batch 1 and 64;
* growth from N to 2N of first-order RDK (expected about 2: linear) and of exact RDK with a
  dense N x N kernel (expected about 4: quadratic), the latter at N = 2K..16K where it fits.

Run:  .venv/bin/python benchmarks/bench_proposals.py [--quick] [--json out.json]
Inputs are trusted arrays (``check=False``): validation is a separate, one-time O(N) cost.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

import rdk_theory as rt
import rdk_theory.case  # noqa: F401  (default_tau)

SIZES = (32_768, 131_072, 151_936, 262_144)
BATCHES = (1, 64)


def _median_times(fns: dict, repeats: int) -> dict:
    times = {k: [] for k in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def _inputs(rng, n, batch, s):
    p = rng.dirichlet(np.full(n, 0.05), size=batch)
    q = rng.dirichlet(np.full(n, 0.05), size=batch)
    cal = rng.dirichlet(np.full(n, 0.05), size=s)
    return p, q, cal


def bench_floor_ratios(sizes, batches, s, rank, repeats, rng):
    rows = []
    for n in sizes:
        for batch in batches:
            p, q, cal = _inputs(rng, n, batch, s)
            vm = rt.VocabMap.identity(n)
            fo = rt.FirstOrderCovarianceKernel(cal, rt.case.default_tau(cal))
            fo_r = rt.FirstOrderCovarianceKernel.from_factor(
                np.linalg.svd(fo.factor, full_matrices=False)[2][:rank]
                * np.linalg.svd(fo.factor, full_matrices=False)[1][:rank, None], fo.tau)
            mk = rt.MarginalKernel(np.full(n, 1.0 / n), 0.1)
            a = lambda r: np.minimum(p, r).sum(-1)  # noqa: E731
            fns = {
                "floor": lambda: np.minimum(p, q).sum(-1),
                "tli": lambda: a(rt.tli_proposal(q, vm, check=False)),
                f"first_order_S{s}": lambda: a(fo.transport(q)),
                f"first_order_r{rank}": lambda: a(fo_r.transport(q)),
                "marginal": lambda: a(mk.transport(q)),
            }
            t = _median_times(fns, repeats)
            row = {"N": n, "batch": batch, "floor_ms": 1e3 * t["floor"]}
            row.update({f"{k}_ratio": t[k] / t["floor"] for k in fns if k != "floor"})
            rows.append(row)
            print(_fmt_row(row), flush=True)
    return rows


def _fmt_row(row):
    rest = "  ".join(f"{k[:-6]} {v:5.2f}x" for k, v in row.items() if k.endswith("_ratio"))
    return f"N={row['N']:>7} batch={row['batch']:>3} floor={row['floor_ms']:8.3f} ms  {rest}"


def bench_growth(exact_sizes, fo_sizes, s, repeats, rng, batch=1):
    out = {"exact_dense": {}, "first_order": {}}
    for n in exact_sizes:
        _, q, cal = _inputs(rng, n, batch, s)
        m = rng.dirichlet(np.full(n, 0.05), size=n)  # a dense row-stochastic kernel
        ker = rt.DenseKernel(m, check=False)
        out["exact_dense"][n] = _median_times({"x": lambda: ker.transport(q)}, repeats)["x"]
        del m, ker
    for n in fo_sizes:
        _, q, cal = _inputs(rng, n, batch, s)
        fo = rt.FirstOrderCovarianceKernel(cal, 1.0)
        out["first_order"][n] = _median_times({"x": lambda: fo.transport(q)}, repeats)["x"]
    growth = {}
    for k, d in out.items():
        ns = sorted(d)
        growth[k] = {f"{a}->{b}": d[b] / d[a] for a, b in zip(ns, ns[1:]) if b == 2 * a}
        print(f"{k}: " + ", ".join(f"{n}: {1e3 * d[n]:.3f} ms" for n in ns)
              + "  growth N->2N: " + ", ".join(f"{v:.2f}" for v in growth[k].values()), flush=True)
    return {"times_s": {k: {str(n): t for n, t in d.items()} for k, d in out.items()},
            "growth": growth}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--calibration", type=int, default=64, help="S, calibration rows (default 64)")
    ap.add_argument("--rank", type=int, default=8, help="truncated rank r (default 8)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 21)
    rng = np.random.default_rng(0)
    sizes = SIZES[:2] if args.quick else SIZES
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}, median of {repeats}")
    ratios = bench_floor_ratios(sizes, BATCHES, args.calibration, args.rank, repeats, rng)
    exact_sizes = (2048, 4096) if args.quick else (2048, 4096, 8192, 16384)
    fo_sizes = (32_768, 65_536) if args.quick else (32_768, 65_536, 131_072, 262_144)
    growth = bench_growth(exact_sizes, fo_sizes, args.calibration, repeats, rng)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": {"cpu": platform.processor() or platform.machine(),
                                   "cores": os.cpu_count(), "numpy": np.__version__},
                       "repeats": repeats, "calibration_rows": args.calibration,
                       "rank": args.rank, "floor_ratios": ratios, "growth": growth}, fh, indent=2)


if __name__ == "__main__":
    main()
