"""Benchmark: one proposal + acceptance per sampler, as a ratio to the memory-bound floor.

The floor is ``np.minimum(p, q).sum(-1)`` over the same (batch, N) float64 arrays: reading p and
q once. The methods of one (N, batch) cell are timed interleaved, round-robin, in the same
process (:func:`rdk_theory._timing.median_times`), the median of ``--repeats`` runs each, so the
ratios compare like with like on a shared, noisy machine. The floor is timed in each
round-robin and on its own; every ratio is to the fastest of those floors. Reported:

* the ratio to the floor of TLI, the rank-one marginal kernel (exact RDK in O(N)) and
  first-order RDK (``transport_with_acceptance``) with the fused engine at ranks 1, 2, 4, 8 and
  with the full factor of S calibration rows, the fused engine with a float32 factor at rank 8
  and S, the fused engine on all threads at ranks 1, 4, 8 and S (and 8 with a float32 factor),
  and the numpy engine at rank 8 and S, at N = 32K, 128K, 152K, 262K, batch 1 and 64;
* for each first-order variant, the worst ratio over N at each batch and whether it is within
  the 3x target;
* growth from N to 2N of first-order RDK (expected about 2: linear) and of exact RDK with a
  dense N x N kernel (expected about 4: quadratic), the latter at N = 2K..16K where it fits.

Run:  .venv/bin/python benchmarks/bench_proposals.py [--quick] [--json out.json]
Inputs are trusted arrays (``check=False``): validation is a separate, one-time O(N) cost.
Threads: the floor, TLI and the marginal kernel are numpy element-wise passes (one core); the
numpy engine's products use BLAS (all cores); the fused engine runs on one core (its default)
and, in the ``_mt`` rows, on all of numba's threads. Those are timed in a second round-robin
with a floor of their own and no BLAS products: numba's OpenMP workers and the BLAS workers both
spin after each call, and interleaved on the same cores they slow each other down many times
over (:mod:`rdk_theory._fused`), which would measure the contention, not either method.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np

import rdk_theory as rt
import rdk_theory.case  # noqa: F401  (default_tau)
from rdk_theory import _fused
from rdk_theory._timing import median_times

SIZES = (32_768, 131_072, 151_936, 262_144)
BATCHES = (1, 64)
RANKS = (1, 2, 4, 8)
TARGET = 3.0


def _inputs(rng, n, batch, s):
    p = rng.dirichlet(np.full(n, 0.05), size=batch)
    q = rng.dirichlet(np.full(n, 0.05), size=batch)
    cal = rng.dirichlet(np.full(n, 0.05), size=s)
    return p, q, cal


def _first_order_kernels(cal, s, ranks, fused: bool):
    """``({label: kernel}, {label: kernel})``: the kernels timed with BLAS work around, and
    the fused engine on all of numba's threads (``_mt``), timed apart (see the module doc).

    First group: with numba, the fused engine (one thread, its default) at every rank and S with
    a float64 factor and at the largest rank and S with a float32 one; always the numpy engine
    at the largest rank and S. Second group, with numba and more than one core: the fused engine
    on all threads at ranks 1, 4 and the largest (also float32) and S. Truncated factors come
    from one SVD of the full factor."""
    full = rt.FirstOrderCovarianceKernel(cal, rt.case.default_tau(cal), engine="numpy")
    _, sv, vt = np.linalg.svd(full.factor, full_matrices=False)
    factor = {f"r{r}": sv[:r, None] * vt[:r] for r in ranks}
    factor[f"S{s}"] = full.factor
    big = (f"r{max(ranks)}", f"S{s}")
    plan = [("numpy", "float64", None, big)]
    threaded = []
    if fused:
        plan = [("fused", "float64", None, tuple(factor)), ("fused", "float32", None, big)] + plan
        if _fused.default_threads() > 1:
            some = tuple(f"r{r}" for r in sorted({1, 4, max(ranks)}) if r in ranks) + big[1:]
            threaded = [("fused", "float64", _fused.default_threads(), some),
                        ("fused", "float32", _fused.default_threads(), big[:1])]
    groups = []
    for group in (plan, threaded):
        out = {}
        for engine, dtype, threads, labels in group:
            for label in labels:
                tag = engine + ("_f32" if dtype == "float32" else "") + ("_mt" if threads else "")
                out[f"first_order_{label}_{tag}"] = rt.FirstOrderCovarianceKernel.from_factor(
                    factor[label], full.tau, engine=engine, factor_dtype=dtype, threads=threads)
        groups.append(out)
    return groups


def bench_floor_ratios(sizes, batches, s, ranks, repeats, rng, fused):
    rows = []
    for n in sizes:
        for batch in batches:
            p, q, cal = _inputs(rng, n, batch, s)
            vm = rt.VocabMap.identity(n)
            mk = rt.MarginalKernel(np.full(n, 1.0 / n), 0.1)
            a = lambda r: np.minimum(p, r).sum(-1)  # noqa: E731
            floor = {"floor": lambda: np.minimum(p, q).sum(-1)}
            single, threaded = _first_order_kernels(cal, s, ranks, fused)
            fns = {**floor,
                   "tli": lambda: a(rt.tli_proposal(q, vm, check=False)),
                   "marginal": lambda: a(mk.transport(q))}
            def calls(kernels):
                return {k: lambda fo=fo: fo.transport_with_acceptance(q, p)
                        for k, fo in kernels.items()}

            fns.update(calls(single))
            times = median_times(fns, repeats)
            floors = {"floor_alone_ms": median_times(floor, repeats)["floor"],
                      "floor_rr_ms": times.pop("floor")}
            if threaded:  # apart from the BLAS products
                t = median_times({**floor, **calls(threaded)}, repeats)
                floors["floor_rr_mt_ms"] = t.pop("floor")
                times.update(t)
            # every ratio is to the fastest of the floors measured in this cell: the least
            # disturbed one (spinning BLAS or OpenMP workers slow a neighbour down), which can
            # only make the ratios larger
            best = min(floors.values())
            row = {"N": n, "batch": batch, "floor_ms": 1e3 * best,
                   **{k: 1e3 * v for k, v in floors.items()}}
            row.update({f"{k}_ratio": v / best for k, v in times.items()})
            rows.append(row)
            print(_fmt_row(row), flush=True)
    return rows


def _fmt_row(row):
    rest = "  ".join(f"{k[:-6].replace('first_order_', 'fo_')} {v:5.2f}x"
                     for k, v in row.items() if k.endswith("_ratio"))
    return f"N={row['N']:>7} batch={row['batch']:>3} floor={row['floor_ms']:8.3f} ms  {rest}"


def summarise(rows, batches):
    """Worst ratio over N per method and batch, and whether it meets the target."""
    methods = [k[:-6] for k in rows[0] if k.endswith("_ratio")]
    out = {}
    print(f"\nworst ratio over N (target: within {TARGET:g}x of the floor)")
    for m in methods:
        worst = {b: max(r[f"{m}_ratio"] for r in rows if r["batch"] == b) for b in batches}
        out[m] = {f"batch{b}": {"worst_ratio": w, "within_target": w <= TARGET}
                  for b, w in worst.items()}
        print(f"  {m:28s} " + "  ".join(
            f"batch {b:>2}: {w:6.2f}x {'ok' if w <= TARGET else '--'}" for b, w in worst.items()))
    return out


def bench_growth(exact_sizes, fo_sizes, s, rank, repeats, rng, fused, batch=1):
    out = {"exact_dense": {}, "first_order_numpy": {}}
    if fused:
        out[f"first_order_r{rank}_fused"] = {}
    for n in exact_sizes:
        _, q, cal = _inputs(rng, n, batch, s)
        m = rng.dirichlet(np.full(n, 0.05), size=n)  # a dense row-stochastic kernel
        ker = rt.DenseKernel(m, check=False)
        out["exact_dense"][n] = median_times({"x": lambda ker=ker: ker.transport(q)}, repeats)["x"]
        del m, ker
    for n in fo_sizes:
        _, q, cal = _inputs(rng, n, batch, s)
        fo = rt.FirstOrderCovarianceKernel(cal, 1.0, engine="numpy")
        fns = {"first_order_numpy": lambda: fo.transport(q)}
        if fused:
            fr = rt.FirstOrderCovarianceKernel(cal, 1.0, rank=rank, engine="fused")
            fns[f"first_order_r{rank}_fused"] = lambda: fr.transport(q)
        for k, v in median_times(fns, repeats).items():
            out[k][n] = v
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
    ap.add_argument("--repeats", type=int, default=None, help="runs per method (default 21; 5 with --quick)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 21)
    fused = _fused.available()
    rng = np.random.default_rng(0)
    sizes = SIZES[:2] if args.quick else SIZES
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}, median of {repeats}"
          + (f", _mt: fused engine on {_fused.default_threads()} threads" if fused else "")
          + ("" if fused else "; numba missing: no fused engine (pip install 'rdk-theory[fast]')"))
    ratios = bench_floor_ratios(sizes, BATCHES, args.calibration, RANKS, repeats, rng, fused)
    summary = summarise(ratios, BATCHES)
    exact_sizes = (2048, 4096) if args.quick else (2048, 4096, 8192, 16384)
    fo_sizes = (32_768, 65_536) if args.quick else (32_768, 65_536, 131_072, 262_144)
    print()
    growth = bench_growth(exact_sizes, fo_sizes, args.calibration, max(RANKS), repeats, rng, fused)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": {"cpu": platform.processor() or platform.machine(),
                                   "cores": os.cpu_count(), "numpy": np.__version__,
                                   "fused_threads": _fused.default_threads() if fused else None},
                       "repeats": repeats, "calibration_rows": args.calibration,
                       "ranks": list(RANKS), "target_ratio": TARGET, "fused_engine": fused,
                       "floor_ratios": ratios, "summary": summary, "growth": growth}, fh, indent=2)


if __name__ == "__main__":
    main()
