"""The core sub-commands: ``acceptance``, ``sample`` and ``report``."""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .acceptance import acceptance_rate, oov_cap
from .case import (CASE_KEYS, KERNEL_CHOICES, kernel_options_used, kernels_for, load_case,
                   marginal_is_identity)
from .cli import _one_line
from .proposals import SAMPLERS, build_proposals
from .sampling import COUNT_CHUNK, sample_counts
from .validation import KERNEL_ATOL, NEG_ATOL, PROB_ATOL, InputError, int_at_least

RAW = argparse.RawDescriptionHelpFormatter
CASE_HELP = (
    "CASE.npz (numpy.savez) holds:\n"
    "  target_probs       (C, N_T)  target next-token distributions, one row per context\n"
    "  draft_probs        (C, N_D)  drafter distributions for the same contexts\n"
    "  draft_to_target    (N_D,)    int: the target id of each drafter token, -1 if absent;\n"
    "                               no target id twice (whole-number floats are read\n"
    "                               as ints; any other float is an error)\n"
    "  calibration_probs  (S, N_T)  optional, S >= 1: needed by --kernel marginal|covariance\n"
    "                               and by the first-order sampler\n"
    "  kernel             (N_T, N_T) optional, row-stochastic: needed by --kernel dense\n"
    "Each of these present is checked, used or not: real and finite; probabilities >= "
    f"-{NEG_ATOL:g}\n(such tiny negatives are read as 0), row sums within {PROB_ATOL:g} of 1 "
    "(float16 rows: within its\nrounding, 9.8e-4; rows are then renormalised); kernel entries "
    f">= 0, row sums within {KERNEL_ATOL:g}\nof 1 (float16: 9.8e-4), rows then renormalised. "
    "Other arrays in the file (ids,\nprovenance) are ignored, with a warning on stderr.\nBad input: exit status 2 and one line 'error: ...' "
    "on stderr.\n"
    "Kernels (README, 'Notation and definitions'; the marginal kernel and first-order RDK are\n"
    "this project's [definition]s): marginal: M = (1 - lam) Id + lam 1 w^T, w the calibration\n"
    "mean on the target ids outside I (those the drafter cannot propose), renormalised; when\n"
    "there are none, or they have no calibration mass, the identity (whatever --lam). covariance:\n"
    "M = softmax over all target columns of Omega / tau, Omega the population covariance\n"
    "(divided by S) of the calibration rows; the default tau is max_i Omega_ii (1 when every\n"
    "variance is 0; at least 2.2e-308, float64's smallest normal number)."
)


def clipped_acceptance(p, r):
    """Per-context acceptance, clipped to [0, 1]: the sum of minima of two distributions can
    exceed 1 by round-off (1 + 2e-16 for p == q), and it is reported as the probability it is."""
    return np.clip(acceptance_rate(p, r, check=False), 0.0, 1.0)


def add_kernel_options(p, title: str = "exact RDK uses the kernel; first-order RDK "
                                       "approximates the covariance kernel"):
    """``--kernel``, ``--tau`` and ``--lam`` (default None: identity, the default tau, the
    calibration lambda), as one argument group of parser ``p``."""
    g = p.add_argument_group(f"kernel options ({title}; an option the run does not use "
                             "draws a warning on stderr)")
    g.add_argument("--kernel", choices=KERNEL_CHOICES, default=None,
                   help="identity (RDK = TLI), marginal (rank one, O(N)), covariance (softmax "
                        "of the calibration covariance: O(N^2 S) time, applied a block of rows "
                        "at a time in O(N S) memory; first-order RDK is O(N S)), dense (the "
                        "'kernel' array of the case file). Default: identity")
    g.add_argument("--tau", type=float, default=None,
                   help="covariance softmax temperature; default max_i Var(p_c(i)), which "
                        "keeps every off-diagonal affinity |Omega_ij|/tau <= 1")
    g.add_argument("--lam", type=float, default=None,
                   help="marginal kernel mixing weight in [0, 1]; default: the calibration "
                        "mass outside the drafter's vocabulary")


_ROLES = {"--kernel": "vanilla and TLI use no kernel",
          "--tau": "it is the covariance kernel's temperature (--kernel covariance, and "
                   "first-order RDK)",
          "--lam": "it is the marginal kernel's mixing weight (--kernel marginal)"}


def warn_ignored_options(args, context: str, used: dict, case=None) -> None:
    """One stderr line per kernel option given but not in ``used``
    (:func:`rdk_theory.case.kernel_options_used`), once the kernels are built (a bad value
    is still an error first, and the only line on stderr). The run and its output are
    unchanged: the option is ignored, as before, but no longer silently. With ``case`` (read
    from ``args.case``), also a line naming the arrays of the file that are not part of a
    case, and one when ``--lam`` sets a marginal kernel that is the identity on that case
    whatever its weight. A line break in the file's name is written as its escape
    (:func:`rdk_theory.cli._one_line`, as in an error), so each warning is one line."""
    if case is not None and case.ignored_keys:
        print(_one_line(f"warning: {args.case}: ignoring arrays {list(case.ignored_keys)} (a "
                        f"case holds {', '.join(CASE_KEYS)})"), file=sys.stderr)
    for opt, role in _ROLES.items():
        if getattr(args, opt[2:]) is not None and not used[opt]:
            print(_one_line(f"warning: {opt} is ignored with {context}: {role}"), file=sys.stderr)
    if (used["--lam"] and args.lam is not None and args.lam != 0 and case is not None
            and marginal_is_identity(case)):
        why = ("the drafter reaches every target id" if case.vocab_map.oov.size == 0
               else "no calibration mass outside I")
        print(_one_line(f"warning: --lam {args.lam:g} has no effect: the marginal kernel is the "
                        f"identity on this case ({why}), so exact RDK equals TLI"),
              file=sys.stderr)


def cmd_acceptance(args) -> int:
    case = load_case(args.case)
    kind = args.kernel or "identity"
    kernel, first = kernels_for(case, kind, tau=args.tau, lam=args.lam)
    warn_ignored_options(args, f"--kernel {kind}", kernel_options_used(kind), case)
    props = build_proposals(case.draft_probs, case.vocab_map, kernel=kernel, first_order=first,
                            check=False)
    result = {}
    for name in SAMPLERS:
        if name in props:
            a = clipped_acceptance(case.target_probs, props[name])
            result[name] = {"mean": float(np.mean(a)), "per_context": [float(x) for x in a]}
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return 0
    cap = oov_cap(case.target_probs, case.vocab_map, check=False)
    print(f"case: {args.case}  contexts: {case.n_contexts}  N_T: {case.vocab_map.n_target}  "
          f"N_D: {case.vocab_map.n_draft}  |I|: {case.vocab_map.intersection.size}  "
          f"kernel: {kind}")
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
    need_fo = args.sampler == "rdk_first_order"
    if need_fo and args.kernel not in (None, "covariance"):
        raise InputError(f"--sampler rdk_first_order approximates the covariance kernel; "
                         f"--kernel {args.kernel} does not apply (omit it or use covariance)")
    kind = "covariance" if need_fo else args.kernel or "identity"
    exact = args.sampler == "rdk_exact"
    kernel, first = kernels_for(case, kind, tau=args.tau, lam=args.lam,
                                need_exact=exact, need_first_order=need_fo)
    warn_ignored_options(args, f"--sampler {args.sampler}" + (f" --kernel {kind}" if exact else ""),
                         kernel_options_used(kind, need_exact=exact, need_first_order=need_fo),
                         case)
    q = case.draft_probs[args.context: args.context + 1]
    props = build_proposals(q, case.vocab_map, kernel=kernel,
                            first_order=first, check=False)
    r = props[args.sampler][0]
    p = case.target_probs[args.context]
    counts, accepted = sample_counts(p, r, args.n, np.random.default_rng(args.seed))
    if args.json:
        json.dump({"counts": [int(c) for c in counts], "accepted": accepted,
                   "n": int(args.n)}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    alpha = float(clipped_acceptance(p, r))
    print(f"sampler {args.sampler}, context {args.context}, {args.n} steps, seed {args.seed}")
    print(f"accepted {accepted} / {args.n} = {accepted / args.n:.4f} "
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
                    "TLI, exact RDK with the\nchosen kernel and, with --kernel covariance, "
                    "first-order RDK. Prints a table (mean, min and\nmax alpha over the "
                    "contexts, and the OOV cap p(I) that TLI never exceeds), or with --json\n"
                    "one JSON object: a key per sampler, each {\"mean\": float, "
                    "\"per_context\": [C floats]}.",
        epilog=CASE_HELP + "\n\nexample:\n  rdk-theory acceptance case.npz --kernel "
               "covariance --json\n  -> {\"vanilla\": {\"mean\": ..., \"per_context\": [...]}, "
               "\"tli\": ..., \"rdk_exact\": ..., \"rdk_first_order\": ...}")
    p.add_argument("case", help="path to CASE.npz")
    add_kernel_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_acceptance)

    s = sub.add_parser(
        "sample", formatter_class=RAW,
        help="run N lossless verification steps for one context and count emitted tokens",
        description="Draw N independent verification steps (draft from the sampler's proposal, "
                    "accept with\nmin(1, p/r), else draw from the residual) for context K. "
                    "Every step is lossless: the emitted\ntoken follows p exactly, whatever the "
                    "sampler. rdk_exact uses --kernel (identity by default,\nwhich makes it "
                    "TLI); rdk_first_order always approximates the covariance kernel (it "
                    "needs\ncalibration_probs; another --kernel with it is an error); vanilla "
                    "and tli use no kernel\nand ignore the kernel options (with a warning on "
                    "stderr).",
        epilog=CASE_HELP + "\n\nexample:\n  rdk-theory sample case.npz --sampler "
               "rdk_first_order --context 0 --n 100000 --seed 1 --json\n  -> {\"counts\": "
               "[N_T ints], \"accepted\": int, \"n\": 100000}")
    s.add_argument("case", help="path to CASE.npz")
    s.add_argument("--sampler", choices=SAMPLERS, required=True)
    s.add_argument("--context", type=int_at_least(0), required=True,
                   help="context row K of the case, 0 <= K < C")
    s.add_argument("--n", type=int_at_least(1), required=True,
                   help=f"number of independent steps, >= 1; drawn in blocks of {COUNT_CHUNK:,} "
                        "(memory stays flat, a progress bar shows on a terminal). Every step is "
                        "drawn: about 0.1 us each at a small N_T and 0.5 us at N_T = 152K on one "
                        "core of a 2-core VM, so 1e9 steps take minutes and 1e12 days")
    s.add_argument("--seed", type=int_at_least(0), required=True,
                   help="seed of numpy's default_rng, >= 0 (same seed, same output)")
    add_kernel_options(s)
    s.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    s.set_defaults(func=cmd_sample)

    from .report import register as register_report

    register_report(sub)
