"""What a truncated rank costs: first-order RDK with the factor cut to its top r singular
directions, against the full factor, on the synthetic Zipfian LM of the README's example.

The benchmark (``bench_proposals.py``) shows that low ranks are the fast ones (within 3x of the
floor up to rank 2; rank 4 at batch 64 cold, or with a float32 factor); this script shows what
those ranks compute. For each kept fraction of the drafter vocabulary and each ``tau`` it prints
the mean acceptance of TLI, exact RDK (the dense covariance-softmax kernel), first-order RDK
with the full factor (S calibration rows) and with ranks r, and the mean TV distance from each
rank's proposal to the full factor's. A rank equal to min(S, N) reproduces the full factor to
round-off (tested). With numba installed it also shows the other way to cut the cost, the full
factor with float32 storage and float32 products (``engine="blas"``,
``factor_dtype="float32"``): the same kernel up to float32 round-off.

    .venv/bin/python benchmarks/rank_accuracy.py     # 3 s; the first run compiles numba, ~45 s
    .venv/bin/python benchmarks/rank_accuracy.py --tau 1e-5 --keep 0.1 --json out.json
"""
from __future__ import annotations

import argparse
import json

import numpy as np

import rdk_theory as rt
import rdk_theory.case  # noqa: F401  (default_tau)
from rdk_theory import _fused
from rdk_theory._outdir import writable_file
from rdk_theory.validation import int_at_least


def study(n=2048, contexts=32, calibration=256, keep=(0.25, 0.10), taus=None,
          ranks=(1, 2, 4, 8, 16), seed=0):
    """One row per (kept fraction, tau): mean acceptances and each rank's mean TV to the full
    factor's proposal. ``taus`` None: the CLI default ``max_i Omega_ii`` and 1e-5."""
    rng = np.random.default_rng(seed)
    lm = rt.synthetic.zipfian_lm(rng, n=n, contexts=contexts, calibration=calibration)
    cal = lm.calibration_probs
    taus = list(taus) if taus else [rt.case.default_tau(cal), 1e-5]
    ranks = [r for r in ranks if r <= min(cal.shape)]
    rows = []
    for frac in keep:
        kept = rt.keep_most_frequent(cal.mean(0), k=max(1, int(round(n * frac))))
        vm = rt.VocabMap.from_kept_ids(kept, n_target=n)
        q = lm.draft_probs[:, kept] / lm.draft_probs[:, kept].sum(1, keepdims=True)
        qp = rt.tli_proposal(q, vm)
        for tau in taus:
            def alpha(r):
                return float(rt.acceptance_rate(lm.target_probs, r).mean())
            full = rt.FirstOrderCovarianceKernel(cal, tau).transport(qp)
            row = {"kept": frac, "tau": tau, "tli": alpha(qp),
                   "rdk_exact": alpha(rt.covariance_softmax_kernel(cal, tau).transport(qp)),
                   "first_order_full": alpha(full), "ranks": {}}
            for r in ranks:
                got = rt.FirstOrderCovarianceKernel(cal, tau, rank=r).transport(qp)
                row["ranks"][r] = {"alpha": alpha(got),
                                   "tv_to_full": float(rt.total_variation(got, full).mean())}
            if _fused.available():  # the blas engine needs numba
                got = rt.FirstOrderCovarianceKernel(cal, tau, engine="blas",
                                                    factor_dtype="float32").transport(qp)
                row["full_f32"] = {"alpha": alpha(got),
                                   "tv_to_full": float(rt.total_variation(got, full).mean())}
            rows.append(row)
    return {"n": n, "contexts": contexts, "calibration_rows": calibration, "seed": seed,
            "rows": rows}


def markdown(res) -> str:
    ranks = list(res["rows"][0]["ranks"]) if res["rows"] else []
    f32 = bool(res["rows"]) and "full_f32" in res["rows"][0]
    head = ["kept", "tau", "TLI", "exact RDK", f"full (S = {res['calibration_rows']})"]
    head += ["full, float32 products"] * f32 + [f"r{r}" for r in ranks]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in res["rows"]:
        cells = [f"{row['kept']:.0%}", f"{row['tau']:.3g}", f"{row['tli']:.4f}",
                 f"{row['rdk_exact']:.4f}", f"{row['first_order_full']:.4f}"]
        cells += [f"{d['alpha']:.4f} (TV {d['tv_to_full']:.2g})"
                  for d in ([row["full_f32"]] if f32 else []) + list(row["ranks"].values())]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Cells: mean acceptance over the contexts; for a rank "
                                        "and for float32 products, also the mean TV to the "
                                        "full factor's proposal.")
    ap.add_argument("--n", type=int_at_least(1), default=2048,
                    help="target vocabulary (default 2048)")
    ap.add_argument("--contexts", type=int_at_least(1), default=32, help="contexts (default 32)")
    ap.add_argument("--calibration", type=int_at_least(1), default=256,
                    help="S, calibration rows (default 256)")
    ap.add_argument("--keep", type=float, nargs="+", default=[0.25, 0.10],
                    help="kept fractions of the drafter vocabulary (default 0.25 0.10)")
    ap.add_argument("--tau", type=float, nargs="+", default=None,
                    help="temperatures (default: the CLI default max_i Omega_ii, and 1e-5)")
    ap.add_argument("--ranks", type=int_at_least(1), nargs="+", default=[1, 2, 4, 8, 16],
                    help="truncated ranks (default 1 2 4 8 16)")
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--json", type=writable_file, default=None,
                    help="also write the results here (its folder must exist; checked before the run)")
    args = ap.parse_args(argv)
    if args.n > 8192:
        ap.error("--n above 8192: the exact dense kernel would take more than 512 MiB")
    if any(not 0 < k <= 1 for k in args.keep) or any(not 0 < t < np.inf for t in args.tau or [1]):
        ap.error("--keep must be in (0, 1] and --tau a finite number > 0")  # NaN fails too
    big = [r for r in args.ranks if r > min(args.calibration, args.n)]
    if big:  # its column was silently left out of the table
        ap.error(f"--ranks {big[0]} exceeds the factor's rank, at most min(--calibration, --n) = "
                 f"{min(args.calibration, args.n)}")
    try:
        res = study(args.n, args.contexts, args.calibration, args.keep, args.tau, args.ranks,
                    args.seed)
    except rt.InputError as exc:  # e.g. an --n too small for the synthetic LM's topics
        ap.error(str(exc))
    print(markdown(res))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=2)
    return res


if __name__ == "__main__":
    main()
