"""Triton engine for first-order RDK on CUDA float32 tensors (optional: needs triton, which the
CUDA builds of torch ship with).

The torch array path of :class:`rdk_theory.first_order.FirstOrderCovarianceKernel` reads and
writes each (batch, N) row about ten times (TLI's division, two thin products, the diagonal
term, the clip check, ``min`` and ``sum``: gpu_validation/README.md, "Timing on the GPU"). Here a
call of ``transport_with_acceptance(r, p, normalise=True)`` is:

1. ``w = r L^T`` with ``L = [C / Z ; 0 ; 1 / Z ; 1]`` ((K + 2, N) float32, ``K`` the factor's
   rows rounded up to a power of two of at least 16, the padding rows zero): one cuBLAS product
   that reads ``r`` once and gives ``C v``, ``sum v`` and ``sum r`` of every row
   (``v = r / Z``);
2. one Triton kernel over the vocabulary in blocks of ``BLOCK_N`` columns. A program holds its
   block of ``R = [C / tau ; 0]`` ((K, BLOCK_N)) and of ``coef`` in registers and walks its rows
   ``BLOCK_B`` at a time: ``x = (w[:, :K] R + sum v + r coef) / sum r`` (``tl.dot`` at
   :data:`PRECISION`: float32 accuracy, never plain TF32), writes ``x`` and the block's
   ``min x``, ``sum max(x, 0)`` and ``sum min(p, x)`` per row;
3. those partials reduced per row (small torch reductions), and a second Triton kernel over
   (row, block of 1024 columns) whose programs return at once unless their row has a negative
   entry; such a row is clipped at 0, rescaled to ``sum q'`` and its acceptance summed again,
   as the torch path does. No host sync: the torch path's eager clip needs one, to find out
   whether any entry is negative; here the second kernel always runs and costs a launch where
   no row is clipped. So a CUDA graph captures the same kernels as an eager call (after one
   eager call has compiled them and built the arrays).

So ``r`` is read twice, ``p`` once and ``x`` written once: four passes where the floor
``sum min(p, q)`` makes two. Same kernel and same numbers as the torch path to float32
round-off (the products accumulate in another order). ``normalise=False`` skips the division.

In the decode call (:func:`rdk_theory.rdk_proposal_with_acceptance`, :func:`usable_draft`)
TLI's scatter is fused too: the product and the pass read the drafter's ``q`` through the map,
and ``r`` is never written.

Used by ``engine="auto"`` for float32 CUDA tensors of at least :data:`MIN_ELEMENTS` elements
(:data:`MIN_ELEMENTS_DECODE` in the decode call; smaller calls are launch-bound, and the torch
path launches less) and kernels of at most :data:`MAX_ROWS` factor rows, when triton imports;
``engine="numpy"`` keeps the torch path.
"""
from __future__ import annotations

import functools

from . import _backend as B

#: Largest factor (rows of ``C``) the kernel takes: its ``(K, BLOCK_N)`` block of ``R`` lives in
#: registers, and ``BLOCK_N`` shrinks as ``K`` grows (:func:`block_n`).
MAX_ROWS = 512
#: Rows of the batch per step of a program (``tl.dot`` needs at least 16).
BLOCK_B = 32
#: Floats of ``R`` a program holds (``K * BLOCK_N``, :func:`block_n`).
BLOCK_FLOATS = 8192
#: Warps per program.
NUM_WARPS = 4
#: ``tl.dot``'s precision: "ieee" (float32 FMAs) or "tf32x3" (tensor cores, three TF32
#: products per float32 product: float32 accuracy within a few ulps).
PRECISION = "tf32x3"
#: Columns per program of the clip (:func:`first_order`); a grid axis holds at most 65,535
#: blocks, so N up to 67 million.
CLIP_BLOCK = 1024
#: Calls on fewer elements (rows x N) take the torch path: there launches, not bytes, set the
#: time, and this engine's Python-side launches (two Triton kernels and a dozen small torch
#: ops) cost more than the torch path's (gpu_validation/README.md, "The Triton engine": at
#: batch 64 it wins from N = 262K, 16.8M elements, and loses at N = 152K, 9.7M). The rule
#: depends on the shape alone, so a CUDA graph captures the path its eager warm-up took.
MIN_ELEMENTS = 1 << 24
#: The same for the decode call from the drafter's ``q`` (:func:`usable_draft`, TLI's scatter
#: fused): measured side by side on an H200 (gpu_validation/README.md, "The Triton engine"),
#: it beat the torch path in every cell of at least 2^22 elements (9 of them, batch 16-64, and
#: the batch-1024 cells of the main bench) and lost in 5 of the 15 smaller ones (batch 8-64,
#: N = 49K-262K).
MIN_ELEMENTS_DECODE = 1 << 22
#: ``L`` is kept multiplied by this power of two, and the pass's ``r * coef`` term too (both
#: exact): ``w``, ``sum v`` and ``sum r`` then stay normal float32 numbers for a row whose mass
#: is tiny (float32's normal range ends at 1.2e-38). The pass divides by ``sum r``, scaled
#: alike (or, with ``normalise=False``, by the scale). A row with 1e-41 of the drafter's mass on
#: the target's tokens had an acceptance of 0.148 instead of 0.444 (Triton's interpreter).
#: The cost is range at the other end: a kernel whose scaled products could pass float32's
#: largest number (:func:`in_range`: tau below about 1e-22 for peaked calibration laws) takes
#: the torch path.
SCALE = 2.0 ** 32
#: :func:`in_range`'s bound on the pass's largest term, ``SCALE * K * max|L| * max|C / tau|``
#: (with ``sum r`` up to 1; float32's largest number is 3.4e38: a margin of 3e8 for larger
#: ``sum r`` with ``normalise=False``).
RANGE_BOUND = 1e30
#: Programs per block of the vocabulary along the batch: ``R`` is read from memory once per
#: group of rows, so fewer groups read the factor less often; more groups keep more programs
#: in flight when the vocabulary has few blocks.
MIN_PROGRAMS = 1024


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether triton imports (the first call imports it; the answer is kept)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def padded_rows(s: int) -> int:
    """``K``: the factor's ``s`` rows rounded up to a power of two, at least 16 (``tl.dot``)."""
    return max(16, 1 << (int(s) - 1).bit_length())


def block_n(k: int) -> int:
    """Vocabulary columns per program: ``K * BLOCK_N`` = :data:`BLOCK_FLOATS` floats of ``R``
    in registers (128 columns up to K = 64), at most 128, at least 16 (``tl.dot``)."""
    return max(16, min(128, BLOCK_FLOATS // k))


def usable(kernel, q_prime, target_probs, min_elements=None) -> bool:
    """Whether the call goes to this engine: an ``"auto"`` kernel of at most
    :data:`MAX_ROWS` factor rows, a float32 CUDA tensor of at least :data:`MIN_ELEMENTS`
    elements (and a target of the same shape, dtype and device when one is given), triton
    importable, and a kernel whose scaled passes stay within float32 (:func:`in_range`).
    Anything else takes the torch path, and so does a tensor that requires grad while autograd
    records: the Triton kernels have no backward pass (their output carried no gradient)."""
    if kernel.engine != "auto" or not B.is_torch(q_prime) or not q_prime.is_cuda:
        return False
    import torch

    least = MIN_ELEMENTS if min_elements is None else min_elements
    if (q_prime.dtype != torch.float32 or q_prime.numel() < least
            or kernel.factor.shape[0] > MAX_ROWS):  # q_prime has N on its last axis (checked)
        return False
    if torch.is_grad_enabled() and any(
            B.is_torch(t) and t.requires_grad for t in (q_prime, target_probs)):
        return False
    if not in_range(kernel):
        return False
    if target_probs is not None and not (
            B.is_torch(target_probs) and target_probs.shape == q_prime.shape
            and target_probs.dtype == q_prime.dtype and target_probs.device == q_prime.device):
        return False
    return available()


def in_range(kernel) -> bool:
    """Whether the pass's terms, scaled by :data:`SCALE`, stay within float32 for rows of mass
    up to 1: ``SCALE * K * max|L| * max|[C / tau ; 1]| < RANGE_BOUND``. Computed once per kernel
    (its tau and factor do not change) from the float64 matrices it keeps."""
    got = kernel.__dict__.get("_triton_in_range")
    if got is None:
        import numpy as np

        left, right = kernel._float64_products()
        bound = (SCALE * padded_rows(kernel.factor.shape[0]) * float(np.abs(left).max())
                 * float(np.abs(right).max()))
        got = kernel.__dict__["_triton_in_range"] = bool(bound < RANGE_BOUND)
    return got


def arrays(kernel, like, vocab_map=None):
    """``(left, right, coef)`` float32 on ``like``'s device: ``[C / Z ; 0 ; 1 / Z ; 1]``
    ((K + 2, N); with ``vocab_map``, its columns in the drafter's order: :func:`_left_for`),
    ``[C / tau ; 0]`` ((K, N)) and ``coef`` ((N,)), from the kernel's float64 matrices (the
    torch path's float32 copies are roundings of the same numbers)."""
    import numpy as np

    s, n = kernel.factor.shape
    pad = padded_rows(s) - s

    def right():
        return np.vstack([kernel._float64_products()[1][:s], np.zeros((pad, n))])  # [C/tau ; 0]

    get = kernel._torch.get
    left = (get("triton_left", lambda: _left_host(kernel), like) if vocab_map is None
            else _left_for(kernel, vocab_map, like))
    return left, get("triton_right", right, like, *kernel._right_names()), \
        get("k", kernel._coef, like)


def _left_host(kernel):
    """``L = [C / Z ; 0 ; 1 / Z ; 1]`` times :data:`SCALE`, (K + 2, N) float64 (built for a
    device copy only)."""
    import numpy as np

    s, n = kernel.factor.shape
    products = kernel._float64_products()[0]  # [C/Z ; 1/Z ; 1]
    return SCALE * np.vstack([products[:s], np.zeros((padded_rows(s) - s, n)), products[s:]])


@functools.lru_cache(maxsize=None)
def _kernel():
    """The two Triton kernels (the pass and the clip), compiled on first use (triton is
    imported then, not with the package)."""
    import triton
    import triton.language as tl

    @triton.jit
    def first_order_pass(r_ptr, p_ptr, w_ptr, right_ptr, coef_ptr, out_ptr, part_ptr,
                         source_ptr, n_rows, n, n_source, rows_per_group,
                         K: tl.constexpr, NORMALISE: tl.constexpr, WITH_P: tl.constexpr,
                         GATHER: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr,
                         PRECISION: tl.constexpr, SCALE: tl.constexpr):
        block = tl.program_id(0)
        group = tl.program_id(1)
        cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
        in_n = cols < n
        ks = tl.arange(0, K)
        right = tl.load(right_ptr + ks[:, None].to(tl.int64) * n + cols[None, :],
                        mask=in_n[None, :], other=0.0)
        coef = tl.load(coef_ptr + cols, mask=in_n, other=0.0) * SCALE  # as L (exact)
        if GATHER:  # r_ptr is the drafter's q: column j of r is q's column source[j], or 0
            source = tl.load(source_ptr + cols, mask=in_n, other=-1)
            mapped = in_n & (source >= 0)
        w_stride = K + 2
        first = group * rows_per_group
        for step in range(0, rows_per_group // BLOCK_B):  # whole BLOCK_B steps
            rows = first + step * BLOCK_B + tl.arange(0, BLOCK_B)
            in_rows = rows < n_rows
            mask = in_rows[:, None] & in_n[None, :]
            w = tl.load(w_ptr + rows[:, None] * w_stride + ks[None, :], mask=in_rows[:, None],
                        other=0.0)
            sum_v = tl.load(w_ptr + rows * w_stride + K, mask=in_rows, other=0.0)
            offs = rows[:, None].to(tl.int64) * n + cols[None, :]
            if GATHER:
                r = tl.load(r_ptr + rows[:, None].to(tl.int64) * n_source + source[None, :],
                            mask=in_rows[:, None] & mapped[None, :], other=0.0)
            else:
                r = tl.load(r_ptr + offs, mask=mask, other=0.0)
            x = tl.dot(w, right, input_precision=PRECISION) + sum_v[:, None] + r * coef[None, :]
            if NORMALISE:
                total = tl.load(w_ptr + rows * w_stride + K + 1, mask=in_rows, other=0.0)
                x = x / tl.where(total > 0, total, float("inf"))[:, None]
            else:
                x = x * (1.0 / SCALE)
            x = tl.where(mask, x, 0.0)  # columns past N hold sum v: kept out of the sums
            tl.store(out_ptr + offs, x, mask=mask)
            part = block * n_rows + rows
            n_part = tl.num_programs(0) * n_rows
            tl.store(part_ptr + part, tl.min(tl.where(mask, x, float("inf")), axis=1),
                     mask=in_rows)
            tl.store(part_ptr + 2 * n_part + part, tl.sum(tl.maximum(x, 0.0), axis=1),
                     mask=in_rows)
            if WITH_P:
                p = tl.load(p_ptr + offs, mask=mask, other=0.0)
                tl.store(part_ptr + n_part + part, tl.sum(tl.minimum(p, x), axis=1),
                         mask=in_rows)

    @triton.jit
    def clip_pass(out_ptr, p_ptr, negative_ptr, ratio_ptr, part_ptr, n_rows, n,
                  WITH_P: tl.constexpr, BLOCK_N: tl.constexpr):
        row = tl.program_id(0)
        block = tl.program_id(1)
        if tl.load(negative_ptr + row) != 0:  # a row without a negative entry: nothing to do
            cols = block * BLOCK_N + tl.arange(0, BLOCK_N)
            in_n = cols < n
            offs = row.to(tl.int64) * n + cols
            x = tl.load(out_ptr + offs, mask=in_n, other=0.0)
            x = tl.maximum(x, 0.0) * tl.load(ratio_ptr + row)
            tl.store(out_ptr + offs, x, mask=in_n)
            if WITH_P:
                p = tl.load(p_ptr + offs, mask=in_n, other=0.0)
                tl.store(part_ptr + block * n_rows + row, tl.sum(tl.minimum(p, x), axis=0))

    return first_order_pass, clip_pass


def usable_draft(kernel, draft_probs, vocab_map, target_probs) -> bool:
    """Whether ``rdk_proposal_with_acceptance`` runs on this engine from the drafter's ``q``
    itself (:func:`first_order` with ``vocab_map``): as :func:`usable` for the proposal's shape
    (``q``'s leading axes, the target's ``N``) from :data:`MIN_ELEMENTS_DECODE` elements, with a
    target of exactly that shape, a map that is not the identity (whose ``q`` is already ``r``:
    its call goes through ``transport_with_acceptance``, and :data:`MIN_ELEMENTS`), and a
    :class:`~rdk_theory.FirstOrderCovarianceKernel` whose ``transport_with_acceptance`` is not
    overridden."""
    from .first_order import FirstOrderCovarianceKernel as Kernel

    # this engine computes FirstOrderCovarianceKernel's own numbers: a subclass that overrides
    # transport_with_acceptance (or another kernel with fuses_normalisation) gets its method
    if (not isinstance(kernel, Kernel) or type(kernel).transport_with_acceptance
            is not Kernel.transport_with_acceptance or vocab_map.scatter_plan[2]
            or not (B.is_torch(draft_probs) and B.is_torch(target_probs))):
        return False
    import torch

    if draft_probs.requires_grad and torch.is_grad_enabled():  # as in usable
        return False
    shape = (*draft_probs.shape[:-1], vocab_map.n_target)
    if tuple(target_probs.shape) != shape or draft_probs.dtype != target_probs.dtype:
        return False  # the shape test below is on the target, of the proposal's shape
    return (usable(kernel, target_probs, None, MIN_ELEMENTS_DECODE)
            and draft_probs.device == target_probs.device)


def first_order(kernel, q_prime, target_probs, *, normalise: bool, vocab_map=None):
    """``(q'', alpha or None)`` of ``kernel`` for a float32 CUDA tensor ``q_prime`` (any
    leading axes; see :func:`usable`), the numbers of the torch path to float32 round-off.

    With ``vocab_map`` (see :func:`usable_draft`), ``q_prime`` is the drafter's ``q`` and the
    transported vector is that of ``r``, :func:`rdk_theory.vanilla_proposal` of it, which is
    never written: the product reads ``q`` against the columns of ``L`` that its tokens map
    to (a ``(K + 2, N_D)`` copy kept per map), and the pass reads ``r``'s entries from ``q``
    through the map (``VocabMap.on_device("source")``). That saves TLI's scatter, which writes
    a whole ``(batch, N)`` array, and reads ``q`` (``N_D`` columns) twice instead of ``r``
    (``N``)."""
    import torch

    shape, n = q_prime.shape, q_prime.shape[-1]
    r = q_prime.reshape(-1, n).contiguous()
    source, n_source = r, n  # an unused pointer when there is no map
    if vocab_map is not None:
        n_source, n = n, vocab_map.n_target
        shape = (*shape[:-1], n)
    p = None if target_probs is None else target_probs.reshape(-1, n).contiguous()
    rows = r.shape[0]
    out = torch.empty((rows, n), dtype=r.dtype, device=r.device)
    alpha = None if p is None else torch.zeros(rows, dtype=r.dtype, device=r.device)
    if rows and n:
        left, right, coef = arrays(kernel, r, vocab_map)
        k = right.shape[0]
        if vocab_map is not None:
            source = vocab_map.on_device("source", r.device)
        w = r @ left.T  # (rows, K + 2): C v, sum v, sum r
        bn = block_n(k)
        blocks = -(-n // bn)
        # row groups of whole BLOCK_B steps, enough of them for MIN_PROGRAMS programs
        steps = -(-rows // BLOCK_B)
        groups = min(steps, max(1, -(-MIN_PROGRAMS // blocks)))
        per_group = -(-steps // groups) * BLOCK_B
        groups = -(-rows // per_group)
        part = torch.empty((3, blocks, rows), dtype=r.dtype, device=r.device)
        main, clip = _kernel()
        main[(blocks, groups)](
            r, r if p is None else p, w, right, coef, out, part, source, rows, n, n_source,
            per_group, K=k, NORMALISE=bool(normalise), WITH_P=p is not None,
            GATHER=vocab_map is not None, BLOCK_B=BLOCK_B, BLOCK_N=bn, PRECISION=PRECISION,
            SCALE=SCALE, num_warps=NUM_WARPS)
        # the clip, with no host sync: rows with a negative entry are clipped at 0 and
        # rescaled to sum q' (1, or 0 for a row of zeros, when normalising; else sum r) and
        # their acceptance summed again; the other rows' programs return at once
        negative = part[0].amin(0) < 0
        total = w[:, k + 1]  # sum r, times SCALE
        target = (total > 0).to(r.dtype) if normalise else total * (1.0 / SCALE)
        ratio = B.safe_divide(target, part[2].sum(0))
        clip_blocks = -(-n // CLIP_BLOCK)
        redo = None if p is None else torch.zeros((clip_blocks, rows), dtype=r.dtype,
                                                  device=r.device)
        clip[(rows, clip_blocks)](
            out, r if p is None else p, negative.to(torch.int32), ratio,
            out if redo is None else redo, rows, n, WITH_P=p is not None, BLOCK_N=CLIP_BLOCK)
        if p is not None:
            alpha = torch.where(negative, redo.sum(0), part[1].sum(0))
    out = out.reshape(shape)
    return out, (None if alpha is None else alpha.reshape(shape[:-1]))


def _left_for(kernel, vocab_map, like):
    """``L``'s columns in the drafter's order: column ``j`` is ``L``'s column of the target id
    that drafter token ``j`` maps to, zero for a token the target lacks (``r`` drops it).

    Kept in the kernel's device cache under a key object of the map's own (a map is hashed by
    its ids, which would cost a read of them per call), and dropped from it when the map is
    garbage-collected: a decode loop that builds a new map per call would otherwise keep a
    ``(K + 2, N_D)`` array on the device per map for the kernel's lifetime."""
    import weakref

    import numpy as np

    token = vocab_map._device_indices.setdefault("triton token", object())
    key = ("triton_left_draft", token)
    cache = kernel._torch

    def gathered():  # (K + 2, N_D) float64, built once per device and dtype
        weakref.finalize(vocab_map, _drop, weakref.ref(cache), key)
        keep, dst, _ = vocab_map.scatter_plan
        left = _left_host(kernel)
        cols = np.zeros((left.shape[0], vocab_map.n_draft))
        cols[:, keep] = left[:, dst]
        return cols

    return cache.get(key, gathered, like)


def _drop(cache_ref, key) -> None:
    """Remove ``key``'s copies from a kernel's device cache, if the kernel is still alive."""
    cache = cache_ref()
    if cache is not None:
        cache.forget(key)
