"""Matplotlib figures of a run: acceptance vs kept fraction, predicted vs measured, time vs N."""
from __future__ import annotations

from pathlib import Path

SAMPLER_STYLE = {"vanilla": ("vanilla", "o", "--"), "tli": ("TLI", "s", "-"),
                 "rdk_exact": ("exact RDK (sparse kernel)", "^", "-"),
                 "rdk_first_order": ("first-order RDK", "v", "-"),
                 "marginal": ("marginal RDK", "D", "-")}


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
                   marker=SAMPLER_STYLE[s][1], label=None)
    for s, (label, marker, _) in SAMPLER_STYLE.items():
        ax.scatter([], [], marker=marker, label=label)
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
