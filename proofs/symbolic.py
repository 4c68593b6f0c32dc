"""Case splits for min/max identities, done by sympy.

:func:`holds_for_all_orderings` proves a statement about ``Min``/``Max``/``Abs`` of linear forms in a
few real symbols by splitting on every ordering of the symbols: for an ordering
``s_1 <= s_2 <= ... <= s_k`` it substitutes ``s_1 = t``, ``s_{i+1} = s_i + w_i`` with ``w_i >= 0``,
under which sympy resolves every ``Min``/``Max`` of the original symbols, then checks the relation
(``== 0`` or ``>= 0``) symbolically. Ties are covered since ``w_i = 0`` is allowed. Every case must
succeed; a case sympy cannot decide counts as a failure (never as a success).
"""
from __future__ import annotations

import itertools

import sympy as sp


def ordered_substitutions(symbols, *, nonnegative_base: bool = False, given=()):
    """Yield ``(ordering, substitution dict)`` for every ordering of ``symbols``.

    ``given`` lists pairs ``(x, y)`` meaning the hypothesis ``x <= y``: orderings that put ``y``
    strictly before ``x`` are skipped (they cannot occur).
    """
    symbols = list(symbols)
    base = sp.Symbol("t", nonnegative=True) if nonnegative_base else sp.Symbol("t", real=True)
    gaps = sp.symbols(f"w0:{max(1, len(symbols) - 1)}", nonnegative=True)
    for perm in itertools.permutations(symbols):
        if any(perm.index(y) < perm.index(x) for x, y in given):
            continue
        subs, cur = {}, base
        for i, s in enumerate(perm):
            if i > 0:
                cur = cur + gaps[i - 1]
            subs[s] = cur
        yield perm, subs


def decide(expr, relation: str) -> bool:
    """Whether sympy proves ``expr == 0`` or ``expr >= 0`` from its symbols' assumptions alone;
    undecided counts as False."""
    e = sp.simplify(sp.expand(expr))
    if relation == "==":
        return e == 0
    if relation == ">=":
        return bool(e.is_nonnegative) or e == 0
    raise ValueError(relation)


def holds_for_all_orderings(expr, symbols, relation: str = "==", *, nonnegative_base: bool = False,
                            given=()):
    """True iff ``expr (relation) 0`` is proved by sympy in every ordering of ``symbols``
    compatible with the hypotheses ``given`` (pairs ``(x, y)`` for ``x <= y``).

    Returns ``(ok, failing_ordering)``; ``failing_ordering`` is None when ``ok``.
    """
    for perm, subs in ordered_substitutions(symbols, nonnegative_base=nonnegative_base, given=given):
        if not decide(expr.subs(subs, simultaneous=True), relation):
            return False, perm
    return True, None
