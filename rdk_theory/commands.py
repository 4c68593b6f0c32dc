"""The core sub-commands: ``acceptance``, ``sample`` and ``report``."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .acceptance import acceptance_rate, oov_cap
from .case import KERNEL_CHOICES, DenseKernelTooLarge, kernels_for, load_case
from .proposals import SAMPLERS, build_proposals
from .sampling import emitted_counts, sample_steps
from .validation import InputError

RAW = argparse.RawDescriptionHelpFormatter


def _add_kernel_options(p):
    g = p.add_argument_group("kernel options (exact RDK uses the kernel; first-order RDK "
                             "approximates the covariance kernel)")
    g.add_argument("--kernel", choices=KERNEL_CHOICES, default="identity",
                   help="identity (RDK = TLI), marginal (rank one, O(N)), covariance (dense "
                        "softmax of the calibration covariance, O(N^2)), dense (the 'kernel' "
                        "array of the case file). Default: identity")
    g.add_argument("--tau", type=float, default=None,
                   help="covariance softmax temperature; default max_i Var(p_c(i)), which "
                        "keeps every off-diagonal affinity |Omega_ij|/tau <= 1")
    g.add_argument("--lam", type=float, default=None,
                   help="marginal kernel mixing weight in [0, 1]; default: the calibration "
                        "mass outside the drafter's vocabulary")


def cmd_acceptance(args) -> int:
    case = load_case(args.case)
    try:
        kernel, first = kernels_for(case, args.kernel, tau=args.tau, lam=args.lam)
    except DenseKernelTooLarge as exc:  # first-order RDK is O(N): still report it
        print(f"warning: rdk_exact omitted: {exc}", file=sys.stderr)
        kernel, first = kernels_for(case, args.kernel, tau=args.tau, lam=args.lam, need_exact=False)
    props = build_proposals(case.draft_probs, case.vocab_map, kernel=kernel, first_order=first,
                            check=False)
    result = {}
    for name in SAMPLERS:
        if name in props:
            a = acceptance_rate(case.target_probs, props[name], check=False)
            result[name] = {"mean": float(np.mean(a)), "per_context": [float(x) for x in a]}
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return 0
    cap = oov_cap(case.target_probs, case.vocab_map, check=False)
    print(f"case: {args.case}  contexts: {case.n_contexts}  N_T: {case.vocab_map.n_target}  "
          f"N_D: {case.vocab_map.n_draft}  |I|: {case.vocab_map.intersection.size}  "
          f"kernel: {args.kernel}")
    print(f"{'sampler':<18}{'mean alpha':>12}{'min':>10}{'max':>10}")
    for name, r in result.items():
        pc = np.array(r["per_context"])
        print(f"{name:<18}{r['mean']:>12.6f}{pc.min():>10.4f}{pc.max():>10.4f}")
    print(f"{'OOV cap p(I)':<18}{float(np.mean(cap)):>12.6f}   (TLI never exceeds it; RDK can)")
    return 0


def cmd_sample(args) -> int:
    case = load_case(args.case)
    if not 0 <= args.context < case.n_contexts:
        raise InputError(f"--context {args.context} is out of range: the case has "
                         f"{case.n_contexts} contexts (0..{case.n_contexts - 1})")
    if args.n < 1:
        raise InputError(f"--n must be >= 1, got {args.n}")
    if args.seed < 0:
        raise InputError(f"--seed must be >= 0, got {args.seed}")
    need_fo = args.sampler == "rdk_first_order"
    kernel, first = kernels_for(case, args.kernel, tau=args.tau, lam=args.lam,
                                need_exact=args.sampler == "rdk_exact", need_first_order=need_fo)
    q = case.draft_probs[args.context: args.context + 1]
    props = build_proposals(q, case.vocab_map, kernel=kernel,
                            first_order=first, check=False)
    r = props[args.sampler][0]
    p = case.target_probs[args.context]
    tokens, accepted = sample_steps(p, r, args.n, np.random.default_rng(args.seed), check=False)
    counts = emitted_counts(tokens, case.vocab_map.n_target)
    if args.json:
        json.dump({"counts": [int(c) for c in counts], "accepted": int(accepted.sum()),
                   "n": int(args.n)}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    alpha = float(acceptance_rate(p, r, check=False))
    print(f"sampler {args.sampler}, context {args.context}, {args.n} steps, seed {args.seed}")
    print(f"accepted {int(accepted.sum())} / {args.n} = {accepted.mean():.4f} "
          f"(exact alpha {alpha:.4f})")
    top = np.argsort(-counts)[:10]
    print(f"{'token':>8}{'count':>10}{'freq':>10}{'p':>10}")
    for t in top:
        if counts[t]:
            print(f"{t:>8}{counts[t]:>10}{counts[t] / args.n:>10.4f}{p[t]:>10.4f}")
    return 0


def register_all(sub) -> None:
    p = sub.add_parser(
        "acceptance", formatter_class=RAW,
        help="exact acceptance rate of every sampler on a CASE.npz",
        description="Exact per-context acceptance alpha = sum_x min(p(x), r(x)) of vanilla, "
                    "TLI, exact RDK and (covariance kernel) first-order RDK.",
        epilog="CASE.npz holds target_probs (C, N_T), draft_probs (C, N_D), draft_to_target "
               "(N_D,) int (-1: absent from the target),\noptional calibration_probs (S, N_T) "
               "and kernel (N_T, N_T).\n\nexample:\n  rdk-theory acceptance case.npz --kernel "
               "covariance --json\n  -> {\"vanilla\": {\"mean\": ..., \"per_context\": [...]}, "
               "\"tli\": ..., \"rdk_exact\": ..., \"rdk_first_order\": ...}")
    p.add_argument("case", help="path to CASE.npz")
    _add_kernel_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_acceptance)

    s = sub.add_parser(
        "sample", formatter_class=RAW,
        help="run N lossless verification steps for one context and count emitted tokens",
        description="Draw N independent verification steps (draft from the sampler's proposal, "
                    "accept with min(1, p/r), else draw from the residual) for context K.",
        epilog="example:\n  rdk-theory sample case.npz --sampler rdk_first_order --kernel "
               "covariance --context 0 --n 100000 --seed 1 --json\n  -> {\"counts\": [N_T ints], "
               "\"accepted\": int, \"n\": 100000}")
    s.add_argument("case", help="path to CASE.npz")
    s.add_argument("--sampler", choices=SAMPLERS, required=True)
    s.add_argument("--context", type=int, required=True, help="context row K of the case")
    s.add_argument("--n", type=int, required=True, help="number of independent steps")
    s.add_argument("--seed", type=int, required=True, help="seed of numpy's default_rng")
    _add_kernel_options(s)
    s.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    s.set_defaults(func=cmd_sample)

    from .report import register as register_report

    register_report(sub)
