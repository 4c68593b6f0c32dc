"""The READMEs show what the code prints: the 60-second example, the committed real-model
runs and the fast simulators' tables."""
import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_output_is_current():
    text = README.read_text()
    section = text[text.index("## A 60-second example"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    expected = re.search(r"prints\n\n```\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README example", "exec"), {})
    assert out.getvalue() == expected


RESULTS = README.parent / "gpu_validation" / "results"
ROW = re.compile(r"^\| ([\d,]+) \| ([\d.]+) \|((?: [\d.]+ / [\d.]+ \|){5})$", re.M)


GPU_SECTION = "## Results on an H200 GPU"


def _table_rows(text):
    """Every predicted / measured table row of ``text``, in order, parsed."""
    got = []
    for m in ROW.finditer(text):
        cells = [tuple(float(v) for v in c.split(" / "))
                 for c in m.group(3).strip(" |").split(" | ")]
        got.append((int(m.group(1).replace(",", "")), float(m.group(2)), cells))
    return got


def _report_rows(report):
    want = []
    for r in report["study"]["rows"]:
        checks = [r["checks"][s] for s in ("vanilla", "tli", "rdk_exact", "rdk_first_order",
                                           "marginal")]
        cells = [(round(c["predicted_mean"], 4), round(c["measured_mean"], 4)) for c in checks]
        want.append((r["kept"], round(r["oov_cap"], 3), cells))
    return want


def _split_gpu_section(text):
    """``(text outside the GPU results section, the section)``: the section runs from its
    heading to the next ``## `` heading or the end."""
    if GPU_SECTION not in text:
        return text, ""
    start = text.index(GPU_SECTION)
    end = text.find("\n## ", start + len(GPU_SECTION))
    end = len(text) if end < 0 else end
    return text[:start] + text[end:], text[start:end]


def test_readme_validation_tables_are_the_committed_run():
    """Both READMEs' CPU predicted / measured table is ``results/cpu/report.json`` to 4 digits,
    and the GPU section's table is ``results/cuda/report.json``'s (every such row of a file, in
    order: a second, stale table fails)."""
    import json

    want_cpu = _report_rows(json.loads((RESULTS / "cpu" / "report.json").read_text()))
    want_cuda = _report_rows(json.loads((RESULTS / "cuda" / "report.json").read_text()))
    assert len(want_cpu) == 5 and len(want_cuda) == 3
    for path in (README, README.parent / "gpu_validation" / "README.md"):
        rest, _ = _split_gpu_section(path.read_text())
        assert _table_rows(rest) == want_cpu, path.name
    _, gpu = _split_gpu_section((README.parent / "gpu_validation" / "README.md").read_text())
    assert _table_rows(gpu) == want_cuda


def test_gpu_validation_readme_hetero_table_is_the_committed_run():
    """The whole printed block under "Heterogeneous tokenizers" (pair table and caps) is
    ``summary_lines`` of ``results/hetero/hetero.json``."""
    import json

    from gpu_validation.hetero import summary_lines

    report = json.loads((RESULTS / "hetero" / "hetero.json").read_text())
    text = (README.parent / "gpu_validation" / "README.md").read_text()
    assert "\n".join(summary_lines(report)) + "\n```" in text


def test_gpu_validation_readme_hetero_caps_are_the_committed_run():
    import json

    caps = json.loads((RESULTS / "hetero" / "hetero.json").read_text())["oov_caps"]
    assert len(caps) == 2
    text = (README.parent / "gpu_validation" / "README.md").read_text()
    for c in caps:
        b, m = c["bytes"], c["marker"]
        line = (f"OOV cap p(I), target {c['target']}, drafter vocab {c['drafter_vocab']}: "
                f"{b['mean']:.4f} (eval_prose {b['per_text']['eval_prose']:.4f}, eval_code "
                f"{b['per_text']['eval_code']:.4f}; marker map {m['mean']:.4f}); next token in I "
                f"{b['next_token_in_I']:.4f}")
        assert line in text


def _main_job_blocks():
    """The two tables under "What the main job prints": the real pair's, then the synthetic."""
    text = README.read_text()
    section = text[text.index("## What the main job prints"):text.index("## A 60-second example")]
    blocks = re.findall(r"```\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    return blocks


def test_readme_synthetic_main_job_table_is_what_report_prints(tmp_path, capsys):
    """``rdk-theory report --source synthetic`` is deterministic (seed 0): its table is the
    README's, to the last digit."""
    from rdk_theory.cli import main

    assert main(["report", "--source", "synthetic", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.lstrip().startswith("kept"))
    end = out.index("", start)
    assert "\n".join(out[start:end]) + "\n" == _main_job_blocks()[1]


def test_readme_real_main_job_table_is_the_committed_run():
    """The real pair's table is ``format_table`` of the committed ``bash scripts/report.sh``
    output, ``gpu_validation/results/report/report.json``, footnote included."""
    import json

    from rdk_theory.report import format_table

    report = json.loads((RESULTS / "report" / "report.json").read_text())
    assert report["source"].startswith("real:") and len(report["rows"]) == 5
    table = format_table(report)
    assert table + "\n" == _main_job_blocks()[0]


def _tokens_per_call(e):
    return f"{e['tokens_per_call']:.2f}"


def _accepts(e):
    return f"{e['check']['measured_accepts']} vs {e['check']['predicted_accepts']:.1f}"


def test_readme_timing_slopes_and_generation_figures_are_the_committed_run():
    """The validation paragraphs' log-log slopes and generation figures, in both READMEs, are
    ``results/cpu/report.json``'s (whitespace-normalised: the prose is rewrapped freely)."""
    import json

    report = json.loads((RESULTS / "cpu" / "report.json").read_text())
    sl = {k: f"{v:.2f}" for k, v in report["timing"]["slopes"].items()}
    gen = {(e["kept"], e["sampler"]): e for e in report["speculative"]}
    tli_hi, tli_lo = gen[(65536, "tli")], gen[(4096, "tli")]
    mar_hi, mar_lo = gen[(65536, "marginal")], gen[(4096, "marginal")]

    tpc, acc = _tokens_per_call, _accepts

    top = " ".join(README.read_text().split())
    sub = " ".join((README.parent / "gpu_validation" / "README.md").read_text().split())
    for phrase in (
            f"is {sl['first_order@batch1']} (batch 1) and {sl['first_order@batch64']} (batch 64) "
            f"for first-order RDK, against {sl['dense_exact@batch1']} and "
            f"{sl['dense_exact@batch64']} for the dense exact kernel",
            f"the floor's own slope is {sl['floor@batch1']} in that sweep",
            f"{tpc(tli_hi)} tokens per target call with TLI at K = 65,536 and {tpc(tli_lo)} at "
            f"K = 4,096 (accepted drafts {acc(tli_hi)} predicted, and {acc(tli_lo)};"):
        assert phrase in top, phrase
    for phrase in (
            f"first-order {sl['first_order@batch1']} (batch 1) / {sl['first_order@batch64']} "
            f"(batch 64), dense exact {sl['dense_exact@batch1']} / {sl['dense_exact@batch64']}",
            f"the floor's own slope is {sl['floor@batch1']} in the same sweep",
            f"TLI {tpc(tli_hi)} tokens per target call at K = 65,536 and {tpc(tli_lo)} at "
            f"K = 4,096; marginal RDK {tpc(mar_hi)} and {tpc(mar_lo)}"):
        assert phrase in sub, phrase


def test_readme_gpu_figures_are_the_committed_cuda_runs():
    """The GPU paragraphs' figures, in both READMEs, are those of ``results/cuda/``: the
    validation run's generation, slopes and time ranges, and the two side-by-side scripts'
    (whitespace-normalised)."""
    import json

    cuda = RESULTS / "cuda"
    report = json.loads((cuda / "report.json").read_text())
    launch = json.loads((cuda / "launch.json").read_text())["rows"]
    passes = json.loads((cuda / "passes.json").read_text())["rows"]
    assert report["all_checks_pass"] and report["device"] == "cuda"
    gen = {(e["kept"], e["sampler"]): e for e in report["speculative"]}
    hi, lo = max(k for k, _ in gen), min(k for k, _ in gen)

    tpc, acc = _tokens_per_call, _accepts

    sl = {k: f"{v:.2f}" for k, v in report["timing"]["slopes"].items()}
    timing = report["timing"]["rows"]
    fo = [r["first_order_s"] * 1e3 for r in timing]
    floor = [r["floor_s"] * 1e3 for r in timing]
    big = [r for r in launch if r["batch"] == 1024]
    one = [r for r in launch if r["batch"] == 1]
    ratio = [r["first_order_ratio"] for r in big]
    speed = [r["after_over_before"] for r in passes]
    assert all(r["max_abs_diff"] == 0 for r in passes)
    profile = (cuda / "profile_before_after.txt").read_text()
    kernels, gpu_us = {}, {}
    for side in ("before", "after"):
        m = re.search(rf"^{side}: (\d+) CUDA kernels, GPU time ([\d.]+) us$", profile, re.M)
        kernels[side], gpu_us[side] = int(m.group(1)), round(float(m.group(2)))
    pytest_counts = {}
    for log in ("pytest_cuda.log", "pytest_cuda_edges.log", "pytest_cuda_graph.log"):
        last = (cuda / log).read_text().strip().splitlines()[-1]
        assert "failed" not in last and "error" not in last, last
        pytest_counts[log] = int(re.search(r"(\d+) passed", last).group(1))
    fo_range, floor_range = f"{min(fo):.2f}-{max(fo):.2f}", f"{min(floor):.2f}-{max(floor):.2f}"
    sub = " ".join((README.parent / "gpu_validation" / "README.md").read_text().split())
    top = " ".join(README.read_text().split())
    for phrase in (
            f"All {report['n_checks']} checks pass",
            f"TLI {tpc(gen[hi, 'tli'])} tokens per target call at K = {hi:,} and "
            f"{tpc(gen[lo, 'tli'])} at K = {lo:,} (accepted drafts {acc(gen[hi, 'tli'])} "
            f"predicted, and {acc(gen[lo, 'tli'])}); marginal RDK {tpc(gen[hi, 'marginal'])} and "
            f"{tpc(gen[lo, 'marginal'])} ({acc(gen[hi, 'marginal'])}, {acc(gen[lo, 'marginal'])})",
            f"first-order RDK takes {fo_range} ms per call whatever N is: log-log slopes "
            f"{sl['first_order@batch1']} (batch 1) and {sl['first_order@batch64']} (batch 64), "
            f"against the floor's {sl['floor@batch1']} and {sl['floor@batch64']}; dense exact "
            f"{sl['dense_exact@batch1']} and {sl['dense_exact@batch64']} (4K-32K)",
            f"kernels) takes {floor_range} ms",
            "floor " + " / ".join(f"{r['floor_s'] * 1e3:.2f}" for r in big) + " ms at N = 32K / "
            "152K / 262K), first-order takes "
            + " / ".join(f"{r['first_order_s'] * 1e3:.2f}" for r in big)
            + f" ms: linear in N and {min(ratio):.1f}-{max(ratio):.1f} times the floor",
            "batch 1 drops from " + " / ".join(f"{r['first_order_s'] * 1e3:.2f}" for r in one)
            + " ms to " + " / ".join(f"{r['first_order_graph_s'] * 1e3:.2f}" for r in one) + " ms",
            f"{min(speed):.2f}-{max(speed):.2f}x of the old time over the 9 cells",
            "and batch 64 at N = 32K from {:.2f} to {:.2f} ms".format(
                *[(r["first_order_s"] * 1e3, r["first_order_graph_s"] * 1e3) for r in launch
                  if (r["n"], r["batch"]) == (32768, 64)][0]),
            "({:.2f} ms at 4K to {:.2f} ms at 32K, batch 64;".format(
                *[r["dense_exact_s"] * 1e3 for r in timing if r["batch"] == 64
                  and r["n"] in (4096, 32768)]),
            f"{kernels['before']} -> {kernels['after']} kernels and {gpu_us['before']} -> "
            f"{gpu_us['after']} us of GPU time",
            f"gave {pytest_counts['pytest_cuda.log']} passed and 1 skipped",
            f"more: {pytest_counts['pytest_cuda_edges.log']} passed",
            f"first-order proposal (README, \"CUDA graphs\"): "
            f"{pytest_counts['pytest_cuda_graph.log']} passed"):
        assert phrase in sub, phrase

    def counts(log):  # pytest's last line: passed, skipped, failed (0 when absent), seconds
        last = (cuda / log).read_text().strip().splitlines()[-1]
        got = {w: int(m.group(1)) if (m := re.search(rf"(\d+) {w}", last)) else 0
               for w in ("passed", "skipped", "failed")}
        return got, round(float(re.search(r" in ([\d.]+)s", last).group(1)))

    triton_log = (cuda / "pytest_cuda_triton.log").read_text().strip().splitlines()[-1]
    assert "failed" not in triton_log and "error" not in triton_log, triton_log
    (first, first_s), (final, final_s) = (counts(f"pytest_cuda_full{x}.log")
                                          for x in ("_first_call", ""))
    assert final["failed"] == 0
    for phrase in (f"{first['passed']:,} passed, {first['skipped']} skipped and "
                   f"{first['failed']} failed in {first_s} s",
                   f"{final['passed']:,} passed and {final['skipped']} skipped in {final_s} s"):
        assert phrase in sub, phrase
    full_passed = final["passed"]
    triton_passed = int(re.search(r"(\d+) passed", triton_log).group(1))
    assert f"): {triton_passed} passed." in sub
    bench = {(r["n"], r["batch"]): r for r in
             json.loads((cuda / "bench_gpu.json").read_text())["rows"]}
    for (n, b), r in bench.items():
        row = (f"| {n:,} | {b} | {r['floor_ms']:.3f} | {r['decode_triton_ratio']:.1f}x | "
               f"{r['decode_triton_scatter_ratio']:.1f}x | {r['decode_torch_ratio']:.1f}x | "
               f"{r['kernel_triton_ratio']:.1f}x | {r['decode_triton_graph_ratio']:.1f}x |")
        assert row in top or (n, b) in ((32768, 64), (151936, 1)), row  # two cells left out
    for phrase in (
            f"all {report['n_checks']} checks pass",
            f"The whole suite except the real-model tier ran there too ({full_passed:,} passed, "
            f"{final['skipped']} skipped",
            "replayed, batch 1 costs {:.2f}-{:.2f} ms instead of {:.2f}-{:.2f} ms eagerly".format(
                min(r["first_order_graph_s"] for r in one) * 1e3,
                max(r["first_order_graph_s"] for r in one) * 1e3,
                min(r["first_order_s"] for r in one) * 1e3,
                max(r["first_order_s"] for r in one) * 1e3),
            f"takes {fo_range} ms per call from N = 4K to 262K at batch 1 and 64",
            f"(the floor takes {floor_range} ms)",
            "the torch path is {:.1f}-{:.1f} times the floor and the Triton engine's decode call "
            "{:.1f}-{:.1f} times".format(
                min(r["decode_torch_ratio"] for (_, b), r in bench.items() if b == 1024),
                max(r["decode_torch_ratio"] for (_, b), r in bench.items() if b == 1024),
                min(r["decode_triton_ratio"] for (_, b), r in bench.items() if b == 1024),
                max(r["decode_triton_ratio"] for (_, b), r in bench.items() if b == 1024))):
        assert phrase in top, phrase


def test_readme_benchmark_worst_ratio_tables_are_the_committed_json():
    """Each committed CPU benchmark's worst-ratio table is in the README as
    ``benchmarks/bench_proposals.py --table`` prints it (the first run's per-cell tables too)."""
    import importlib.util
    import json

    bench = README.parent / "benchmarks"
    spec = importlib.util.spec_from_file_location("bench_proposals", bench / "bench_proposals.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = README.read_text()
    for name in ("results_cpu.json", "results_cpu_repeat.json", "results_cpu_h200_host.json"):
        table = mod.markdown(json.loads((bench / name).read_text()))
        worst = table[table.index("| method |"):]
        assert worst in text, name
        if name == "results_cpu.json":
            assert table[:table.index("Worst ratio")] in text
    host = json.loads((bench / "results_cpu_h200_host.json").read_text())["summary"]

    def worst(method, *cells):
        return [f"{host[method][c]['worst_ratio']:.2f}x" for c in cells]

    every = ("batch1_cold", "batch1_hot", "batch64_cold", "batch64_hot")
    r1, r2, r4 = (max(host[m][c]["worst_ratio"] for c in every)
                  for m in ("first_order_r1_fused", "first_order_r2_fused",
                            "first_order_r4_fused_f32"))
    assert max(r1, r2, r4) < 3
    blas = worst("first_order_S64_blas", *every)
    prose = " ".join(text.split())
    for phrase in (f"within 3x in every cell (worst {r1:.2f}x and {r2:.2f}x)",
                   f"float32 factor (worst {r4:.2f}x)",
                   f"on the blas engine ({blas[2]} cold, {blas[3]} hot), not at batch 1 "
                   f"({blas[0]} cold, {blas[1]} hot)"):
        assert phrase in prose, phrase


SIM_README = README.parent / "simulators" / "README.md"
_COST_ROW = re.compile(r"^(\s+\d+\s+\d+)\s+\S+$")  # string's cost table: length, count, seconds


@pytest.mark.parametrize("simulator", ["speedup", "dsi", "spectr", "string", "disco"])
def test_simulators_readme_tables_are_what_the_commands_print(simulator, capsys):
    """The simulators README's command for each fast simulator, run as written (without its
    --figure), prints every line of the README's table: exact numbers, Monte Carlo columns
    included (seeded). Only the wall-clock seconds of the string cost table are not compared."""
    from rdk_theory.cli import main

    text = SIM_README.read_text()
    m = re.search(rf"```\n(rdk-theory simulate {simulator} [^\n]*)\n```\n```\n(.*?)```", text, re.S)
    argv = m.group(1).split()[1:]
    if "--figure" in argv:
        i = argv.index("--figure")
        del argv[i:i + 2]
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()

    def comparable(lines):
        return [_COST_ROW.sub(r"\1", line) if simulator == "string" else line for line in lines]

    want, got = comparable(m.group(2).splitlines()), comparable(printed)
    missing = [line for line in want if line not in got]
    assert not missing, missing
    assert [got.index(line) for line in want] == sorted(got.index(line) for line in want)
