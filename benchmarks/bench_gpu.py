"""Benchmark on a CUDA device: first-order RDK's Triton engine and torch path against the floor.

Needs a CUDA device, torch and triton (the GPU machine's image has them; CI has no GPU and
never runs this). For each N in ``--sizes`` and batch in ``--batches``, on float32 tensors
(S = ``--s`` calibration rows, the drafter pruned to every other target id), timed side by
side, round-robin, medians of ``--repeats`` runs (:func:`rdk_theory._timing.median_times`):

* ``floor``: ``sum min(p, q)`` over the (batch, N) target and drafter-on-target arrays, the
  memory-bound floor of the CPU benchmark (``acceptance_rate(p, q, check=False)``);
* ``decode_triton`` / ``decode_torch``: ``rdk_proposal_with_acceptance(p, q, vm, kernel)``
  from the drafter's (batch, N / 2) ``q``: TLI's scatter and the first-order proposal and its
  acceptance, with ``engine="auto"`` (the Triton engine, at every size: the script sets
  ``_triton.MIN_ELEMENTS`` and ``MIN_ELEMENTS_DECODE`` to 0; it reads ``q`` through the map, TLI's scatter fused into its
  passes) and ``engine="numpy"`` (the torch path);
* ``decode_triton_scatter``: the same call as the Triton engine made it before that fusion,
  TLI's scatter by torch and then the engine on the scattered ``r``;
* ``kernel_triton``: ``transport_with_acceptance(r, p, normalise=True)`` on the scattered
  ``r`` alone, the part the Triton engine replaces;
* ``*_graph``: the floor and ``decode_triton`` captured once in a CUDA graph and replayed,
  which removes the launch costs that set the time at small batches.

Reported per cell: each time, each ratio to the floor (the graph one to the floor's graph), the
largest difference between the two engines' proposals and acceptances, and between the fused
and unfused Triton calls. From the
repository root on a CUDA machine:

    python benchmarks/bench_gpu.py --out DIR      # DIR/bench_gpu.json; about a minute on an H200
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import rdk_theory as rt  # noqa: E402
from rdk_theory import _triton  # noqa: E402
from rdk_theory._timing import median_times  # noqa: E402
from rdk_theory.validation import int_at_least  # noqa: E402


def _laws(rng, shape):
    x = np.exp(rng.standard_normal(shape) * 3.0)
    return x / x.sum(-1, keepdims=True)


def _graph(fn, torch):
    """``fn`` captured in a CUDA graph after warm-ups on a side stream: the replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def cell(n, batch, s, tau, repeats, rng, torch):
    vm = rt.VocabMap.from_kept_ids(np.arange(0, n, 2), n)
    cal = _laws(rng, (s, n))
    fast = rt.FirstOrderCovarianceKernel(cal, tau)
    slow = rt.FirstOrderCovarianceKernel(cal, tau, engine="numpy")
    dev = lambda a: torch.as_tensor(a, dtype=torch.float32, device="cuda")  # noqa: E731
    p, q = dev(_laws(rng, (batch, n))), dev(_laws(rng, (batch, vm.n_draft)))
    r = rt.vanilla_proposal(q, vm, check=False)  # (batch, N): the drafter's mass on target ids
    fns = {
        "floor": lambda: rt.acceptance_rate(p, r, check=False),
        "decode_triton": lambda: rt.rdk_proposal_with_acceptance(p, q, vm, fast, check=False),
        "decode_torch": lambda: rt.rdk_proposal_with_acceptance(p, q, vm, slow, check=False),
        "decode_triton_scatter": lambda: fast.transport_with_acceptance(
            rt.vanilla_proposal(q, vm, check=False), p, normalise=True),
        "kernel_triton": lambda: fast.transport_with_acceptance(r, p, normalise=True),
    }
    a, b, c = fns["decode_triton"](), fns["decode_torch"](), fns["decode_triton_scatter"]()
    diff_out = float((a[0] - b[0]).abs().max())
    diff_alpha = float((a[1] - b[1]).abs().max())
    diff_fused = max(float((a[0] - c[0]).abs().max()), float((a[1] - c[1]).abs().max()))
    fns["floor_graph"] = _graph(fns["floor"], torch)
    fns["decode_triton_graph"] = _graph(fns["decode_triton"], torch)
    t = median_times(fns, repeats, sync=torch.cuda.synchronize)
    row = {"n": n, "batch": batch, **{f"{k}_ms": 1e3 * v for k, v in t.items()}}
    for k in ("decode_triton", "decode_torch", "decode_triton_scatter", "kernel_triton"):
        row[f"{k}_ratio"] = t[k] / t["floor"]
    row["decode_triton_graph_ratio"] = t["decode_triton_graph"] / t["floor_graph"]
    row["max_diff_proposal"], row["max_diff_alpha"] = diff_out, diff_alpha
    row["max_diff_fused_vs_scatter"] = diff_fused
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="32768,151936,262144", help="target vocabulary sizes N")
    ap.add_argument("--batches", default="1,64,1024", help="batch sizes")
    ap.add_argument("--s", type=int_at_least(1), default=64, help="calibration rows S (default 64)")
    ap.add_argument("--tau", type=float, default=0.01, help="temperature (default 0.01)")
    ap.add_argument("--repeats", type=int_at_least(1), default=21, help="timed runs per method (default 21)")
    ap.add_argument("--out", type=Path, help="write DIR/bench_gpu.json")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or not _triton.available():
        print("error: needs a CUDA device and triton", file=sys.stderr)
        return 2
    _triton.MIN_ELEMENTS = _triton.MIN_ELEMENTS_DECODE = 0  # the engine at every size: the
    # table shows where it pays
    rng = np.random.default_rng(0)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        for batch in (int(x) for x in args.batches.split(",")):
            row = cell(n, batch, args.s, args.tau, args.repeats, rng, torch)
            rows.append(row)
            print(f"N={n:7d} batch={batch:5d} floor {row['floor_ms']:.3f} ms | decode: triton "
                  f"{row['decode_triton_ratio']:.2f}x torch {row['decode_torch_ratio']:.2f}x "
                  f"unfused {row['decode_triton_scatter_ratio']:.2f}x "
                  f"graph {row['decode_triton_graph_ratio']:.2f}x | kernel only "
                  f"{row['kernel_triton_ratio']:.2f}x | diff {row['max_diff_proposal']:.1e} "
                  f"{row['max_diff_alpha']:.1e}", flush=True)
            torch.cuda.empty_cache()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        info = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                "triton": __import__("triton").__version__, "s": args.s, "tau": args.tau,
                "repeats": args.repeats, "rows": rows}
        (args.out / "bench_gpu.json").write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
