r"""Statement S (string level, [2]): SLRS accepts at least as often as SLEM,

.. math::
    \sum_t \min(p(t), \psi(t)) \;\ge\; \sum_t p(t)\, \psi(t),

where :math:`\psi(t)` is the drafter's probability of producing target token :math:`t` (its
generated string starts with :math:`t`'s string).

Proof (symbolic): for :math:`0 \le a, b \le 1`, :math:`\min(a, b) \ge ab`. Written homogeneously in
the upper bound :math:`o = 1`, the claim is :math:`\min(a, b)\, o - ab \ge 0` for
:math:`0 \le a, b \le o`; sympy proves it in every ordering of :math:`a, b, o` that the hypotheses
allow (:func:`proofs.symbolic.holds_for_all_orderings`: :math:`a \le b \le o` gives
:math:`a\,(o - b) \ge 0`, :math:`b \le a \le o` gives :math:`b\,(o - a) \ge 0`). Without the
bound :math:`a, b \le o` the same check fails (:func:`_symbolic` with ``bounded=False``; a
test asserts it), so the bound is what the proof uses. Each :math:`p(t)` and
:math:`\psi(t)` is a probability, so the termwise inequality applies and sums over :math:`t`.

Cross-check: on every toy tokenizer below, :math:`\psi` computed by the recursion of
:func:`rdk_theory.string_level.psi` equals the brute-force sum over enumerated segmentations
(``==`` on Fractions), lies in [0, 1], and the inequality holds for every target law on the grid.

Perturbed statement (must be refuted): swapped, SLEM >= SLRS.
"""
from __future__ import annotations

import sympy as sp

from rdk_theory.string_level import psi, psi_by_segmentations, slem_acceptance, slrs_acceptance, unigram_drafter

from .exhaustive import distributions
from .result import run_check
from .symbolic import holds_for_all_orderings

ID = "S"
TITLE = "SLRS acceptance sum_t min(p, psi) >= SLEM acceptance sum_t p psi"
PERTURBED = "SLEM acceptance >= SLRS acceptance"
#: Toy drafter vocabularies (strings) and target vocabularies.
DRAFTER_VOCABS = (("a", "b"), ("a", "ab", "b"), ("a", "aa", "b", "ba"), ("ab", "a", "bb"))
TARGET_VOCAB = ("a", "b", "ab", "ba", "aab")
WEIGHT_GRID = 3  # drafter unigram laws with entries in multiples of 1/3


def _symbolic(bounded: bool = True) -> bool:
    """Whether sympy proves ``min(a, b) o - a b >= 0`` for ``0 <= a, b`` (and, when
    ``bounded``, ``a, b <= o``) in every ordering of ``a, b, o``."""
    a, b, o = sp.symbols("a b o", real=True)
    ok, _ = holds_for_all_orderings(sp.Min(a, b) * o - a * b, (a, b, o), ">=", nonnegative_base=True,
                                    given=((a, o), (b, o)) if bounded else ())
    return ok


def _body(out):
    if not _symbolic():
        out.fail("sympy could not establish min(a, b) >= a b on [0, 1]")
    out.methods.append("sympy: min(a, b) o - a b >= 0 for 0 <= a, b <= o (o = 1), in every ordering of "
                       "a, b, o")
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


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
