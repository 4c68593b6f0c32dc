"""A *case*: the arrays of one acceptance study, as stored in ``CASE.npz``.

Keys (shapes): ``target_probs`` (C, N_T), ``draft_probs`` (C, N_D), ``draft_to_target`` (N_D,)
int; optional ``calibration_probs`` (S, N_T) (needed by the marginal and covariance kernels)
and ``kernel`` (N_T, N_T) (needed by ``--kernel dense``). Every array present is validated,
used or not (tolerances: :mod:`rdk_theory.validation`); rows of probabilities are
then renormalised to sum to 1, so that a row within tolerance is read as the distribution it
approximates. A file may carry other arrays too (ids, provenance): :func:`load_case` leaves
them out and names them in :attr:`Case.ignored_keys` (no key outside the five changes a
result, since every option that needs an optional array checks that it is there).

:func:`kernels_for` turns the CLI's kernel options into the kernel of exact RDK and, for the
covariance kernel, its first-order approximation.
"""
from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import numpy as np

from .first_order import FirstOrderCovarianceKernel
from .kernels import (CovarianceSoftmaxKernel, DenseKernel, IdentityKernel, MarginalKernel,
                      centred_rows)
from .validation import (KERNEL_ATOL, InputError, as_calibration, as_prob_array, as_real_array,
                         check_tau, known_shape, real_number, rounding_atol)
from .vocab import VocabMap

KERNEL_CHOICES = ("identity", "marginal", "covariance", "dense")
CASE_KEYS = ("target_probs", "draft_probs", "draft_to_target", "calibration_probs", "kernel")
#: Largest dense N_T x N_T float64 matrix the synthetic report builds (bytes). The CLI never
#: forms the covariance kernel: it applies it a block of rows at a time
#: (:class:`rdk_theory.kernels.CovarianceSoftmaxKernel`: faster from N_T ~ 1000 and O(N S)
#: memory).
DENSE_KERNEL_MAX_BYTES = 4 * 2**30


@dataclass
class Case:
    target_probs: np.ndarray
    draft_probs: np.ndarray
    vocab_map: VocabMap
    calibration_probs: np.ndarray | None = None
    kernel: np.ndarray | None = None
    ignored_keys: tuple = ()  # arrays of the file that are not part of a case

    @property
    def n_contexts(self) -> int:
        return int(self.target_probs.shape[0])


def load_case(path) -> Case:
    """Read and validate ``CASE.npz``; every problem raises :class:`InputError` naming it."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise InputError(f"case file not found: {path}" if path else
                         "the case file's path is empty")
    if os.path.isdir(path):
        raise InputError(f"{path} is a directory, not a case file")
    if not os.path.isfile(path):  # a FIFO would block the reads below for ever
        raise InputError(f"{path} is not a regular file (a pipe or a device), not a case file")
    try:  # is_zipfile would call a file it cannot open "not an .npz archive"
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if not zipfile.is_zipfile(path):
        raise InputError(f"{path} is not an .npz archive (write one with numpy.savez)")
    try:  # only a case's arrays are read: another (a pickled dict, a large table) is skipped
        with np.load(path, allow_pickle=False) as z:
            known = {k: z[k] for k in CASE_KEYS if k in z.files}
            others = tuple(sorted(set(z.files) - set(CASE_KEYS)))
    except Exception as exc:  # corrupt zip, pickled objects, not an npz ...
        raise InputError(f"cannot read {path} as .npz: {exc}") from None
    for key, value in known.items():  # numpy returns a member that is not .npy as its bytes
        if not isinstance(value, np.ndarray):
            raise InputError(f"cannot read {path} as .npz: its member for {key} is not a "
                             "numpy array (.npy) file")
    case = case_from_arrays(**known, source=path)
    case.ignored_keys = others
    return case


def _check_2d(p, q):
    """Shapes before sums: a (C, N, 1) target would otherwise be reported as rows that do not
    sum to 1. An input whose shape numpy cannot tell (a ragged list) is left to the checks of
    its values."""
    ps, qs = known_shape(p), known_shape(q)
    if (ps is not None and len(ps) != 2) or (qs is not None and len(qs) != 2):
        raise InputError(f"target_probs and draft_probs must be 2-D (contexts, vocab), got "
                         f"{ps} and {qs}")


def _check_draft_width(q, ids):
    """Before any sum: a draft_probs cut short would otherwise be reported as rows that do
    not sum to 1. Shapes numpy cannot tell (ragged) are refused by the value checks, and ids
    that are not 1-D by VocabMap."""
    qs, ids_s = known_shape(q), known_shape(ids)
    if qs is not None and ids_s is not None and len(ids_s) == 1 and ids_s[0] != qs[1]:
        raise InputError(f"draft_to_target has {ids_s[0]} entries but draft_probs has "
                         f"{qs[1]} columns")


def case_from_arrays(*, target_probs=None, draft_probs=None, draft_to_target=None,
                     calibration_probs=None, kernel=None, source: str = "case", **extra) -> Case:
    """Validate the arrays of a case (the checks of :func:`load_case`, which leaves a file's
    other arrays out before it calls this; a keyword outside ``CASE_KEYS`` here is an error)."""
    if extra:
        raise InputError(f"{source}: unexpected keys {sorted(extra)}; expected "
                         f"{', '.join(CASE_KEYS)}")
    for name, val in (("target_probs", target_probs), ("draft_probs", draft_probs),
                      ("draft_to_target", draft_to_target)):
        if val is None:
            raise InputError(f"{source}: missing required array '{name}'")
    _check_2d(target_probs, draft_probs)
    _check_draft_width(draft_probs, draft_to_target)
    p = as_prob_array(target_probs, "target_probs")
    q = as_prob_array(draft_probs, "draft_probs")
    _check_2d(p, q)  # a ragged list that numpy read after all
    if p.shape[0] == 0:
        raise InputError(f"{source}: the case has no contexts (target_probs has 0 rows)")
    if p.shape[0] != q.shape[0]:
        raise InputError(f"context-count mismatch: target_probs has {p.shape[0]} rows, "
                         f"draft_probs has {q.shape[0]}")
    vm = VocabMap(p.shape[1], draft_to_target)  # its width against q: _check_draft_width
    cal = None
    if calibration_probs is not None:
        cal = as_calibration(calibration_probs, n_target=p.shape[1])  # renormalised
    ker = None
    if kernel is not None:
        ker = as_real_array(kernel, "kernel")
        if ker.shape != (p.shape[1], p.shape[1]):
            raise InputError(f"kernel must be ({p.shape[1]}, {p.shape[1]}), got {ker.shape}")
        # finite, >= 0, rows within the tolerance of the file's dtype, then renormalised
        ker = DenseKernel(ker, name="kernel", atol=rounding_atol(kernel, KERNEL_ATOL)).matrix
    return Case(_renormalised(p), _renormalised(q), vm, cal, ker)


def _renormalised(x: np.ndarray) -> np.ndarray:
    """Rows divided by their sums (validated to be within tolerance of 1, so never 0)."""
    return x / x.sum(axis=-1, keepdims=True)


#: Smallest default tau: float64's smallest normal number. Below it ``1 / tau`` overflows,
#: which the first-order kernel refuses; a larger tau keeps ``|B_ij| <= 1``.
MIN_DEFAULT_TAU = float(np.finfo(np.float64).tiny)


def default_tau(calibration_probs) -> float:
    """``max_i Omega_ii``: then ``|B_ij| <= 1`` (Cauchy-Schwarz), the first-order regime; 1
    when every variance is 0 (centred as the kernels centre, so equal rows give exactly 0);
    at least ``MIN_DEFAULT_TAU`` (a subnormal variance made a default the first-order kernel
    refused, on a valid case)."""
    cal = np.asarray(as_calibration(calibration_probs), dtype=np.float64)  # as the kernels
    var = (centred_rows(cal) ** 2).mean(axis=0).max()
    return max(float(var), MIN_DEFAULT_TAU) if var > 0 else 1.0


def kernels_for(case: Case, kind: str = "identity", *, tau: float | None = None,
                lam: float | None = None, need_exact: bool = True,
                need_first_order: bool | None = None):
    """``(kernel, first_order)`` for exact and first-order RDK under the chosen kernel kind.

    ``kernel`` is None unless ``need_exact``. ``first_order`` is built when
    ``need_first_order`` is True, or, when it is None, for ``kind == 'covariance'``; else None.
    ``tau=None`` uses :func:`default_tau`; ``lam=None`` lets the marginal kernel use the
    calibration mass outside ``I``. The exact covariance kernel is applied a block of rows
    at a time (:class:`rdk_theory.kernels.CovarianceSoftmaxKernel`), never formed.
    """
    if kind not in KERNEL_CHOICES:
        raise InputError(f"unknown kernel '{kind}'; choose from {', '.join(KERNEL_CHOICES)}")
    if need_first_order is None:
        need_first_order = kind == "covariance"
    # a kernel that is not built is not checked either (sample --sampler tli ignores --kernel)
    needs_cal = (need_exact and kind in ("marginal", "covariance")) or need_first_order
    if needs_cal and case.calibration_probs is None:
        raise InputError(f"the {kind if kind != 'identity' else 'first-order'} kernel needs "
                         "'calibration_probs' (S, N_T) in the case file")
    if tau is not None:  # named by the CLI's flags; a string, a bool or an array is refused
        tau = check_tau(tau, "--tau")
    if lam is not None:
        t = real_number(lam)
        if t is None or not 0 <= t <= 1:
            raise InputError(f"--lam must be in [0, 1], got {lam!r}")
        lam = t
    if needs_cal and tau is None:
        tau = default_tau(case.calibration_probs)
    kernel = _exact_kernel(case, kind, tau, lam) if need_exact else None
    first = FirstOrderCovarianceKernel(case.calibration_probs, tau) if need_first_order else None
    return kernel, first


def kernel_options_used(kind: str = "identity", *, need_exact: bool = True,
                        need_first_order: bool | None = None) -> dict:
    """Which of ``--kernel``, ``--tau`` and ``--lam`` a :func:`kernels_for` call with these
    arguments reads (the CLI warns about the others): ``tau`` sets the covariance kernel and
    the first-order one, ``lam`` the marginal kernel, and the kernel kind matters only when a
    kernel is built."""
    if need_first_order is None:
        need_first_order = kind == "covariance"
    return {"--kernel": need_exact or need_first_order,
            "--tau": need_first_order or (need_exact and kind == "covariance"),
            "--lam": need_exact and kind == "marginal"}


def marginal_is_identity(case: Case) -> bool:
    """Whether the marginal kernel of ``case`` is the identity whatever ``lam``
    (:meth:`rdk_theory.kernels.MarginalKernel.from_calibration`: no token outside ``I``, or no
    calibration mass on those tokens). False without calibration rows."""
    if case.calibration_probs is None:
        return False
    return not MarginalKernel.calibration_oov_mass(case.calibration_probs, case.vocab_map)[1] > 0


def _exact_kernel(case: Case, kind: str, tau, lam):
    if kind == "identity":
        return IdentityKernel()
    if kind == "marginal":
        return MarginalKernel.from_calibration(case.calibration_probs, case.vocab_map, lam)
    if kind == "covariance":
        return CovarianceSoftmaxKernel(case.calibration_probs, tau)
    if case.kernel is None:
        raise InputError("--kernel dense needs a 'kernel' (N_T, N_T) array in the case file")
    return DenseKernel(case.kernel, copy=False)  # checked again; a case's kernel is its own copy
