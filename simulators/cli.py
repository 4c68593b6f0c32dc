"""``rdk-theory simulate {block,speedup,dsi,disco,spectr,string}``: the simulators on the CLI.

Registered through the entry point ``simulate = "simulators.cli:register"``. Each handler
returns the exit status; bad input raises :class:`rdk_theory.validation.InputError` (the core
CLI prints ``error: ...`` and exits 2). ``--json`` prints one JSON object on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from rdk_theory._optional import import_failure
from rdk_theory._outdir import check_writable
from rdk_theory._progress import progress
from rdk_theory.proposals import SAMPLERS
from rdk_theory.validation import InputError, int_at_least

RAW = argparse.RawDescriptionHelpFormatter
#: Size limits that keep a run near a minute or two on 2 cores. The dsi sweep evaluates every
#: lookahead at every grid point, linear in each (default grid: 3.6 s at --k-max 64, 46 s at
#: 1024); disco's toy LM runs one Monte Carlo policy per static gamma.
DSI_MAX_WORK = 2**21  # c-points x a-points x k-max: about 80 s
#: Most grid points of 'dsi' on each axis: rounded to 4 decimals, c's log-spaced points from
#: 0.01 are distinct while 0.01 (100^(1/(n-1)) - 1) > 1e-4 (n <= 463), a's on [0, 0.98] while
#: 0.98 / (n - 1) > 1e-4 (n <= 9,800)
DSI_MAX_C_POINTS = 400
DSI_MAX_A_POINTS = 2000
DISCO_MAX_GAMMA = 64
#: Longest acceptance trace: the toy LM's trace keeps its whole context (about 0.3 GB and 2 s
#: at 8,000 positions on 2 cores, 1 GB and 12 s at 16,000).
DISCO_MAX_TRACE = 10_000


def _emit(args, obj, lines):
    if args.json:
        json.dump(obj, sys.stdout, default=float)
        sys.stdout.write("\n")
    else:
        print("\n".join(lines))
    return 0


def _figure(args, fn, *a):
    """Draw ``--figure`` after the results are printed: a write that fails at the end (the
    disk filled up) then loses the figure, not the run's numbers."""
    if getattr(args, "figure", None):
        try:
            fn(args.figure, *a)
        except OSError as exc:  # the full disk's message named no file
            raise OSError(exc.errno, exc.strerror or str(exc), args.figure) from exc
        if not args.json:
            print(f"figure written to {args.figure}")


def _mc_rng(seed: int):
    """The Monte Carlo's generator for ``--seed``: its own stream, ``default_rng([seed, 1])``.
    The toy models are drawn by ``default_rng(seed)`` (``toy_pair(name, seed)``): a Monte
    Carlo seeded with the same integer began with the very 64-bit words that drew the model's
    weights. The model for a given ``--seed`` is unchanged."""
    return np.random.default_rng([seed, 1])


# ----------------------------------------------------------------------------------- block
def _kernels_for_pair(pair):
    from rdk_theory.case import default_tau
    from rdk_theory.first_order import FirstOrderCovarianceKernel
    from rdk_theory.kernels import covariance_softmax_kernel

    cal = pair.calibration_probs()
    tau = default_tau(cal)
    return covariance_softmax_kernel(cal, tau), FirstOrderCovarianceKernel(cal, tau), tau


#: Most Monte Carlo iterations of 'block' (its blocks are kept as lists: about 330 MB here).
BLOCK_MAX_MC = 10_000_000


def cmd_block(args) -> int:
    from .block import bernstein_pvalue, law_sd, simulate_blocks, tokens_per_call_ci, z_pvalue
    from .sequence import block_law, is_lossless, make_proposal_fn
    from .toy_lm import TOY_PAIRS, toy_pair

    if args.gamma < 0 or args.gamma > 6:
        raise InputError(f"--gamma must be in 0..6 (exact enumeration is exponential), got {args.gamma}")
    if args.mc < 0:
        raise InputError(f"--mc must be >= 0, got {args.mc}")
    if args.mc > BLOCK_MAX_MC:  # 3e9 ran into the machine's out-of-memory killer (24 GB)
        raise InputError(f"--mc must be at most {BLOCK_MAX_MC:,} for block (every block is "
                         f"kept, about 33 bytes each), got {args.mc:,}")
    pairs = TOY_PAIRS if args.pair == "all" else (args.pair,)
    samplers = SAMPLERS if args.sampler == "all" else (args.sampler,)
    rng = _mc_rng(args.seed)  # not the toy models' stream, default_rng(args.seed)
    results = []
    jobs = [(pn, s) for pn in pairs for s in samplers]
    for pn, s in progress(jobs, desc="block", total=len(jobs)):
        pair = toy_pair(pn, args.seed)
        kern, fo, tau = _kernels_for_pair(pair)
        kw = {"kernel": kern} if s == "rdk_exact" else {"first_order": fo} if s == "rdk_first_order" else {}
        fn = make_proposal_fn(pair.drafter, pair.vocab_map, s, **kw)
        blk = block_law(pair.target, fn, args.gamma)
        ok, diff = is_lossless(pair.target, fn, args.gamma, n_tokens=args.gamma + 2)
        row = {"pair": pn, "sampler": s, "rationalised": bool(fn.rationalised), "lossless": bool(ok),
               "max_law_difference": float(diff), "expected_tokens": float(blk.expected_tokens),
               "expected_tokens_exact": str(blk.expected_tokens) if not fn.rationalised else None,
               "length_law": {str(k): float(v) for k, v in blk.length_law.items()},
               "position_acceptances": [float(a) for a in blk.position_acceptances()]}
        if args.mc:
            fl = make_proposal_fn(pair.drafter, pair.vocab_map, s, exact=False, **kw)
            lengths = np.array([len(b) for b in simulate_blocks(pair.target.float_copy(), fl, args.gamma,
                                                                args.mc, rng)])
            # the exact law's standard deviation: two equal draws gave a zero-width interval
            mean, sd = float(blk.expected_tokens), law_sd(blk.length_law)
            m, lo, hi = tokens_per_call_ci(lengths, sd, args.gamma)  # Bernstein: any n
            row["mc"] = {"n": int(args.mc), "mean": m, "ci999": [lo, hi], "law_sd": sd,
                         "z_pvalue": z_pvalue(lengths, mean, sd=sd),
                         "bernstein_pvalue": bernstein_pvalue(lengths, mean, sd=sd,
                                                              spread=args.gamma)}
        results.append(row)
    lines = [f"one speculative iteration, gamma = {args.gamma}, toy pairs seed {args.seed} "
             f"(covariance kernel tau = default: max calibration variance)",
             f"{'pair':<8}{'sampler':<17}{'lossless':>11}{'E[tokens/call]':>16}  "
             f"{'P(L=1..gamma+1)':<34}{'MC mean [99.9% CI]' if args.mc else ''}"]
    for r in results:
        law = " ".join(f"{v:.3f}" for v in r["length_law"].values())
        tag = "exact" if not r["rationalised"] else "exact*"
        mc = (f"{r['mc']['mean']:.4f} [{r['mc']['ci999'][0]:.4f}, {r['mc']['ci999'][1]:.4f}]"
              if "mc" in r else "")
        lines.append(f"{r['pair']:<8}{r['sampler']:<17}{('yes ' + tag) if r['lossless'] else 'NO':>11}"
                     f"{r['expected_tokens']:>16.4f}  {law:<34}{mc}")
    lines.append("lossless: the block completed by the target, and the first gamma+2 tokens of repeated "
                 "iterations, equal the target's law exactly (Fraction ==).")
    lines.append("exact* = float proposal (covariance/first-order kernel, uses exp) rationalised to "
                 "Fractions before the exact enumeration.")
    from . import plots

    _emit(args, {"gamma": args.gamma, "results": results}, lines)
    _figure(args, plots.block_figure, results)
    return 0 if all(r["lossless"] for r in results) else 1


# --------------------------------------------------------------------------------- speedup
#: Largest --gamma-max of 'speedup'.
SPEEDUP_GAMMA_MAX = 512
#: Most Monte Carlo iterations of 'speedup' and of 'spectr' (per alpha, per k): both draw in
#: blocks (memory stays flat); 1e7 took 2.5 s at gamma 16 and 13 s per k for spectr here.
SPEEDUP_MAX_MC = 10_000_000
SPECTR_MAX_MC = 10_000_000
#: Most random pairs of 'spectr' (about 20 ms each: 10,000 is some 3.5 minutes).
SPECTR_MAX_TRIALS = 10_000
#: Most tokens per policy of 'disco' (the default 15 policies took about 0.85 s per 1,000
#: tokens together here: 200,000 is some 3 minutes).
DISCO_MAX_TOKENS = 200_000


def cmd_speedup(args) -> int:
    from .block import (expected_tokens_iid, mc_tokens_iid, optimal_gamma, speedup,
                        speedup_grows, tokens_per_call_ci, tokens_sd_iid)

    if args.gamma_max < 1 or args.gamma_max > SPEEDUP_GAMMA_MAX:
        raise InputError(f"--gamma-max must be in 1..{SPEEDUP_GAMMA_MAX}, got {args.gamma_max}")
    bad = next((a for a in args.alpha if not 0 <= a <= 1), None)
    if bad is not None:  # all of them before any Monte Carlo (a bad second one came after the first's)
        raise InputError(f"--alpha values must be in [0, 1], got {bad}")
    if args.mc > SPEEDUP_MAX_MC:
        raise InputError(f"--mc must be at most {SPEEDUP_MAX_MC:,} for speedup (about 3 s per "
                         f"alpha at gamma 16 on 2 cores), got {args.mc:,}")
    rows, curves, best = [], [], []
    rng = np.random.default_rng(args.seed)
    for a in args.alpha:
        g, s = optimal_gamma(a, args.c, args.gamma_max)
        curve = [float(speedup(a, k, args.c)) for k in range(args.gamma_max + 1)]
        row = {"alpha": a, "c": args.c, "best_gamma": g, "speedup": s,
               "tokens_per_call": float(expected_tokens_iid(a, g)),
               # the optimum lies beyond the cap: the speedup is unimodal in gamma, so
               # whether it still grows at the cap tells
               "at_gamma_max": bool(g == args.gamma_max
                                    and speedup_grows(a, args.gamma_max, args.c))}
        if args.mc and g > 0:
            x = mc_tokens_iid([a] * g, args.mc, rng)
            # the law's own standard deviation: the sample's gave a zero-width interval when
            # every draw was gamma + 1 (alpha near 1), excluding the exact value
            m, lo, hi = tokens_per_call_ci(x, tokens_sd_iid(a, g), g)  # Bernstein: any n
            row["mc"] = {"n": args.mc, "tokens_per_call": m, "ci999": [lo, hi],
                         "speedup": m / (g * args.c + 1),
                         "speedup_ci999": [lo / (g * args.c + 1), hi / (g * args.c + 1)]}
        rows.append(row)
        curves.append(curve)
        best.append((g, s))
    lines = [f"Leviathan model: speedup = (1 - a^(g+1)) / ((1 - a)(g c + 1)), c = {args.c:g}",
             f"{'alpha':>7}{'best gamma':>12}{'tokens/call':>13}{'speedup':>10}"
             f"{'   MC tokens/call [99.9% CI]' if args.mc else ''}"]
    for r in rows:
        mc = (f"   {r['mc']['tokens_per_call']:.4f} [{r['mc']['ci999'][0]:.4f}, {r['mc']['ci999'][1]:.4f}]"
              if "mc" in r else "")
        best_g = f"{'>=' if r['at_gamma_max'] else ''}{r['best_gamma']}"
        a_text = f"{r['alpha']:.3f}" if round(r["alpha"], 3) == r["alpha"] else f"{r['alpha']:.6g}"
        lines.append(f"{a_text:>7}{best_g:>12}{r['tokens_per_call']:>13.4f}{r['speedup']:>10.4f}{mc}")
    if any(r["at_gamma_max"] for r in rows):
        if args.c == 0:  # drafting is free: every longer draft is faster, no optimum exists
            why = "with c = 0 every longer draft is faster (no finite optimum)"
        elif args.gamma_max < SPEEDUP_GAMMA_MAX:
            why = "gamma + 1 is faster; raise it to find the optimum"
        else:  # it cannot be raised: telling the user to was a dead end
            why = f"gamma + 1 is faster; the optimum lies beyond the largest allowed, {SPEEDUP_GAMMA_MAX}"
        lines.append(f">=: the best gamma searched is the largest (--gamma-max {args.gamma_max}) and "
                     f"{why} (the row is at that gamma)")
    from . import plots

    _emit(args, {"c": args.c, "rows": rows, "curves": curves}, lines)
    _figure(args, plots.speedup_figure, args.alpha, args.c, args.gamma_max, curves, best)
    return 0


# ------------------------------------------------------------------------------------- dsi
REALISTIC_C = (0.02, 0.3)
REALISTIC_A = (0.5, 0.95)
# round-off allowed in the grid's "DSI is not slower" comparisons (times per token are O(1))
INEQUALITY_SLACK_RUN = 1e-12


def cmd_dsi(args) -> int:
    from . import dsi, plots

    if not (2 <= args.c_points <= DSI_MAX_C_POINTS and 2 <= args.a_points <= DSI_MAX_A_POINTS):
        raise InputError(f"--c-points must be in 2..{DSI_MAX_C_POINTS} and --a-points in "
                         f"2..{DSI_MAX_A_POINTS} (the grid is rounded to 4 decimals: more points "
                         f"repeat values), got {args.c_points} and {args.a_points}")
    if args.servers < 1:
        raise InputError(f"--servers must be >= 1, got {args.servers}")
    work = args.c_points * args.a_points * args.k_max
    if work > DSI_MAX_WORK:
        raise InputError(f"--c-points x --a-points x --k-max = {work:,} lookahead evaluations, at "
                         f"most {DSI_MAX_WORK:,} (about 80 s on 2 cores; the defaults make 76,800)")
    cs = np.round(np.geomspace(0.01, 1.0, args.c_points), 4)
    as_ = np.round(np.linspace(0.0, 0.98, args.a_points), 4)
    assert np.unique(cs).size == cs.size and np.unique(as_).size == as_.size  # the caps' reason
    t0 = time.time()
    sw = dsi.sweep(cs, as_, args.servers, args.k_max, progress=lambda it: progress(it, desc="dsi sweep"))
    worst = float((sw["dsi"] - np.minimum(sw["si"], 1.0)).max())
    # what the model proves (dsi.py): never slower than non-SI (k c <= 1) anywhere, and never
    # slower than SI where the servers cover one-token lookahead (S >= ceil(1/c)); elsewhere,
    # with too few servers (S = 1 is no parallelism at all), DSI may lose to SI, and that is
    # reported, not a failed run
    covered = np.array([args.servers >= dsi.servers_needed(c, 1) for c in cs])
    slower_si = sw["dsi"] > sw["si"] + INEQUALITY_SLACK_RUN
    broken = {"non_si": int((sw["dsi"] > 1.0 + INEQUALITY_SLACK_RUN).sum()),
              "si_where_servers_cover": int(slower_si[covered].sum())}
    real = np.ix_((cs >= REALISTIC_C[0]) & (cs <= REALISTIC_C[1]), (as_ >= REALISTIC_A[0]) & (as_ <= REALISTIC_A[1]))
    sub = sw["speedup_vs_si"][real]
    # points whose best lookahead is the cap --k-max, not the model's own limit (DSI's k c <= 1):
    # a larger k may do better there, and SI's time is then overstated (DSI / SI 1.437 at c =
    # 0.01, a = 0.98, k = 64; 1.429 with SI's best k = 74)
    dsi_cap = np.floor(1 / cs + 1e-12)[:, None] > args.k_max
    capped = {"si": int((sw["si_k"] == args.k_max).sum()),
              "dsi": int(((sw["dsi_k"] == args.k_max) & dsi_cap).sum())}
    out = {"servers": args.servers, "c": cs.tolist(), "a": as_.tolist(),
           "speedup_vs_si": sw["speedup_vs_si"].tolist(), "speedup_vs_nonsi": sw["speedup_vs_nonsi"].tolist(),
           "dsi_k": sw["dsi_k"].tolist(), "si_k": sw["si_k"].tolist(),
           "range_vs_si": [float(sw["speedup_vs_si"].min()), float(sw["speedup_vs_si"].max())],
           "range_vs_si_realistic": [float(sub.min()), float(sub.max())] if sub.size else None,
           "realistic_grid": {"c": list(REALISTIC_C), "a": list(REALISTIC_A)},
           "range_vs_nonsi": [float(sw["speedup_vs_nonsi"].min()), float(sw["speedup_vs_nonsi"].max())],
           "si_slower_than_nonsi_points": int((sw["si"] > 1).sum()),
           "max_dsi_excess_over_min_si_nonsi": worst,
           "dsi_slower_than_si_points": int(slower_si.sum()),
           "guarantee_violations": broken,
           "points_best_k_at_k_max": capped, "seconds": time.time() - t0}
    lines = [f"DSI offline cost model, {args.servers} target servers, grid {cs.size} c x {as_.size} a "
             f"(c in [{cs[0]}, {cs[-1]}] geometric, a in [{as_[0]}, {as_[-1]}]), best lookahead per point",
             f"DSI / SI speedup, whole grid:        {out['range_vs_si'][0]:.3f} .. {out['range_vs_si'][1]:.3f}",
             (f"DSI / SI speedup, c in [{REALISTIC_C[0]}, {REALISTIC_C[1]}], a in "
              f"[{REALISTIC_A[0]}, {REALISTIC_A[1]}]: "
              f"{out['range_vs_si_realistic'][0]:.3f} .. {out['range_vs_si_realistic'][1]:.3f}")
             if sub.size else "realistic sub-grid empty at this resolution",
             f"DSI / non-SI speedup, whole grid:    {out['range_vs_nonsi'][0]:.3f} .. {out['range_vs_nonsi'][1]:.3f}",
             f"grid points where SI is slower than non-SI: {out['si_slower_than_nonsi_points']} of {cs.size * as_.size}",
             f"max over grid of DSI - min(SI, non-SI) time per token: {worst:.3g} "
             f"({'DSI never slower' if worst <= INEQUALITY_SLACK_RUN else 'DSI slower somewhere'})"]
    if slower_si.any():
        lines.append(f"DSI slower than SI at {int(slower_si.sum())} of {slower_si.size} grid points, "
                     f"{int(slower_si[~covered].sum())} of them where {args.servers} server(s) are "
                     "fewer than ceil(1/c), so the target waits for a free server and the model "
                     "promises nothing against SI there")
    if any(broken.values()):
        lines.append(f"GUARANTEE VIOLATED: DSI slower than non-SI at {broken['non_si']} points, "
                     f"slower than SI at {broken['si_where_servers_cover']} points whose servers "
                     "cover the drafter (S >= ceil(1/c))")
    if capped["si"] or capped["dsi"]:
        lines.append(f"best lookahead at the cap --k-max {args.k_max}: {capped['si']} SI and "
                     f"{capped['dsi']} DSI grid points, whose times are for k <= {args.k_max} "
                     "only (a larger --k-max may lower them)")
    _emit(args, out, lines)
    _figure(args, plots.dsi_figure, sw)
    return 1 if any(broken.values()) else 0


# ----------------------------------------------------------------------------------- disco
def cmd_disco(args) -> int:
    from . import disco, plots
    from .sequence import make_proposal_fn
    from .toy_lm import toy_pair

    if not 1 <= args.gamma_max <= DISCO_MAX_GAMMA:
        raise InputError(f"--gamma-max must be in 1..{DISCO_MAX_GAMMA} (the toy LM runs one Monte Carlo "
                         f"policy per static gamma), got {args.gamma_max}")
    if args.trace_length > DISCO_MAX_TRACE:
        raise InputError(f"--trace-length must be at most {DISCO_MAX_TRACE:,} (the toy LM's trace "
                         f"keeps its whole context: time and memory grow with its square), got "
                         f"{args.trace_length}")
    if args.tokens > DISCO_MAX_TOKENS:
        raise InputError(f"--tokens must be at most {DISCO_MAX_TOKENS:,} (every policy runs that many "
                         f"on the toy LM: about 3 minutes at the defaults), got {args.tokens:,}")
    repeated = next((t for i, t in enumerate(args.thresholds) if t in args.thresholds[:i]), None)
    if repeated is not None:
        raise InputError(f"--thresholds lists {repeated!r} twice")
    rng = _mc_rng(args.seed)  # the traces and the Monte Carlo; not the toy model's stream
    trace = disco.regime_trace(rng, args.trace_length)
    n = trace.size
    static = [disco.trace_time_static(trace, g, args.c) / n for g in range(args.gamma_max + 1)]
    oracle = disco.trace_time_oracle(trace, args.c) / n
    gbest = int(np.argmin(static))
    pair = toy_pair(args.pair, args.seed)
    fl = make_proposal_fn(pair.drafter.float_copy(), pair.vocab_map, args.sampler, exact=False,
                          **({"kernel": _kernels_for_pair(pair)[0]} if args.sampler == "rdk_exact" else
                             {"first_order": _kernels_for_pair(pair)[1]} if args.sampler == "rdk_first_order" else {}))
    tgt = pair.target.float_copy()
    toy_trace_alphas, _ = disco.toy_trace(tgt, fl, args.trace_length, rng)
    tstatic = [disco.trace_time_static(toy_trace_alphas, g, args.c) / n for g in range(args.gamma_max + 1)]
    toracle = disco.trace_time_oracle(toy_trace_alphas, args.c) / n
    runs = {}
    # static gamma 0 (no drafting, time 1 per token) is the baseline of every gain, as in the
    # exact DPs above: without it, at c = 0.9 a static_1 slower than not speculating was the
    # "best static" and every gain was inflated. It runs last so that the random stream of
    # the other policies, and their printed results, are those of the earlier releases.
    jobs = ([("static", {"gamma": g}) for g in range(1, args.gamma_max + 1)] + [("oracle", {})]
            + [("threshold", {"threshold": t}) for t in args.thresholds]
            + [("static", {"gamma": 0})])
    for pol, kw in progress(jobs, desc="disco policies", total=len(jobs)):
        key = pol + (f"_{list(kw.values())[0]!r}" if kw else "")  # 0.3 and 0.3000001 differ
        runs[key] = disco.run_policy(tgt, fl, args.tokens, args.c, rng, policy=pol,
                                     gamma_max=args.gamma_max, **kw)
    runs = {"static_0": runs.pop("static_0"), **runs}  # printed in gamma order
    st = [runs[f"static_{g}"]["time_per_token"] for g in range(args.gamma_max + 1)]
    best_static = min(st)
    thr = {k: v for k, v in runs.items() if k.startswith("threshold")}
    best_thr_key = min(thr, key=lambda k: thr[k]["time_per_token"]) if thr else None
    out = {
        "c": args.c, "trace": {"kind": "regime", "length": n, "static_time_per_token": static,
                               "best_static_gamma": gbest, "oracle_time_per_token": oracle,
                               "oracle_gain": static[gbest] / oracle - 1},
        "toy_trace": {"pair": args.pair, "sampler": args.sampler, "static_time_per_token": tstatic,
                      "best_static_gamma": int(np.argmin(tstatic)), "oracle_time_per_token": toracle,
                      "oracle_gain": min(tstatic) / toracle - 1},
        "toy_runs": runs, "toy_best_static_gamma": int(np.argmin(st)),
        "toy_oracle_gain": best_static / runs["oracle"]["time_per_token"] - 1,
        "toy_best_threshold": best_thr_key,
        "toy_threshold_gain": (best_static / thr[best_thr_key]["time_per_token"] - 1) if thr else None,
    }
    lines = [f"DISCO: speculation-length policies, drafter cost c = {args.c:g} (target = 1); "
             f"time per token in target forwards, gain = best static / policy - 1",
             f"regime trace ({n} positions, exact DP): best static gamma {gbest} -> {static[gbest]:.4f}; "
             f"oracle {oracle:.4f}; oracle gain {out['trace']['oracle_gain']:+.1%}",
             f"toy trace ({args.pair}/{args.sampler}, exact DP): best static gamma "
             f"{out['toy_trace']['best_static_gamma']} -> {min(tstatic):.4f}; oracle {toracle:.4f}; "
             f"oracle gain {out['toy_trace']['oracle_gain']:+.1%}",
             f"toy LM speculative sampling ({args.tokens} tokens per policy, Monte Carlo; oracle"
             f"{' and threshold' if thr else ''} draft at most --gamma-max {args.gamma_max} per call):",
             f"  {'policy':<16}{'time/token':>11}{'tokens/call':>13}{'gain':>8}"]
    for k, v in runs.items():
        lines.append(f"  {k:<16}{v['time_per_token']:>11.4f}{v['tokens_per_call']:>13.3f}"
                     f"{best_static / v['time_per_token'] - 1:>+8.1%}")
    if thr:
        lines.append("(the threshold is picked on the same run: an optimistic estimate for a tuned policy)")
    _emit(args, out, lines)
    _figure(args, plots.disco_figure, args.c, static, oracle, st, runs["oracle"]["time_per_token"],
            thr[best_thr_key]["time_per_token"] if thr else np.nan)
    return 0


# ---------------------------------------------------------------------------------- spectr
def _random_pair(rng, n, exact=True):
    from fractions import Fraction

    def law():
        w = rng.integers(0, 7, size=n)
        while (w > 0).sum() < 2:  # at least two tokens in each support
            w = rng.integers(0, 7, size=n)
        return np.array([Fraction(int(x), int(w.sum())) for x in w], dtype=object)

    return law(), law()


def cmd_spectr(args) -> int:
    from rdk_theory.multidraft import kseq_is_valid, one_minus_inv_e

    from .spectr import compare_with_lp, kseq_law_by_enumeration, kseq_sample, rational_best_rho

    if not 2 <= args.support <= 8 or not 1 <= args.k_max <= 5:
        raise InputError("--support must be in 2..8 and --k-max in 1..5 (exact enumeration)")
    if args.trials > SPECTR_MAX_TRIALS or args.mc > SPECTR_MAX_MC:
        raise InputError(f"--trials must be at most {SPECTR_MAX_TRIALS:,} and --mc at most "
                         f"{SPECTR_MAX_MC:,} (some 3.5 minutes and 13 s per k on 2 cores), got "
                         f"{args.trials:,} and {args.mc:,}")
    rng = np.random.default_rng(args.seed)
    p, q = _random_pair(rng, args.support)
    ks = range(1, args.k_max + 1)
    rows = compare_with_lp(p.astype(float), q.astype(float), ks)
    for row in rows:
        rho = rational_best_rho(p, q, row["k"])
        law, acc = kseq_law_by_enumeration(p, q, rho, row["k"])
        row["lossless_exact"] = bool(all(law == p)) and kseq_is_valid(p, q, rho, row["k"])
        if args.mc:
            toks, ok = kseq_sample(p.astype(float), q.astype(float), row["rho"], row["k"], args.mc, rng)
            row["mc"] = {"n": args.mc, "acceptance": float(ok.mean()),
                         "counts": np.bincount(toks, minlength=args.support).tolist()}
    worst = []
    trial_rng = np.random.default_rng([args.seed, 1])  # its own stream: the same pairs for any --mc
    for _ in progress(range(args.trials), desc="spectr trials", total=args.trials):
        pp, qq = _random_pair(trial_rng, args.support)
        worst.extend(r["ratio"] for r in compare_with_lp(pp.astype(float), qq.astype(float), ks))
    out = {"p": [str(x) for x in p], "q": [str(x) for x in q], "rows": rows,
           "trials": args.trials, "min_ratio_over_trials": float(min(worst)) if worst else None,
           "bound": one_minus_inv_e()}
    lines = [f"SpecTr K-SEQ on p = {[str(x) for x in p]}, q = {[str(x) for x in q]}",
             f"{'k':>3}{'rho*':>9}{'beta':>8}{'K-SEQ':>9}{'LP opt':>9}{'ratio':>8}{'lossless':>10}"
             f"{'   MC acceptance' if args.mc else ''}"]
    for r in rows:
        mc = f"   {r['mc']['acceptance']:.4f} (n={args.mc})" if "mc" in r else ""
        lines.append(f"{r['k']:>3}{r['rho']:>9.4f}{r['beta']:>8.4f}{r['kseq']:>9.4f}{r['lp_optimum']:>9.4f}"
                     f"{r['ratio']:>8.4f}{'exact' if r['lossless_exact'] else 'NO':>10}{mc}")
    if worst:
        lines.append(f"min K-SEQ / LP-optimum ratio over {args.trials} random pairs x k = 1..{args.k_max}: "
                     f"{min(worst):.4f} (SpecTr's guarantee: >= 1 - 1/e = {one_minus_inv_e():.4f})")
    code = _emit(args, out, lines)
    # a failed exact check is a failure of the run, as in 'block' and 'dsi' (it exited 0)
    return 1 if any(not r["lossless_exact"] for r in rows) else code


# ---------------------------------------------------------------------------------- string
def _draft_context(target_id: int) -> tuple:
    """The drafter's (order-1) context after the text of target token ``target_id``: the
    drafter token spelling the same text when there is one ('ab', 'b'), else the drafter token
    of its last character ('aa' is 'a' 'a' to the drafter: the last 'a')."""
    from .strings import DRAFT_TOKENS, TARGET_TOKENS

    text = TARGET_TOKENS[target_id]
    return (DRAFT_TOKENS.index(text if text in DRAFT_TOKENS else text[-1]),)


def cmd_string(args) -> int:
    from . import plots
    from .strings import DRAFT_TOKENS, TARGET_TOKENS, cost_table, markov_string_drafter, string_step, toy_string_models

    if not 1 <= args.max_length <= 60:
        raise InputError(f"--max-length must be in 1..60, got {args.max_length}")
    tgt, dr = toy_string_models(args.seed)
    rows = []
    for ctx in range(len(TARGET_TOKENS)):
        p = tgt.next_probs((ctx,))
        res = string_step(p, markov_string_drafter(dr, DRAFT_TOKENS, start=_draft_context(ctx)))
        rows.append({"context": TARGET_TOKENS[ctx], "p": [float(x) for x in p],
                     "psi": [float(x) for x in res["psi"]],
                     "psi_methods_agree": bool(all(res["psi"] == res["psi_by_segmentations"])),
                     "slem": float(res["slem"]), "slrs": float(res["slrs"]),
                     # the step is lossless for any r >= 0 it is given, so the output law alone
                     # could not fail: what can is psi being the law of the drafted target
                     # token (summing to 1, a complete prefix code) the step is given
                     "psi_sum": float(sum(res["psi"])),
                     "slrs_lossless_exact": bool(sum(res["psi"]) == 1
                                                 and all(res["slrs_output_law"] == p))})
    cost = cost_table(range(1, args.max_length + 1))
    out = {"target_tokens": TARGET_TOKENS, "draft_tokens": DRAFT_TOKENS, "rows": rows, "cost": cost}
    lines = [f"target tokens {TARGET_TOKENS} (a complete prefix code), drafter tokens {DRAFT_TOKENS}",
             f"{'after':<7}{'p':<24}{'psi':<24}{'SLEM':>7}{'SLRS':>7}  SLRS lossless (exact: sum psi = 1, law p)"]
    for r in rows:
        lines.append(f"{r['context']:<7}{' '.join(f'{x:.3f}' for x in r['p']):<24}"
                     f"{' '.join(f'{x:.3f}' for x in r['psi']):<24}{r['slem']:>7.3f}{r['slrs']:>7.3f}  "
                     f"{'yes' if r['slrs_lossless_exact'] else 'NO'}"
                     f"{'' if r['psi_methods_agree'] else ' (psi methods DISAGREE)'}")
    lines.append("SLEM emits the target's own draw, so its law is p by construction (nothing to check)")
    lines.append("cost of psi by enumeration: segmentations of 'abab...' into drafter tokens")
    lines.append(f"{'length':>7}{'segmentations':>15}{'enumeration s':>15}")
    for c in cost:
        t = f"{c['enumeration_seconds']:.2e}" if "enumeration_seconds" in c else "-"
        lines.append(f"{c['length']:>7}{c['segmentations']:>15}{t:>15}")
    _emit(args, out, lines)
    _figure(args, plots.string_cost_figure, cost)
    return 0


# -------------------------------------------------------------------------------- register
_count = int_at_least(0)  # e.g. --mc 0: no Monte Carlo; --gamma 0: no drafts; --seed
_positive_int = int_at_least(1)


def _mc_count(text):
    """An argparse type: Monte Carlo iterations, 0 (none) or >= 2 (a confidence interval
    needs two draws; one gave an infinite interval and a NaN p-value)."""
    value = _count(text)
    if value == 1:
        raise argparse.ArgumentTypeError("expected 0 (no Monte Carlo) or at least 2 iterations "
                                         "(a confidence interval needs two), got 1")
    return value


def _unit_float(text):
    """An argparse type: a number in [0, 1] (a threshold, a cost ratio)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def _figure_path(text):
    """An argparse type for ``--figure``: checked before the run, so that no result is lost
    to a bad path at the end. The format comes from the suffix (``.png`` added when there
    is none, and the path printed is the one written); the folder must exist."""
    import os

    name = os.path.basename(text)
    # '.svg' is a hidden name without a suffix to Python: it wrote a PNG named '.svg.png'
    if not name or name.endswith(".") or os.path.isdir(text) or (name.startswith(".") and
                                                                  not os.path.splitext(name)[1]):
        raise argparse.ArgumentTypeError(f"{text!r} names no file (e.g. speedup.png)")
    path = text if os.path.splitext(text)[1] else text + ".png"
    fmt = os.path.splitext(path)[1][1:].lower()
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise argparse.ArgumentTypeError(f"cannot write figures: {import_failure(exc)}") from None
    formats = set(Figure().canvas.get_supported_filetypes()) - {"pgf"}  # pgf needs LaTeX
    if fmt not in formats:
        raise argparse.ArgumentTypeError(f"{text!r}: this cannot write .{fmt} figures; "
                                         f"use one of .{', .'.join(sorted(formats))}")
    if os.path.isdir(path):  # 'figdir' names the folder 'figdir.png'
        raise argparse.ArgumentTypeError(f"{path!r} is a folder, not a file")
    check_writable(path, text)
    return path


def register(subparsers) -> None:
    """Add ``simulate`` with its six sub-commands to the ``rdk-theory`` parser."""
    from .toy_lm import TOY_PAIRS

    sim = subparsers.add_parser(
        "simulate", formatter_class=RAW,
        help="exact and Monte Carlo simulators: blocks, speedup, DSI, DISCO, SpecTr, SLEM/SLRS",
        description="Simulators built on the core samplers (see simulators/README.md).",
        epilog="examples:\n  rdk-theory simulate block --pair all --sampler all --gamma 3\n"
               "  rdk-theory simulate speedup --alpha 0.6 0.8 0.9 --c 0.05\n"
               "  rdk-theory simulate dsi --servers 7 --figure dsi.png\n"
               "  rdk-theory simulate disco --c 0.1\n  rdk-theory simulate spectr --k-max 4\n"
               "  rdk-theory simulate string --figure psi_cost.png")
    sub = sim.add_subparsers(dest="sim_command", metavar="SIMULATOR")
    def no_simulator(args):
        raise InputError("rdk-theory simulate: a SIMULATOR is required, one of: "
                         f"{', '.join(sub.choices)} (see 'rdk-theory simulate --help')")

    sim.set_defaults(func=no_simulator)

    def common(p, figure=True):
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        if figure:
            p.add_argument("--figure", metavar="PATH", type=_figure_path,
                           help="write a figure to PATH (format from its suffix; .png if none)")

    b = sub.add_parser("block", formatter_class=RAW, help="exact law of one speculative iteration on toy LMs",
                       description="Enumerate every draft path of one speculative iteration on toy Markov "
                                   "LMs (Fraction arithmetic); check sequence-level losslessness; exact law of "
                                   "tokens per target call; optional Monte Carlo with the real sampler.",
                       epilog="example:\n  rdk-theory simulate block --pair pruned --sampler all --gamma 3 --mc 20000\n"
                              "  -> per sampler: lossless yes, E[tokens/call], P(L = 1..4), MC mean [99.9% CI]")
    b.add_argument("--pair", choices=TOY_PAIRS + ("all",), default="all",
                   help="toy pair: same vocabulary, pruned drafter, or heterogeneous tokenizers (default all)")
    b.add_argument("--sampler", choices=SAMPLERS + ("all",), default="all", help="sampler (default all)")
    b.add_argument("--gamma", type=_count, default=3,
                   help="draft length, 0..6 (default 3; exact enumeration is exponential in it: "
                        "on 2 cores all 12 pairs and samplers take about 7 s at gamma 4, 30 s "
                        "at gamma 5 and 2-3 minutes at gamma 6, in under 300 MB)")
    b.add_argument("--seed", type=_count, default=0,
                   help="seed of the toy models and the Monte Carlo (>= 0; default 0)")
    b.add_argument("--mc", type=_mc_count, default=0,
                   help="Monte Carlo iterations, 0 or 2..10,000,000 (default 0: none; each "
                        "block is kept, about 33 bytes)")
    common(b)
    b.set_defaults(func=cmd_block)

    s = sub.add_parser("speedup", formatter_class=RAW, help="tokens per call, wall-time speedup, best gamma",
                       description="Leviathan's i.i.d. model: tokens per target call (1 - a^(g+1))/(1 - a), "
                                   "speedup with drafter cost c, and the best draft length g.",
                       epilog="example:\n  rdk-theory simulate speedup --alpha 0.6 0.8 0.9 --c 0.05 --mc 100000 "
                              "--figure speedup.png")
    s.add_argument("--alpha", type=float, nargs="+", default=[0.6, 0.8, 0.9],
                   help="acceptance rates in [0, 1], one curve each (default 0.6 0.8 0.9)")
    s.add_argument("--c", type=float, default=0.05,
                   help="drafter/target cost ratio, >= 0 (default 0.05)")
    s.add_argument("--gamma-max", type=_positive_int, default=16,
                   help="largest gamma searched, 1..512 (default 16)")
    s.add_argument("--mc", type=_mc_count, default=0,
                   help=f"Monte Carlo iterations at the best gamma, 0 or 2..{SPEEDUP_MAX_MC:,} "
                        "(default 0: none)")
    s.add_argument("--seed", type=_count, default=0, help="Monte Carlo seed (default 0)")
    common(s)
    s.set_defaults(func=cmd_speedup)

    d = sub.add_parser("dsi", formatter_class=RAW, help="DSI vs SI vs non-SI heat-map sweep",
                       description="Offline cost model of distributed speculative inference (arXiv "
                                   "2405.14105): best-lookahead DSI, SI and non-SI time per token over a "
                                   "(drafter cost c, acceptance a) grid. Exit 1 if a proved inequality fails: DSI "
                                   "slower than non-SI anywhere, or slower than SI where the servers "
                                   "cover the drafter (S >= ceil(1/c)). With fewer servers DSI may "
                                   "lose to SI; those points are counted, not a failure.",
                       epilog="example:\n  rdk-theory simulate dsi --servers 7 --figure dsi.png\n"
                              "  -> DSI / SI speedup ranges (whole grid and realistic sub-grid), "
                              "never-slower check")
    d.add_argument("--servers", type=_positive_int, default=7, help="target servers (default 7)")
    d.add_argument("--c-points", type=_positive_int, default=24,
                   help=f"grid points in c, log-spaced on [0.01, 1], 2..{DSI_MAX_C_POINTS} (default 24)")
    d.add_argument("--a-points", type=_positive_int, default=50,
                   help=f"grid points in a, on [0, 0.98], 2..{DSI_MAX_A_POINTS} (default 50)")
    d.add_argument("--k-max", type=_positive_int, default=64,
                   help=f"largest lookahead (default 64; c-points x a-points x k-max at most "
                        f"{DSI_MAX_WORK:,})")
    common(d)
    d.set_defaults(func=cmd_dsi)

    c = sub.add_parser("disco", formatter_class=RAW, help="oracle / static / confidence-threshold draft lengths",
                       description="DISCO (arXiv 2405.04304): the oracle speculation length against the best "
                                   "static one, on acceptance traces (exact DP) and on toy LMs (Monte Carlo "
                                   "speculative sampling), plus a confidence-threshold policy.",
                       epilog="example:\n  rdk-theory simulate disco --c 0.1 --figure disco.png")
    c.add_argument("--pair", choices=TOY_PAIRS, default="pruned", help="toy pair (default pruned)")
    c.add_argument("--sampler", choices=SAMPLERS, default="tli", help="sampler (default tli)")
    c.add_argument("--c", type=_unit_float, default=0.1,
                   help="drafter/target cost ratio in [0, 1] (default 0.1; a drafter slower than "
                        "the target never pays off, and the oracle bounds the policies only then)")
    c.add_argument("--gamma-max", type=_positive_int, default=8,
                   help="largest static gamma, and the most drafts per call of the toy LM's oracle "
                        f"and threshold policies, 1..{DISCO_MAX_GAMMA} (default 8)")
    c.add_argument("--tokens", type=_positive_int, default=20000,
                   help=f"tokens per policy, 1..{DISCO_MAX_TOKENS:,} (default 20000)")
    c.add_argument("--trace-length", type=int_at_least(2), default=2000,
                   help="positions of each acceptance trace, 2..10,000 (default 2000)")
    c.add_argument("--thresholds", type=_unit_float, nargs="*", default=[0.1, 0.2, 0.3, 0.4, 0.5],
                   help="confidence thresholds in [0, 1] (default 0.1 .. 0.5)")
    c.add_argument("--seed", type=_count, default=0,
                   help="seed of the toy pair, the traces and the Monte Carlo (default 0)")
    common(c)
    c.set_defaults(func=cmd_disco)

    k = sub.add_parser("spectr", formatter_class=RAW, help="K-SEQ multi-draft: rho*, acceptance, LP optimum",
                       description="SpecTr K-SEQ (arXiv 2310.15141) with k i.i.d. drafts: best rho by "
                                   "bisection, acceptance 1 - (1 - beta)^k, exact output law, LP optimum. "
                                   "Exit 1 if an exact output law is not p.",
                       epilog="example:\n  rdk-theory simulate spectr --support 4 --k-max 4 --mc 100000")
    k.add_argument("--support", type=_positive_int, default=4,
                   help="vocabulary size, 2..8 (default 4; the output law is enumerated exactly)")
    k.add_argument("--k-max", type=_positive_int, default=4, help="most drafts k, 1..5 (default 4)")
    k.add_argument("--trials", type=_positive_int, default=50,
                   help=f"random pairs for the K-SEQ / LP-optimum ratio, 1..{SPECTR_MAX_TRIALS:,} (default 50)")
    k.add_argument("--mc", type=_count, default=0,
                   help=f"Monte Carlo K-SEQ steps per k, 0..{SPECTR_MAX_MC:,} (default 0: none)")
    k.add_argument("--seed", type=_count, default=0, help="seed of the random pairs (default 0)")
    common(k, figure=False)
    k.set_defaults(func=cmd_spectr)

    t = sub.add_parser("string", formatter_class=RAW, help="SLEM / SLRS on toy tokenizers; cost of psi",
                       description="String-level verification (arXiv 2502.05202) on toy tokenizers: psi by "
                                   "segmentations, SLEM and SLRS acceptance, exact losslessness, and the "
                                   "exponential number of segmentations.",
                       epilog="example:\n  rdk-theory simulate string --max-length 24 --figure psi_cost.png")
    t.add_argument("--max-length", type=_positive_int, default=24,
                   help="cost table up to strings 'abab...' of this length, 1..60 (default 24; "
                        "their segmentations are counted, and enumerated up to length 7)")
    t.add_argument("--seed", type=_count, default=0, help="seed of the toy models (default 0)")
    common(t)
    t.set_defaults(func=cmd_string)
