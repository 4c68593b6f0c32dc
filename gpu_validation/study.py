"""Acceptance vs kept size: predicted by the calculators, measured by running the step.

For each kept size K the drafter is pruned to its K most frequent ids (:mod:`.pruning`); each
sampler of :mod:`.samplers` builds its proposal from the real teacher-forced ``q``; the
predicted acceptance per position is ``alpha(p, r)`` and the measured one is the fraction of
``n_steps`` verification steps (:func:`rdk_theory.sampling.sample_steps`, the real ``p`` and
``r``, drawn :data:`STEP_CHUNK` at a time: :func:`accepted_count`) that accepted. Agreement is
tested as in :mod:`.agreement`.

Two relations hold exactly for a pruned drafter, so they are checked per position without
sampling (:func:`deterministic_checks`, to :data:`EXACT_ROUNDOFF`): vanilla's alpha equals
TLI's (the kept ids all lie in the target's vocabulary and the pruned ``q`` already sums to 1
on them), and TLI's alpha is at most the OOV cap ``p(I)`` (statement O2).
"""
from __future__ import annotations

import numpy as np

from rdk_theory.acceptance import acceptance_rate, oov_cap
from rdk_theory.proposals import tli_proposal
from rdk_theory.sampling import COUNT_CHUNK, sample_steps
from rdk_theory.validation import InputError, as_count
from rdk_theory.vocab import pruned_draft_probs

from . import agreement
from .collect import laws64
from .pruning import pruned_vocab_map
from .samplers import SAMPLERS, KeptRowsTopK, build_kernels, pick_tau, proposals


#: Steps drawn at once per position (:func:`accepted_count`): the steps' arrays (about 50 bytes
#: a step) stay at one chunk's, whatever ``n_steps`` is. rdk_theory.sampling.sample_counts'
#: chunk, so the draws are its draws; up to it (the default 2,000 steps, any n up to 2^20)
#: they are exactly those of one ``sample_steps(p, r, n_steps, rng)`` call.
STEP_CHUNK = COUNT_CHUNK
#: Float64 round-off allowed in the deterministic checks (sums over N terms, N up to 2^20):
#: ``|alpha_vanilla - alpha_tli|`` and ``alpha_tli - p(I)`` per position.
EXACT_ROUNDOFF = 1e-9
#: The deterministic checks of each kept size (:func:`deterministic_checks`), in report order.
DETERMINISTIC_CHECKS = ("vanilla_equals_tli", "tli_within_oov_cap")


def accepted_count(p, r, n_steps: int, rng, chunk: int | None = None) -> int:
    """How many of ``n_steps`` verification steps with target law ``p`` and proposal ``r``
    accepted: :func:`rdk_theory.sampling.sample_steps` ``chunk`` steps at a time (default
    :data:`STEP_CHUNK`), unchecked, on one generator. Holding every step of ``--steps 2e7``
    at once took 1.7 GB; this holds one chunk's. It draws what
    ``rdk_theory.sampling.sample_counts(p, r, n_steps, rng, chunk=chunk)`` draws (without
    validating the laws or counting the emitted tokens), and for ``n_steps <= chunk`` exactly
    what ``sample_steps(p, r, n_steps, rng)`` draws."""
    chunk = STEP_CHUNK if chunk is None else int(chunk)
    accepted = 0
    for start in range(0, n_steps, chunk):
        accepted += int(sample_steps(p, r, min(chunk, n_steps - start), rng,
                                     check=False)[1].sum())
    return accepted


def check_sparse_k(sparse_k: int, n: int) -> None:
    """InputError unless the sparse exact kernel's ``sparse_k`` is in ``1..n`` (the laws'
    width): the study checks it, and the harness before an earlier run's files go."""
    if not 1 <= sparse_k <= n:
        raise InputError(f"sparse_k must be in 1..{n} (the vocabulary), got {sparse_k}")


def deterministic_checks(a_vanilla, a_tli, cap) -> dict:
    """The exact relations of one kept size, per position (arrays of the same length):
    ``vanilla_equals_tli`` (``|alpha_vanilla - alpha_tli| <= EXACT_ROUNDOFF``) and
    ``tli_within_oov_cap`` (``alpha_tli - p(I) <= EXACT_ROUNDOFF``). Each: the worst
    position's value, how many positions break it, the tolerance and ``pass``. Deterministic:
    no false-alarm rate is spent on them."""
    a_vanilla, a_tli, cap = (np.asarray(x, dtype=np.float64) for x in (a_vanilla, a_tli, cap))
    if not a_vanilla.shape == a_tli.shape == cap.shape:  # [0.5] was stretched over 3 positions
        raise ValueError(f"one value per position in each: shapes {a_vanilla.shape}, "
                         f"{a_tli.shape}, {cap.shape}")
    diff, excess = np.abs(a_vanilla - a_tli), a_tli - cap
    out = {}
    for name, key, v in (("vanilla_equals_tli", "max_abs_difference", diff),
                         ("tli_within_oov_cap", "max_excess", excess)):
        bad = ~(v <= EXACT_ROUNDOFF)  # NaN breaks it too
        out[name] = {key: float(np.max(v)) if v.size else 0.0, "positions_failing": int(bad.sum()),
                     "tolerance": EXACT_ROUNDOFF, "pass": not bool(bad.any())}
    return out


def _at_grid_edge(tau, table: dict) -> bool:
    """Whether ``tau`` is the smallest or the largest of the grid ``table`` was picked on
    (False for an empty table: no tau was picked)."""
    return bool(table) and tau in (min(table), max(table))


def acceptance_study(p, q, counts, kept_sizes, *, mu, factor, p_cal, q_cal, n_steps: int,
                     rng, sparse_k: int = 16, exact_max_kept: int | None = None,
                     chunk: int = 64, progress=None, other_tests: int = 0) -> dict:
    """Run the study; returns ``{"rows": [...], "per_position": {...}, "taus": {...}}``.

    Each row holds the statistical ``checks`` per sampler (with ``n_steps``) and the
    ``deterministic_checks`` of its kept size (:func:`deterministic_checks`, always).

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
    # each a raw numpy error, a misleading message, or an empty study, before
    if np.shape(q) != p.shape or np.shape(q_cal) != np.shape(p_cal) or np.ndim(p_cal) != 2 \
            or np.shape(p_cal)[1] != n:
        raise InputError(f"p {p.shape} and q {np.shape(q)}, p_cal {np.shape(p_cal)} and q_cal "
                         f"{np.shape(q_cal)} must be (positions, N) pairs of one N")
    if np.shape(counts) != (n,):
        raise InputError(f"counts must hold one token count per target id ({n}), got shape "
                         f"{np.shape(counts)}")
    kept_sizes = [as_count(k, "kept size", 1) for k in kept_sizes]
    if not kept_sizes or len(set(kept_sizes)) != len(kept_sizes):
        raise InputError(f"kept_sizes must be distinct sizes, at least one, got {kept_sizes}")
    chunk = as_count(chunk, "chunk", 1)
    if p.shape[0] == 0 or len(p_cal) == 0:  # a numpy error, or NaN tau tables, before
        raise InputError(f"the study needs evaluation and calibration positions, got "
                         f"{p.shape[0]} and {len(p_cal)}")
    check_sparse_k(sparse_k, n)  # a torch error inside the sparse kernel's top-k, before
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
                    meas[s].append([accepted_count(pc[i], r[i], n_steps, rng)
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
        row["deterministic_checks"] = deterministic_checks(
            np.concatenate(pred["vanilla"]), np.concatenate(pred["tli"]), cap)
        row["checks"] = checks
        rows.append(row)
    return {"rows": rows, "per_position": per_pos, "taus": taus, "n_steps": n_steps,
            "false_alarm": agreement.FALSE_ALARM, "n_tests": n_tests}
