"""Hypothesis strategies for the whole suite (one module, STYLE.md).

Distributions are drawn as *integer weights* so that they hold exact zeros (disjoint supports,
point masses, ``p == q``); each is returned both exactly (numpy object array of ``Fraction``) and
as float64. Vocabulary maps cover pruned drafters, heterogeneous maps with ``-1`` entries, and
empty and singleton intersections. Kernels are row-stochastic: dense, sparse, identity, rank one.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

MAX_WEIGHT = 6


@dataclass(frozen=True)
class Law:
    """One vector of probabilities: ``exact`` (Fractions, object array) and ``f64`` (float64)."""

    exact: np.ndarray
    f64: np.ndarray

    @classmethod
    def from_weights(cls, weights, total=None):
        total = sum(weights) if total is None else total
        exact = np.array([Fraction(w, total) for w in weights], dtype=object)
        return cls(exact, exact.astype(np.float64))

    def __len__(self):
        return len(self.exact)


def weights(n: int, *, max_weight: int = MAX_WEIGHT, min_positive: int = 1):
    """``n`` non-negative integer weights with at least ``min_positive`` positive entries."""
    return st.lists(st.integers(0, max_weight), min_size=n, max_size=n).filter(
        lambda w: sum(1 for x in w if x > 0) >= min_positive)


def laws(n: int, **kw):
    """A probability vector of length ``n`` with exact zeros allowed."""
    return weights(n, **kw).map(Law.from_weights)


#: Decimal exponents of :func:`magnitude_weights`: entries from 1e-300 (still a normal float64
#: after normalisation) to 1.
MIN_EXPONENT = -300


def magnitude_weights(n: int, *, min_exponent: int = MIN_EXPONENT):
    """``n`` exact weights ``w_i 10^k_i`` (``w_i`` in ``0..MAX_WEIGHT``, at least one positive;
    ``k_i`` in ``[min_exponent, 0]``): entries of wildly different magnitudes, so that masses
    such as ``q(I)`` or ``1 - alpha`` can be tiny yet positive (a division that treats a tiny
    positive denominator as zero is then wrong)."""
    entry = st.tuples(st.integers(0, MAX_WEIGHT), st.integers(min_exponent, 0))
    return st.lists(entry, min_size=n, max_size=n).filter(lambda e: any(w for w, _ in e)).map(
        lambda e: [Fraction(w) * Fraction(10) ** k for w, k in e])


def magnitude_laws(n: int, **kw):
    """A probability vector of length ``n`` from :func:`magnitude_weights` (exact zeros too)."""
    return magnitude_weights(n, **kw).map(Law.from_weights)


def sub_laws(n: int, **kw):
    """A sub-stochastic vector of length ``n`` (an extra hidden slot takes the missing mass)."""
    return weights(n + 1, min_positive=0, **kw).filter(lambda w: sum(w) > 0).map(
        lambda w: Law.from_weights(w[:n], total=sum(w)))


@st.composite
def law_pairs(draw, min_n: int = 1, max_n: int = 6, *, sub_stochastic_second: bool = False,
              law=None):
    """``(p, r)`` over one vocabulary; ``r`` may be sub-stochastic (``law``: the strategy of
    ``p`` and of a stochastic ``r``, :func:`laws` unless given, e.g. :func:`magnitude_laws`)."""
    law = law or laws
    n = draw(st.integers(min_n, max_n))
    p = draw(law(n))
    r = draw(sub_laws(n) if sub_stochastic_second else law(n))
    return p, r


@st.composite
def vocab_cases(draw, *, max_target: int = 6, max_draft: int = 6, kind: str | None = None):
    """``(n_target, draft_to_target)`` of kind ``pruned``, ``hetero`` (``-1`` entries), ``empty``
    (no drafter token in the target) or ``singleton`` (exactly one shared token)."""
    kind = kind or draw(st.sampled_from(["pruned", "hetero", "empty", "singleton"]))
    nt = draw(st.integers(1, max_target))
    if kind == "pruned":
        kept = draw(st.lists(st.integers(0, nt - 1), min_size=1, max_size=nt, unique=True))
        return nt, np.array(kept, dtype=np.int64)
    nd = draw(st.integers(1, max_draft))
    if kind == "empty":
        return nt, np.full(nd, -1, dtype=np.int64)
    if kind == "singleton":
        m = np.full(nd, -1, dtype=np.int64)
        m[draw(st.integers(0, nd - 1))] = draw(st.integers(0, nt - 1))
        return nt, m
    ids = draw(st.lists(st.integers(0, nt - 1), min_size=0, max_size=min(nd, nt), unique=True))
    m = np.full(nd, -1, dtype=np.int64)
    slots = draw(st.permutations(range(nd)))[: len(ids)]
    m[list(slots)] = ids
    return nt, m


def _matrix(rows):
    exact = np.array([list(r.exact) for r in rows], dtype=object)
    return exact, exact.astype(np.float64)


@st.composite
def kernels(draw, n: int, kind: str | None = None):
    """``(kind, exact (n, n) object array, float64 (n, n))`` row-stochastic kernel."""
    kind = kind or draw(st.sampled_from(["dense", "sparse", "identity", "rank_one"]))
    if kind == "identity":
        rows = [Law.from_weights([int(i == j) for j in range(n)]) for i in range(n)]
    elif kind == "dense":
        rows = [draw(laws(n)) for _ in range(n)]
    elif kind == "sparse":
        rows = []
        for i in range(n):
            w = draw(weights(n, min_positive=0))
            w = [x if draw(st.booleans()) else 0 for x in w]
            w[i] = max(w[i], 1)  # keep the diagonal so each row has mass
            rows.append(Law.from_weights(w))
    elif kind == "rank_one":
        w = draw(laws(n))
        lam = Fraction(draw(st.integers(0, 4)), 4)
        exact = np.empty((n, n), dtype=object)
        for i in range(n):
            for j in range(n):
                exact[i, j] = (1 - lam) * int(i == j) + lam * w.exact[j]
        return kind, exact, exact.astype(np.float64)
    else:  # pragma: no cover
        raise ValueError(kind)
    exact, f64 = _matrix(rows)
    return kind, exact, f64


@st.composite
def calibration_sets(draw, n: int, *, min_rows: int = 2, max_rows: int = 8):
    """Calibration target laws ``p_c`` (S, n), float64, exact zeros allowed."""
    s = draw(st.integers(min_rows, max_rows))
    return np.stack([draw(laws(n)).f64 for _ in range(s)])


@st.composite
def toy_tokenizers(draw):
    """``(drafter unigram {string: Fraction}, target token strings)`` over the alphabet {a, b}."""
    token = st.text(alphabet="ab", min_size=1, max_size=3)
    dvocab = draw(st.lists(token, min_size=1, max_size=5, unique=True))
    w = draw(weights(len(dvocab)))
    law = Law.from_weights(w)
    tvocab = draw(st.lists(token, min_size=1, max_size=5, unique=True))
    return dict(zip(dvocab, law.exact)), tvocab
