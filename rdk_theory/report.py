"""``rdk-theory report``: acceptance of every sampler across drafter pruning levels.

For each kept fraction of the drafter vocabulary (the most frequent ids on calibration data),
computes the mean exact acceptance of vanilla, TLI, exact RDK (the covariance-softmax kernel:
dense on synthetic data; on the real pair its sparse top-16 form, at most K = 40,000 kept),
first-order RDK (the O(N S) first-order form of the dense kernel, a [definition] of this
project: at exact RDK's tau on synthetic data, at its own tuned tau on the real pair), the
rank-one marginal kernel (a [definition] too), and the OOV cap ``p(I)``. Prints a table and
writes ``report.json`` and ``acceptance_vs_kept.png``.

Data sources: the built-in synthetic Zipfian LM (:func:`rdk_theory.synthetic.zipfian_lm`), or a
source registered in the entry-point group ``rdk_theory.report_sources`` (the validation
harness registers ``real``: the PyPI-shipped Qwen pair). ``--source auto`` uses ``real`` when it
reports its models as fetched, synthetic otherwise.

A source is called with the parsed arguments and returns the report dict, None when its data
is not there (the models not fetched), or raises :class:`SourceUnavailable` when it cannot run
here (an optional dependency missing): ``auto`` then falls back to the synthetic LM with one
warning line giving the reason, and ``real`` is that reason as the error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import entry_points

import numpy as np

from ._optional import import_failure
from ._outdir import check_targets, out_folder, write_replacing
from ._progress import progress
from .acceptance import acceptance_rate, finite_tau_score, oov_cap, total_variation
from .case import DENSE_KERNEL_MAX_BYTES, default_tau
from .first_order import FirstOrderCovarianceKernel
from .kernels import MarginalKernel, covariance_softmax_kernel
from .proposals import build_proposals
from .synthetic import zipfian_lm
from .validation import InputError, int_at_least, type_name
from .vocab import VocabMap, keep_most_frequent, kept_size, pruned_draft_probs

COLUMNS = ("vanilla", "tli", "rdk_exact", "rdk_first_order", "marginal")
DEFAULT_KEEP = (1.0, 0.5, 0.25, 0.1, 0.05)
REPORT_JSON, REPORT_FIGURE = "report.json", "acceptance_vs_kept.png"
#: tau candidates, as multiples of default_tau (max calibration variance).
TAU_MULTIPLIERS = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 1e-1, 1.0)
#: Smallest synthetic vocabulary: one topic of :func:`rdk_theory.synthetic.zipfian_lm` (24).
MIN_VOCAB = 24
#: Synthetic vocabulary size when ``--vocab`` is not given.
DEFAULT_VOCAB = 2048


class SourceUnavailable(InputError):
    """A report source that cannot run here, and why (one line): a missing optional
    dependency, or a source that failed to import. ``--source auto`` warns and uses the
    synthetic LM; ``--source real`` prints it as the error (exit status 2)."""


def capped_mean(caps) -> float:
    """The mean OOV cap ``p(I)``, at most 1: a drafter that keeps every id has ``p(I) = 1``,
    which float64 sums of a row can miss by round-off (1 + 6e-15 on the real pair)."""
    return min(1.0, float(np.mean(caps)))


def _mean_alpha(p, r):
    return float(np.mean(acceptance_rate(p, r, check=False)))


def synthetic_report(*, n: int, contexts: int, calibration: int, keep, seed: int,
                     show_progress: bool | None = None) -> dict:
    """The sweep on the synthetic Zipfian LM; returns the report dict (see module doc)."""
    rng = np.random.default_rng(seed)
    lm = zipfian_lm(rng, n, contexts=2 * contexts, calibration=calibration)
    tune, evalp = slice(0, contexts), slice(contexts, 2 * contexts)  # tau tuned on held-out rows
    cal = lm.calibration_probs
    base_tau = default_tau(cal)
    taus = [base_tau * m for m in TAU_MULTIPLIERS]
    freq = cal.mean(axis=0)
    rows = []
    for frac in progress(keep, desc="kept fractions", enabled=show_progress):
        k = kept_size(frac, n)
        vm = VocabMap.from_kept_ids(keep_most_frequent(freq, k), n)
        q = pruned_draft_probs(lm.draft_probs, vm)
        p = lm.target_probs
        props = build_proposals(q, vm, check=False)
        best, best_score, kernel = 0, -1.0, None
        for i, t in enumerate(taus):  # one dense N x N kernel alive at a time
            ker = covariance_softmax_kernel(cal, t)
            score = finite_tau_score(_mean_alpha(p[tune], ker.transport(props["tli"][tune])), t,
                                     "the covariance kernel")
            if score > best_score:
                best, best_score, kernel = i, score, ker
            del ker
        fo = FirstOrderCovarianceKernel(cal, taus[best])
        marginal = MarginalKernel.from_calibration(cal, vm)
        pe, tli = p[evalp], props["tli"][evalp]
        exact, approx = kernel.transport(tli), fo.transport(tli)
        rows.append({
            "keep_fraction": float(frac), "kept": k,
            "oov_cap": capped_mean(oov_cap(pe, vm, check=False)),
            "vanilla": _mean_alpha(pe, props["vanilla"][evalp]),
            "tli": _mean_alpha(pe, tli),
            "rdk_exact": _mean_alpha(pe, exact),
            "rdk_first_order": _mean_alpha(pe, approx),
            "tv_exact_first_order": float(np.mean(total_variation(exact, approx, check=False))),
            "marginal": _mean_alpha(pe, marginal.transport(tli)),
            "tau": taus[best], "marginal_lam": float(marginal.lam),
        })
    return {
        "source": "synthetic",
        "description": (f"synthetic Zipfian LM (rdk_theory.synthetic.zipfian_lm), N = {n}, "
                        f"{contexts} evaluation contexts, {calibration} calibration contexts, "
                        f"seed {seed}; tau of the covariance kernel chosen on {contexts} "
                        "held-out contexts from multiples of max calibration variance"),
        "keep_fractions": [float(f) for f in keep],
        "rows": rows,
    }


def _real_source():
    """The ``real`` source, or None when none is installed. One installed whose import fails
    (any exception: a missing dependency, a stale entry point) is a source that raises
    :class:`SourceUnavailable` naming the error, so that ``auto`` warns once with the real
    cause and ``real`` makes it the error (it said 'gpu_validation missing', and ``auto`` that
    the models were not fetched)."""
    for ep in entry_points(group="rdk_theory.report_sources"):
        if ep.name == "real":
            try:
                return ep.load()
            except Exception as exc:
                why = f"the 'real' report source could not be loaded: {type_name(exc)}: {exc}"

                def unavailable(args, why=why):
                    raise SourceUnavailable(why)

                return unavailable
    return None


def format_table(report: dict) -> str:
    cols = [c for c in COLUMNS if any(c in r for r in report["rows"])]
    head = f"{'kept':>8}{'fraction':>10}{'OOV cap':>10}" + "".join(f"{c:>17}" for c in cols)
    lines = [head, "-" * len(head)]
    for r in report["rows"]:
        lines.append(f"{r['kept']:>8}{r['keep_fraction']:>10.3f}{r['oov_cap']:>10.4f}"
                     + "".join(f"{r[c]:>17.4f}" if r.get(c) is not None else f"{'-':>17}"
                               for c in cols))
    if any(r.get(c) is None for r in report["rows"] for c in cols):
        lines.append("(-: not computed at that size; see the description above)")
    return "\n".join(lines)


def plot_report(report: dict, path: str) -> None:
    """Mean acceptance vs kept fraction, one line per sampler, and the OOV cap.

    ``report["rows"]`` as returned by the sources; optional ``report["title"]`` and
    ``report["labels"]`` (sampler -> legend label, overriding the defaults).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(report["rows"], key=lambda r: r["keep_fraction"])  # lines left to right,
    x = [r["keep_fraction"] for r in rows]  # whatever order --keep gave
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    styles = {"vanilla": ":", "tli": "-", "rdk_exact": "-", "rdk_first_order": "--", "marginal": "-"}
    labels = {"vanilla": "vanilla", "tli": "TLI", "rdk_exact": "exact RDK (covariance kernel)",
              "rdk_first_order": "first-order RDK (same tau)",
              "marginal": "exact RDK (rank-one marginal kernel)", **report.get("labels", {})}
    for c in COLUMNS:
        pts = [(r["keep_fraction"], r[c]) for r in rows if r.get(c) is not None]
        if pts:
            # vanilla on top: it equals TLI for a pruned drafter and would hide under it
            ax.plot(*zip(*pts), styles[c], marker="o", ms=4, label=labels[c],
                    zorder=3 if c == "vanilla" else 2)
    ax.plot(x, [r["oov_cap"] for r in rows], color="black", lw=1, ls="-.",
            label="OOV cap p(I) (TLI bound)")
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{r['kept']:,}\n{100 * f:.3g}%" for r, f in zip(rows, x)], fontsize=7)
    ax.minorticks_off()
    ax.set_xlabel("kept drafter vocabulary (K, fraction of N)")
    ax.set_ylabel("mean acceptance rate alpha")
    ax.set_title(report.get("title", f"acceptance vs pruning ({report['source']})"), fontsize=10)
    ax.grid(alpha=0.3, which="both")
    # below the axes: inside, "best" sat on the OOV cap line (it weighs points, not segments)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def _parse_keep(text: str):
    """``--keep`` as fractions in (0, 1], a repeat once (as validate's --kept); an empty item
    ('0.5,,0.25', '0.5,') is refused, not skipped."""
    if any(not v.strip() for v in text.split(",")):
        raise InputError(f"--keep has an empty item, got '{text}'")
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise InputError(f"--keep must be comma-separated fractions, got '{text}'") from None
    if not vals or any(not 0 < v <= 1 for v in vals):
        raise InputError(f"--keep fractions must lie in (0, 1], got '{text}'")
    return list(dict.fromkeys(vals))  # a repeat once: its row said nothing new


def distinct_kept(keep: list, n: int) -> list:
    """``keep`` without the fractions that keep as many of ``n`` ids as an earlier one, with a
    warning naming them: at ``--vocab 24``, 0.04 and 0.05 both keep 1 id and gave two equal
    rows (the real report's study refuses a repeated size)."""
    first: dict = {}  # kept size -> the first fraction that keeps it
    dropped = []
    for frac in keep:
        k = kept_size(frac, n)
        if first.setdefault(k, frac) != frac:
            dropped.append(f"{frac:g} keeps {k} of {n} ids, as {first[k]:g} does")
    if dropped:
        print("warning: --keep: " + "; ".join(dropped) + ": one row for each size",
              file=sys.stderr)
    return list(first.values())


def _synthetic_vocab(args) -> int:
    """The synthetic LM's vocabulary size N for ``args`` (``--vocab``, capped at 1024 by
    ``--quick``), or InputError when it is below one topic or too large for the dense kernel."""
    vocab = DEFAULT_VOCAB if args.vocab is None else args.vocab
    if vocab < MIN_VOCAB:
        raise InputError(f"--vocab must be >= {MIN_VOCAB} (one topic of the synthetic LM), "
                         f"got {vocab}")
    n = min(vocab, 1024) if args.quick else vocab
    if 2 * 8 * n**2 > DENSE_KERNEL_MAX_BYTES:
        raise InputError(f"--vocab {n} is too large for the exact dense covariance kernel "
                         f"(two N x N float64 matrices must fit in "
                         f"{DENSE_KERNEL_MAX_BYTES / 2**30:.0f} GiB)")
    return n


def cmd_report(args) -> int:
    keep = _parse_keep(args.keep)
    args.keep_fractions = keep
    # --vocab sizes the synthetic LM only: checked before any work when the source is
    # synthetic, and under auto only once the real pair turned out not to be fetched
    n = _synthetic_vocab(args) if args.source == "synthetic" else None
    with out_folder(args.out):  # a failed run leaves no empty folder of its own behind
        check_targets(args.out, (REPORT_JSON, REPORT_FIGURE))
        return _run_report(args, keep, n)


def _run_report(args, keep, n) -> int:
    report = None
    fallback = None  # auto without the real pair: why, warned once --vocab is known to be good
    if args.source in ("auto", "real"):
        from .cli import _one_line  # a reason may span lines: one warning line

        source = _real_source()
        if source is None and args.source == "real":
            raise InputError("no 'real' report source is installed (gpu_validation missing)")
        try:
            report = source(args) if source is not None else None
        except SourceUnavailable as exc:  # auto: its reason, then the synthetic LM
            if args.source == "real":
                raise
            fallback = _one_line(f"warning: {exc}: using the synthetic Zipfian LM")
        else:
            if report is None and args.source == "real":
                raise InputError("the real models are not fetched: run 'rdk-theory models "
                                 "fetch'")
            if report is None:
                why = "real models not fetched ('rdk-theory models fetch')" if source else \
                    "no 'real' report source is installed"
                fallback = f"warning: {why}: using the synthetic Zipfian LM"
        if report is not None and args.vocab is not None:
            print(f"warning: --vocab {args.vocab} ignored: it sizes the synthetic LM, and the "
                  "real model pair has its own vocabulary (--source synthetic uses it)",
                  file=sys.stderr)
    if report is None:
        n = _synthetic_vocab(args) if n is None else n  # a bad --vocab: its error line alone
        if fallback:
            print(fallback, file=sys.stderr)
        if args.vocab is not None and args.vocab > n:  # documented under --quick, said here
            print(f"warning: --quick caps the synthetic vocabulary at {n}: --vocab "
                  f"{args.vocab} is not used", file=sys.stderr)
        keep = distinct_kept(keep, n)
        report = synthetic_report(n=n, contexts=32 if args.quick else 64,
                                  calibration=128 if args.quick else 256, keep=keep,
                                  seed=args.seed)
    # the table first: a write that fails at the end (a full disk) does not lose the numbers
    print(report.get("description", report["source"]))
    print(format_table(report), flush=True)
    json_path = os.path.join(args.out, REPORT_JSON)
    fig_path = os.path.join(args.out, REPORT_FIGURE)
    skipped = None
    try:  # each file is replaced whole or left as it was (never half-written)
        write_replacing(fig_path, lambda tmp: plot_report(report, tmp))
    except ImportError as exc:  # matplotlib is the optional [plot] extra: the JSON has every number
        fig_path, skipped = None, exc
    write_replacing(json_path, lambda tmp: _write_json(report, tmp))
    print(f"\nwrote {json_path}" + (f"\nwrote {fig_path}" if fig_path else ""))
    if skipped is not None:
        print(f"figure skipped: {import_failure(skipped)}", file=sys.stderr)
    return 0


def _write_json(report: dict, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(report, fh, indent=2)


def register(sub) -> None:
    p = sub.add_parser(
        "report", formatter_class=argparse.RawDescriptionHelpFormatter,
        help="the main job: acceptance of every sampler vs drafter pruning level",
        description=__doc__.split("\n\n")[1].replace("``", ""),
        epilog="examples:\n  rdk-theory report                      # real pair if fetched, "
               "else synthetic\n  rdk-theory report --source synthetic --keep 1,0.25,0.05 "
               "--out outputs/syn\n\nThe table has one row per kept fraction; the OOV cap p(I) "
               "bounds TLI (and vanilla),\nnot RDK, which can move mass onto pruned tokens. "
               "The RDK columns use the covariance-softmax\nkernel as defined (no mixing with "
               "the identity; on the real pair exact RDK's is sparse, top-16),\nand first-order "
               "RDK is a kernel of its own away from small tau; that they fall below or\nrise "
               "above TLI is a finding about those kernels (README, 'What the main job\nprints'), "
               "not an error.")
    p.add_argument("--source", choices=("auto", "synthetic", "real"), default="auto",
                   help="data: real model pair (needs 'rdk-theory models fetch'), synthetic, or "
                        "auto (real when fetched). Default: auto")
    p.add_argument("--keep", default=",".join(str(k) for k in DEFAULT_KEEP),
                   help="comma-separated fractions of the drafter vocabulary to keep; one "
                        "that keeps as many ids as an earlier one is left out, with a warning "
                        "(default: %(default)s)")
    p.add_argument("--vocab", type=int, default=None, help="synthetic vocabulary size N, at "
                   f"least {MIN_VOCAB} (default {DEFAULT_VOCAB}; the exact covariance kernel is "
                   "N x N). The real pair has its own vocabulary: there --vocab is ignored, "
                   "with a warning")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="random seed, >= 0 (default 0)")
    p.add_argument("--quick", action="store_true",
                   help="smaller sizes, for a fast look: synthetic, 32 contexts, 128 "
                        "calibration rows, N at most 1024; real pair, 128 positions instead "
                        "of 512 and exact RDK up to K = 16384 instead of 40000")
    p.add_argument("--out", default=os.path.join("outputs", "report"),
                   help="output directory for report.json and the figure, which replace "
                        "those of an earlier run there (default %(default)s)")
    p.set_defaults(func=cmd_report)
