"""First-order RDK: an O(N) approximation of the covariance-softmax proposal ``M^T q'``.

**[definition]** (MATH.md section 5; the paper's own O(N) formula is not available to this
project). Write ``A = Omega / tau = diag(a) + B`` with ``B`` zero on the diagonal, and replace
``exp(B_ij)`` by ``1 + B_ij`` for ``i != j``. Because the rows of ``Omega`` sum to 0,
``Z_i ~= exp(a_i) + N - 1 - a_i`` and

    q''(j) ~= q'(j) (exp(a_j) - 1) / Z_j + sum_i q'(i) / Z_i + (B^T (q' / Z))_j.

``Omega = C^T C`` with ``C = (P_c - mu) / sqrt(S)`` of shape (S, N), so ``B^T v = C^T (C v) / tau
- a v`` costs O(N S) and no N x N matrix is ever formed; a truncated rank ``r`` (top singular
vectors of ``C``) makes it O(N r). Before clipping the vector sums to ``sum q'`` exactly;
negative entries are clipped to 0 and the vector is renormalised. That final vector is what is
sampled, divided by and used for the residual, so the step stays lossless. The error is second
order in ``max |B_ij|`` and ``|alpha_exact - alpha_fo| <= TV(q''_exact, q''_fo)`` (Theorem E).

The class has the kernel interface (``n``, ``transport``), so it is one pluggable implementation
of "an approximation of ``M^T q'``"; another formula would be another class with ``transport``.

Engines for numpy float64 input: ``"numpy"`` (two thin BLAS products and element-wise passes; the
reference), ``"fused"`` (one compiled two-pass loop per row, :mod:`rdk_theory._fused`, needs
numba; one thread by default, ``threads=`` for more) and ``"blas"`` (the numpy engine's two BLAS
products in blocks of the vocabulary, each followed by one compiled pass that writes ``q''`` and
sums the acceptance, :mod:`rdk_theory._blocked`, needs numba). ``"auto"`` (the default) takes,
when numba is installed, the fused engine for a factor of at most ``_fused.AUTO_MAX_ROWS`` rows (a
truncated rank) and the blas engine, with float64 products, for a larger factor (a full
calibration factor, where BLAS products beat hand-written loops); otherwise the numpy engine.
The engines agree to float64 round-off, with one exception that must be asked for:
``engine="blas"`` with ``factor_dtype="float32"`` computes the two products in float32
arithmetic (see :mod:`rdk_theory._blocked` for its error bound). Torch tensors take the array
path of their own backend, except that with ``engine="auto"`` float32 CUDA tensors of at least
``_triton.MIN_ELEMENTS`` elements (``MIN_ELEMENTS_DECODE`` in the decode call
:func:`rdk_theory.rdk_proposal_with_acceptance`) take the Triton engine when triton imports
(:mod:`rdk_theory._triton`: one cuBLAS product and one fused pass, the torch path's numbers to
float32 round-off, CUDA graph capture included); exact
``Fraction`` arrays are read as float64 first (the kernel's numbers are floats) and then go
where a float64 array goes.
"""
from __future__ import annotations

import numpy as np

from . import _backend as B
from . import _blocked, _fused, _triton
from .acceptance import acceptance_rate
from .kernels import (_centred_factor, _DeviceCache, _DeviceCopies, check_width, real_input,
                      widened)
from ._fused import _F64
from .validation import (InputError, as_calibration, as_count, as_real_array, as_real_tensor,
                         check_broadcast, check_tau, common_tier, same_backend)


def _plain(x) -> bool:
    """A non-empty numpy float64 array of at least one axis (not a subclass): the decode-loop
    input, tested with a few attribute reads because the test runs on every call."""
    return type(x) is np.ndarray and x.dtype == _F64 and x.ndim > 0 and x.size > 0


def _target_fits(p, q) -> bool:
    """Whether a compiled engine can take the target ``p`` beside ``q``: a real numpy array
    that broadcasts to ``q``'s shape without adding axes. Anything else (a list, a tensor,
    exact ``Fraction`` arrays, a target with more leading axes than ``q'``) goes to
    :func:`rdk_theory.acceptance_rate`, which broadcasts both."""
    if _plain(p) and p.shape == q.shape:
        return True
    if not isinstance(p, np.ndarray) or p.dtype.kind not in "fiu" or p.ndim > q.ndim:
        return False
    try:
        return np.broadcast_shapes(p.shape, q.shape) == q.shape
    except ValueError:
        return False


class FirstOrderCovarianceKernel(_DeviceCopies):
    """First-order approximation of the covariance-softmax kernel at temperature ``tau``.

    Parameters:
      calibration_probs: (S, N_T) calibration next-token distributions ``p_c``.
      tau: softmax temperature (> 0); the approximation error shrinks as ``tau`` grows.
      rank: optional truncation of ``C`` to its top ``rank`` singular directions (``min(S, N)``
        keeps ``C`` itself: the same kernel as ``None``).
      engine: ``"auto"``, ``"fused"``, ``"blas"`` or ``"numpy"`` (see the module docstring;
        ``"numpy"`` also keeps float32 CUDA tensors on the torch path instead of Triton).
      factor_dtype: ``"float64"`` (default) or ``"float32"``: store ``C`` rounded to float32,
        which halves the bytes the fused engine reads per call (see :meth:`_setup`); with
        ``engine="blas"`` it also makes the two products float32 arithmetic.
      threads: threads the fused engine may use (default 1: the calling thread only; more
        speeds up large N, see :mod:`rdk_theory._fused` for when not to). The result does not
        depend on it beyond round-off.
    """

    #: :meth:`transport` takes TLI's unnormalised proposal (``normalise=True``):
    #: :func:`rdk_theory.rdk_proposal` then leaves the division to the kernel's own passes.
    fuses_normalisation = True

    def __init__(self, calibration_probs, tau: float, *, rank: int | None = None,
                 engine: str = "auto", factor_dtype: str = "float64", threads: int | None = None):
        # rows renormalised exactly (as_calibration): then every row of C sums to 0, which is
        # what makes the first-order vector sum to sum q' without a renormalising pass
        cal = as_calibration(calibration_probs)
        tau = check_tau(tau)
        s, n = cal.shape
        # (S, N): Omega = c.T @ c; float64 whatever the rows (Fractions: the SVD needs floats)
        c = np.asarray(_centred_factor(cal), dtype=np.float64)
        if rank is not None:
            rank = as_count(rank, "rank", 1)
            if rank > min(s, n):
                raise InputError(f"rank must be in [1, {min(s, n)}], got {rank}")
            if rank < min(s, n):  # a full rank keeps C itself: an SVD rotation of it gives
                u, sv, vt = np.linalg.svd(c, full_matrices=False)  # the same kernel but not
                c = sv[:rank, None] * vt[:rank]  # its zeros (1e-18 / tau at tiny tau)
        self._setup(c, tau, engine, factor_dtype, threads)

    def _setup(self, factor, tau, engine, factor_dtype="float64", threads=None):
        """Precompute everything one call needs.

        The factor's rows are re-centred, ``C - (row means) 1^T``, so that they sum to 0 to
        round-off of their own size (the property that makes ``q''`` sum to ``sum q'``): a no-op
        in exact arithmetic, and in float64 a change below the round-off of the rows' sums.
        With ``factor_dtype="float32"`` the kernel is, **[definition]**, the first-order kernel
        of ``C~ = round32(C) - (row means) 1^T``: the float32 rounding re-centred in float64 so
        that its rows sum to 0 again. Every
        engine computes that same kernel: the numpy engine from ``C~`` in float64, the fused
        engine from the float32 copy plus a per-row shift, so the engines still agree to
        float64 round-off. ``C~`` is within a relative 2^-24 (plus a shift of the same order)
        of ``C``; the proposal is not: the affinities ``C~^T C~ / tau`` move by up to about
        ``2^-24 |C|^2 / tau``, so at a small ``tau`` it can move much further (2.4e-3 at
        ``tau = 1e-7``, N = 3).
        """
        if engine not in ("auto", "fused", "blas", "numpy"):
            raise InputError(f"engine must be 'auto', 'fused', 'blas' or 'numpy', got {engine!r}")
        if engine in ("fused", "blas") and not _fused.available():
            raise InputError(f"engine={engine!r} needs numba: pip install 'rdk-theory[fast]'")
        whole = isinstance(threads, (int, np.integer)) and not isinstance(threads, bool)
        if threads is not None and not (whole and threads >= 1):
            raise InputError(f"threads must be a positive integer or None, got {threads!r}")
        self._engine, self.threads = engine, threads
        c = np.ascontiguousarray(factor, dtype=np.float64)
        if factor_dtype == "float32":
            if not float(np.abs(c).max(initial=0.0)) < float(np.finfo(np.float32).max):
                raise InputError(f"the factor's largest entry {float(np.abs(c).max()):g} is "
                                 "beyond float32's range (3.4e38): factor_dtype='float32' "
                                 "cannot store it; use factor_dtype='float64'")
            stored = c.astype(np.float32)
            shift = stored.sum(axis=1, dtype=np.float64) / c.shape[1]
            c = stored.astype(np.float64) - shift[:, None]
        elif factor_dtype == "float64":
            # rows re-centred: their sums drift from 0 by the round-off of the calibration
            # rows' own sums, which a factor of tiny variances (nearly equal calibration
            # rows, a tau of 1e-30) turned into a q'' summing to 1 + 1e-2
            c -= (c.sum(axis=1) / c.shape[1])[:, None]  # c is the kernel's own copy
            stored, shift = c, np.zeros(c.shape[0])
        else:
            raise InputError(f"factor_dtype must be 'float64' or 'float32', got {factor_dtype!r}")
        tau = float(tau)  # checked finite and > 0 by the callers
        with np.errstate(over="ignore"):
            a = (c * c).sum(axis=0) / tau  # diag(Omega) / tau, >= 0
            c_over_tau = float(np.abs(c).max(initial=0.0)) / tau
        if not np.isfinite(max(float(a.max(initial=0.0)), c_over_tau, 1.0 / tau)):
            # the exact kernel refuses an Omega / tau that overflows too
            # (kernels.CovarianceSoftmaxKernel); 1 / tau is this kernel's own (tau < 2^-1024)
            raise InputError(f"Omega / tau or C / tau overflows at tau = {tau:g}: choose a "
                             "larger tau")
        if engine == "blas" and factor_dtype == "float32" and (
                c_over_tau >= float(np.finfo(np.float32).max)):
            raise InputError(f"tau = {tau:g} puts C / tau beyond float32's range: float32 "
                             "products (engine='blas', factor_dtype='float32') cannot hold it; "
                             "use factor_dtype='float64'")
        self.factor_dtype = factor_dtype
        self.factor, self.tau, self.n = c, tau, int(c.shape[1])
        # Z = exp(a) + N - 1 - a >= N > 0. Written with exp(-a) so a large a cannot overflow:
        # 1/Z = e^-a / (1 + (N-1-a) e^-a), (e^a - 1)/Z = (1 - e^-a) / (1 + (N-1-a) e^-a).
        e = np.exp(-a)
        den = 1 + (self.n - 1 - a) * e
        self.a, self.inv_z, self.diag_coef = a, e / den, (1 - e) / den
        self._coef = self.diag_coef - self.a * self.inv_z
        self._fused_arrays = (stored, shift, self.inv_z, self.tau)
        self._products = None  # the numpy/torch engine's (left, right): built on first use
        self._products32 = None  # their float32 roundings, for engine="blas" with a float32 factor
        self._compiled = False  # plain float64 input's engine: "fused", "blas" or None; first use
        self._torch = _DeviceCache()

    @classmethod
    def from_factor(cls, factor, tau: float, *, engine: str = "auto",
                    factor_dtype: str = "float64", threads: int | None = None):
        """Build from a precomputed factor ``C`` (S or r, N) with ``Omega = C^T C``.

        The factor is copied (later edits of the caller's array do not reach the kernel) and
        its rows re-centred (see :meth:`_setup`): ``kernel.factor`` may differ from it by the
        row-sum drift the check allows."""
        tau = check_tau(tau)
        c = np.array(as_real_array(factor, "factor"), dtype=np.float64, order="C", copy=True)
        if c.ndim != 2 or c.shape[0] < 1 or c.shape[1] < 1 or not np.all(np.isfinite(c)):
            raise InputError(f"factor must be a finite 2-D (r, N) array with r, N >= 1, "
                             f"got shape {c.shape}")
        # against the whole factor's scale, not each row's own: a row that is round-off
        # alone (a numerically null direction of an SVD, sv ~ 1e-17) sums to about itself
        # and changes Omega by ~1e-19, yet failed a per-row test
        scale = np.abs(c).sum(axis=1).max()
        drift = np.abs(c.sum(axis=1)) > 1e-9 * (scale + 1e-300)
        if np.any(drift):
            raise InputError(
                f"factor row {int(np.argmax(drift))} does not sum to 0: a first-order factor must "
                "come from centred calibration rows (then Omega's rows sum to 0)")
        obj = cls.__new__(cls)
        obj._setup(c, tau, engine, factor_dtype, threads)
        return obj

    def _arrays(self, like):
        """``(left, right, coef)`` for the array engines, so that one call is two thin matrix
        products and two passes over N:

            u = [C v ; sum v] = q' @ left.T  with v = q' / Z,
            q'' = u @ [C / tau ; 1] + q' * (diag_coef - a / Z)   (the ones row adds sum v).

        ``left`` and ``right`` ((r + 1) x N float64 each) are built on the first call that
        needs them (:meth:`_product_matrices`), so a kernel that only ever runs on the fused
        engine does not hold them."""
        left, right = self._float64_products()
        left = left[:-1]  # without the blas engine's ones row (a view)
        if B.is_torch(like):
            g = self._torch.get
            return (g("l", left, like), g("r", right, like, *self._right_names()),
                    g("k", self._coef, like))
        return left, right, self._coef

    def transport_unclipped(self, q_prime):
        """The first-order vector before clipping (sums to ``sum q'``; may hold negatives).

        ``q'(j) (e^{a_j} - 1)/Z_j + sum_i v_i + (B^T v)_j`` with ``v = q'/Z`` and
        ``B^T v = C^T (C v) / tau - a v``: O(N S) per row, no N x N matrix.
        """
        q_prime = self._input(q_prime)
        left, right, coef = self._arrays(q_prime)
        u = q_prime @ left.T  # (..., S + 1): C v and sum v
        out = u @ right  # C^T (C v) / tau + sum v
        if B.is_torch(out):
            out.addcmul_(q_prime, coef)
        else:
            out += np.multiply(q_prime, coef)
        return out

    def transport(self, q_prime, *, normalise: bool = False):
        """The first-order RDK proposal: clipped at 0 and renormalised to ``sum q'``.

        When no entry is negative the vector already sums to ``sum q'`` (up to round-off) and is
        returned as is; either way the returned vector is the one to sample, divide by and
        build the residual from. On CUDA tensors inside a CUDA graph capture the clip makes no
        host sync (same numbers; see :func:`_clip_without_sync`), so a decode step that calls
        this after one eager warm-up can be captured.

        ``normalise=True``: ``q_prime`` is any non-negative ``r``, typically
        :func:`rdk_theory.vanilla_proposal` (the drafter's mass on the target's tokens), and the
        result is the proposal of ``q' = r / sum r`` (TLI's proposal; zeros where ``sum r`` is
        0). The compiled engines fold that division into their passes (the vector is linear in
        ``q'`` before the clip), saving the pass that writes ``q'`` and the one that reads it
        back; the other paths divide first. Same numbers either way, to float64 round-off
        (float32 products: within ``float32_error_bound(r, ...) / sum r`` for ``sum r`` in
        ``[2^-60, 2^60]``; a row outside that range is divided first, so that ``r`` rounded to
        float32 neither underflows nor overflows).
        """
        q_prime = self._input(q_prime)
        engine = self._route(q_prime)
        if engine:
            return self._run(engine, q_prime, None, normalise)[0]
        if _triton.usable(self, q_prime, None):
            return _triton.first_order(self, q_prime, None, normalise=normalise)[0]
        if normalise:
            q_prime = B.safe_divide(q_prime, B.total(q_prime, keepdims=True))
        out = self.transport_unclipped(q_prime)
        if B.is_torch(out):
            if _capturing(out):
                return _clip_without_sync(out, q_prime)
            if out.numel() and bool(out.amin() < 0):  # one read; (out < 0).any() took two
                out.clamp_min_(0)
                out *= B.safe_divide(B.total(q_prime, keepdims=True), B.total(out, keepdims=True))
            return out
        if out.min(initial=0.0) < 0:
            np.maximum(out, 0.0, out=out)
            out *= B.safe_divide(B.total(q_prime, keepdims=True), B.total(out, keepdims=True))
        return out

    def transport_with_acceptance(self, q_prime, target_probs, *, normalise: bool = False):
        """``(q'', alpha(p, q''))``: the proposal of :meth:`transport` and its acceptance.

        With the fused and blas engines both come out of the same passes over each row (the
        acceptance costs no extra read of the proposal); otherwise this is
        ``transport`` followed by :func:`rdk_theory.acceptance_rate` on trusted arrays.
        ``normalise`` as in :meth:`transport`.

        ``target_probs`` is trusted, as in a decode loop, whose ``p`` is a softmax row:
        its width and broadcasting are checked, not that it is a law (that check would read
        ``p`` once more, as much as the floor itself). Logits passed by mistake give a
        meaningless "acceptance" (negative, say); :func:`rdk_theory.rdk_proposal_with_acceptance`
        checks ``p`` and ``q`` and then calls this method.
        """
        q_prime = self._input(q_prime)
        if not (_plain(target_probs) and target_probs.shape == q_prime.shape):  # decode loop: no
            # more checks than shape equality; otherwise the target as the transports read q'
            # (a float8 tensor as float32, an ndarray subclass as its plain data)
            target_probs = real_input(target_probs, "target_probs")
            check_width(target_probs, self.n, "target_probs")
            check_broadcast(np.shape(target_probs)[:-1], np.shape(q_prime)[:-1],
                            ("target_probs", "q_prime"))
        engine = self._route(q_prime)
        if engine and _target_fits(target_probs, q_prime):
            return self._run(engine, q_prime, target_probs, normalise)
        if not engine and _triton.usable(self, q_prime, target_probs):
            return _triton.first_order(self, q_prime, target_probs, normalise=normalise)
        out = self.transport(q_prime, normalise=normalise)
        # mixed numpy/torch input: the acceptance is computed on the tensor's device; an exact
        # target with this float proposal: in float64
        return out, acceptance_rate(*common_tier(*same_backend(target_probs, out,
                                                               ("target_probs", "q_prime"))),
                                    check=False)

    def _input(self, q_prime):
        """``q_prime`` checked to hold the kernel's N target ids on its last axis; a tensor as
        a floating one (integer tensors as float64), a numpy float ndarray as float64 (a float16,
        float32 or big-endian one is copied; a longdouble one is read as given, and a compiled
        engine forced by name refuses it), anything else as float64
        numpy (a list, integers, Fraction arrays, ndarray subclasses such as np.matrix or a
        masked array, read as their plain data: the kernel's numbers are floats, exp has no
        exact value; complex numbers and strings are InputErrors). A few attribute reads on
        the decode-loop input."""
        if not _plain(q_prime) or q_prime.shape[-1] != self.n:
            check_width(q_prime, self.n)
            if B.is_torch(q_prime):
                q_prime = as_real_tensor(q_prime, "q_prime")
            elif not (type(q_prime) is np.ndarray and q_prime.dtype.kind == "f"):
                # subclasses too (np.matrix, masked arrays): the numpy engine's reductions
                # and broadcasting differ on them, where the compiled engines took them
                q_prime = as_real_array(q_prime, "q_prime")
            else:  # float16, float32 or big-endian: float64 (the numpy engine computed in it)
                q_prime = widened(q_prime)
        return q_prime

    @property
    def engine(self) -> str:
        """``"auto"``, ``"fused"``, ``"blas"`` or ``"numpy"``, as given (read-only: what
        ``"auto"`` runs is decided once, on first use)."""
        return self._engine

    def _compiled_engine(self):
        """The engine for plain numpy float64 input: ``"fused"``, ``"blas"`` or None (the numpy
        engine). ``"auto"`` with numba importable takes the fused engine for at most
        ``_fused.AUTO_MAX_ROWS`` factor rows and the blas engine for more, with float64
        products whatever ``factor_dtype`` (float32 products only with ``engine="blas"``, see
        :meth:`_blas_arrays`). Decided on first use (numba is imported then, not with the
        package) and kept: the decode-loop call then does a handful of checks before the
        compiled kernel."""
        if self._compiled is False:
            engine = self.engine
            if engine == "auto":
                engine = None
                if _fused.available():
                    small = self.factor.shape[0] <= _fused.AUTO_MAX_ROWS
                    engine = "fused" if small else "blas"
            self._compiled = engine if engine in ("fused", "blas") else None
        return self._compiled

    def _route(self, q_prime):
        """The compiled engine ``q_prime`` goes to, or None for the numpy/torch/exact array
        path. A plain float64 array (see :func:`_plain`, the decode-loop case; exact input
        arrives here as float64, :meth:`_input`) is settled by :meth:`_compiled_engine` alone;
        torch input takes the torch path whatever the engine; numpy input that is not float64
        takes the numpy path, and a forced ``"fused"`` or ``"blas"`` engine refuses it."""
        if _plain(q_prime):
            return self._compiled_engine()
        if self.engine == "numpy" or B.is_torch(q_prime) or B.is_exact(q_prime):
            return None
        f64 = isinstance(q_prime, np.ndarray) and q_prime.dtype == np.float64
        if f64 and q_prime.ndim >= 1 and q_prime.size == 0:
            return None  # an empty batch: the array path returns its empty result on any engine
        usable = f64 and q_prime.ndim >= 1
        if self.engine in ("fused", "blas") and not usable:
            raise InputError(f"engine={self.engine!r} takes a numpy float64 array, "
                             f"got {type(q_prime).__name__} {getattr(q_prime, 'dtype', '')}")
        return self._compiled_engine() if usable else None

    def _run(self, engine, q_prime, target_probs, normalise):
        """``(q'', alpha or None)`` on the compiled ``engine``."""
        if engine == "fused":
            return _fused.first_order(q_prime, target_probs, self._fused_arrays,
                                      normalise=normalise, threads=self.threads)
        return _blocked.first_order(q_prime, target_probs, self._blas_arrays(),
                                    normalise=normalise,
                                    min_sum=_fused.smallest_scaled_sum(self.tau))

    def _blas_arrays(self):
        """``(left, right, coef)`` for the blas engine: the numpy engine's float64 matrices,
        ``left`` with its ones row (float64 products, also for a float32 factor taken by
        ``engine="auto"``), or, for
        ``engine="blas"`` with a float32 factor, their float32 roundings, built once and kept
        instead of the float64 ones (which are built only if a torch call needs them)."""
        if not (self.engine == "blas" and self.factor_dtype == "float32"):
            return (*self._float64_products(), self._coef)
        if self._products32 is None:
            products = self._products or self._product_matrices()
            self._products32 = tuple(x.astype(np.float32) for x in products)
        return (*self._products32, self._coef)

    def _float64_products(self):
        """:meth:`_product_matrices`, built on first use and kept."""
        if self._products is None:
            self._products = self._product_matrices()
        return self._products

    def _product_matrices(self):
        """``(left, right)`` float64: ``[C / Z ; 1 / Z ; 1]`` (S + 2, N) and ``[C / tau ; 1]``
        (S + 1, N) (see :meth:`_arrays`; ``left``'s ones row gives the blas engine the row sums
        of normalising input, :func:`rdk_theory._blocked.first_order`); built afresh on each
        call, kept by the callers."""
        c = self.factor
        ones = np.ones((1, self.n))
        return (np.vstack([c * self.inv_z, self.inv_z[None, :], ones]),
                np.vstack([c / self.tau, ones]))

    def _right_names(self) -> tuple:
        """``(what, remedy)`` of ``[C / tau ; 1]`` for the refusal of a torch dtype whose range
        it exceeds (:class:`rdk_theory.kernels._DeviceCache`)."""
        return f"C / tau at tau = {self.tau:g}", ", or choose a larger tau"

    def max_offdiag_affinity(self) -> float:
        """``max_{i != j} |B_ij|`` (forms Omega: small N only, for error checks)."""
        omega = self.factor.T @ self.factor / self.tau
        np.fill_diagonal(omega, 0.0)
        return float(np.abs(omega).max())


def _capturing(t) -> bool:
    """True while the current CUDA stream is being captured into a CUDA graph, where a host
    sync (``bool(tensor)``) is an error. That is the current device's stream, where
    ``torch.cuda.graph`` captures (a tensor on another device inside a capture is not a case
    handled here; this form is the one tested on a GPU)."""
    if not t.is_cuda:
        return False
    import torch

    return torch.cuda.is_current_stream_capturing()


def _clip_without_sync(out, q_prime):
    """The clip of :meth:`FirstOrderCovarianceKernel.transport` with no host sync, for CUDA
    graph capture: every step runs, and the rescale multiplies by exactly 1 when no entry of
    the batch is negative. For finite input the same numbers as the eager clip, which reads
    ``amin < 0`` on the host and skips the steps when it is false: faster outside a graph
    (a sync-free variant measured before this one took 35 kernels against the eager 22,
    gpu_validation/README.md)."""
    import torch

    if not out.numel():
        return out
    negative = out.amin() < 0  # a 0-d tensor on the device, never read on the host
    out.clamp_min_(0)
    ratio = B.safe_divide(B.total(q_prime, keepdims=True), B.total(out, keepdims=True))
    out.mul_(torch.where(negative, ratio, torch.ones_like(ratio)))
    return out
