"""The READMEs show what the code prints: the 60-second example and the committed real-model
runs."""
import contextlib
import io
import re
from pathlib import Path

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


def test_readme_validation_tables_are_the_committed_run():
    """Both READMEs' predicted / measured table is ``results/cpu/report.json`` to 4 digits."""
    import json

    report = json.loads((RESULTS / "cpu" / "report.json").read_text())
    want = []
    for r in report["study"]["rows"]:
        checks = [r["checks"][s] for s in ("vanilla", "tli", "rdk_exact", "rdk_first_order",
                                           "marginal")]
        cells = [(round(c["predicted_mean"], 4), round(c["measured_mean"], 4)) for c in checks]
        want.append((r["kept"], round(r["oov_cap"], 3), cells))
    assert len(want) == 5
    for path in (README, README.parent / "gpu_validation" / "README.md"):
        got = []  # every such table row of the file, in order: a second, stale table fails
        for m in ROW.finditer(path.read_text()):
            cells = [tuple(float(v) for v in c.split(" / "))
                     for c in m.group(3).strip(" |").split(" | ")]
            got.append((int(m.group(1).replace(",", "")), float(m.group(2)), cells))
        assert got == want, path.name


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
    output, ``gpu_validation/results/report/report.json`` (the footnote's wording aside)."""
    import json

    from rdk_theory.report import format_table

    report = json.loads((RESULTS / "report" / "report.json").read_text())
    assert report["source"].startswith("real:") and len(report["rows"]) == 5
    table = format_table(report).replace("see the description above", "see below")
    assert table + "\n" == _main_job_blocks()[0]


def test_readme_timing_slopes_and_generation_figures_are_the_committed_run():
    """The validation paragraphs' log-log slopes and generation figures, in both READMEs, are
    ``results/cpu/report.json``'s (whitespace-normalised: the prose is rewrapped freely)."""
    import json

    report = json.loads((RESULTS / "cpu" / "report.json").read_text())
    sl = {k: f"{v:.2f}" for k, v in report["timing"]["slopes"].items()}
    gen = {(e["kept"], e["sampler"]): e for e in report["speculative"]}
    tli_hi, tli_lo = gen[(65536, "tli")], gen[(4096, "tli")]
    mar_hi, mar_lo = gen[(65536, "marginal")], gen[(4096, "marginal")]

    def tpc(e):
        return f"{e['tokens_per_call']:.2f}"

    def acc(e):
        return f"{e['check']['measured_accepts']} vs {e['check']['predicted_accepts']:.1f}"

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
