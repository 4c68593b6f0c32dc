r"""Statement E (first-order error): :math:`|\alpha_{exact} - \alpha_{fo}| \le
\mathrm{TV}(q''_{exact}, q''_{fo})`, and that TV is :math:`O(\max_{i \ne j} |B_{ij}|^2)`.

Part 1 (symbolic): :math:`\min(p, a) - \min(p, b) \le (a - b)^+` in every ordering of
:math:`p, a, b` (sympy). Summing over :math:`x`, :math:`\alpha(p, a) - \alpha(p, b) \le
\sum_x (a - b)^+ = \mathrm{TV}(a, b)` whenever :math:`\sum a = \sum b`; the first-order proposal
is renormalised to :math:`\sum q'`, so this applies, and by symmetry to the absolute value.
Exhaustive exact check on the grid; then the bound is checked on the toolkit's own
:class:`~rdk_theory.first_order.FirstOrderCovarianceKernel` against
:func:`~rdk_theory.kernels.covariance_softmax_kernel` (float64).

Part 2 (numerical, hence the whole statement is ``verified``, not ``proved``): on a fixed random
calibration set, :math:`\tau` is swept over a geometric grid so that :math:`\max |B_{ij}|` falls
by about 10x per step; the log-log slope of the TV against :math:`\max |B_{ij}|` must be at least
``MIN_SLOPE`` (second order has slope 2; first order would have slope 1).

Part 3 (clip): the bound holds for any two proposals of equal mass, clipped or not, and the
sweep's :math:`\tau` never make the first-order vector negative, so neither leg above sees a
missing clip. At the ``CLIP`` temperatures (:math:`\max |B_{ij}|` of 8 and 27) the vector goes
negative on some contexts (checked: a leg where nothing is clipped fails as vacuous); there, on
every engine available (numpy, and with numba the fused and blas engines), the proposal must be
non-negative, sum to :math:`\sum q'` (rows of mass 1 down to 1/16; with ``normalise=True``, the
call :func:`~rdk_theory.proposals.rdk_proposal` makes, to 1) and equal its definition (MATH.md
section 5: the vector clipped at 0 and renormalised to :math:`\sum q'`), and the bound must hold.

Perturbed statement (must be refuted): the bound with half the TV,
:math:`|\alpha_a - \alpha_b| \le \mathrm{TV}(a, b)/2`.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from rdk_theory import _fused
from rdk_theory.acceptance import acceptance_rate, total_variation
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.kernels import covariance_softmax_kernel

from .exhaustive import distributions, inexact
from .result import run_check
from .symbolic import holds_for_all_orderings

ID = "E"
TITLE = "|alpha_exact - alpha_fo| <= TV(q''_exact, q''_fo), and the TV is second order in max|B|"
PERTURBED = "|alpha(p, a) - alpha(p, b)| <= TV(a, b) / 2"
GRID = dict(n=3, d=4)
SWEEP = dict(n=40, s=24, seed=20240610, taus=(0.03, 0.3, 3.0, 30.0), contexts=16)
MIN_SLOPE = 1.8
#: Part 3: taus where the first-order vector of the sweep's inputs has negative entries; the
#: contexts' q' are the sweep's rows scaled to masses 1, 15/16, ..., 1/16.
CLIP = dict(taus=(1e-4, 3e-5))
ENGINES = ("numpy", "fused", "blas")
#: float64 slack on the TV bound (sums of N = 40 terms).
SLACK = 1e-12


def _body(out):
    p_, a_, b_ = sp.symbols("p a b", real=True)
    ok, _ = holds_for_all_orderings(sp.Max(0, a_ - b_) - (sp.Min(p_, a_) - sp.Min(p_, b_)), [p_, a_, b_], ">=")
    if not ok:
        out.fail("sympy could not establish min(p, a) - min(p, b) <= (a - b)^+")
    out.methods.append("sympy: min(p,a) - min(p,b) <= (a-b)^+ in every ordering, summed with sum a = sum b")
    n, d = GRID["n"], GRID["d"]
    laws = list(distributions(n, d))
    for p in laws:
        for a in laws:
            for b in laws:
                out.cases += 1
                gap, tv = abs(acceptance_rate(p, a) - acceptance_rate(p, b)), total_variation(a, b)
                if inexact(gap, tv) is not None:
                    out.fail({"p": p, "a": a, "b": b, "gap": gap, "tv": tv, "inexact": True})
                if gap > tv:
                    out.fail({"p": p, "a": a, "b": b, "gap": gap, "tv": tv})
                if gap > tv / 2:
                    out.refute({"p": p, "a": a, "b": b, "gap": gap, "tv/2": tv / 2})
    out.methods.append(f"exhaustive exact check over all p, a, b on N = {n}, grid 1/{d}")
    # Part 2: the toolkit's first-order kernel against the exact covariance-softmax kernel.
    rng = np.random.default_rng(SWEEP["seed"])
    nn, s = SWEEP["n"], SWEEP["s"]
    cal = rng.dirichlet(np.full(nn, 0.5), size=s)
    p = rng.dirichlet(np.full(nn, 0.5), size=SWEEP["contexts"])
    qp = rng.dirichlet(np.full(nn, 0.5), size=SWEEP["contexts"])
    bmax, tvs = [], []
    for tau in SWEEP["taus"]:
        fo = FirstOrderCovarianceKernel(cal, tau)
        ex = covariance_softmax_kernel(cal, tau)
        r_fo, r_ex = fo.transport(qp), ex.transport(qp)
        tv = total_variation(r_ex, r_fo)
        gap = np.abs(acceptance_rate(p, r_ex) - acceptance_rate(p, r_fo))
        out.cases += len(p)
        if np.any(gap > tv + SLACK):
            i = int(np.argmax(gap - tv))
            out.fail({"tau": tau, "context": i, "gap": float(gap[i]), "tv": float(tv[i])})
        bmax.append(fo.max_offdiag_affinity())
        tvs.append(float(tv.max()))
    slope = np.polyfit(np.log(bmax[1:]), np.log(tvs[1:]), 1)[0]
    if slope < MIN_SLOPE:
        out.fail({"max_abs_B": bmax, "max_tv": tvs, "loglog_slope": float(slope)})
    out.notes.append(f"tau sweep {SWEEP['taus']}: max|B| = {[f'{b:.2e}' for b in bmax]}, "
                     f"max TV = {[f'{t:.2e}' for t in tvs]}, log-log slope {slope:.2f} (>= {MIN_SLOPE}).")
    out.methods.append(f"float64 check of the bound on FirstOrderCovarianceKernel vs covariance_softmax_kernel "
                       f"(N = {nn}, S = {s}, {SWEEP['contexts']} contexts, tau in {SWEEP['taus']}) and "
                       f"log-log slope of TV vs max|B| >= {MIN_SLOPE} (numerical: hence 'verified')")
    _clip_leg(out, cal, p, qp)


def _clip_leg(out, cal, p, qp):
    """Part 3: where the clip acts, every engine's proposal is the clipped vector renormalised
    to ``sum q'`` (non-negative, of that mass) and the bound holds against the exact kernel."""
    engines = ENGINES if _fused.available() else ENGINES[:1]
    mass = np.arange(len(qp), 0, -1) / len(qp)  # 1, 15/16, ..., 1/16
    qs = qp * mass[:, None]
    clipped = []
    for tau in CLIP["taus"]:
        raw = FirstOrderCovarianceKernel(cal, tau, engine="numpy").transport_unclipped(qs)
        hit = raw.min(axis=-1) < 0
        clipped.append(int(hit.sum()))
        if not hit.any():
            out.fail({"tau": tau, "why": "the first-order vector has no negative entry: the clip leg is vacuous"})
            continue
        want = np.maximum(raw, 0.0)
        want *= qs.sum(axis=-1, keepdims=True) / want.sum(axis=-1, keepdims=True)
        r_ex = covariance_softmax_kernel(cal, tau).transport(qs)
        for engine in engines:
            fo = FirstOrderCovarianceKernel(cal, tau, engine=engine)
            out.cases += len(qs)
            for normalise, scale in ((False, mass), (True, np.ones_like(mass))):
                got = fo.transport(qs, normalise=normalise)
                dev = np.abs(got - want * (scale / mass)[:, None]).max(axis=-1)
                bad = (got.min(axis=-1) < 0) | (np.abs(got.sum(axis=-1) - scale) > SLACK) | (dev > SLACK)
                if bad.any():
                    i = int(np.argmax(bad))
                    out.fail({"tau": tau, "engine": engine, "normalise": normalise, "context": i,
                              "min": float(got[i].min()), "sum": float(got[i].sum()),
                              "want_sum": float(scale[i]), "from_definition": float(dev[i])})
            got = fo.transport(qs)
            tv = total_variation(r_ex, got)
            gap = np.abs(acceptance_rate(p, r_ex) - acceptance_rate(p, got))
            if np.any(gap > tv + SLACK):
                i = int(np.argmax(gap - tv))
                out.fail({"tau": tau, "engine": engine, "context": i, "gap": float(gap[i]), "tv": float(tv[i])})
    out.notes.append(f"clip leg at tau {CLIP['taus']}: {clipped} of {len(qs)} contexts clipped, engines "
                     f"{', '.join(engines)}" + ("" if len(engines) == len(ENGINES)
                                                 else " (fused and blas need numba, not importable here)")
                     + ".")
    out.methods.append(f"float64 check, where the clip acts (tau in {CLIP['taus']}), that every engine's "
                       f"proposal ({', '.join(engines)}; with normalise=True too) is the first-order vector "
                       f"clipped at 0 and renormalised to sum q' (non-negative, of that mass, sum q' from 1 "
                       f"down to 1/{len(qs)}), and of the bound there")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "verified")
