"""SpecTr's K-SEQ [6] with ``k`` i.i.d. drafts: exact output law by enumeration, a sampler, and
the comparison with the optimal k-draft acceptance (an LP on small supports).

The maths (``beta(rho)``, validity ``1 - (1 - beta)^k <= rho beta``, acceptance
``1 - (1 - beta)^k``, the best ``rho`` by bisection, the LP and min-cut optima) lives in
:mod:`rdk_theory.multidraft`; this module *runs* the procedure:

* :func:`kseq_law_by_enumeration` walks every tuple of drafts ``(x_1..x_k)`` (probability
  ``prod q(x_i)``), scans it accepting ``x_i`` with probability ``min(1, p(x_i) / (rho q(x_i)))``
  and, when all are rejected, draws from the residual ``(p - a)^+ / sum (p - a)^+`` where ``a`` is
  the accept law. Exact on Fractions: the output law equals ``p`` when ``rho`` is valid, and the
  accept part equals :func:`rdk_theory.multidraft.kseq_accept_law`.
* :func:`kseq_sample` draws ``n`` K-SEQ steps (float64) for Monte Carlo tests.
* :func:`rational_best_rho` turns the bisection's float ``rho*`` into a valid Fraction.
* :func:`compare_with_lp` tabulates K-SEQ at ``rho*`` against the LP optimum.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from rdk_theory.multidraft import (
    LP_MAX_TUPLES,
    _pq,
    beta,
    check_rho,
    kseq_accept_law,
    kseq_acceptance,
    kseq_best_rho,
    kseq_is_valid,
    one_minus_inv_e,
    optimal_acceptance_lp,
)
from rdk_theory.sampling import InverseCdf
from rdk_theory.validation import InputError, as_count, check_numpy_rng


def rational_best_rho(p, q, k: int) -> Fraction:
    """A Fraction ``rho`` at (or just above) the bisection's ``rho*`` that is exactly valid."""
    p, q = _pq(p, q)  # a scalar was a raw TypeError
    pf = np.array([float(v) for v in p])
    qf = np.array([float(v) for v in q])
    rho = Fraction(kseq_best_rho(pf, qf, k)).limit_denominator(1 << 40)
    step = Fraction(1, 1 << 30)
    while not kseq_is_valid(p, q, rho, k):
        rho += step
        step *= 2
    return max(rho, Fraction(1))


def kseq_law_by_enumeration(p, q, rho, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact K-SEQ output law by walking every draft tuple; returns ``(law, accept_law)``.

    ``accept_law[x]`` is the probability that a draft is accepted and equals ``x``; its total is
    the acceptance.

    ``p``, ``q``: 1-D object arrays of Fractions over one vocabulary (q may be sub-stochastic:
    the missing mass is a draft the target lacks, never accepted). ``rho``: a Fraction >= 1.
    """
    k = as_count(k, "k", 1)
    rho = check_rho(rho)  # < 1 would draft past the target's law: not K-SEQ, and not lossless
    p, q = (np.array(list(v), dtype=object) if isinstance(v, (list, tuple)) else v
            for v in (p, q))  # a list of Fractions stays exact (as_prob_array reads floats)
    p, q = _pq(p, q)  # laws of one length: a p of (3/2, -1/2) or a short one was walked as given
    n = len(p)
    accept = np.array([Fraction(0)] * n, dtype=object)
    support = [x for x in range(n) if q[x] != 0]
    outside = 1 - sum(q)  # a draft outside the target's vocabulary
    atoms = [(x, q[x]) for x in support] + ([(-1, outside)] if outside != 0 else [])
    if len(atoms) > 1 and k * math.log(len(atoms)) > math.log(LP_MAX_TUPLES) + 1e-9:
        raise InputError(f"{len(atoms)}^{k} draft tuples to walk (at most {LP_MAX_TUPLES:,}): "
                         "use kseq_output_law, which needs no enumeration")
    none = Fraction(0)
    for tup in itertools.product(atoms, repeat=int(k)):
        w = Fraction(1)
        for _, qx in tup:
            w *= qx
        for x, qx in tup:  # scan the drafts in order
            if x < 0:
                continue
            acc = min(Fraction(1), Fraction(p[x]) / (rho * qx))
            accept[x] += w * acc
            w *= 1 - acc
        none += w
    excess = [v - u if v > u else Fraction(0) for v, u in zip(p, accept)]
    tot = sum(excess)
    law = accept + (none * np.array([e / tot for e in excess], dtype=object) if tot != 0 else 0)
    return law, accept


def kseq_sample(p, q, rho: float, k: int, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``n`` K-SEQ steps (float64): returns emitted tokens (n,) and whether a draft was accepted.
    Steps are drawn in blocks of :data:`KSEQ_BLOCK` (memory stays flat: 1e7 steps at once
    took 2.2 GB); up to one block, the draws are those of a single block."""
    p, q = _pq(p, q)  # strings were numpy's raw ValueError
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    n, k, rho = as_count(n, "n"), as_count(k, "k", 1), float(check_rho(rho))
    check_numpy_rng(rng, "kseq_sample needs")
    if n > KSEQ_BLOCK:
        parts = [_kseq_block(p, q, rho, k, min(KSEQ_BLOCK, n - i), rng) for i in range(0, n, KSEQ_BLOCK)]
        return np.concatenate([t for t, _ in parts]), np.concatenate([a for _, a in parts])
    return _kseq_block(p, q, rho, k, n, rng)


#: Steps per block of :func:`kseq_sample`.
KSEQ_BLOCK = 1 << 20


def _kseq_block(p, q, rho, k, n, rng):
    """:func:`kseq_sample` on checked arguments, ``n`` steps at once."""
    q_draw = InverseCdf(q)  # q may be sub-stochastic: its total is the drafting mass
    mass = q_draw.total
    u = rng.random((n, k))
    drafts = np.full((n, k), -1, dtype=np.int64)  # -1: the drafter drafted nothing
    drafting = u < mass  # only these are uniforms of q's draw (u / mass in [0, 1))
    if mass > 0:
        drafts[drafting] = q_draw(u[drafting] / mass)
    safe = np.where(drafts >= 0, drafts, 0)
    ratio = np.where(drafts >= 0, p[safe] / (rho * np.where(q[safe] > 0, q[safe], 1.0)), 0.0)
    ok = rng.random((n, k)) < np.minimum(ratio, 1.0)
    any_ok = ok.any(axis=1)
    first = ok.argmax(axis=1)
    tokens = np.where(any_ok, drafts[np.arange(n), first], -1)
    a = kseq_accept_law(p, q, rho, k)
    excess = np.maximum(p - a, 0.0)
    rej = np.flatnonzero(~any_ok)
    if rej.size:
        # an empty excess (a = p to round-off, hit once in ~2^53 steps) draws from p, as the
        # one-draft step does from an empty residual
        tokens[rej] = InverseCdf(excess if excess.sum() > 0 else p)(rng.random(rej.size))
    return tokens, any_ok


def compare_with_lp(p, q, ks=(1, 2, 3, 4)) -> list[dict]:
    """For each ``k``: ``rho*``, ``beta``, K-SEQ acceptance at ``rho*``, the LP optimum, the ratio."""
    rows = []
    p, q = _pq(p, q)  # ['a', 'b'] was numpy's raw ValueError
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    ks = [ks] if np.ndim(ks) == 0 and not hasattr(ks, "__iter__") else list(ks)  # one k: [k]
    for k in ks:
        rho = kseq_best_rho(p, q, k)
        acc = float(kseq_acceptance(p, q, rho, k))
        opt = optimal_acceptance_lp(p, q, k)
        rows.append({"k": int(k), "rho": float(rho), "beta": float(beta(p, q, rho)),
                     "kseq": acc, "lp_optimum": opt,
                     "ratio": acc / opt if opt > 0 else 1.0, "bound": one_minus_inv_e()})
    return rows
