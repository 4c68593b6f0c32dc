"""Input validation at the public boundary.

Every public entry point validates once, here, and raises :class:`InputError` with a message
that names the offending argument and value. Internal helpers trust their inputs.

Conventions (written down once, enforced here):

* probabilities are real numbers (not complex, not strings), finite, at least ``-NEG_ATOL``
  (an entry in ``[-NEG_ATOL, 0)`` is round-off and is returned as 0, in a copy) and sum to 1
  within ``PROB_ATOL`` along the last axis (a sub-stochastic vector is accepted only where the
  caller says so);
* calibration rows are such probabilities, at least one row of them;
* ``draft_to_target`` is an integer vector whose entries are ``-1`` or valid target ids, with no
  target id used twice;
* a kernel is row-stochastic within ``KERNEL_ATOL`` (float16 and bfloat16 input: within its
  dtype's eps, :func:`rounding_atol`, as for probabilities); the kernels then divide float rows
  by their sums (:class:`rdk_theory.kernels.DenseKernel`).
"""
from __future__ import annotations

import functools
import numbers
import operator

import numpy as np

#: Tolerance on ``|sum(p) - 1|`` for float inputs (torch's float32 CPU softmax over 152K ids
#: misses 1 by 1e-5 to 1e-4 on real models: renormalise such rows first, as
#: ``gpu_validation.models.LoadedModel.probs`` does; 1e-4 still rejects a visibly wrong
#: distribution).
PROB_ATOL = 1e-4
#: Tolerance on negative probabilities: ``-1e-12`` from a subtraction is round-off, not a
#: wrong distribution; such entries are read as 0.
NEG_ATOL = 1e-12
#: Tolerance on the row sums of a kernel.
KERNEL_ATOL = 1e-6


class InputError(ValueError):
    """Bad user input: the CLI turns this into ``error: ...`` and exit status 2."""


def _is_exact(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype == object


def as_prob_array(x, name: str, *, allow_sub_stochastic: bool = False, atol: float = PROB_ATOL):
    """Return ``x`` as an array of probabilities along its last axis, or raise InputError.

    numpy object arrays of exact numbers (``Fraction``, Python or numpy ints) are checked
    exactly; torch tensors are checked on their own device (integer and bool tensors as
    float64, as numpy reads them; float8 tensors refused: within their eps, 0.125 or 0.25, a
    row is hardly a law); anything else becomes float64 numpy (an object array that mixes
    floats with Fractions too).
    """
    if _is_torch(x):
        return _check_torch_probs(x, name, allow_sub_stochastic, atol)
    if is_rational_array(x):
        arr = python_ints(x)  # numpy ints would wrap around in the sums below
        if arr.ndim == 0 or arr.shape[-1] == 0:
            raise InputError(f"{name} must have a non-empty last axis, got shape {arr.shape}")
        bad = [v for v in arr.reshape(-1) if v < 0]
        if bad:
            raise InputError(f"{name} holds a negative entry: {bad[0]!r}")
        sums = arr.sum(axis=-1)
        for s in np.atleast_1d(sums).reshape(-1):
            if s > 1 or (not allow_sub_stochastic and s != 1):
                want = "at most 1" if allow_sub_stochastic else "1 exactly"
                raise InputError(f"{name} must sum to {want} along its last axis, got {s}")
        return arr
    atol = rounding_atol(x, atol)  # float16 rows miss 1 by their rounding (as on torch)
    arr = as_real_array(x, name)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise InputError(f"{name} must have a non-empty last axis, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise InputError(f"{name} has a non-finite value {arr[idx]} at index {idx}")
    if np.any(arr < 0):
        if np.any(arr < -NEG_ATOL):
            idx = tuple(int(i) for i in np.argwhere(arr < -NEG_ATOL)[0])
            raise InputError(f"{name} has a negative probability {float(arr[idx])!r} at index "
                             f"{idx} (tolerance {NEG_ATOL:g})")
        arr = np.maximum(arr, 0.0)  # a copy: the caller's array is left as it was
    with np.errstate(over="ignore"):  # finite entries near 1e308 sum to inf: reported below
        sums = arr.sum(axis=-1)
    if allow_sub_stochastic:
        bad = sums > 1 + atol
    else:
        bad = np.abs(sums - 1) > atol
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(np.atleast_1d(bad))[0])
        s = np.atleast_1d(sums)[idx]
        want = "at most 1" if allow_sub_stochastic else "1"
        raise InputError(
            f"{name} must sum to {want} along its last axis (tolerance {atol:g}); "
            f"row {idx} sums to {s:.8g}"
        )
    return arr


def rounding_atol(x, atol: float) -> float:
    """``atol``, or the machine epsilon of ``x``'s floating dtype where that is larger (numpy
    float16, torch float16 and bfloat16: 9.8e-4 and 7.8e-3): values stored in such a dtype
    miss their exact sums by their own rounding, whatever ``atol`` allows."""
    given = getattr(x, "dtype", None)
    if isinstance(given, np.dtype):
        eps = float(np.finfo(given).eps) if given.kind == "f" else 0.0
    elif _is_torch(x) and x.is_floating_point():
        import torch

        eps = float(torch.finfo(x.dtype).eps)
    else:
        eps = 0.0
    return max(float(atol), eps)


def known_shape(x) -> tuple | None:
    """``x``'s shape (a tensor's without a copy), or None when numpy cannot tell it (ragged)."""
    try:
        return tuple(np.shape(x))
    except (ValueError, TypeError):
        return None


def is_rational_array(x) -> bool:
    """Whether ``x`` is an object array whose entries are all exact (ints or Fractions)."""
    return (isinstance(x, np.ndarray) and x.dtype == object
            and all(isinstance(v, numbers.Rational) for v in x.flat))


def python_ints(arr: np.ndarray) -> np.ndarray:
    """An exact object array with its numpy integer scalars made Python ints (a copy, only when
    there is one): numpy's int64 arithmetic wraps around silently (four entries of 2^62 sum to
    0), and ``int64 / int64`` is a float, where the exact tier must stay exact."""
    if not any(isinstance(v, np.integer) for v in arr.flat):
        return arr
    out = np.empty(arr.shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        out[idx] = int(v) if isinstance(v, np.integer) else v
    return out


def rational_array(x, name: str) -> np.ndarray | None:
    """``x`` (a list too) as an exact object array when every entry is an int or a Fraction,
    else None (the caller then reads it as floats); a ragged sequence is an InputError."""
    try:
        arr = np.asarray(host(x, name))
    except ValueError:
        raise InputError(f"{name} is a ragged sequence") from None
    return python_ints(arr) if is_rational_array(arr) else None


def common_tier(a, b):
    """Two arrays in one arithmetic tier: both as they are when both are exact (object arrays
    of Fractions) or both floats; one of each gives both as float64 (Fractions mixed with
    floats give floats, as in Python). Anything but two numpy arrays (tensors) is returned
    as it is."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return a, b
    if (a.dtype == object) != (b.dtype == object):
        return a.astype(np.float64), b.astype(np.float64)
    return a, b


def real_number(value) -> float | None:
    """``value`` as a float when it is one real number (a Python or numpy scalar, a Fraction, a
    0-d array or tensor), else None: a bool, a string, a complex number or an array is none.
    A tensor that requires grad is read as its value (numpy refused it with torch's error)."""
    if _is_torch(value):
        if value.is_complex() or value.is_quantized or value.is_nested:  # float() raised raw
            return None  # (a 0-d complex tensor with no imaginary part passed as its real)
        value = value.detach()
    if isinstance(value, np.complexfloating):  # float() dropped the imaginary part, warning
        return None
    try:
        scalar = np.ndim(value) == 0 and not isinstance(value, (bool, np.bool_, str, bytes))
        return float(value) if scalar and np.asarray(value).dtype != bool else None
    except (TypeError, ValueError, OverflowError):  # None, a complex number, a huge Fraction
        return None


def host_prob_array(x, name: str, **kwargs) -> np.ndarray:
    """:func:`as_prob_array` for the host-side helpers: a tensor on any device is checked on
    its device, in its own precision (so half-precision rows get their rounding as tolerance,
    as numpy float16 rows do), then copied to the host as float64 numpy."""
    if _is_torch(x):
        return np.asarray(host(as_prob_array(x, name, **kwargs), name), dtype=np.float64)
    return as_prob_array(x, name, **kwargs)


def host(x, name: str = "input"):
    """``x`` as a host numpy array when it is a torch tensor on any device (numpy cannot read
    a CUDA tensor directly); anything else is returned as it is."""
    if _is_torch(x):
        _check_tensor(x, name)
        if x.is_floating_point():  # float64 on the host (numpy has no bfloat16)
            import torch

            return x.detach().to("cpu", torch.float64).numpy()
        return x.detach().cpu().numpy()
    return x


def same_backend(a, b, names=("a", "b")):
    """``(a, b)`` on one backend. A numpy float array paired with a torch tensor becomes a
    float64 tensor on that tensor's device (one host-to-device copy), and the tensor is
    promoted to float64 as numpy would; two tensors on different devices, or an exact
    ``Fraction`` array paired with a tensor, raise InputError."""
    ta, tb = _is_torch(a), _is_torch(b)
    if ta and tb and a.device != b.device:
        raise InputError(f"{names[0]} is on {a.device} and {names[1]} on {b.device}: "
                         "put both on one device")
    for t, x, name in ((ta, a, names[0]), (tb, b, names[1])):
        if t:
            _check_tensor(x, name)
    if ta and tb:
        return a, b
    if not (ta or tb):
        return a, b
    import torch

    tensor, other, other_name = (a, b, names[1]) if ta else (b, a, names[0])
    if _is_exact(other):
        raise InputError(f"{other_name} holds exact Fractions but the other input is a torch "
                         "tensor: pass both as Fraction arrays or both as float arrays")
    other = numpy_to_torch(np.asarray(other, dtype=np.float64), device=tensor.device)
    tensor = tensor.to(torch.float64)  # as numpy promotes float32 (or int) with float64
    return (tensor, other) if ta else (other, tensor)


def numpy_to_torch(array: np.ndarray, dtype=None, device=None):
    """``torch.as_tensor`` of a numpy array of any layout: one with a negative stride (``p[::-1]``,
    ``np.flip``), which torch refuses with a ValueError, is copied first. A read-only one (a
    ``np.broadcast_to`` view, say) is shared as it is, and torch warns once per process that
    writing to it would be undefined (this package never does); the kernels hand torch their
    own writable arrays, of which they show read-only views."""
    import torch

    if any(s < 0 for s in array.strides):
        array = np.ascontiguousarray(array)
    return torch.as_tensor(array, dtype=dtype, device=device)


def read_only_view(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (which stays as it is): what an object shows of an array
    it owns and has checked, so that no one edits it afterwards, while its own code (and
    torch, which warns on a read-only array) reads the writable original."""
    view = array.view()
    view.setflags(write=False)
    return view


#: The largest count or size accepted (:func:`as_count`, :func:`int_at_least`): int64's, the
#: integers numpy sizes, indexes and counts with (a larger one was numpy's OverflowError or
#: ValueError, or a loop that could never end).
MAX_COUNT = 2**63 - 1


def as_count(value, name: str, lo: int = 0) -> int:
    """``value`` as a Python ``int`` in ``[lo, MAX_COUNT]``: an int, a numpy integer, a
    whole-number float or Fraction (``1e5``, ``Fraction(2)``), or a 0-d array/tensor of one;
    anything else (``2.5``, NaN, a string, a bool, ``2**70``) raises InputError."""
    out = None
    if _is_torch(value) and value.ndim != 0:  # operator.index read a one-element tensor
        raise InputError(f"{name} must be an integer >= {lo}, got a tensor of shape "
                         f"{tuple(value.shape)}")
    if (isinstance(value, np.ndarray) or _is_torch(value)) and value.ndim == 0:
        if _is_torch(value):
            check_dense_tensor(value, name)
        value = value.item()  # a 0-d array or tensor: its number
    if not isinstance(value, (bool, np.bool_)):
        try:
            out = operator.index(value)
        except TypeError:  # a whole float or Fraction (1e5, Fraction(2)) is its integer
            if isinstance(value, numbers.Rational):  # exactly: float() overflows beyond 1e308
                if value.denominator == 1:
                    out = int(value)
            elif isinstance(value, numbers.Real) and float(value).is_integer():
                out = int(value)
    if out is None or out < lo:
        raise InputError(f"{name} must be an integer >= {lo}, got {value!r}")
    if out > MAX_COUNT:
        raise InputError(f"{name} must be an integer <= 2^63 - 1 (int64), got {value!r}")
    return out


def check_numpy_rng(rng, who: str = "numpy arrays need") -> None:
    """InputError unless ``rng`` is a ``numpy.random.Generator`` (``who`` opens the message)."""
    if not isinstance(rng, np.random.Generator):
        raise InputError(f"{who} a numpy.random.Generator (np.random.default_rng(seed)), "
                         f"got {type_name(rng)}")


def type_name(value) -> str:
    """``value``'s type with its module where that is not builtins: numpy's and torch's
    generators are both called ``Generator``, so the bare name read as the right one."""
    kind = type(value)
    module = kind.__module__
    if module == "builtins":
        return kind.__qualname__
    public = "numpy.random" if module.startswith("numpy.random") else module.split(".")[0]
    return f"{public}.{kind.__qualname__}"  # not torch._C or numpy.random._generator


def int_at_least(lo: int):
    """An argparse ``type``: an integer in ``[lo, MAX_COUNT]``; anything else is a one-line
    usage error (``error: ...``, exit status 2) before the command starts."""
    import argparse

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"expected an integer >= {lo}, got {value}")
        if value > MAX_COUNT:
            raise argparse.ArgumentTypeError(f"expected an integer <= 2^63 - 1 (int64), got "
                                             f"{value}")
        return value
    return parse


def check_broadcast(shape_a, shape_b, names=("a", "b")) -> None:
    """InputError unless two leading (batch) shapes broadcast against each other."""
    try:
        np.broadcast_shapes(tuple(shape_a), tuple(shape_b))
    except ValueError:
        raise InputError(f"{names[0]} has leading shape {tuple(shape_a)}, {names[1]} "
                         f"{tuple(shape_b)}: they must broadcast (one row per context, or one "
                         "for all)") from None


def as_real_array(x, name: str) -> np.ndarray:
    """``x`` as float64, refusing what would convert silently but wrongly: complex numbers
    (numpy would drop the imaginary part), strings and bytes (numpy would parse them).
    A torch tensor (any device) is copied to the host."""
    try:
        raw = np.asarray(host(x, name))  # an ndarray is returned as it is
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} is not a numeric array: {exc}") from None
    except RuntimeError as exc:  # a list holding a tensor that requires grad (torch's error)
        if "requires grad" not in str(exc):  # e.g. a CUDA error copying to the host: not input
            raise
        raise InputError(f"{name} is not a numeric array: {exc} (pass one tensor, or a list "
                         "of plain numbers)") from None
    if raw.dtype.kind == "O" and all(isinstance(v, numbers.Real) for v in raw.reshape(-1)):
        try:
            raw = raw.astype(np.float64)  # e.g. a list mixing Fractions and floats
        except OverflowError:  # an int or a Fraction beyond float64's range
            raise InputError(f"{name} holds a number too large for float64") from None
    if raw.dtype.kind not in "biuf":
        what = {"c": "complex numbers", "U": "strings", "S": "bytes", "O": "Python objects",
                "M": "dates", "m": "time spans", "V": "structured records"}.get(raw.dtype.kind,
                                                                              str(raw.dtype))
        raise InputError(f"{name} must hold real numbers, got {what} (dtype {raw.dtype})")
    return raw.astype(np.float64, copy=False)


def as_calibration(x, name: str = "calibration_probs", n_target: int | None = None):
    """Calibration next-token distributions as a (S, N_T) float64 numpy array with S >= 1,
    each row divided by its sum.

    Kernels are built once, on the host, from their calibration rows: a torch tensor (on any
    device) is validated, then copied to the host. Rows are validated to sum to 1 within
    ``PROB_ATOL`` and then renormalised exactly, so that every kernel built from the same rows
    (exact covariance-softmax, first-order, marginal) sees the same ``Omega`` and ``mu``, and
    ``Omega``'s rows sum to 0, which the first-order formula relies on. The result is a new
    array: later edits of the caller's rows do not reach a kernel. ``Fraction`` rows, which
    sum to 1 exactly, are returned as given. The shape is checked before the sums (a
    transposed matrix is a shape error, not rows that miss 1); input whose shape numpy cannot
    tell (ragged) is refused by the value checks."""
    shape = known_shape(x)
    if shape is not None and (len(shape) != 2 or shape[0] == 0):
        raise InputError(f"{name} must be (S, N_T) with S >= 1 calibration rows, got shape "
                         f"{shape}")
    if shape is not None and n_target is not None and shape[1] != n_target:
        raise InputError(f"{name} must be (S, {n_target}), got {shape}")
    cal = host_prob_array(x, name)
    if cal.dtype == object:
        return cal
    return cal / cal.sum(axis=1, keepdims=True)


def _is_torch(x) -> bool:
    mod = type(x).__module__
    return mod.startswith("torch") and hasattr(x, "dtype") and hasattr(x, "device")


def _check_tensor(x, name) -> None:
    """InputError for a torch tensor this package cannot read: complex (the tensor twin of
    :func:`as_real_array`'s check), of a one-byte floating dtype that is not a float8 number
    format (:func:`_unreadable`), or one :func:`check_dense_tensor` refuses."""
    check_dense_tensor(x, name)
    if x.is_complex():
        raise InputError(f"{name} must hold real numbers, got {x.dtype}")
    if x.is_floating_point() and x.element_size() == 1 and (why := _unreadable(x.dtype)):
        raise InputError(f"{name} has dtype {x.dtype}, {why}")


@functools.cache
def _unreadable(dtype) -> str | None:
    """Why tensors of the one-byte floating ``dtype`` cannot be read as real numbers, or None
    (float8_e4m3fn, float8_e5m2 and their fnuz forms: read as float32, :func:`_computable`)."""
    import torch

    try:
        torch.empty(1, dtype=dtype).to(torch.float32)
    except (NotImplementedError, RuntimeError):  # float4_e2m1fn_x2: two numbers a byte
        return "which torch cannot convert (a packed format): unpack it to float32 first"
    if torch.finfo(dtype).eps >= 1:  # float8_e8m0fnu: an exponent alone
        return "a scale format (powers of two only, no zero): it cannot hold probabilities"
    return None


def check_dense_tensor(x, name) -> None:
    """InputError for a sparse or otherwise not strided torch tensor (the samplers index and
    reduce dense rows) and for one on the meta device (a shape, no numbers to read)."""
    if x.layout != _strided():
        raise InputError(f"{name} must be a dense tensor, got layout {x.layout} "
                         "(call .to_dense() first)")
    if x.is_nested:  # strided in layout, but rows of several lengths: no shape to read
        raise InputError(f"{name} is a nested tensor: pass one tensor of equal-length rows")
    if x.is_quantized:  # strided too; torch's own conversions raised raw RuntimeErrors
        raise InputError(f"{name} is a quantized tensor ({x.dtype}): call .dequantize() "
                         "first")
    if x.device.type == "meta":
        raise InputError(f"{name} is on the meta device: it has a shape but no values")


def _strided():
    import torch

    return torch.strided


def as_real_tensor(x, name: str):
    """A torch tensor of real numbers, on its own device: complex refused, integer or bool
    entries as float64 (as :func:`as_real_array` makes them); float8 as float32
    (:func:`_computable`); other floating point kept as it is."""
    _check_tensor(x, name)
    return _computable(x) if x.is_floating_point() else x.double()


def _computable(x):
    """A floating-point tensor, or for a float8 one (``float8_e4m3fn``, ``float8_e5m2``, ...)
    its float32 copy: torch has almost no operations on float8 (no comparison, ``isfinite``,
    ``minimum`` or sum in its own dtype), so a transport computes such a ``q'`` in float32
    (float16 and bfloat16, which torch computes with, keep their own dtype; float8 laws are
    refused by :func:`as_prob_array`)."""
    if x.element_size() == 1:  # every one-byte floating dtype is a float8 format
        import torch

        return x.to(torch.float32)
    return x


def _check_torch_probs(x, name, allow_sub_stochastic, atol):
    import torch

    _check_tensor(x, name)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise InputError(f"{name} must have a non-empty last axis, got shape {tuple(x.shape)}")
    if not x.is_floating_point():  # integer and bool tensors: float64, as numpy reads them
        x = x.to(torch.float64)
    if x.element_size() == 1:  # float8: rows pass within eps, and alpha = 1.25 came out
        raise InputError(f"{name} has dtype {x.dtype}, whose rounding "
                         f"(eps {torch.finfo(x.dtype).eps:g}) puts a law's sum, and so acceptances, off by more than any tolerance "
                         "here: upcast and renormalise it first, e.g. x.float() / "
                         "x.float().sum(-1, keepdim=True)")
    # a half-precision softmax misses 1 by its rounding (bf16: <= eps / 2 in all; fp16 also
    # flushes entries below 6e-8 to 0, which over a long tail can miss by more: upcast)
    atol = rounding_atol(x, atol)
    if not torch.isfinite(x).all():
        raise InputError(f"{name} has a non-finite value")
    if (x < 0).any():
        if (x < -NEG_ATOL).any():
            raise InputError(f"{name} has a negative probability (min {x.min().item()!r}, "
                             f"tolerance {NEG_ATOL:g})")
        x = x.clamp_min(0)  # a copy: the caller's tensor is left as it was
    sums = x.sum(-1, dtype=torch.float64)
    bad = (sums > 1 + atol) if allow_sub_stochastic else ((sums - 1).abs() > atol)
    if bad.any():
        want = "at most 1" if allow_sub_stochastic else "1"
        raise InputError(f"{name} must sum to {want} along its last axis (tolerance {atol:g}); "
                         f"a row sums to {sums[bad].reshape(-1)[0].item():.8g}")
    return x


def check_tau(tau, name: str = "tau") -> float:
    """A softmax temperature as a float: a real number (a Fraction, a numpy scalar or 0-d
    array too), finite and > 0, or InputError naming ``name`` (a bool, a string or an array
    included)."""
    t = real_number(tau)
    if t is None or not (t > 0 and np.isfinite(t)):
        raise InputError(f"{name} must be a finite real number > 0, got {tau!r}")
    return t


def check_not_a_class(kernel, name: str) -> None:
    """InputError when ``kernel`` is a kernel class, not one made from it: ``IdentityKernel``
    for ``IdentityKernel()`` has an unbound ``transport``, which then failed with a raw
    TypeError (and passed as a kernel where only the attribute was looked for)."""
    if isinstance(kernel, type):
        raise InputError(f"{name} is the class {kernel.__name__}, not a kernel: make one "
                         f"({kernel.__name__}(...))")


def check_float_ids(dtype, n_target: int, name: str) -> None:
    """InputError when ids stored as floats of ``dtype`` (numpy's or torch's: check a tensor
    before :func:`host` makes it float64) cannot all be exact below ``n_target``: float16
    holds every whole number only up to 2048 (bfloat16 256, float32 2^24), so an id 3001
    written as float16 reads 3000, another token, and every acceptance read 0."""
    if getattr(dtype, "is_floating_point", False):  # a torch dtype
        import torch

        eps = torch.finfo(dtype).eps
    elif not hasattr(dtype, "is_floating_point") and np.dtype(dtype).kind == "f":
        eps = float(np.finfo(dtype).eps)
    else:
        return
    exact = int(round(2 / eps))  # 2^(mantissa bits + 1): every whole number up to it is exact
    if n_target - 1 > exact:
        shown = str(dtype).replace("torch.", "")
        raise InputError(f"{name} is stored as {shown}, which holds whole numbers exactly "
                         f"only up to {exact:,}, not every id of a {n_target:,}-token "
                         "vocabulary: store the ids as integers")


def host_ids(x, name: str = "ids"):
    """``(array, dtype)``: ids as a host numpy array, and the dtype they were given in, for
    :func:`check_float_ids` (:func:`host` makes a float tensor float64, so a bfloat16 or
    float16 tensor's own precision is noted first). An object array of Python ints is read
    as int64 (one beyond int64 is an InputError naming it)."""
    given = x.dtype if _is_torch(x) else None
    arr = np.asarray(host(x, name))
    if arr.dtype == object and arr.size and all(
            isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
            for v in arr.flat):  # Python ints in an object array (or a list with huge ones)
        try:
            arr = arr.astype(np.int64)
        except OverflowError:
            big = next(int(v) for v in arr.flat if not -2**63 <= int(v) < 2**63)
            raise InputError(f"{name} holds {big}, beyond the int64 ids") from None
    return arr, (arr.dtype if given is None else given)


def as_draft_to_target(x, n_target: int, name: str = "draft_to_target") -> np.ndarray:
    """Return the drafter->target id map as int64, or raise InputError."""
    try:
        arr, given = host_ids(x, name)
    except InputError:
        raise
    except (ValueError, TypeError):  # ragged
        raise InputError(f"{name} must be a non-empty 1-D integer array, got a ragged "
                         "sequence") from None
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise InputError(f"{name} must be a non-empty 1-D integer array, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise InputError(f"{name} must hold integers, got non-integer values")
    elif arr.dtype.kind not in "iu":
        raise InputError(f"{name} must hold integers, got dtype {arr.dtype}")
    # a whole-number float (1e5) as from_kept_ids and identity take it; at most 2^63 - 1,
    # since ids are int64 (a larger N_T let an id of 2^63 pass and wrap)
    n_target = as_count(n_target, "target vocabulary size", 1)
    check_float_ids(given, n_target, name)
    # the range is checked on the values as given, before the cast to int64 (which would
    # wrap a uint64 or a float beyond 2^63 into another id, and report the wrong value)
    bad = (arr >= n_target) if arr.dtype.kind == "u" else (arr < -1) | (arr >= n_target)
    if np.any(bad):
        j = int(np.argmax(bad))
        v = arr[j]
        shown = (repr(float(v)) if arr.dtype.kind == "f" and not -2**63 <= v < 2**63
                 else f"{int(v)}")  # whole numbers (checked above), all digits
        raise InputError(
            f"{name}[{j}] = {shown} is out of range: entries must be -1 or in [0, {n_target - 1}]"
        )
    arr = arr.astype(np.int64)
    valid = arr[arr >= 0]
    if np.unique(valid).size != valid.size:
        vals, counts = np.unique(valid, return_counts=True)
        raise InputError(f"{name} maps two drafter tokens to target id {int(vals[counts > 1][0])}")
    return arr


def check_row_stochastic(row_sums, name: str = "kernel", atol: float = KERNEL_ATOL) -> None:
    """Raise InputError unless every row sum equals 1 (exactly for Fractions; within ``atol``
    and above 0 for floats: a caller's ``atol >= 1`` would accept an all-zero row, which
    renormalising divides by 0)."""
    sums = np.asarray(host(row_sums))
    if sums.dtype == object:
        bad = np.array([s != 1 for s in sums.reshape(-1)])
    else:
        bad = ~np.isfinite(sums) | (np.abs(sums - 1) > atol)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise InputError(
            f"{name} is not row-stochastic: row {i} sums to {sums.reshape(-1)[i]} "
            f"(tolerance {atol:g})"
        )
    if sums.dtype != object and np.any(empty := ~(sums.reshape(-1) > 0)):
        i = int(np.argmax(empty))
        raise InputError(f"{name} is not row-stochastic: row {i} sums to {sums.reshape(-1)[i]}, "
                         "and a row must sum to more than 0 to be renormalised, whatever atol")


def check_nonnegative(values, name: str) -> None:
    arr = np.asarray(host(values))
    if arr.dtype == object:
        neg = [v for v in arr.reshape(-1) if v < 0]
        if neg:
            raise InputError(f"{name} has a negative entry {neg[0]}")
        return
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} has a non-finite entry")
    if np.any(arr < 0):
        raise InputError(f"{name} has a negative entry {arr[arr < 0].min():.3g}")
