"""Acceptance vs kept size: predicted by the calculators, measured by running the step.

For each kept size K the drafter is pruned to its K most frequent ids (:mod:`.pruning`); each
sampler of :mod:`.samplers` builds its proposal from the real teacher-forced ``q``; the
predicted acceptance per position is ``alpha(p, r)`` and the measured one is the fraction of
``n_steps`` verification steps (:func:`rdk_theory.sampling.sample_steps`, the real ``p`` and
``r``) that accepted. Agreement is tested as in :mod:`.agreement`.
"""
from __future__ import annotations

import numpy as np

from rdk_theory.acceptance import acceptance_rate, oov_cap
from rdk_theory.proposals import tli_proposal
from rdk_theory.sampling import sample_steps
from rdk_theory.validation import InputError
from rdk_theory.vocab import pruned_draft_probs

from . import agreement
from .collect import laws64
from .pruning import pruned_vocab_map
from .samplers import SAMPLERS, KeptRowsTopK, build_kernels, pick_tau, proposals


def _at_grid_edge(tau, table: dict) -> bool:
    """Whether ``tau`` is the smallest or the largest of the grid ``table`` was picked on
    (False for an empty table: no tau was picked)."""
    return bool(table) and tau in (min(table), max(table))


def acceptance_study(p, q, counts, kept_sizes, *, mu, factor, p_cal, q_cal, n_steps: int,
                     rng, sparse_k: int = 16, exact_max_kept: int | None = None,
                     chunk: int = 64, progress=None, other_tests: int = 0) -> dict:
    """Run the study; returns ``{"rows": [...], "per_position": {...}, "taus": {...}}``.

    Parameters:
      p, q: (C, N) float32 teacher-forced target / full-drafter laws (evaluation positions).
      counts: (N,) calibration token counts (the pruning order).
      kept_sizes: the K values.
      mu, factor: calibration mean (N,) and factor (r, N) with Omega ~= factor^T factor.
      p_cal, q_cal: calibration-position laws, used only to pick tau.
      n_steps: verification steps per position and sampler (0: predictions only).
      exact_max_kept: skip the sparse exact kernel above this K (its build costs O(K N r)).
      other_tests: tests made elsewhere in the same run (the end-to-end checks): the run-wide
        false-alarm rate ``agreement.FALSE_ALARM`` is split over these and the study's alike.
    """
    n = p.shape[1]
    if p.shape[0] == 0 or len(p_cal) == 0:  # a numpy error, or NaN tau tables, before
        raise InputError(f"the study needs evaluation and calibration positions, got "
                         f"{p.shape[0]} and {len(p_cal)}")
    if not 1 <= sparse_k <= n:  # a torch error inside the sparse kernel's top-k, before
        raise InputError(f"sparse_k must be in 1..{n} (the vocabulary), got {sparse_k}")
    scale = float(np.max(np.sum(np.asarray(factor, dtype=np.float64) ** 2, axis=0)))
    if not scale > 0:  # the kernels' tau grid is multiples of the largest variance
        raise InputError("the calibration rows do not vary (their covariance is 0), so the "
                         "covariance kernels are undefined: calibrate on more varied text")
    n_tests = 2 * len(kept_sizes) * len(SAMPLERS) + other_tests  # aggregate + dispersion per cell
    rows, per_pos, taus = [], {}, {}
    # tau is picked on at most 128 calibration rows (evenly spaced): enough to rank the grid
    cal_sel = np.linspace(0, len(p_cal) - 1, min(128, len(p_cal))).round().astype(int)
    p_cal, q_cal = p_cal[cal_sel], q_cal[cal_sel]
    for K in kept_sizes:
        vm = pruned_vocab_map(counts, K)
        qk_cal = pruned_draft_probs(q_cal, vm)
        p_cal64 = laws64(p_cal)
        from rdk_theory.first_order import FirstOrderCovarianceKernel

        tau_fo, fo_table = pick_tau(p_cal64, qk_cal, vm,
                                    lambda t: FirstOrderCovarianceKernel.from_factor(factor, t),
                                    scale)
        topk = None
        tau_ex, ex_table = None, {}
        if exact_max_kept is None or K <= exact_max_kept:
            topk = KeptRowsTopK(factor, vm.intersection, sparse_k)
            tau_ex, ex_table = pick_tau(p_cal64, qk_cal, vm, topk.kernel, scale)
        kernels = build_kernels(vm, mu, factor, tau_exact=tau_ex, tau_fo=tau_fo, topk_rows=topk)
        taus[K] = {"rdk_first_order": tau_fo, "rdk_exact": tau_ex,
                   "calibration_alpha_by_tau": {"rdk_first_order": fo_table, "rdk_exact": ex_table},
                   # the limit tau -> 0 of first-order RDK, and whether a grid edge (the
                   # smallest or the largest tau) won
                   "tli_calibration_alpha": float(np.mean(acceptance_rate(
                       p_cal64, tli_proposal(qk_cal, vm, check=False), check=False))),
                   "at_grid_edge": {"rdk_first_order": _at_grid_edge(tau_fo, fo_table),
                                    "rdk_exact": _at_grid_edge(tau_ex, ex_table)}}
        pred = {s: [] for s in SAMPLERS}
        meas = {s: [] for s in SAMPLERS}
        cap = []
        for s0 in range(0, p.shape[0], chunk):
            pc = laws64(p[s0:s0 + chunk])
            qk = pruned_draft_probs(q[s0:s0 + chunk], vm)
            props = proposals(qk, vm, kernels)
            cap.append(oov_cap(pc, vm, check=False))
            for s, r in props.items():
                a = acceptance_rate(pc, r, check=False)
                pred[s].append(a)
                if n_steps:
                    meas[s].append([int(sample_steps(pc[i], r[i], n_steps, rng,
                                                     check=False)[1].sum())
                                    for i in range(pc.shape[0])])
            if progress is not None:
                progress.update(pc.shape[0])
        cap = np.concatenate(cap)
        row = {"kept": int(K), "keep_fraction": K / n, "oov_cap": float(cap.mean()),
               "kept_mass_calibration": float(mu[vm.intersection].sum())}
        checks = {}
        for s in SAMPLERS:
            if not pred[s]:
                row[s] = None
                continue
            a = np.concatenate(pred[s])
            row[s] = float(a.mean())
            if not n_steps:
                continue
            k = np.concatenate([np.asarray(m) for m in meas[s]])
            checks[s] = agreement.binomial_agreement(a, k, n_steps, n_tests)
            row[s] = checks[s]["predicted_mean"]
            per_pos[f"{s}@{K}"] = {"predicted": a.astype(np.float32).tolist(),
                                   "measured": (k / n_steps).astype(np.float32).tolist()}
        row["rdk_exact_kernel"] = (f"sparse covariance top-{sparse_k}" if topk is not None
                                   else None)
        row["checks"] = checks
        rows.append(row)
    return {"rows": rows, "per_position": per_pos, "taus": taus, "n_steps": n_steps,
            "false_alarm": agreement.FALSE_ALARM, "n_tests": n_tests}
