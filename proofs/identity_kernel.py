r"""Statement O3 (identity kernel): exact RDK with :math:`M = I` equals TLI.

:math:`q'' = M^\top q' = I^\top q' = q'` for a vocabulary of any size :math:`n`.

Proof (symbolic): sympy's matrix-expression algebra simplifies :math:`I_n^\top q` to :math:`q` for a
symbolic :math:`n`. Cross-check: :func:`rdk_theory.proposals.rdk_proposal` with the
:class:`~rdk_theory.kernels.IdentityKernel` and with an explicit dense exact identity matrix equals
:func:`~rdk_theory.proposals.tli_proposal` (``==``) on every drafter map with :math:`N_T, N_D \le 3`
and every law on the grid. That cross-check rests on ``rdk_proposal`` being :math:`M^\top q'`, which
the identity (and the uniform kernel of the control) cannot tell from :math:`M q'`, being
symmetric: so ``rdk_proposal`` with a dense exact kernel is also compared with
:math:`\sum_i q'(i) M[i, :]` written out (:math:`q'` by its definition), for every
:math:`3 \times 3` row-stochastic :math:`M` with entries in :math:`\{0, 1/2, 1\}` (most of them
not symmetric) and every :math:`q` on the grid under ``KERNEL_MAPS``.

Perturbed statement (must be refuted): a uniform kernel (every row :math:`1/n`) also equals TLI.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import sympy as sp

from rdk_theory.kernels import DenseKernel, IdentityKernel
from rdk_theory.proposals import rdk_proposal, tli_proposal
from rdk_theory.vocab import VocabMap

from .exhaustive import distributions, every_map, fractions, inexact, row_stochastic
from .result import run_check
from .tli_vs_vanilla import tli_by_definition

ID = "O3"
TITLE = "RDK with the identity kernel equals TLI"
PERTURBED = "RDK with the uniform kernel equals TLI"
GRID = dict(n_max=3, d=3)
#: the kernel leg: every 3 x 3 row-stochastic M on the 1/2 grid (6^3 = 216), under two drafter
#: maps over N_T = 3: the identity map (q' = q) and one with an unmapped drafter token and a
#: reordering (q' = q / q(I) on I = {0, 2}, q(I) = 0 included).
KERNEL_GRID = dict(n=3, d=2)
KERNEL_MAPS = ((0, 1, 2), (2, -1, 0))


def _body(out):
    n = sp.Symbol("n", integer=True, positive=True)
    q = sp.MatrixSymbol("q", n, 1)
    if sp.simplify((sp.Identity(n).T * q).doit()) != q:
        out.fail("sympy could not simplify I^T q to q")
    out.methods.append("sympy: I_n^T q = q for symbolic n (matrix expressions)")
    n_max, d = GRID["n_max"], GRID["d"]
    dense_eye, uniform = {}, {}
    for n in range(1, n_max + 1):
        eye = np.empty((n, n), dtype=object)
        for i in range(n):
            eye[i] = fractions([int(i == j) for j in range(n)], 1)
        dense_eye[n] = DenseKernel(eye)
        uniform[n] = DenseKernel(np.array([list(fractions([1] * n, n))] * n, dtype=object))
    for nt, nd, m in every_map(n_max):
        vm = VocabMap(nt, m)
        for q in distributions(nd, d):
            out.cases += 1
            tli = list(tli_proposal(q, vm))
            for kern in (IdentityKernel(), dense_eye[nt]):
                got = list(rdk_proposal(q, vm, kern))
                if got != tli:
                    out.fail({"q": q, "draft_to_target": m, "kernel": type(kern).__name__, "rdk": got, "tli": tli})
            uni = list(rdk_proposal(q, vm, uniform[nt]))
            if uni != tli:
                out.refute({"q": q, "draft_to_target": m, "rdk_uniform": uni, "tli": tli})
    out.methods.append(f"exhaustive exact check of rdk_proposal == tli_proposal over every drafter map "
                       f"with N_T, N_D in 1..{n_max} and every q on the 1/{d} grid")
    _kernel_leg(out)


def _kernel_leg(out):
    """``rdk_proposal`` with a dense exact kernel against ``q''(x) = sum_i q'(i) M[i, x]``."""
    n, kd, d = KERNEL_GRID["n"], KERNEL_GRID["d"], GRID["d"]
    kernels = [(m, DenseKernel(m)) for m in row_stochastic(n, kd)]
    for ids in KERNEL_MAPS:
        vm = VocabMap(n, np.array(ids, dtype=np.int64))
        for q in distributions(len(ids), d):
            qp = tli_by_definition(q, ids, n)
            for m, kern in kernels:
                out.cases += 1
                got = rdk_proposal(q, vm, kern)
                want = [sum((qp[i] * m[i, x] for i in range(n)), Fraction(0)) for x in range(n)]
                if list(got) != want or inexact(got) is not None:
                    out.fail({"q": q, "draft_to_target": list(ids), "M": m, "rdk": got, "by_definition": want})
    out.methods.append(f"exact check of rdk_proposal against sum_i q'(i) M[i, :] for every {n} x {n} "
                       f"row-stochastic M on the 1/{kd} grid ({len(kernels)}, most not symmetric), "
                       f"drafter maps {', '.join(str(list(i)) for i in KERNEL_MAPS)} and every q on "
                       f"the 1/{d} grid")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
