"""Matplotlib figures of a run: acceptance vs kept fraction, predicted vs measured, time vs N."""
from __future__ import annotations

from pathlib import Path

SAMPLER_STYLE = {"vanilla": ("vanilla", "o", "--"), "tli": ("TLI", "s", "-"),
                 "rdk_exact": ("exact RDK (sparse kernel)", "^", "-"),
                 "rdk_first_order": ("first-order RDK", "v", "-"),
                 "marginal": ("marginal RDK", "D", "-")}
#: One colour per sampler, for its points and its legend entry alike (points drawn from the
#: colour cycle, one scatter per (sampler, kept size), took other colours than the legend's
#: with two kept sizes or more): the colour ``acceptance_vs_kept`` gives its line where every
#: sampler has one (the core's plot_report takes them from the cycle in this order).
SAMPLER_COLOUR = {s: f"C{i}" for i, s in enumerate(SAMPLER_STYLE)}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def acceptance_vs_kept(study: dict, path: Path, title: str) -> Path:
    """The core report's figure (:func:`rdk_theory.report.plot_report`) for a run's study rows."""
    from rdk_theory.report import plot_report

    plot_report({"source": "real", "title": title, "rows": study["rows"],
                 "labels": {s: label for s, (label, _, _) in SAMPLER_STYLE.items()}}, path)
    return path


def predicted_vs_measured(study: dict, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    for key, d in study["per_position"].items():
        s = key.split("@")[0]
        ax.scatter(d["predicted"], d["measured"], s=2, alpha=0.3,
                   marker=SAMPLER_STYLE[s][1], color=SAMPLER_COLOUR[s], label=None)
    for s, (label, marker, _) in SAMPLER_STYLE.items():
        ax.scatter([], [], marker=marker, color=SAMPLER_COLOUR[s], label=label)
    ax.plot([0, 1], [0, 1], "k-", lw=0.8)
    ax.set_xlabel("predicted alpha per position")
    ax.set_ylabel(f"measured (fraction of {study['n_steps']} steps)")
    ax.legend(fontsize=7, markerscale=1)
    ax.set_title("calculators vs verification steps, every kept size", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def time_vs_n(timing: dict, path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    for b in sorted({r["batch"] for r in timing["rows"]}):
        rows = [r for r in timing["rows"] if r["batch"] == b]
        for name, ls in (("first_order", "-"), ("dense_exact", "--"), ("floor", ":")):
            pts = [(r["n"], r[f"{name}_s"]) for r in rows if r.get(f"{name}_s")]
            if pts:
                sl = timing["slopes"].get(f"{name}@batch{b}")
                ax.plot(*zip(*pts), ls=ls, marker="o", ms=3,
                        label=f"{name} b={b}" + (f" (slope {sl:.2f})" if sl is not None else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("vocabulary size N")
    ax.set_ylabel("seconds per call (median)")
    ax.set_title(f"proposal + acceptance on {timing['device']}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def redraw(folder) -> Path:
    """Draw ``predicted_vs_measured.png`` of a finished run again from its ``report.json`` and
    ``per_position.npz`` in ``folder`` (no model): the committed figures after a change to the
    figure. ``python -m gpu_validation.figures FOLDER``."""
    import json
    import zipfile

    import numpy as np

    from rdk_theory._outdir import write_replacing

    from rdk_theory.validation import InputError

    folder = Path(folder)
    for name in ("report.json", "per_position.npz"):
        if not (folder / name).is_file():  # a traceback naming '--help/report.json' before
            raise InputError(f"{folder}: no {name} (give the folder of a finished "
                             "'rdk-theory validate' run)")
    try:
        report = json.loads((folder / "report.json").read_text())
        per = {}
        with np.load(folder / "per_position.npz") as z:
            for name in z.files:  # "sampler@K:predicted" and ":measured", in the study's order
                key, what = name.rsplit(":", 1)
                per.setdefault(key, {})[what] = z[name]
        st = {"per_position": per, "n_steps": report["study"]["n_steps"]}
    except (ValueError, KeyError, TypeError, OSError, EOFError,
            zipfile.BadZipFile) as exc:  # not a validate run's files (a truncated npz too)
        raise InputError(f"{folder}: not a finished validate run's report.json and "
                         f"per_position.npz ({type(exc).__name__}: {exc})") from None
    if not per or any(set(v) != {"predicted", "measured"} for v in per.values()):
        raise InputError(f"{folder}/per_position.npz holds no predicted/measured pairs")
    path = folder / "predicted_vs_measured.png"
    write_replacing(str(path), lambda tmp: predicted_vs_measured(st, Path(tmp)))
    return path


def main(argv=None) -> int:
    """``python -m gpu_validation.figures FOLDER [FOLDER ...]``: :func:`redraw` each folder;
    a folder that is not a finished run's is one ``error:`` line, exit status 2."""
    from rdk_theory.cli import _Parser, run_command

    parser = _Parser(prog="python -m gpu_validation.figures",
                     description="Draw predicted_vs_measured.png of finished 'rdk-theory "
                                 "validate' runs again from their report.json and "
                                 "per_position.npz (no model is loaded), replacing the figure "
                                 "in each folder.")
    parser.add_argument("folders", nargs="+", metavar="FOLDER",
                        help="the --out folder of a finished validate run")
    args = parser.parse_args(argv)

    def redraw_all(args):
        for folder in args.folders:
            print(f"wrote {redraw(folder)}")

    return run_command(redraw_all, args)


if __name__ == "__main__":
    import sys

    sys.exit(main())
