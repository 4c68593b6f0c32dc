"""gpu_validation model registry, fetch and cache logic (no model is downloaded or loaded here)."""
from __future__ import annotations

import hashlib
import re

import pytest

from gpu_validation import models
from gpu_validation.registry import DEFAULT_DRAFTER, DEFAULT_TARGET, REGISTRY


def test_registry_pins_every_model_of_the_spec():
    assert set(REGISTRY) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m",
                             "gemma-3-270m"}
    counts = {m.name: len(m.chunks) for m in REGISTRY.values()}
    assert counts == {"qwen2.5-coder-1.5b": 22, "qwen2.5-coder-0.5b": 6, "smollm2-135m": 1,
                      "gemma-3-270m": 4}
    for m in REGISTRY.values():
        assert re.fullmatch(r"[0-9a-f]{64}", m.sha256)
        for c in m.chunks:
            assert re.fullmatch(r"[0-9]+(\.[0-9]+)+", c.version)  # an exact pin, not a range
            assert c.requirement == f"{c.package}=={c.version}"
    assert REGISTRY[DEFAULT_TARGET].vocab_size == REGISTRY[DEFAULT_DRAFTER].vocab_size == 151_936
    # chunk order is the concatenation order
    assert REGISTRY["qwen2.5-coder-1.5b"].chunks[21].relpath == "data/part22.bin"
    assert REGISTRY["gemma-3-270m"].chunks[0].relpath.endswith(".part00")


def _parts(tmp_path, blobs):
    paths = []
    for i, b in enumerate(blobs):
        p = tmp_path / f"part{i}"
        p.write_bytes(b)
        paths.append(p)
    return paths


def test_assemble_concatenates_in_order_and_checks_the_hash(tmp_path):
    blobs = [b"abc" * 1000, b"", b"xyz"]
    good = hashlib.sha256(b"".join(blobs)).hexdigest()
    dest = models.assemble(_parts(tmp_path, blobs), tmp_path / "out" / "m.gguf", good)
    assert dest.read_bytes() == b"".join(blobs)


def test_wrong_hash_is_an_error_and_leaves_no_file(tmp_path):
    parts = _parts(tmp_path, [b"hello", b"world"])
    dest = tmp_path / "m.gguf"
    with pytest.raises(models.HashMismatchError, match="nothing loaded"):
        models.assemble(parts, dest, "0" * 64)
    assert not dest.exists()
    assert not list(tmp_path.glob("*.partial"))


def test_verify_moves_a_mismatching_file_aside_without_deleting_it(tmp_path):
    """The name is freed for a fresh fetch, and the bytes (maybe a user's own file under
    $RDK_THEORY_CACHE) are kept."""
    f = tmp_path / "m.gguf"
    f.write_bytes(b"tampered")
    with pytest.raises(models.HashMismatchError, match="moved to .*m.gguf.sha256-mismatch"):
        models.verify(f, hashlib.sha256(b"original").hexdigest())
    assert not f.exists()
    assert (tmp_path / "m.gguf.sha256-mismatch").read_bytes() == b"tampered"
    f.write_bytes(b"tampered again")  # a second mismatch does not overwrite the first
    with pytest.raises(models.HashMismatchError, match="m.gguf.sha256-mismatch.1"):
        models.verify(f, hashlib.sha256(b"original").hexdigest())
    assert (tmp_path / "m.gguf.sha256-mismatch").read_bytes() == b"tampered"
    assert (tmp_path / "m.gguf.sha256-mismatch.1").read_bytes() == b"tampered again"
    g = tmp_path / "ok.gguf"
    g.write_bytes(b"original")
    models.verify(g, hashlib.sha256(b"original").hexdigest())
    assert g.read_bytes() == b"original"


def test_cache_dir_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("RDK_THEORY_CACHE")
    assert models.cache_dir().parts[-2:] == ("rdk-theory", "models")


def test_corrupted_cache_is_refused_at_load_time(tmp_path, monkeypatch):
    """A GGUF in the cache with the wrong bytes is removed and never handed to transformers."""
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    m = REGISTRY["smollm2-135m"]
    (tmp_path / m.gguf_name).write_bytes(b"not the model")
    pytest.importorskip("torch")
    with pytest.raises(models.HashMismatchError):
        models.load(m.name)
    assert not (tmp_path / m.gguf_name).exists()


def test_unfetched_builtin_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    pytest.importorskip("torch")
    with pytest.raises(models.ModelError, match="not fetched"):
        models.load("qwen2.5-coder-0.5b")


def test_unknown_builtin_name_is_rejected():
    with pytest.raises(models.ModelError, match="unknown built-in"):
        models.fetch("no-such-model")


def test_missing_chunk_package_names_the_fetch_command(monkeypatch):
    from importlib import metadata

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(models.ModelError, match="models fetch smollm2-135m"):
        models.chunk_paths(REGISTRY["smollm2-135m"])


def test_report_source_is_none_when_models_are_not_fetched(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gpu_validation.report_source import real_pair_report

    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    assert real_pair_report(SimpleNamespace(quick=True, seed=0, out=str(tmp_path))) is None


def test_cli_models_list_and_bad_input(tmp_path, monkeypatch, capsys):
    from rdk_theory.cli import main

    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in REGISTRY)
    # names narrow the list (they were ignored), and an unknown one is an error there too
    assert main(["models", "list", "smollm2-135m"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split()[0] for r in rows] == ["smollm2-135m"]
    for action in ("fetch", "list"):
        assert main(["models", action, "gpt-17"]) == 2
        assert "error: unknown model 'gpt-17'" in capsys.readouterr().err
    assert main(["models"]) == 2
    assert capsys.readouterr().err.startswith("error: rdk-theory models: an action is required")
    assert main(["models", "list", "all", "smollm2-135m"]) == 2  # said "unknown model 'all'"
    assert "error: 'all' names every model: give it alone" in capsys.readouterr().err
    from gpu_validation.__main__ import main as module_main
    assert module_main(["models"]) == 2  # the message names the program that ran
    assert capsys.readouterr().err.startswith("error: python -m gpu_validation models: an action")
    # usage errors of the module's own parser: one line, as rdk-theory's (a usage block before)
    for argv, want in ((["run", "--positions", "0"], "error: python -m gpu_validation run: "
                        "argument --positions: expected an integer >= 1, got 0"),
                       ([], "error: python -m gpu_validation: a COMMAND is required, one of: "
                        "run, models")):
        try:
            code = module_main(argv)
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
        assert err.startswith(want), err
    assert main(["validate", "--kept", "4096,abc"]) == 2
    assert "--kept" in capsys.readouterr().err
    # a kept size beyond the built-in drafter's vocabulary: refused before any model loads
    assert main(["validate", "--kept", "200000", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --kept 200000 exceeds the vocabulary of qwen2.5-coder-0.5b (151,936 tokens)")
    assert not (tmp_path / "run").exists()


def test_bf16_cache_copy_leaves_the_live_model_at_its_own_precision(tmp_path):
    """The first load writes a bf16 copy for later loads; the float32 model that wrote it must
    keep its float32 weights (converting it to bf16 and back used to round them)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from gpu_validation import models

    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2)).to(torch.float32)
    before = {k: v.clone() for k, v in lm.state_dict().items()}

    class Tok:
        def save_pretrained(self, path):
            (path / "tokenizer.stub").write_text("stub")

    stub = type("M", (), {"sha256": "0" * 64, "name": "tiny"})()
    models._save_bf16(lm, Tok(), stub, tmp_path / "tiny-bf16")
    assert lm.dtype == torch.float32
    for k, v in lm.state_dict().items():
        assert torch.equal(v, before[k]), k
    saved = LlamaForCausalLM.from_pretrained(tmp_path / "tiny-bf16", dtype=torch.bfloat16)
    for k, v in saved.state_dict().items():
        assert torch.equal(v, before[k].to(torch.bfloat16)), k
    assert (tmp_path / "tiny-bf16" / models.SOURCE_STAMP).is_file()


@pytest.mark.parametrize("cached", [True, False])
def test_fetch_load_loads_only_when_the_bf16_copy_is_missing(monkeypatch, capsys, cached):
    """``models fetch --load`` (run by scripts/report.sh every time) writes the bf16 copy by
    loading once; with the copy there, loading again only cost about 10 s per run. Names after
    ``--load`` are taken (they were an 'unrecognized arguments' error)."""
    from rdk_theory.cli import main

    loaded = []
    monkeypatch.setattr(models, "fetch", lambda name, **kw: None)
    monkeypatch.setattr(models, "load", lambda name, **kw: loaded.append(name))
    monkeypatch.setattr(models, "bf16_cached", lambda model: cached)
    assert main(["models", "fetch", "--load", "smollm2-135m"]) == 0
    assert loaded == ([] if cached else ["smollm2-135m"])
    assert ("bf16 copy present" in capsys.readouterr().out) == cached
