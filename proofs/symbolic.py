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


class Steps:
    """The named sub-steps of one symbolic argument, each with sympy's verdict.

    A proof records every step with :meth:`require`; it holds when at least one step was
    recorded and every step held. Keeping the names (instead of one ``ok = ok and ...`` chain)
    lets a failed check say which step sympy could not establish, and lets the tests pin the
    list of steps, so a step dropped from a proof does not go unseen.
    """

    def __init__(self):
        self.results: dict[str, bool] = {}

    def require(self, name: str, held) -> bool:
        """Record step ``name`` with verdict ``held`` (a sympy or Python truth value)."""
        if name in self.results:
            raise ValueError(f"step {name!r} recorded twice")
        self.results[name] = bool(held)
        return self.results[name]

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(self.results.values())

    @property
    def failed(self) -> list[str]:
        """The names of the steps that did not hold, in the order they were recorded."""
        return [name for name, held in self.results.items() if not held]

    def counterexample(self) -> dict:
        """What a check reports when the argument does not hold."""
        return {"why": "sympy could not establish these steps", "steps": self.failed}
