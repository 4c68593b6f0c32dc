"""CUDA timings of first-order RDK against the floor, side by side in one run: eager, with a
clip that makes no host sync (per-row select), and both replayed as CUDA graphs; plus the CUDA
kernel count of one call at N = 152K, batch 64.

The script as run on the H200 for ``launch.json`` and ``launch_profile.txt`` (only its output
file names changed since). From the repository root, on a CUDA machine:

    OUT=DIR python gpu_validation/results/cuda/scripts/launch.py
"""
import json, os, sys, time
import numpy as np, torch
from rdk_theory import _backend as B
from rdk_theory.acceptance import acceptance_rate
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.proposals import tli_proposal
from rdk_theory.vocab import VocabMap
from rdk_theory._timing import median_times
from gpu_validation.timing import _laws

OUT = os.environ["OUT"]

def transport_nosync(k, qp):
    out = k.transport_unclipped(qp)
    neg = (out < 0).any(-1, keepdim=True)
    out.clamp_min_(0)
    ratio = B.safe_divide(B.total(qp, keepdims=True), B.total(out, keepdims=True))
    out.mul_(torch.where(neg, ratio, torch.ones_like(ratio)))
    return out

rows = []
rng = np.random.default_rng(0)
prof_lines = []
for n in (32768, 151936, 262144):
    vm = VocabMap.from_kept_ids(np.arange(0, n, 2), n)
    fo = FirstOrderCovarianceKernel(_laws(rng, (64, n)), tau=0.01)
    for b in (1, 64, 1024):
        to = lambda a: torch.as_tensor(a, dtype=torch.float32, device="cuda")
        p = to(_laws(rng, (b, n))); q = to(_laws(rng, (b, vm.n_draft)))
        qf = torch.zeros((b, n), device="cuda"); qf[:, torch.as_tensor(vm.draft_to_target, device="cuda")] = q
        cur = lambda: acceptance_rate(p, fo.transport(tli_proposal(q, vm, check=False)), check=False)
        nos = lambda: acceptance_rate(p, transport_nosync(fo, tli_proposal(q, vm, check=False)), check=False)
        floor = lambda: acceptance_rate(p, qf, check=False)
        a0, a1 = cur(), nos()
        diff = float((a0 - a1).abs().max())
        fns = {"floor": floor, "first_order": cur, "first_order_nosync": nos}
        try:
            s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3): nos()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                gout = nos()
            g.replay(); torch.cuda.synchronize()
            diff_g = float((gout - a1).abs().max())
            fns["first_order_graph"] = g.replay
            gf = torch.cuda.CUDAGraph()
            with torch.cuda.graph(gf):
                fout = floor()
            fns["floor_graph"] = gf.replay
        except Exception as e:
            diff_g = repr(e)
        t = median_times(fns, 21, sync=torch.cuda.synchronize)
        row = {"n": n, "batch": b, **{k + "_s": v for k, v in t.items()},
               **{k + "_ratio": v / t["floor"] for k, v in t.items()},
               "max_abs_diff_nosync": diff, "max_abs_diff_graph": diff_g}
        if "floor_graph" in t:
            row["graph_ratio_graph_floor"] = t["first_order_graph"] / t["floor_graph"]
        rows.append(row); print(json.dumps(row), flush=True)
        if n == 151936 and b == 64:
            from torch.profiler import profile, ProfilerActivity
            for name, f in (("floor", floor), ("first_order", cur), ("first_order_nosync", nos)):
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    f(); torch.cuda.synchronize()
                ev = prof.events()
                kern = [e for e in ev if e.device_type == torch.autograd.DeviceType.CUDA]
                syncs = [e.name for e in ev if "Synchronize" in e.name or "Memcpy" in e.name]
                prof_lines.append(f"{name}: {len(kern)} CUDA kernels, gpu us {sum(e.device_time for e in kern):.1f}, sync/memcpy {syncs}")
                prof_lines.append(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows},
          open(f"{OUT}/launch.json", "w"), indent=1)
open(f"{OUT}/launch_profile.txt", "w").write("\n".join(prof_lines))
print("\n".join(l for l in prof_lines if "kernels" in l))
