"""Before/after, side by side in one run: the torch path of first-order RDK with the code
before commit 4e6e97a (``safe_divide`` selecting between the quotient and zeros, the clip
check ``(out < 0).any()``; both re-implemented below) against the code of that commit, and the
floor. N = 32K / 152K / 262K, batch 1 / 64 / 1024, 21 runs each.

The script as run on the H200 for ``passes.json`` and ``profile_before_after.txt`` (only its
output file name for the profile changed since). From the repository root, on a CUDA machine:

    OUT=DIR python gpu_validation/results/cuda/scripts/passes.py
"""
import json, os
import numpy as np, torch
from rdk_theory import _backend as B
from rdk_theory.acceptance import acceptance_rate
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.proposals import tli_proposal, vanilla_proposal
from rdk_theory.vocab import VocabMap
from rdk_theory._timing import median_times
from gpu_validation.timing import _laws

OUT = os.environ["OUT"]
def old_sd(num, den):
    pos = den > 0
    return torch.where(pos, num / torch.where(pos, den, torch.ones_like(den)), torch.zeros_like(num))
def old_transport(k, qp):
    out = k.transport_unclipped(qp)
    if bool((out < 0).any()):
        out.clamp_min_(0); out *= old_sd(B.total(qp, keepdims=True), B.total(out, keepdims=True))
    return out
rows, rng, lines = [], np.random.default_rng(0), []
for n in (32768, 151936, 262144):
    vm = VocabMap.from_kept_ids(np.arange(0, n, 2), n)
    fo = FirstOrderCovarianceKernel(_laws(rng, (64, n)), tau=0.01)
    for b in (1, 64, 1024):
        to = lambda a: torch.as_tensor(a, dtype=torch.float32, device="cuda")
        p = to(_laws(rng, (b, n))); q = to(_laws(rng, (b, vm.n_draft)))
        qf = vanilla_proposal(q, vm, check=False).clone()
        def before():
            r = vanilla_proposal(q, vm, check=False)
            return acceptance_rate(p, old_transport(fo, old_sd(r, B.total(r, keepdims=True))), check=False)
        after = lambda: acceptance_rate(p, fo.transport(tli_proposal(q, vm, check=False)), check=False)
        floor = lambda: acceptance_rate(p, qf, check=False)
        d = float((before() - after()).abs().max())
        t = median_times({"floor": floor, "before": before, "after": after}, 21, sync=torch.cuda.synchronize)
        row = {"n": n, "batch": b, **{k + "_s": v for k, v in t.items()},
               "before_ratio": t["before"] / t["floor"], "after_ratio": t["after"] / t["floor"],
               "after_over_before": t["after"] / t["before"], "max_abs_diff": d}
        rows.append(row); print(json.dumps(row), flush=True)
        if n == 151936 and b == 64:
            from torch.profiler import profile, ProfilerActivity
            for name, f in (("before", before), ("after", after)):
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    f(); torch.cuda.synchronize()
                kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                lines.append(f"{name}: {len(kern)} CUDA kernels, GPU time {sum(e.device_time for e in kern):.1f} us")
                lines.append(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=20))
json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "repeats": 21,
           "rows": rows}, open(f"{OUT}/passes.json", "w"), indent=1)
open(f"{OUT}/profile_before_after.txt", "w").write("\n".join(lines))
print("\n".join(l for l in lines if "kernels" in l))
