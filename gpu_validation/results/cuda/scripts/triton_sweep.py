"""Which settings of rdk_theory._triton run fastest on this GPU: the kernel call
(transport_with_acceptance(r, p, normalise=True)) for a grid of BLOCK_B, BLOCK_FLOATS, NUM_WARPS
and PRECISION, beside the floor and the engine's cuBLAS product alone, side by side per cell.
From the repository root on a CUDA machine: OUT=DIR python gpu_validation/results/cuda/scripts/triton_sweep.py
"""
import itertools, json, os
import numpy as np, torch
import rdk_theory as rt
from rdk_theory import _triton
from rdk_theory._timing import median_times

rng = np.random.default_rng(0)
laws = lambda shape: (lambda x: x / x.sum(-1, keepdims=True))(np.exp(rng.standard_normal(shape) * 3))
dev = lambda a: torch.as_tensor(a, dtype=torch.float32, device="cuda")
rows = []
for n, b in ((262144, 1024), (262144, 64), (32768, 1024), (262144, 1)):
    cal = laws((64, n))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.01)
    ref = rt.FirstOrderCovarianceKernel(cal, 0.01, engine="numpy")
    p, r = dev(laws((b, n))), dev(laws((b, n)))
    want = ref.transport_with_acceptance(r, p, normalise=True)  # torch path
    left = _triton.arrays(fo, r)[0]
    fns = {"floor": lambda: rt.acceptance_rate(p, r, check=False), "product": lambda: r @ left.T}
    configs = list(itertools.product((16, 32, 64), (4096, 8192), (4, 8), ("ieee", "tf32x3")))
    errs = {}
    for bb, bf, nw, pr in configs:
        name = f"b{bb}_f{bf}_w{nw}_{pr}"
        def call(bb=bb, bf=bf, nw=nw, pr=pr):
            _triton.BLOCK_B, _triton.BLOCK_FLOATS, _triton.NUM_WARPS, _triton.PRECISION = bb, bf, nw, pr
            return fo.transport_with_acceptance(r, p, normalise=True)
        try:
            got = call()
            errs[name] = max(float((got[0] - want[0]).abs().max()), float((got[1] - want[1]).abs().max()))
            fns[name] = call
        except Exception as e:
            errs[name] = repr(e)[:200]
    t = median_times(fns, 9, sync=torch.cuda.synchronize)
    row = {"n": n, "batch": b, "floor_ms": 1e3 * t["floor"], "product_ratio": t["product"] / t["floor"],
           "ratios": {k: t[k] / t["floor"] for k in t if k not in ("floor", "product")}, "max_diff": errs}
    best = sorted(row["ratios"].items(), key=lambda kv: kv[1])[:6]
    print(n, b, f"floor {row['floor_ms']:.3f} ms product {row['product_ratio']:.2f}x best", best, flush=True)
    print("  errors", {k: v for k, v in errs.items() if isinstance(v, str) or v > 1e-5}, flush=True)
    print("  all", {k: round(v, 2) for k, v in row["ratios"].items()}, flush=True)
    rows.append(row)
    torch.cuda.empty_cache()
json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, open(f"{os.environ['OUT']}/triton_sweep.json", "w"), indent=1)
