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
(``==`` on Fractions), lies in [0, 1], and the inequality holds for every target law on the grid;
both acceptances equal their definitions written out here (so a wrong formula that still keeps
SLRS >= SLEM fails too), every number a Fraction. Two target vocabularies: one that is not
prefix-free (``ab`` and ``aab`` share a start: :math:`\psi` is then no law, and the inequality,
termwise, still holds), and a prefix-free one, where :math:`\psi` is the law of the drafted target
token (it sums to 1) and one SLRS step (draft ``t ~ psi``, accept with ``min(1, p/psi)``, else
the residual) outputs exactly ``p`` (:func:`rdk_theory.acceptance.step_output_law`).

Perturbed statement (must be refuted): swapped, SLEM >= SLRS.
"""
from __future__ import annotations

import sympy as sp

from rdk_theory.acceptance import step_output_law
from rdk_theory.string_level import psi, psi_by_segmentations, slem_acceptance, slrs_acceptance, unigram_drafter

from .exhaustive import distributions, inexact
from .result import run_check
from .symbolic import holds_for_all_orderings

ID = "S"
TITLE = "SLRS acceptance sum_t min(p, psi) >= SLEM acceptance sum_t p psi"
PERTURBED = "SLEM acceptance >= SLRS acceptance"
#: Toy drafter vocabularies (strings) and target vocabularies.
DRAFTER_VOCABS = (("a", "b"), ("a", "ab", "b"), ("a", "aa", "b", "ba"), ("ab", "a", "bb"))
TARGET_VOCAB = ("a", "b", "ab", "ba", "aab")
#: Prefix-free and complete over {a, b}: every string starts with exactly one of these.
PREFIX_FREE_TARGET = ("aa", "ab", "b")
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
    for target_vocab in (TARGET_VOCAB, PREFIX_FREE_TARGET):
        _grid(out, target_vocab, prefix_free=target_vocab == PREFIX_FREE_TARGET)
    out.methods.append(f"exhaustive exact check: psi by recursion == psi by enumerating segmentations, "
                       f"SLRS and SLEM acceptances == sum min(p, psi) and sum p psi (Fractions), and "
                       f"SLRS >= SLEM for every p on the 1/3 grid over target tokens {TARGET_VOCAB}; "
                       f"over the prefix-free {PREFIX_FREE_TARGET} also sum psi == 1 and the SLRS "
                       f"step's output law == p; drafter vocabularies {DRAFTER_VOCABS} with unigram "
                       f"laws on the 1/{WEIGHT_GRID} grid")


def _grid(out, target_vocab, *, prefix_free: bool) -> None:
    targets = list(distributions(len(target_vocab), 3))
    for vocab in DRAFTER_VOCABS:
        for weights in distributions(len(vocab), WEIGHT_GRID):
            drafter = unigram_drafter(dict(zip(vocab, weights)))
            case = {"drafter": dict(zip(vocab, weights)), "target_vocab": target_vocab}
            ps = psi(target_vocab, drafter)
            brute = psi_by_segmentations(target_vocab, drafter, vocab)
            if list(ps) != list(brute) or not all(0 <= x <= 1 for x in ps) or inexact(ps) is not None:
                out.fail({**case, "psi": ps, "by_segmentations": brute})
            if prefix_free and sum(ps) != 1:
                out.fail({**case, "psi": ps, "sum_psi": sum(ps)})
            for p in targets:
                out.cases += 1
                slrs, slem = slrs_acceptance(p, ps), slem_acceptance(p, ps)
                want = (sum(min(a, b) for a, b in zip(p, ps)), sum(a * b for a, b in zip(p, ps)))
                if (slrs, slem) != want or inexact(slrs, slem) is not None:
                    out.fail({**case, "p": p, "slrs": slrs, "slem": slem,
                              "by_definition": list(want)})
                if slrs < slem:
                    out.fail({**case, "p": p, "slrs": slrs, "slem": slem})
                if prefix_free and list(step_output_law(p, ps)) != list(p):
                    out.fail({**case, "p": p, "psi": ps, "slrs_output_law": step_output_law(p, ps)})
                if slem < slrs:
                    out.refute({**case, "p": p, "psi": ps, "slem": slem, "slrs": slrs})


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
