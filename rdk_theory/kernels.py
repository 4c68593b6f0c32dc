"""Token-affinity kernels (MATH.md section 4).

A kernel is a row-stochastic matrix ``M`` over the target vocabulary (row ``i``: where token
``i``'s drafted mass goes). Every kernel object exposes

* ``n``: the vocabulary size ``N_T`` (None for the size-agnostic identity);
* ``transport(q_prime)``: ``M^T q'`` for ``q'`` of shape (..., N_T) (any other last axis is
  an InputError), on numpy float64 arrays (or lists, integer arrays), torch tensors and, except
  for :class:`SparseKernel` (float64 entries: it refuses them by name), numpy ``Fraction``
  arrays (exact where the kernel's own numbers are; Fractions mixed with a float give
  float64). Input that is not real numbers (complex numbers, strings) is an InputError on
  every kernel, as numpy would drop an imaginary part or parse a string;
* ``row_sums()``: for checks.

Any row-stochastic ``M`` keeps the verification step lossless (Theorem L). Provided:

* :class:`IdentityKernel` (``M = I``: RDK reproduces TLI);
* :class:`MarginalKernel` (**[definition, after the authors' later engineering code]**: rank one,
  ``M = (1 - lam) Id + lam 1 w^T`` with ``w`` the calibration mean renormalised on OOV; O(N));
* :func:`covariance_softmax_kernel` (dense ``softmax(Omega / tau)`` row-wise, [1]; O(N^2)), and
  :class:`CovarianceSoftmaxKernel`, the same kernel applied a block of rows at a time without
  forming it (O(N S) memory);
* :func:`sparse_topk_kernel` (top-k per row of any affinity, softmax-renormalised; O(N k));
* :class:`DenseKernel` / :class:`SparseKernel` for a user's own matrix.
"""
from __future__ import annotations

import functools
import numbers
from fractions import Fraction

import numpy as np

from . import _backend as B
from ._progress import progress
from .validation import (KERNEL_ATOL, InputError, as_calibration, as_count, as_prob_array,
                         as_real_array, as_real_tensor, check_nonnegative, check_not_a_class,
                         check_row_stochastic, check_tau, is_rational_array, known_shape,
                         numpy_to_torch, python_ints, read_only_view, real_number,
                         rounding_atol)
from .vocab import check_vocab_map


class _DeviceCache:
    """Torch copies of numpy arrays, made once per (device, dtype)."""

    def __init__(self):
        self._cache = {}

    def get(self, key, array, like, what: str = "an array of the kernel", remedy: str = ""):
        """The copy of ``array`` on ``like``'s device and dtype; ``array`` may be a function
        that builds it, called only when no copy is kept yet.

        InputError if a finite entry rounds to infinity in that dtype (a first-order kernel's
        ``C / tau`` in float16, where the products then made NaN of every entry it reached):
        ``what`` names the array and ``remedy`` ends the message (", or ...")."""
        k = (key, str(like.device), like.dtype)
        if k not in self._cache:
            with B.kept_tensors():
                self._cache[k] = self._copy(array, like, what, remedy)
        return self._cache[k]

    @staticmethod
    def _copy(array, like, what, remedy):
        """:meth:`get`'s new copy."""
        import torch

        array = np.asarray(array() if callable(array) else array)
        if array.dtype == object:  # Fractions (an exact kernel) meet a float tensor
            array = array.astype(np.float64)
        copy = numpy_to_torch(array, dtype=like.dtype)  # on the host: the check syncs nothing
        if (copy.is_floating_point() and bool(torch.isinf(copy).any())
                and np.all(np.isfinite(array))):
            top = torch.finfo(like.dtype).max
            wider = "float64" if top >= np.finfo(np.float32).max else "float32 or float64"
            raise InputError(f"{what} holds {float(np.abs(array).max()):.4g}, beyond the "
                             f"range of {like.dtype} (largest {top:.4g}), the input's dtype "
                             f"in which the torch path computes: pass {wider} tensors{remedy}")
        return copy.to(like.device)

    def forget(self, key) -> None:
        """Drop ``key``'s copies, on every device and in every dtype."""
        for k in [k for k in list(self._cache) if k[0] == key]:
            self._cache.pop(k, None)


def check_width(q_prime, n: int, name: str = "q'") -> None:
    """InputError unless ``q_prime`` has ``n`` entries (the kernel's target ids) on its last
    axis: reshaping to rows of ``n`` re-chunked any other width into meaningless rows."""
    shape = known_shape(q_prime)
    if shape is None:
        raise InputError(f"{name} is a ragged sequence")
    if not shape or shape[-1] != n:
        got = f"{shape[-1]} on its last axis" if shape else "a scalar"
        raise InputError(f"{name} must hold the kernel's {n} target ids on its last axis, "
                         f"got {got}")


def real_input(q_prime, name: str = "q'"):
    """``q_prime`` as the transports read it, refusing what is not real numbers: a torch
    tensor of real numbers (integer and bool tensors as float64; a complex one refused), a
    numpy array of a real dtype as given, except that float16, float32 and non-native byte
    order are read as float64 (:func:`widened`; an ndarray subclass, np.matrix or a masked
    array, as its plain data), an object array (or list) of real numbers as an
    object array (the exact tier when they are Fractions and ints: each kernel then reads it
    as before), anything else as :func:`rdk_theory.validation.as_real_array` reads it (a list
    of floats: float64; complex numbers, strings, other objects: InputError naming ``name``)."""
    if B.is_torch(q_prime):
        return as_real_tensor(q_prime, name)
    if type(q_prime) is np.ndarray and q_prime.dtype.kind in "biuf":
        return widened(q_prime)  # not a subclass: np.matrix, masked arrays read as plain
    try:
        arr = np.asarray(q_prime)
    except (TypeError, ValueError):
        raise InputError(f"{name} is not a numeric array (a ragged sequence?)") from None
    if arr.dtype == object and all(isinstance(v, numbers.Real) for v in arr.flat):
        return arr
    return as_real_array(arr, name)


def widened(arr: np.ndarray) -> np.ndarray:
    """A numpy float array narrower than float64 (float16, float32) or of non-native byte
    order as float64, anything else as it is: the host transports compute in float64 (a
    float16 ``(1 - lam) q'`` flushed hundreds of small entries to 0; a big-endian float64
    array was refused by a compiled engine as "not a float64 array")."""
    if arr.dtype.kind == "f" and (arr.dtype.itemsize < 8 or not arr.dtype.isnative):
        return arr.astype(np.float64)
    return arr


def settled(out):
    """``out``, or its float64 copy when it is an object array holding a float: Fractions
    mixed with a float (``q'``, the kernel or ``lam``) give floats, which an object array would
    pass off as the exact tier (and which its checks then refuse); the toolkit's calculators
    return float64 for such a mixture too."""
    if B.is_exact(out) and not is_rational_array(out):
        return out.astype(np.float64)
    return out


def _shares_memory(array: np.ndarray, source) -> bool:
    """Whether the host ``array`` made from ``source`` may be memory the caller can still
    reach: that of an ndarray (or a view of one), of a CPU torch tensor (numpy reads a float64
    one in place), or of any other array-like that numpy may have read in place (a
    memoryview, an object with ``__array__``). Only a Python list or tuple and a tensor on
    another device have certainly been copied; the answer errs towards True (one copy more)."""
    if isinstance(source, np.ndarray):
        return np.may_share_memory(array, source)
    if B.is_torch(source):
        if source.device.type != "cpu":
            return False
        try:
            return np.may_share_memory(array, source.detach().numpy())
        except (TypeError, RuntimeError):  # a dtype numpy lacks (bfloat16): read as a copy,
            return True  # but the answer may err towards True
    return not isinstance(source, (list, tuple))


def _off_one(sums: np.ndarray, n: int) -> np.ndarray:
    """Rows whose float64 sum ``sums`` misses 1 by more than the round-off of summing ``n``
    entries of a row that does sum to 1 (so a renormalised row is never flagged again)."""
    return np.abs(sums - 1) > 2 * n * np.finfo(np.float64).eps


def _rows_renormalised(m: np.ndarray, sums: np.ndarray, *, owned: bool) -> np.ndarray:
    """``m`` with each row that misses 1 beyond round-off (:func:`_off_one`) divided by its sum
    ``sums`` (validated within tolerance of 1 and > 0 by
    :func:`rdk_theory.validation.check_row_stochastic`). A kernel accepted within
    ``KERNEL_ATOL`` of row-stochastic would otherwise create or lose mass ``sum - 1`` per row:
    its proposal would sum to ``1 +- 1e-6`` and its acceptance be off by as much. In place
    when ``m`` is the kernel's own array (``owned``); else a new array, the caller's left as
    it was."""
    off = _off_one(sums, m.shape[1])
    if not off.any():
        return m
    if not owned:
        m = m.copy()
    m[off] /= sums[off, None]
    return m


class _DeviceCopies:
    """Kernels that keep torch copies of their arrays (``_torch``, one per device and dtype)
    pickle and deep-copy without them, as :class:`~rdk_theory.vocab.VocabMap` does: they may
    live on a device the reader lacks, and on the host a float64 copy shares the kernel's own
    array, which the pickle then held twice."""

    _new_torch = _DeviceCache

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_torch"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._torch = self._new_torch()


class IdentityKernel:
    """``M = I``: exact RDK with this kernel equals TLI (statement O3)."""

    n = None

    def transport(self, q_prime):
        """``q'`` itself, read as every transport reads it (:func:`real_input`: an ndarray
        subclass or a list as a plain array, a complex or string input refused; a scalar
        refused, as by every other kernel: ``q'`` is (..., N_T))."""
        out = real_input(q_prime)
        if not tuple(out.shape):
            raise InputError("q' must hold the target ids on its last axis, got a scalar")
        return out

    def row_sums(self):
        """The row sums of ``M``: the identity's rows sum to 1 (one value stands for all)."""
        return np.ones(1)


class DenseKernel(_DeviceCopies):
    """A user-given dense row-stochastic matrix (N_T, N_T); float64 or ``Fraction`` entries (an
    object array of Fractions and ints is the exact tier; one with a float in it is read as
    float64, as probability rows are).

    Float rows must sum to 1 within ``KERNEL_ATOL`` (a float16 or bfloat16 matrix: within its
    dtype's eps, which its rounding alone can take; ``atol`` overrides this, for a matrix
    already converted from such a dtype) and are then divided by their sums, so
    that the kernel moves mass without creating any; ``Fraction`` rows must sum to 1 exactly.
    The matrix is copied (later edits of the caller's array would bypass the checks); for a
    kernel too large to hold twice, ``copy=False`` keeps the caller's array, which the caller
    must then leave unchanged (a float64 matrix with a row to renormalise is copied even
    then: the caller's array is never written)."""

    def __init__(self, matrix, *, check: bool = True, name: str = "kernel", copy: bool = True,
                 atol: float | None = None):
        if isinstance(matrix, np.ndarray) and matrix.dtype == object:
            bad = next((v for v in matrix.flat if not isinstance(v, numbers.Real)), None)
            if bad is not None:  # an object array holds real numbers or Fractions only
                raise InputError(f"{name} must hold real numbers or Fractions, got a "
                                 f"{type(bad).__name__} ({bad!r})")
        # Fractions and ints: the exact tier; an object array with a float in it is floats
        exact = is_rational_array(matrix)
        if atol is not None:
            given = real_number(atol)
            if given is None or not 0 <= given < np.inf:
                raise InputError(f"atol must be a finite real number >= 0, got {atol!r}")
            atol = given
        m = python_ints(matrix) if exact else as_real_array(matrix, name)
        shared = _shares_memory(m, matrix)
        if copy and shared:
            m, shared = m.copy(), False
        if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
            raise InputError(f"{name} must be a square (N_T, N_T) matrix with N_T >= 1, got "
                             f"shape {m.shape}")
        if check:
            check_nonnegative(m, name)
            with np.errstate(over="ignore"):  # a sum of huge entries is inf: reported
                sums = m.sum(axis=1)
            check_row_stochastic(sums, name, rounding_atol(matrix, KERNEL_ATOL)
                                 if atol is None else atol)
            if not exact:
                m = _rows_renormalised(m, sums, owned=not shared)
        self._matrix, self._shared = m, shared
        self.n = int(m.shape[0])
        self._torch = _DeviceCache()

    @property
    def matrix(self):
        """``M`` (N_T, N_T): a read-only view of the kernel's own copy (an edit reached numpy
        and float64 torch but not a float32 copy, after the checks), or with ``copy=False``
        the caller's array itself."""
        return self._matrix if self._shared else read_only_view(self._matrix)

    def transport(self, q_prime):
        """``M^T q'`` for ``q'`` (..., N_T): numpy, Fractions or a torch tensor on its device."""
        check_width(q_prime, self.n)
        q_prime = real_input(q_prime)
        if B.is_torch(q_prime):
            return q_prime @ self._torch.get("m", self._matrix, q_prime)
        return settled(q_prime @ self._matrix)

    def row_sums(self):
        """The row sums of ``M`` (N_T,): 1 up to round-off, checked when the kernel is made."""
        return self._matrix.sum(axis=1)


class SparseKernel(_DeviceCopies):
    """A ``scipy.sparse`` row-stochastic matrix (N_T, N_T), held as its own float64 CSR copy
    in canonical form (duplicate stored entries summed, explicit zeros dropped, before any
    check: a non-canonical CSR is the same matrix as the COO it came from); rows are checked
    and renormalised as :class:`DenseKernel`'s. Its transport takes float and torch input, not
    exact ``Fraction`` arrays (its entries are float64)."""

    _new_torch = dict

    def __init__(self, matrix, *, check: bool = True, name: str = "kernel"):
        import scipy.sparse as sp

        if not sp.issparse(matrix):
            raise InputError(f"{name} must be a scipy.sparse matrix")
        if matrix.dtype.kind not in "biuf":
            raise InputError(f"{name} must hold real numbers, got dtype {matrix.dtype}")
        # a copy: later edits of the caller's matrix cannot bypass the checks below
        m = sp.csr_matrix(matrix, dtype=np.float64, copy=True)
        m.sum_duplicates()  # an entry stored twice is its sum, as scipy reads the matrix
        m.eliminate_zeros()
        if m.shape[0] != m.shape[1] or m.shape[0] == 0:
            raise InputError(f"{name} must be square with N_T >= 1, got shape {m.shape}")
        if check:
            check_nonnegative(m.data, name)
            sums = np.asarray(m.sum(axis=1)).ravel()
            check_row_stochastic(sums, name, rounding_atol(matrix, KERNEL_ATOL))
            off = _off_one(sums, m.shape[1])
            if off.any():  # scale the stored entries of those rows (a row's nonzeros are
                # data[indptr[i]:indptr[i + 1]]); the other rows are multiplied by 1, exactly
                m.data *= np.repeat(np.where(off, 1 / sums, 1.0), np.diff(m.indptr))
        self.matrix = m
        self.matrix_t = m.T.tocsr()
        self.n = int(m.shape[0])
        self._torch = {}

    def transport(self, q_prime):
        """``M^T q'`` for ``q'`` (..., N_T), by the sparse product: numpy or a torch tensor."""
        check_width(q_prime, self.n)
        q_prime = real_input(q_prime)
        if B.is_torch(q_prime):
            import torch

            key = (str(q_prime.device), q_prime.dtype)
            if key not in self._torch:
                coo = self.matrix_t.tocoo()
                with B.kept_tensors():
                    idx = torch.as_tensor(np.vstack([coo.row, coo.col]), device=q_prime.device)
                    vals = torch.as_tensor(coo.data, dtype=q_prime.dtype, device=q_prime.device)
                    self._torch[key] = torch.sparse_coo_tensor(
                        idx, vals, coo.shape, check_invariants=True).coalesce()
            mt = self._torch[key]
            flat = q_prime.reshape(-1, self.n).T  # (N, batch)
            return torch.sparse.mm(mt, flat).T.reshape(q_prime.shape)
        if B.is_exact(q_prime):
            raise InputError("a scipy.sparse kernel holds float64 entries and cannot transport "
                             "exact Fraction input: use a DenseKernel of Fractions (an object "
                             "array) for the exact tier")
        flat = q_prime.reshape(-1, self.n)
        return np.asarray((self.matrix_t @ flat.T).T).reshape(q_prime.shape)

    def row_sums(self):
        """The row sums of ``M`` (N_T,): 1 up to round-off, checked when the kernel is made."""
        return np.asarray(self.matrix.sum(axis=1)).ravel()


def _checked_lam(lam):
    """A mixing weight in [0, 1]: an int or Fraction as it is (exact), any other real number
    (numpy's, a 0-d array's or tensor's) as a float; else InputError."""
    scalar = real_number(lam)  # None for an array, a tensor of several entries, a string
    if scalar is None or not 0 <= scalar <= 1:  # NaN fails too
        raise InputError(f"lam must be a number in [0, 1], got {lam!r}")
    return lam if isinstance(lam, numbers.Rational) else scalar


class MarginalKernel(_DeviceCopies):
    """Rank-one kernel ``M = (1 - lam) Id + lam 1 w^T``; ``M^T q' = (1 - lam) q' + lam q'(T) w``.

    **[definition, after the authors' later engineering code]** With :meth:`from_calibration`,
    ``w`` is the calibration mean ``mu`` restricted to OOV and renormalised. Cost O(N).

    Parameters:
      w: (N_T,) distribution (float64 or Fractions).
      lam: mixing weight in [0, 1].
    """

    def __init__(self, w, lam):
        w = as_prob_array(w, "w")
        if w.ndim != 1:
            raise InputError(f"w must be 1-D, got shape {w.shape}")
        lam = _checked_lam(lam)
        # a private host copy: later edits by the caller cannot leak in; torch input (any
        # device) is copied to the host, and transport moves it to each input's device. A float
        # w (validated to sum to 1 within PROB_ATOL) is renormalised so that the kernel is
        # row-stochastic to round-off; Fraction entries sum to 1 exactly already.
        own = np.array(B.to_numpy(w), copy=True)
        if own.dtype != object:
            own = own.astype(np.float64)  # an integer tensor (a point mass) included
            own /= own.sum()
        self._w = own
        self.lam = lam
        self.n = int(w.shape[0])
        self._torch = _DeviceCache()

    @classmethod
    def from_calibration(cls, calibration_probs, vocab_map, lam=None):
        """``w = mu|_OOV / mu(OOV)`` from calibration rows ``p_c`` (S, N_T).

        ``lam=None`` uses ``mu(OOV)``, the average target mass outside ``I`` (the mass TLI can
        never place). When OOV is empty or carries no calibration mass, the kernel is the
        identity (``lam = 0``). ``Fraction`` rows give an exact kernel (``w`` Fractions,
        ``lam`` a Fraction unless a float ``lam`` is given); float rows a float64 one.
        """
        mu, mass = cls.calibration_oov_mass(calibration_probs, vocab_map)
        oov, n = vocab_map.oov, vocab_map.n_target
        exact = mu.dtype == object
        w = np.zeros(n, dtype=object if exact else np.float64)  # exact: Python int zeros
        if lam is not None:  # checked whatever the kernel turns out to be (5 made an identity)
            _checked_lam(lam)
        if mass <= 0:
            w[:] = Fraction(1, n) if exact else 1.0 / n
            return cls(w, 0 if exact else 0.0)
        w[oov] = mu[oov] / mass
        # rows normalised within tolerance (or a sum's round-off, 1 + 2^-52 when I is empty)
        # can put mu(OOV) a hair above 1: the mass TLI cannot place is at most all of it
        return cls(w, min(mass, 1.0) if lam is None else lam)

    @staticmethod
    def calibration_oov_mass(calibration_probs, vocab_map):
        """``(mu, mu(OOV))``: the calibration mean (N_T,) and its mass outside ``I`` (0 when
        OOV is empty); exact (Fractions) for ``Fraction`` rows, float64 otherwise. Where that
        mass is 0, :meth:`from_calibration` gives the identity, whatever ``lam``."""
        check_vocab_map(vocab_map)
        cal = as_calibration(calibration_probs, n_target=vocab_map.n_target)
        oov = vocab_map.oov
        if cal.dtype == object:  # a Fraction times the sums: numpy's mean of ints is a float
            mu = cal.sum(axis=0) * Fraction(1, cal.shape[0])
            return mu, (Fraction(mu[oov].sum()) if oov.size else Fraction(0))
        mu = cal.mean(axis=0)
        return mu, (float(mu[oov].sum()) if oov.size else 0.0)

    @property
    def w(self):
        """``w`` (N_T,): a read-only view of the kernel's own copy (checked once; an edit
        reached numpy and float64 torch but not a float32 copy)."""
        return read_only_view(self._w)

    def transport(self, q_prime):
        """``(1 - lam) q' + lam q'(T) w`` for ``q'`` (..., N_T): O(N), exact on Fractions."""
        check_width(q_prime, self.n)
        lam = self.lam
        q_prime = real_input(q_prime)  # a list as an array (a float times a list: TypeError)
        if B.is_torch(q_prime):  # torch takes no Fraction: lam as a float
            w, lam = self._torch.get("w", self._w, q_prime), float(lam)
            return (1 - lam) * q_prime + lam * B.total(q_prime, keepdims=True) * w
        return settled((1 - lam) * q_prime + lam * B.total(q_prime, keepdims=True) * self._w)

    def row_sums(self):
        """The row sums of ``M``, all ``(1 - lam) + lam sum w`` (one value stands for all)."""
        return np.array([(1 - self.lam) + self.lam * self._w.sum()])

    def dense(self):
        """``M`` as an (N_T, N_T) array: Fractions for an exact kernel, else float64."""
        eye = np.eye(self.n, dtype=self._w.dtype)  # an object eye holds the ints 0 and 1
        return settled((1 - self.lam) * eye + self.lam * np.tile(self._w, (self.n, 1)))


def calibration_covariance(calibration_probs):
    """Population covariance ``Omega = (1/S) sum_c (p_c - mu)(p_c - mu)^T``, (N_T, N_T).

    Rows of ``Omega`` sum to 0 because each ``p_c`` sums to 1. Computed on the host: in
    float64 for float rows, exactly for ``Fraction`` rows (an object array of Fractions comes
    back); a torch input gets a float64 tensor back on its device.
    """
    cal = as_calibration(calibration_probs)
    c = centred_rows(cal)
    omega = c.T @ c / cal.shape[0]
    if B.is_torch(calibration_probs):
        import torch

        return torch.as_tensor(omega, device=calibration_probs.device)
    return omega


def covariance_softmax_kernel(calibration_probs, tau: float) -> DenseKernel:
    """Exact covariance-softmax kernel ``M_ij = exp(Omega_ij / tau) / sum_k exp(Omega_ik / tau)``.

    Dense: O(N_T^2) memory and time ([1], as summarised in public reviews): every row of
    :class:`CovarianceSoftmaxKernel`, formed at once.
    """
    rows = CovarianceSoftmaxKernel(calibration_probs, tau)
    return DenseKernel(rows.rows(np.arange(rows.n)), check=False, copy=False)


def centred_rows(cal: np.ndarray) -> np.ndarray:
    """``P_c - mu`` of calibration rows (S, N), computed from the differences to the first row:
    ``d = P_c - p_1`` then ``d - mean(d)``. Where every row agrees on a token (one repeated
    row, or a token no context gives mass) its column is exactly 0, and rows that differ
    little from the first are centred to their differences' precision (a column where the
    first row is far from the others keeps an error of order eps times its entry, as the
    plain centring has of order eps times the mean). The plain ``P_c - mean(P_c)`` left
    ulps of the mean there: a covariance of round-off that ``max_i Omega_ii`` (the default
    tau) scaled to order one, so the kernel of three equal rows came out as noise instead of
    the uniform kernel of ``Omega = 0``."""
    d = cal - cal[:1]
    if d.dtype == object:  # exact rows: a mean of Python ints would be a float
        return d - d.sum(axis=0) * Fraction(1, d.shape[0])
    return d - d.mean(axis=0)


def _centred_factor(cal: np.ndarray) -> np.ndarray:
    """``C = (P_c - mu) / sqrt(S)`` of calibration rows (S, N): ``Omega = C^T C``."""
    return centred_rows(cal) / np.sqrt(cal.shape[0])


class CovarianceSoftmaxKernel(_DeviceCopies):
    """The exact covariance-softmax kernel of :func:`covariance_softmax_kernel`, applied without
    forming ``M``: O(N_T S) memory plus one block of rows, for vocabularies whose dense kernel
    does not fit.

    ``M^T q' = sum_i q'(i) M[i, :]``: only the rows ``i`` where some ``q'`` has mass are formed,
    a block at a time (``Omega[rows, :] = C[:, rows]^T C`` with ``C = (P_c - mu) / sqrt(S)``,
    then the max-shifted softmax of each row, as in the dense kernel), and dropped after use.
    Time O(|support| N_T (S + C)) for C rows of ``q'`` (the dense kernel's product is
    O(C N_T^2), after O(N_T^2 S) to form it);
    the two agree to float64 round-off. ``block_bytes`` bounds one block of rows; a progress
    bar shows on long calls (see :mod:`rdk_theory._progress`). A torch ``q'`` is transported on
    its own device in float64 (the factor is copied there once) and the result returned in its
    dtype (float64 for integer input); gradients flow to ``q'``: the backward pass forms every
    row of ``M`` again, a block at a time (the derivative in a zero entry ``q'(i)`` is the row
    ``M[i, :]``), O(N_T^2 S) time and still one block of memory.
    """

    def __init__(self, calibration_probs, tau: float, *, block_bytes: int = 64 * 2**20,
                 show_progress: bool | None = None):
        tau = check_tau(tau)
        cal = as_calibration(calibration_probs)  # float64 numpy (tensor input too) or Fractions
        # float64 whatever the rows (exp has no exact value; the first-order kernel's C the same)
        self.factor = np.asarray(_centred_factor(cal), dtype=np.float64)
        self.tau = float(tau)
        self.n = int(cal.shape[1])
        # |Omega_ij| <= max_i Omega_ii (Cauchy-Schwarz): finite diagonal / tau, finite kernel.
        # With a factor 2 of margin: rows() forms Omega by a BLAS product, whose rounding may
        # land an ulp above this sum's (tau = 3.55e-310 made a finite top here, an inf row
        # there, and inf - inf a NaN row of M).
        with np.errstate(over="ignore"):
            top = float((self.factor * self.factor).sum(axis=0).max()) / self.tau
        if not np.isfinite(2 * top):
            raise InputError(f"Omega / tau overflows at tau = {tau:g}: choose a larger tau")
        self.block_rows = max(1, as_count(block_bytes, "block_bytes", 1) // (8 * self.n))
        self.show_progress = show_progress
        self._torch = _DeviceCache()

    def rows(self, rows):
        """``M[rows, :]`` (len(rows), N_T)."""
        blk = self.factor[:, rows].T @ self.factor
        blk /= self.tau
        blk -= blk.max(axis=1, keepdims=True)
        np.exp(blk, out=blk)
        blk /= blk.sum(axis=1, keepdims=True)
        return blk

    def transport(self, q_prime):
        """``M^T q'`` for ``q'`` (..., N_T), from the rows of ``M`` where ``q'`` has mass."""
        check_width(q_prime, self.n)
        q_prime = real_input(q_prime)
        if B.is_torch(q_prime):
            import torch

            # on the tensor's device, in float64 (as the numpy path); differentiable in q'
            flat = q_prime.reshape(-1, self.n).to(torch.float64)
            c = self._torch.get("factor", self.factor, flat)
            rows_of = lambda rows: torch.softmax((c[:, rows].T @ c) / self.tau, dim=1)  # noqa: E731
            out = _blockwise_transport_fn().apply(flat, self, rows_of).reshape(q_prime.shape)
            return out.to(q_prime.dtype) if q_prime.is_floating_point() else out
        flat = np.asarray(q_prime, dtype=np.float64).reshape(-1, self.n)
        return self._forward(flat, self.rows).reshape(np.shape(q_prime))

    def _blocks(self, support, what: str):
        """``support`` in blocks of :attr:`block_rows`, with a progress bar on long calls."""
        starts = range(0, int(support.shape[0]), self.block_rows)
        bar = progress(starts, desc=f"exact covariance kernel, {what}", total=len(starts),
                       enabled=self.show_progress if len(starts) > 8 else False)
        return (support[start:start + self.block_rows] for start in bar)

    def _forward(self, flat, rows_of):
        """``flat M`` from the rows of ``M`` where ``flat`` (C, N_T) has mass: numpy or torch."""
        if B.is_torch(flat):
            import torch

            support = torch.nonzero((flat != 0).any(dim=0)).flatten()
        else:
            support = np.flatnonzero((flat != 0).any(axis=0))
        out = B.zeros(flat, flat.shape)
        for rows in self._blocks(support, "row blocks"):
            out += flat[:, rows] @ rows_of(rows)
        return out

    def _backward(self, grad_out, rows_of):
        """``grad_out M^T`` (C, N_T): the gradient in every entry of ``q'``, its zeros included
        (``d out / d q'(i) = M[i, :]``), each block of rows formed again and dropped."""
        import torch

        grad = torch.empty_like(grad_out)
        for rows in self._blocks(torch.arange(self.n, device=grad_out.device), "gradient"):
            grad[:, rows] = grad_out @ rows_of(rows).T
        return grad

    def row_sums(self):
        """Each row is a softmax: sums to 1 up to round-off (checked on a sample of rows)."""
        rows = np.unique(np.linspace(0, self.n - 1, min(self.n, 64)).astype(np.int64))
        return self.rows(rows).sum(axis=1)


@functools.cache
def _blockwise_transport_fn():
    """The autograd function of :meth:`CovarianceSoftmaxKernel.transport` on tensors: the
    forward pass forms only the rows of ``M`` on the support of ``q'``, the backward pass every
    row, a block at a time, so neither keeps more than one block of ``M`` (autograd saving each
    block for the backward pass would keep all ``N_T^2`` entries). Made on first use: torch is
    optional."""
    import torch

    class BlockwiseTransport(torch.autograd.Function):
        @staticmethod
        def forward(ctx, flat, kernel, rows_of):
            ctx.kernel, ctx.rows_of = kernel, rows_of
            return kernel._forward(flat, rows_of)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad_out):
            return ctx.kernel._backward(grad_out, ctx.rows_of), None, None

    return BlockwiseTransport


def covariance_affinity(calibration_probs):
    """Callable ``rows -> Omega[rows, :]`` that never materialises the full N x N matrix."""
    c = _centred_factor(as_calibration(calibration_probs))
    return lambda rows: c[:, rows].T @ c


def cosine_affinity(embeddings):
    """Callable ``rows -> cos(e_rows, e_all)`` for embedding rows (e.g. the target LM head).

    Each row is divided by its largest absolute entry before its norm is taken, so that rows of
    any finite scale (1e200 or 1e-200, whose squares overflow or underflow float64) give their
    cosines; an all-zero row has cosine 0 with every row, itself included."""
    e = as_real_array(embeddings, "embeddings")
    if e.ndim != 2:
        raise InputError(f"embeddings must be (N, d), one row per token, got shape {e.shape}")
    if not np.all(np.isfinite(e)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(e))[0])
        raise InputError(f"embeddings has a non-finite value {e[idx]} at index {idx}")
    scale = np.abs(e).max(axis=1, keepdims=True, initial=0.0)
    zero = scale == 0  # an all-zero row stays all zeros: cosine 0 with every row
    e = e / np.where(zero, 1.0, scale)  # largest entry +-1: the norm is in [1, sqrt(d)]
    e /= np.where(zero, 1.0, np.linalg.norm(e, axis=1, keepdims=True))
    return lambda rows: e[rows] @ e.T


def sparse_topk_kernel(affinity, k: int, tau: float = 1.0, *, n: int | None = None,
                       block: int = 1024) -> SparseKernel:
    """Keep the ``k`` largest affinities of each row, softmax them at temperature ``tau``.

    Parameters:
      affinity: dense (N, N) array, or a callable ``rows -> (len(rows), N)`` block of rows
        (see :func:`covariance_affinity`, :func:`cosine_affinity`), with ``n`` given.
      k: entries kept per row (the diagonal is always kept so that ``M = I`` is reachable).
      tau: softmax temperature over the kept entries.
      n: the vocabulary size, required with a callable; with a dense affinity it may be
        given and must then equal the affinity's size.
      block: rows of affinity formed at a time (an integer >= 1).
    Memory O(N k + block N).
    """
    import scipy.sparse as sp

    if callable(affinity):
        if n is None:
            raise InputError("n is required when affinity is a callable")
        n = as_count(n, "n", 1)
        rows_of = affinity
    else:
        a = as_real_array(affinity, "affinity")
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise InputError(f"affinity must be square, got shape {a.shape}")
        if n is not None and as_count(n, "n", 1) != a.shape[0]:
            raise InputError(f"n = {n!r} disagrees with the ({a.shape[0]}, {a.shape[1]}) "
                             "affinity: leave n out with a dense affinity, or give its size")
        n = a.shape[0]
        rows_of = lambda rows: a[rows]  # noqa: E731
    k = as_count(k, "k", 1)
    if k > n:
        raise InputError(f"k must be in [1, {n}], got {k}")
    tau = check_tau(tau)
    block = as_count(block, "block", 1)
    indptr = np.arange(0, n * k + 1, k)
    # zeros, not np.empty: the matrix below skips scipy's checks (check=False), so no path may
    # hand it uninitialised column ids (a block of -1 once filled none: a segfault)
    indices = np.zeros(n * k, dtype=np.int64)
    data = np.zeros(n * k)
    for start in range(0, n, block):
        rows = np.arange(start, min(n, start + block))
        try:
            # complex, strings: refused; a copy (the loop writes into it): never the caller's
            # array, which may be read-only (a memmap slice) or shared (a CPU tensor)
            blk = np.array(as_real_array(B.to_numpy(rows_of(rows)), "affinity(rows)"))
        except IndexError:  # a callable over fewer ids than n (covariance_affinity's, say)
            raise InputError(f"affinity(rows) failed for rows {rows[0]}..{rows[-1]} with an "
                             f"index error: does the affinity cover n = {n} ids?") from None
        if blk.shape != (rows.size, n):  # wider rows would put column ids >= n in the matrix
            raise InputError(f"affinity(rows) must return a (len(rows), {n}) block, got shape "
                             f"{blk.shape} for rows {rows[0]}..{rows[-1]}")
        if not np.all(np.isfinite(blk)):
            raise InputError(f"affinity has a non-finite value in rows {rows[0]}..{rows[-1]}")
        ar = np.arange(rows.size)
        diag = blk[ar, rows].copy()
        blk[ar, rows] = np.inf  # always keep the diagonal
        top = np.argpartition(-blk, k - 1, axis=1)[:, :k]
        blk[ar, rows] = diag
        kept = np.take_along_axis(blk, top, axis=1)
        # shift before dividing by tau: (a - max a) / tau is <= 0 for any tau (-inf at worst,
        # the weight 0 it stands for), where a / tau can overflow and the softmax of infs is NaN
        with np.errstate(over="ignore", under="ignore"):
            vals = B.softmax((kept - kept.max(axis=1, keepdims=True)) / tau)
        order = np.argsort(top, axis=1)
        sl = slice(start * k, (start + rows.size) * k)
        indices[sl] = np.take_along_axis(top, order, axis=1).ravel()
        data[sl] = np.take_along_axis(vals, order, axis=1).ravel()
    return SparseKernel(sp.csr_matrix((data, indices, indptr), shape=(n, n)), check=False)


def as_kernel(kernel, *, name: str = "kernel"):
    """Wrap a dense array / scipy.sparse matrix / kernel object as a kernel, checking it."""
    if kernel is None:
        return IdentityKernel()
    check_not_a_class(kernel, name)
    if hasattr(kernel, "transport"):
        return kernel
    try:
        import scipy.sparse as sp

        if sp.issparse(kernel):
            return SparseKernel(kernel, name=name)
    except ImportError:  # pragma: no cover - scipy is a core dependency
        pass
    return DenseKernel(kernel, name=name)
