"""Real tokenizers and real SmolLM2 laws: heterogeneous TLI maps, the OOV cap, top-k bound.

The maps are built from the real token lists of SmolLM2-135M (49,152), Qwen2.5-Coder
(151,936) and Gemma-3-270M (262,144); only tokenizers are loaded, except SmolLM2, the target
whose teacher-forced laws give p(I). About 40-70 s on 2 cores (the Gemma tokenizer alone takes
~20 s to build from its GGUF).
"""
from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.realmodel, pytest.mark.timeout(900)]

SIZES = {"smollm2-135m": 49_152, "qwen2.5-coder-1.5b": 151_936, "gemma-3-270m": 262_144}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from gpu_validation import hetero

    out = tmp_path_factory.mktemp("hetero")
    report = hetero.run("smollm2-135m", ("qwen2.5-coder-1.5b", "gemma-3-270m"), out=out,
                        fetch_missing=True, log=lambda *a: None)
    return report, out


def test_tokenizer_sizes_and_families(study):
    report, out = study
    assert (out / "hetero.json").is_file()
    tok = report["tokenizers"]
    assert {n: t["size"] for n, t in tok.items()} == SIZES
    assert tok["gemma-3-270m"]["family"] == "sentencepiece"
    assert tok["qwen2.5-coder-1.5b"]["family"] == tok["smollm2-135m"]["family"] == "byte_level"
    assert tok["smollm2-135m"]["duplicate_canonical_strings"] == 0


def test_maps_are_injective_and_pair_identical_bytes(study):
    from gpu_validation import hetero

    lists = {n: hetero.load_token_list(n) for n in ("smollm2-135m", "qwen2.5-coder-1.5b")}
    for d, t in (("qwen2.5-coder-1.5b", "smollm2-135m"), ("smollm2-135m", "qwen2.5-coder-1.5b")):
        vm = hetero.build_map(lists[d], lists[t])
        j = np.flatnonzero(vm.draft_to_target >= 0)
        tt = vm.draft_to_target[j]
        assert np.unique(tt).size == j.size
        assert all(lists[d].canonical[a] == lists[t].canonical[b] for a, b in zip(j, tt))
        # the same strings in both vocabularies: the most common English words are matched
        for word in (" the", " and", "def", "\n"):
            assert lists[d].canonical.index(word) in j
    report, _ = study
    for row in report["pairs"]:
        assert row["normalisations"]["bytes"]["matched_pairs_with_different_bytes"] == 0
        assert 0 < row["normalisations"]["bytes"]["intersection"] <= min(
            SIZES[row["drafter"]], SIZES[row["target"]])
    # |I| does not depend on the direction of the map
    by = {(r["drafter"], r["target"]): r["normalisations"]["bytes"]["intersection"]
          for r in report["pairs"]}
    assert all(by[(a, b)] == by[(b, a)] for a, b in by)
    # byte normalisation finds every SentencePiece-vs-byte-level match the marker one finds
    # (and more), minus the marker's false pairs
    for r in report["pairs"]:
        b, m = r["normalisations"]["bytes"], r["normalisations"]["marker"]
        assert b["intersection"] >= m["intersection"] - m["matched_pairs_with_different_bytes"]


def test_oov_cap_two_ways_and_bounds(study):
    report, _ = study
    assert report["eval_positions"] > 500
    for c in report["oov_caps"]:
        b = c["bytes"]
        assert b["max_abs_diff_two_ways"] <= 1e-12
        assert b["mean_by_strings"] == pytest.approx(b["mean"], abs=1e-12)
        assert 0.5 < b["mean"] < 1.0 and 0.5 < b["next_token_in_I"] <= 1.0
        assert min(b["per_text"].values()) <= b["mean"] <= max(b["per_text"].values())


def test_topk_acceptance_within_the_tail_bound_on_real_laws(tmp_path):
    """Top-k compressed real laws (SmolLM2 target, its 24-layer truncation as drafter):
    |alpha(p, q) - alpha(p~, q~)| <= tail_p + tail_q at every position, and not vacuously."""
    pytest.importorskip("transformers")
    from gpu_validation import collect, models
    from gpu_validation.harness import save_laws

    tgt = models.load("smollm2-135m", fetch_missing=True, log=lambda *a: None)
    drf = models.load("truncated:24:smollm2-135m", log=lambda *a: None)
    ev = collect.collect(tgt, drf, collect.EVAL_TEXTS, max_tokens=96)
    ca = collect.collect(tgt, drf, collect.CALIB_TEXTS, max_tokens=32)
    for k in (8, 256):
        info = save_laws(tmp_path / f"laws{k}.npz", ev, ca, k)
        assert info["bound_holds"], info
        assert info["alpha_abs_error_max"] <= info["bound_max"]
    assert info["tail_p_mean"] < 0.2  # k = 256 keeps most of the target's mass
