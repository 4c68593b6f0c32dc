"""O(N) timing: proposal + acceptance for first-order RDK and dense exact RDK vs vocabulary size.

Synthetic inputs at each N (random softmax laws; a random calibration set of ``S`` rows gives
the factor): the timed operation is ``tli_proposal -> kernel.transport -> acceptance_rate`` for
a batch of contexts, the drafter pruned to half the vocabulary. The memory floor is the time to
read ``p`` and ``q`` once (``sum(min(p, q))`` over the same arrays). On CUDA every timing is
bracketed by ``torch.cuda.synchronize()``; the methods of one (N, batch) cell are warmed up and
timed round-robin (:func:`rdk_theory._timing.median_times`), the median of ``repeats`` runs each. The log-log slope of time vs N is fitted by least
squares over the N values measured (about 1 for first-order, 2 for dense exact).
"""
from __future__ import annotations

import numpy as np

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory._backend import softmax
from rdk_theory._timing import median_times
from rdk_theory.proposals import tli_proposal
from rdk_theory.validation import InputError
from rdk_theory.vocab import VocabMap

CPU_SIZES = (2048, 4096, 8192, 16384, 32768, 65536, 151_936)
GPU_SIZES = (4096, 8192, 16384, 32768, 65536, 131_072, 151_936, 262_144)
CPU_DENSE_MAX = 8192  # N x N float64 = 512 MiB
#: Largest N of a sweep: 4x Gemma 3's 262,144 ids; its float64 calibration rows, laws and
#: proposals take about 3 GiB (3e9 was refused only by the kernel's out-of-memory killer,
#: 20 GB in).
MAX_SIZE = 1 << 20
GPU_DENSE_MAX = 32768  # N x N float32 = 4 GiB


def _laws(rng, shape, sharp=3.0):
    return softmax(rng.standard_normal(shape) * sharp)


def slope(ns, ts) -> float | None:
    """Least-squares slope of log t against log N (None with fewer than 2 distinct N: no
    line can be fitted through one N)."""
    if len(set(ns)) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def sweep(*, device: str = "cpu", sizes=None, batches=(1, 64), calib_rows: int = 64,
          dense_max: int | None = None, repeats: int = 5, seed: int = 0, progress=None) -> dict:
    """Time first-order and dense exact RDK over ``sizes``; returns rows and fitted slopes.

    ``device="cpu"`` times numpy float64 (the reference path); ``"cuda"`` times torch float32
    tensors on the GPU (torch float64 is slow on most GPUs; the maths is the same).
    """
    rng = np.random.default_rng(seed)
    if sizes is not None and len(sizes) == 0:  # () ran the whole default sweep
        raise InputError("sizes names no vocabulary size: give None for the default sweep")
    sizes = sizes if sizes is not None else (GPU_SIZES if device == "cuda" else CPU_SIZES)
    dense_max = dense_max if dense_max is not None else (
        GPU_DENSE_MAX if device == "cuda" else CPU_DENSE_MAX)
    rows = []
    for n in sizes:
        vm = VocabMap.from_kept_ids(np.arange(0, n, 2), n)
        cal = _laws(rng, (calib_rows, n))
        fo = FirstOrderCovarianceKernel(cal, tau=0.01)
        dense = None
        if n <= dense_max:
            from rdk_theory.kernels import covariance_softmax_kernel

            dense = covariance_softmax_kernel(cal, tau=0.01)
        for b in batches:
            p = _laws(rng, (b, n))
            q = _laws(rng, (b, vm.n_draft))
            qf = np.zeros((b, n))
            qf[:, vm.draft_to_target] = q
            sync = None
            if device == "cuda":
                import torch

                sync = torch.cuda.synchronize
                to = lambda a: torch.as_tensor(a, dtype=torch.float32, device="cuda")  # noqa: E731
                p, q, qf = to(p), to(q), to(qf)  # kernels move to the tensors' device/dtype once
            kern = {"first_order": fo, "dense_exact": dense}
            row = {"n": int(n), "batch": int(b), "device": device}
            fns = {"floor": lambda: acceptance_rate(p, qf, check=False)}
            fns.update({name: (lambda k=k: acceptance_rate(
                p, k.transport(tli_proposal(q, vm, check=False)), check=False))
                for name, k in kern.items() if k is not None})
            t = median_times(fns, repeats, sync=sync)  # one cell, round-robin
            row["floor_s"] = t["floor"]
            for name in kern:
                row[f"{name}_s"] = t.get(name)
                if name in t:
                    row[f"{name}_ratio_to_floor"] = t[name] / t["floor"]
            rows.append(row)
            if progress is not None:
                progress.update(1)
        del dense
    fits = {}
    for b in batches:
        for name in ("first_order", "dense_exact", "floor"):
            pts = [(r["n"], r[f"{name}_s"]) for r in rows if r["batch"] == b and r.get(f"{name}_s")]
            if pts:
                fits[f"{name}@batch{b}"] = slope(*zip(*pts))
    return {"device": device, "rows": rows, "slopes": fits, "calib_rows": calib_rows,
            "repeats": repeats}
