"""The few array operations the core needs, on numpy (float64 or exact ``Fraction`` object
arrays) and torch (CPU or CUDA), so that each formula is written once.

Numerical convention: a proposal may be sub-stochastic; divisions by a total mass that is zero
are never performed (callers branch on the mass first), so no ``0/0`` appears on any backend.
"""
from __future__ import annotations

import numbers
from fractions import Fraction

import numpy as np

from .validation import host


def is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "device")


def is_exact(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == object


def minimum(a, b):
    if is_torch(a):
        import torch

        return torch.minimum(a, b)
    return np.minimum(a, b)


def positive_part(x):
    """``max(x, 0)`` elementwise (exact zeros stay exact)."""
    if is_torch(x):
        return x.clamp_min(0)
    if is_exact(x):
        return np.array([v if v > 0 else 0 for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    return np.maximum(x, 0.0)


def total(x, keepdims: bool = False):
    """Sum over the last axis."""
    if is_torch(x):
        return x.sum(-1, keepdim=keepdims)
    return x.sum(axis=-1, keepdims=keepdims)


def zeros(like, shape):
    """Zeros of ``shape`` with the dtype/device of ``like`` (exact 0 for Fraction arrays)."""
    if is_torch(like):
        import torch

        return torch.zeros(shape, dtype=like.dtype, device=like.device)
    if is_exact(like):
        out = np.empty(shape, dtype=object)
        out.fill(0)
        return out
    return np.zeros(shape, dtype=like.dtype if like.dtype.kind == "f" else np.float64)


def scatter_last(values, index, size, *, plan=None):
    """Place ``values[..., j]`` at position ``index[j]`` of a new last axis of length ``size``.

    ``index`` holds distinct ids; columns with ``index == -1`` are dropped. ``plan`` is the
    precomputed ``(keep, dst, is_identity)`` of :attr:`rdk_theory.vocab.VocabMap.scatter_plan`;
    for the identity map ``values`` itself is returned (never mutated by the core).
    """
    if plan is None:
        keep = np.flatnonzero(np.asarray(index) >= 0)
        plan = (keep, np.asarray(index)[keep], False)
    keep, dst_idx, identity = plan
    if identity and values.shape[-1] == size:
        return values
    out = zeros(values, tuple(values.shape[:-1]) + (size,))
    if is_torch(values):
        import torch

        k = torch.as_tensor(keep, device=values.device)
        d = torch.as_tensor(dst_idx, device=values.device)
        out[..., d] = values.index_select(-1, k)
        return out
    out[..., dst_idx] = values if keep.size == values.shape[-1] else values[..., keep]
    return out


def safe_divide(num, den):
    """``num / den`` where ``den > 0``, 0 where ``den <= 0``, NaN where ``den`` is NaN (a NaN
    row stays NaN rather than passing for an empty one; ``den`` broadcasts; exact for Fractions).

    Divides directly (never through ``1 / den``, which overflows for a subnormal ``den``).
    On torch a ``den <= 0`` is replaced by ``+inf`` (``num`` is finite, so ``num / inf`` is 0):
    one pass over ``num``, where a select between the quotient and zeros took three (it
    showed in the GPU profile of first-order RDK, gpu_validation/README.md).
    """
    if is_torch(num):
        import torch

        return num / torch.where(den <= 0, float("inf"), den)  # a python float: int den too
    if is_exact(num):
        den_b = np.broadcast_to(den, num.shape)
        out = np.empty(num.shape, dtype=object)
        for idx in np.ndindex(num.shape):
            d, v = den_b[idx], num[idx]
            if isinstance(v, numbers.Rational) and isinstance(d, numbers.Rational):
                v = Fraction(v)  # int / int is a float: the exact tier stays exact
            out[idx] = v / d if d > 0 else 0
        return out
    den = np.asarray(den)
    pos = ~(den <= 0)  # NaN stays in: NaN / NaN
    if np.all(pos):
        return num / den
    return np.where(pos, num / np.where(pos, den, 1.0), 0.0)


def softmax(x):
    """Softmax over the last axis of a float64 numpy array (max-shifted: no overflow)."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def kept_tensors():
    """A context in which new torch tensors are ordinary ones, even inside
    ``torch.inference_mode()``: for copies a cache keeps (index maps, kernel arrays). A kept
    inference tensor broke every later call that autograd records ("Inference tensors cannot
    be saved for backward"). It also turns grad mode on inside ``torch.no_grad()``: use it for
    copies of numpy arrays only, never for a computation on tensors that require grad."""
    import torch

    return torch.inference_mode(False)


def to_numpy(x) -> np.ndarray:
    """``x`` as a numpy array; a torch tensor on any device is copied to the host
    (:func:`rdk_theory.validation.host`: floats as float64)."""
    return np.asarray(host(x))
