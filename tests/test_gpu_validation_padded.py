"""Two models of one tokenizer whose LM heads are padded to different widths (as Qwen2.5 7B's
152,064 rows against 0.5B's 151,936, past the hub tokenizer's 151,665 ids), on tiny random
Llama models (tests/tiny_models.py; no hub, a few seconds): the harness reads both over the
shared ids instead of failing after the study, and the hetero study pads the token list with
holes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from gpu_validation import agreement, collect, hetero, models  # noqa: E402
from gpu_validation.__main__ import main  # noqa: E402
from tests import stats  # noqa: E402


@pytest.mark.parametrize("target, drafter", [("narrow", "wide"), ("wide", "narrow")])
def test_run_reads_both_heads_over_the_shared_ids(tiny, tmp_path, monkeypatch, target, drafter):
    """The run completes and passes (exit status 0). Monte Carlo (20 positions x 50 steps per
    study cell, generation of 6 tokens): its checks run at the suite's FALSE_ALARM_PER_TEST,
    not the harness's 1e-3, and their pass is one counted assertion
    (``tests.stats.assert_run_checks_pass``)."""
    monkeypatch.setattr(agreement, "FALSE_ALARM", stats.FALSE_ALARM_PER_TEST)
    out = tmp_path / "run"
    rc = main(["run", "--target", tiny[target], "--drafter", tiny[drafter], "--kept", "200,50",
               "--positions", "20", "--steps", "50", "--e2e-tokens", "6", "--no-timing",
               "--dtype", "float32", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    stats.assert_run_checks_pass(report)
    assert rc == 0
    assert report["dtype"] == report["settings"]["dtype"] == "float32"
    n = tiny["n_tokens"]
    for role in ("target", "drafter"):
        info = report["models"][role]
        assert info["width_used"] == n
    wide = report["models"]["target" if target == "wide" else "drafter"]
    # a random head puts real mass on its 64 padding rows; it is recorded, then dropped
    assert 0 < wide["max_mass_beyond_width"] < 1
    assert "max_mass_beyond_width" not in report["models"]["target" if target == "narrow" else "drafter"]
    assert all(e["new_tokens"] > 0 for e in report["speculative"])


def test_laws_over_a_width_sum_to_one_and_equal_the_renormalised_restriction(tiny):
    lm = models.load(tiny["wide"], dtype="float32")
    ids = collect.tokenize(lm.tokenizer, "def f(x):\n    return x\n")
    full = collect.next_token_probs(lm, ids)
    lm.width = tiny["n_tokens"]
    cut = collect.next_token_probs(lm, ids)
    assert cut.shape == (len(ids) - 1, tiny["n_tokens"]) and full.shape[1] == tiny["n_tokens"] + 64
    kept = full[:, :lm.width].astype(np.float64)
    np.testing.assert_allclose(cut, kept / kept.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    dropped = 1 - full[:, :lm.width].astype(np.float64).sum(1)
    assert lm.info["max_mass_beyond_width"] == pytest.approx(dropped.max(), abs=1e-5)


@pytest.mark.parametrize("width", [None, 151_665])
def test_laws_of_a_152k_head_sum_to_one_to_float32_round_off(width):
    """Qwen-sized logits (151,936 ids; the hub tokenizer's 151,665 as width): every row sums to
    1 within ``FLOAT32_LAW_SUM_ATOL`` and each entry is the float64 softmax's to
    ``FLOAT32_LAW_RTOL``. torch's float32 CPU softmax alone sums to 1 + 1e-5 here."""
    from tests.tolerances import FLOAT32_LAW_RTOL, FLOAT32_LAW_SUM_ATOL

    lm = models.LoadedModel(model=None, tokenizer=None, spec="qwen-sized", width=width)
    logits = torch.from_numpy(np.random.default_rng(7).standard_normal((8, 151_936)) * 3)
    got = lm.probs(logits.float().requires_grad_())  # inference only: no graph, no error
    assert not got.requires_grad and got.dtype is torch.float32
    got, want = got.double(), torch.softmax(logits[:, :width], -1)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.sum(-1).numpy(), 1.0, rtol=0, atol=FLOAT32_LAW_SUM_ATOL)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=FLOAT32_LAW_RTOL, atol=0)


def test_a_head_narrower_than_the_tokenizer_is_refused(tiny):
    a, b = models.load(tiny["wide"], dtype="float32"), models.load(tiny["narrow"], dtype="float32")
    b.tokenizer.add_tokens(["<extra_token>"])  # now one id more than the narrow head has rows
    with pytest.raises(models.ModelError, match="narrower than the tokenizer"):
        models.share_output_width(a, b)
    assert models.share_output_width(b, b) is None


def test_hetero_pads_the_target_token_list_to_its_head(tiny, tmp_path):
    report = hetero.run(tiny["wide"], [tiny["narrow"]], out=tmp_path, dtype="float32",
                        log=lambda *a: None)
    (cap,) = report["oov_caps"]
    # the same tokenizer: every real id is matched, the 64 padding ids are holes
    assert cap["bytes"]["intersection"] == tiny["n_tokens"]
    assert cap["bytes"]["max_abs_diff_two_ways"] < 1e-6
    assert 0 < cap["bytes"]["mean"] < 1  # the head's padding rows carry the rest


def test_a_folder_without_a_causal_lm_and_an_unwritable_out_are_error_lines(tiny, tmp_path,
                                                                              capsys):
    from transformers import ViTConfig

    vit = tmp_path / "vit"
    ViTConfig().save_pretrained(vit)
    for f in Path(tiny["narrow"]).glob("tok*"):
        (vit / f.name).write_bytes(f.read_bytes())
    assert main(["run", "--target", str(vit), "--drafter", tiny["narrow"], "--no-timing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load") and "Traceback" not in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--no-timing",
                 "--out", str(blocker / "x"), "--positions", "5"]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_the_report_names_the_dtype_auto_resolved_to(tiny, tmp_path, monkeypatch):
    """settings.dtype records what was asked ("auto"); the report's dtype, what the models
    computed in: float32 on a CPU (gpu_validation.models.resolve_dtype). Exit status 0 needs
    every check to pass: Monte Carlo (10 positions x 20 steps, 4 generated tokens), run at the
    suite's FALSE_ALARM_PER_TEST and counted once (``tests.stats.assert_run_checks_pass``)."""
    monkeypatch.setattr(agreement, "FALSE_ALARM", stats.FALSE_ALARM_PER_TEST)
    out = tmp_path / "run"
    rc = main(["run", "--target", tiny["narrow"], "--drafter", tiny["narrow"], "--kept", "50",
               "--positions", "10", "--steps", "20", "--e2e-tokens", "4", "--no-timing",
               "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    stats.assert_run_checks_pass(report)
    assert rc == 0
    assert report["settings"]["dtype"] == "auto"
    assert report["dtype"] == report["models"]["target"]["dtype"] == "float32"


def test_hetero_reads_a_repeated_drafter_once_and_leaves_the_target_out(tiny, tmp_path):
    """``drafters`` (wide, wide, narrow) with target narrow: one drafter. The repeat was
    studied twice (its rows twice in the table and in hetero.json); now once."""
    report = hetero.run(tiny["narrow"], [tiny["wide"], tiny["wide"], tiny["narrow"]],
                        out=tmp_path, dtype="float32", log=lambda *a: None)
    assert [(r["drafter"], r["target"]) for r in report["pairs"]] == [
        (tiny["narrow"], tiny["wide"]), (tiny["wide"], tiny["narrow"])]
    assert [c["drafter_vocab"] for c in report["oov_caps"]] == [tiny["wide"]]
    assert json.loads((tmp_path / "hetero.json").read_text())["pairs"] == report["pairs"]


def test_hetero_json_replaces_a_symbolic_link_instead_of_writing_through_it(tiny, tmp_path):
    """A link at out/hetero.json: the report was written through it (plain write_text,
    overwriting the file it points to); now a new file replaces the link, as the main run's
    outputs (rdk_theory._outdir.write_replacing), and no temporary file is left."""
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    out = tmp_path / "h"
    out.mkdir()
    (out / "hetero.json").symlink_to(precious)
    report = hetero.run(tiny["narrow"], [tiny["wide"]], out=out, dtype="float32",
                        log=lambda *a: None)
    assert precious.read_text() == "precious"
    assert not (out / "hetero.json").is_symlink()
    assert json.loads((out / "hetero.json").read_text())["pairs"] == report["pairs"]
    assert [p.name for p in out.iterdir()] == ["hetero.json"]


def test_a_truncated_model_has_its_bases_tokenizer(tiny, tmp_path):
    """``truncated:L:MODEL`` passed check_spec, then load_tokenizer handed the whole string to
    transformers as a hub id (a confusing hub error, with --hetero); now MODEL's tokenizer is
    loaded, and the hetero study runs with a truncated target."""
    spec = f"truncated:1:{tiny['wide']}"
    tok, info = models.load_tokenizer(spec)
    assert len(tok) == tiny["n_tokens"] and info["path_or_id"] == tiny["wide"]
    report = hetero.run(spec, [tiny["narrow"]], out=tmp_path, dtype="float32",
                        log=lambda *a: None)
    assert report["oov_caps"][0]["bytes"]["intersection"] == tiny["n_tokens"]
