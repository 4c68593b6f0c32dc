"""Matplotlib figures for the simulators (imported lazily, Agg backend; small PNGs)."""
from __future__ import annotations

import numpy as np

DPI = 90


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path):
    """Write ``fig`` to ``path`` whole or not at all: a write that fails part-way (a full disk)
    leaves an earlier file there as it was, and no partial one. PostScript's note that it
    renders transparency opaque (logged on every .eps/.ps figure) is kept off stderr."""
    import logging

    from rdk_theory._outdir import write_replacing

    fig.tight_layout()
    ps_log = logging.getLogger("matplotlib.backends.backend_ps")
    level = ps_log.level
    ps_log.setLevel(logging.ERROR)
    try:
        write_replacing(path, lambda tmp: fig.savefig(tmp, dpi=DPI))
    finally:
        ps_log.setLevel(level)
        _plt().close(fig)


def speedup_figure(path, alphas, c, gamma_max, speedups, best):
    """Speedup vs gamma, one line per alpha, the best gamma marked."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    g = np.arange(gamma_max + 1)
    for a, s, (bg, bs) in zip(alphas, speedups, best):
        ax.plot(g, s, marker=".", label=f"alpha={a:g}")
        ax.plot([bg], [bs], "k*", ms=9)
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("draft length gamma")
    ax.set_ylabel("wall-time speedup")
    ax.set_title(f"Speculative sampling speedup, c = {c:g} (* = best gamma)", fontsize=9)
    ax.legend(fontsize=8)
    _save(fig, path)


def dsi_figure(path, sw):
    """Two heat maps over (c, a): DSI vs SI and DSI vs non-SI speedups."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.6))
    for ax, key, title in ((axes[0], "speedup_vs_si", "DSI speedup over SI (best k each)"),
                           (axes[1], "speedup_vs_nonsi", "DSI speedup over non-SI")):
        data = sw[key]
        im = ax.pcolormesh(sw["a"], sw["c"], data, shading="nearest", cmap="viridis",
                           norm=None if key == "speedup_vs_si" else _lognorm(data))
        ax.set_yscale("log")
        ax.set_xlabel("acceptance rate a")
        ax.set_ylabel("drafter cost c (target = 1)")
        ax.set_title(f"{title}\n{sw['servers']} target servers; min {data.min():.2f}, max {data.max():.2f}",
                     fontsize=8)
        fig.colorbar(im, ax=ax)
    _save(fig, path)


def _lognorm(data):
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=max(1.0, float(data.min())), vmax=float(data.max()))


def disco_figure(path, c, trace_static, trace_oracle, toy_static, toy_oracle, toy_threshold):
    """Time per token vs static gamma (trace and toy LM), oracle and threshold as lines."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.3))
    g = np.arange(len(trace_static))
    axes[0].plot(g, trace_static, marker=".", label="static gamma")
    axes[0].axhline(trace_oracle, color="C3", ls="--", label="oracle")
    axes[0].set_title(f"regime trace (exact DP), c = {c:g}", fontsize=9)
    gs = np.arange(len(toy_static))
    axes[1].plot(gs, toy_static, marker=".", label="static gamma")
    axes[1].axhline(toy_oracle, color="C3", ls="--", label="oracle")
    axes[1].axhline(toy_threshold, color="C2", ls=":", label="best confidence threshold")
    axes[1].set_title(f"toy LM (Monte Carlo), c = {c:g}", fontsize=9)
    for ax in axes:
        ax.set_xlabel("static draft length gamma")
        ax.set_ylabel("time per token (target forwards)")
        ax.legend(fontsize=7)
    _save(fig, path)


def string_cost_figure(path, rows):
    """Segmentation count (log scale) and enumeration time vs target-token length."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 3.3))
    L = [r["length"] for r in rows]
    ax.semilogy(L, [r["segmentations"] for r in rows], marker=".", label="segmentations (DP count)")
    timed = [r for r in rows if "enumeration_seconds" in r]
    ax2 = ax.twinx()
    ax2.semilogy([r["length"] for r in timed], [r["enumeration_seconds"] for r in timed], "C3s-",
                 ms=3, label="brute-force enumeration time (s)")
    ax.set_xlabel("length of the target token string")
    ax.set_ylabel("segmentations into drafter tokens")
    ax2.set_ylabel("seconds", color="C3")
    ax.set_title("Cost of psi(t) by enumerating segmentations", fontsize=9)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    _save(fig, path)


def block_figure(path, results):
    """Exact law of tokens per target call, one group of bars per sampler."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.3))
    names = [f"{r['pair']}/{r['sampler']}" for r in results]
    gmax = max(max(int(k) for k in r["length_law"]) for r in results)
    width = 0.8 / gmax
    for L in range(1, gmax + 1):
        ax.bar(np.arange(len(results)) + (L - 1) * width, [r["length_law"].get(str(L), 0) for r in results],
               width, label=f"L={L}")
    ax.set_xticks(np.arange(len(results)) + 0.4 - width / 2)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("P(L tokens per target call)")
    ax.set_title("Exact block-length law (one speculative iteration)", fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, path)
