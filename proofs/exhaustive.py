"""Exhaustive enumeration of small exact inputs: every distribution on a rational grid.

``distributions(n, d)`` yields every probability vector of length ``n`` whose entries are
multiples of ``1/d`` (all compositions of ``d`` into ``n`` non-negative parts), as numpy object
arrays of ``Fraction``: exact zeros, point masses, disjoint supports and ``p == q`` all occur.
"""
from __future__ import annotations

import itertools
import numbers
from fractions import Fraction

import numpy as np

from rdk_theory.validation import InputError


def compositions(total: int, parts: int):
    """All tuples of ``parts`` non-negative ints summing to ``total`` (``parts >= 1``,
    ``total >= 0``: 0 parts recursed without end)."""
    if parts < 1 or total < 0:
        raise InputError(f"compositions need parts >= 1 and total >= 0, got {parts}, {total}")
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in compositions(total - first, parts - 1):
            yield (first,) + rest


def fractions(values, d: int) -> np.ndarray:
    return np.array([Fraction(v, d) for v in values], dtype=object)


def distributions(n: int, d: int):
    """Every law on ``n`` points with entries in ``{0, 1/d, ..., 1}`` (``n, d >= 1``)."""
    if n < 1 or d < 1:  # d = 0 divided by zero
        raise InputError(f"distributions need n >= 1 points and a grid d >= 1, got {n}, {d}")
    for c in compositions(d, n):
        yield fractions(c, d)


def sub_distributions(n: int, d: int):
    """Every sub-stochastic vector on ``n`` points with entries in ``{0, 1/d, ..., 1}``."""
    if n < 1 or d < 1:  # d = 0 divided by zero
        raise InputError(f"sub_distributions need n >= 1 points and a grid d >= 1, got {n}, {d}")
    for total in range(d + 1):
        for c in compositions(total, n):
            yield fractions(c, d)


def vocab_maps(n_target: int, n_draft: int):
    """Every ``draft_to_target`` of length ``n_draft`` over ``n_target`` (``-1`` allowed, no repeats)."""
    for entries in itertools.product(range(-1, n_target), repeat=n_draft):
        valid = [e for e in entries if e >= 0]
        if len(valid) == len(set(valid)):
            yield np.array(entries, dtype=np.int64)


def every_map(n_max: int):
    """Every ``(n_target, n_draft, draft_to_target)`` with ``1 <= n_target, n_draft <= n_max``.

    So the pruned maps include proper subsets (``n_draft < n_target``, where ``p(D) < 1`` is
    possible), not only the permutations ``n_draft = n_target`` allows.
    """
    for nt in range(1, n_max + 1):
        for nd in range(1, n_max + 1):
            for m in vocab_maps(nt, nd):
                yield nt, nd, m


def row_stochastic(n: int, d: int):
    """Every ``n x n`` row-stochastic matrix with entries in multiples of ``1/d`` (small n, d!)."""
    rows = list(distributions(n, d))
    for choice in itertools.product(rows, repeat=n):
        yield np.stack(choice)


def is_distribution(x) -> bool:
    return all(v >= 0 for v in x) and sum(x) == 1


def inexact(*values):
    """The first number among ``values`` (scalars or arrays) that is not exact (a float, where
    a Fraction or int belongs), or None. A grid of quarters is exact in float64 too, and
    ``Fraction(1, 4) == 0.25``: without this, a core that fell back to floats passed the
    ``==`` checks on such a grid unseen."""
    for v in values:
        for x in np.asarray(v, dtype=object).reshape(-1):
            if not isinstance(x, numbers.Rational):
                return x
    return None
