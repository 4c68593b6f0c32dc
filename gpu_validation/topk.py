"""Top-k compression of next-token laws with the exact tail mass.

A row ``p`` (N,) is stored as the ids and values of its ``k`` largest entries plus
``tail = 1 - sum(top-k values)``, computed in float64 from the full row, so that the stored
masses add up to the row's total. Decompression puts the tail uniformly on the ``N - k`` other
ids (a proper law again). Any quantity that is 1-Lipschitz in total variation, such as
``alpha(p, r) = 1 - TV(p, r)``, moves by at most ``tail`` when ``p`` is replaced by its
decompression: :func:`alpha_error_bound` states it for a pair.
"""
from __future__ import annotations

import numpy as np

from rdk_theory.validation import InputError


def compress(probs, k: int, *, block: int = 256):
    """``(ids, values, tail)``: top-``k`` ids (C, k) int32, values (C, k) float32, tail (C,) float64.

    The values are the input's rounded toward zero to float32 (exact for float32 input), and
    ``tail`` is ``row_sum - sum(values)`` in float64 from the values that are stored, so
    ``values.sum(-1) + tail`` equals the row sum of the input to float64 round-off, and the
    float32 storage error of float64 input is part of ``tail`` (which
    :func:`alpha_error_bound` then covers). Rounded to nearest, the top values of float64
    input could sum to more than the row: the tail was clipped at 0 and the mass was off by
    up to ``k`` float32 half-ulps.
    """
    p = np.asarray(probs)
    if p.ndim != 2:
        raise InputError(f"probs must be (C, N), got shape {p.shape}")
    n = p.shape[1]
    if not 1 <= k <= n:
        raise InputError(f"k must be in [1, {n}], got {k}")
    c = p.shape[0]
    ids, vals = np.empty((c, k), np.int32), np.empty((c, k), np.float32)
    tail = np.empty(c, np.float64)
    for s in range(0, c, block):  # blocks of rows: argpartition allocates (rows, N) int64
        blk = p[s:s + block]
        top = np.argpartition(-blk, k - 1, axis=1)[:, :k]
        v = np.take_along_axis(blk, top, axis=1)
        order = np.argsort(-v, axis=1, kind="stable")
        ids[s:s + block] = np.take_along_axis(top, order, axis=1)
        vals[s:s + block] = _toward_zero_float32(np.take_along_axis(v, order, axis=1))
        row_sum = blk.astype(np.float64).sum(axis=1)
        tail[s:s + block] = np.clip(row_sum - vals[s:s + block].astype(np.float64).sum(axis=1),
                                    0.0, None)
    return ids, vals, tail


def _toward_zero_float32(values) -> np.ndarray:
    """``values`` as float32, each rounded toward zero (never above the input: a tail of mass
    computed from them is never negative beyond float64 round-off)."""
    out = np.asarray(values).astype(np.float32)
    above = out.astype(np.float64) > values
    out[above] = np.nextafter(out[above], np.float32(0))
    return out


def decompress(ids, values, tail, n: int) -> np.ndarray:
    """Dense (C, n) float64: the stored values, and ``tail`` spread evenly over the other ids."""
    ids = np.asarray(ids)
    c, k = ids.shape
    out = np.empty((c, n), dtype=np.float64)
    out[:] = (np.asarray(tail, dtype=np.float64) / max(n - k, 1))[:, None] if n > k else 0.0
    np.put_along_axis(out, ids.astype(np.int64), np.asarray(values, dtype=np.float64), axis=1)
    return out


def alpha_error_bound(tail_p, tail_q):
    """Bound on ``|alpha(p, r) - alpha(p~, r~)|`` for the decompressed ``p~``, ``r~``.

    ``alpha = (sum p + sum r - ||p - r||_1) / 2``. Let ``m`` be p's mass off the top-k ids.
    The stored values are at most p's (rounded toward zero), so on the top-k ids
    ``sum |p - p~| = tail_p - m``; off them ``p~`` is the uniform spread of ``tail_p`` and
    ``sum |p - p~| <= m + tail_p``. With ``k < N`` the total is kept and
    ``||p - p~||_1 <= 2 tail_p``; with ``k = N`` there are no other ids, the tail (float32
    storage error alone) is dropped, and the total and ``||p - p~||_1`` each move by
    ``tail_p``. Either way ``|Delta alpha| <= tail_p + tail_q``.
    """
    return np.asarray(tail_p, dtype=np.float64) + np.asarray(tail_q, dtype=np.float64)


def save(path, arrays: dict, *, topk: int | None = None) -> None:
    """Write ``arrays`` to ``path`` (.npz); probability arrays named ``p``/``q`` are float32,
    or top-``k`` compressed (``p_ids``, ``p_values``, ``p_tail``, ``p_n``) when ``topk`` is set."""
    out = {}
    for key, val in arrays.items():
        if key in ("p", "q") and val is not None:
            val = np.asarray(val, dtype=np.float32)
            if topk:
                ids, vals, tail = compress(val, min(topk, val.shape[1]))
                out.update({f"{key}_ids": ids, f"{key}_values": vals, f"{key}_tail": tail,
                            f"{key}_n": np.int64(val.shape[1])})
                continue
        if val is not None:
            out[key] = val
    write_npz(path, out)


def write_npz(path, arrays: dict) -> None:
    """``arrays`` compressed into ``path`` through a temporary file and a rename: never
    written through a symbolic link there, never left half-written."""
    from rdk_theory._outdir import write_replacing

    def write(tmp):
        with open(tmp, "wb") as f:  # a file object: numpy adds no .npz to the temporary name
            np.savez_compressed(f, **arrays)

    write_replacing(str(path), write)


def load(path) -> dict:
    """Inverse of :func:`save`; compressed laws come back dense (float64)."""
    with np.load(path) as z:
        data = {k: z[k] for k in z.files}
    for key in ("p", "q"):
        if f"{key}_ids" in data:
            data[key] = decompress(data.pop(f"{key}_ids"), data.pop(f"{key}_values"),
                                   data[f"{key}_tail"], int(data.pop(f"{key}_n")))
    return data
