"""The models' compute dtype: ``auto`` is float32 on the CPU and older GPUs and bfloat16 on
CUDA devices with native bf16, the dtype used is recorded, and a built-in model computes from
its bf16-rounded cache weights on every load, the first (the one that dequantises the GGUF)
included. Tiny random Llama models, no hub."""
from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from gpu_validation import models  # noqa: E402
from gpu_validation.__main__ import main  # noqa: E402


def test_auto_is_float32_on_the_cpu_and_bfloat16_on_cuda_with_native_bf16(monkeypatch):
    asked = []
    monkeypatch.setattr(models, "_cuda_has_native_bf16", lambda dev: asked.append(dev) or True)
    assert models.resolve_dtype("auto", "cpu") == "float32"
    assert asked == []  # the CPU never touches torch.cuda
    for dev in ("cuda", "cuda:0", "cuda:3"):
        assert models.resolve_dtype("auto", dev) == "bfloat16"
    assert asked == ["cuda", "cuda:0", "cuda:3"]
    monkeypatch.setattr(models, "_cuda_has_native_bf16", lambda dev: False)  # V100, T4
    for dev in ("cuda", "cuda:1"):
        assert models.resolve_dtype("auto", dev) == "float32"
    for explicit in ("bfloat16", "float32", "float16"):
        assert models.resolve_dtype(explicit, "cpu") == explicit
        assert models.resolve_dtype(explicit, "cuda") == explicit
    with pytest.raises(models.ModelError, match="dtype must be one of auto, bfloat16"):
        models.resolve_dtype("int8", "cpu")


@pytest.mark.parametrize("native, emulated", [(True, True), (False, True), (False, False)])
def test_native_bf16_probe_asks_the_named_device_and_ignores_emulation(monkeypatch, native,
                                                                       emulated):
    """torch counts emulated bf16 as supported unless told not to; ``auto`` must not."""
    import contextlib

    entered, calls = [], []

    def supported(including_emulation=True):
        calls.append(including_emulation)
        return native or (including_emulation and emulated)

    monkeypatch.setattr(torch.cuda, "device", lambda d: entered.append(d)
                        or contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", supported)
    assert models._cuda_has_native_bf16("cuda:2") is native
    assert entered == [torch.device("cuda:2")] and calls == [False]


@pytest.mark.parametrize("major, hip, want", [(7, None, False), (8, None, True),
                                              (9, None, True), (7, "6.0", True)])
def test_native_bf16_probe_on_a_torch_without_the_emulation_argument(monkeypatch, major, hip,
                                                                     want):
    """torch before 2.4: the compute capability decides (Volta/Turing no, Ampere on yes); on
    ROCm torch's own probe does."""
    import contextlib

    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: hip is not None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (major, 0))
    monkeypatch.setattr(torch.version, "hip", hip)
    assert models._cuda_has_native_bf16("cuda:1") is want


def test_load_defaults_to_float32_on_the_cpu_and_records_the_dtype(tiny):
    lm = models.load(tiny["narrow"])
    assert lm.info["dtype"] == "float32"
    assert {p.dtype for p in lm.model.parameters()} == {torch.float32}
    lm = models.load(tiny["narrow"], dtype="bfloat16")
    assert lm.info["dtype"] == "bfloat16"
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}
    with pytest.raises(models.ModelError, match="dtype must be one of"):
        models.load(tiny["narrow"], dtype="float8")


def test_cli_refuses_an_unknown_dtype(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--dtype", "int8"])
    assert exc.value.code == 2
    assert "--dtype" in capsys.readouterr().err


def test_first_load_of_a_builtin_computes_from_its_bf16_cache(tiny, tmp_path, monkeypatch,
                                                             stub_backends):
    """A GGUF's float32 dequantisation is not bf16-exact; the load that writes the bf16 cache
    must hand back the cache's weights, so that the first run's numbers are every later run's.
    Here the "GGUF" is the tiny float32 model (the GGUF reader is replaced: gguf is not
    needed)."""
    from pathlib import Path

    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    builtin = models.get_builtin("smollm2-135m")
    monkeypatch.setattr(models, "_verified_gguf",
                        lambda m, fetch, log: Path(tiny["narrow"]) / "model.gguf")
    auto_lm, auto_tok = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    orig_lm, orig_tok = auto_lm.from_pretrained, auto_tok.from_pretrained
    gguf_reads = []

    def reader(orig):
        def from_pretrained(path, **kw):
            if kw.pop("gguf_file", None) is not None:
                gguf_reads.append((str(path), kw.get("dtype")))
            return orig(path, **kw)
        return from_pretrained

    monkeypatch.setattr(auto_lm, "from_pretrained", reader(orig_lm))
    monkeypatch.setattr(auto_tok, "from_pretrained", reader(orig_tok))
    source = orig_lm(tiny["narrow"], dtype=torch.float32).state_dict()
    assert any(not torch.equal(v, v.bfloat16().float()) for v in source.values())

    first = models.load(builtin.name, log=lambda *a: None)
    # tokenizer and weights, once; the weights in bf16 (they only go to the cache)
    assert gguf_reads == [(tiny["narrow"], None), (tiny["narrow"], torch.bfloat16)]
    assert first.info["loaded_from"] == "bf16 cache (written from the GGUF by this load)"
    assert first.info["dtype"] == "float32" and first.info["weights_precision"] == "bfloat16"
    second = models.load(builtin.name, log=lambda *a: None)
    assert len(gguf_reads) == 2 and second.info["loaded_from"] == "bf16 cache"
    w1, w2 = first.model.state_dict(), second.model.state_dict()
    for k, v in w1.items():
        assert v.dtype == torch.float32, k
        assert torch.equal(v, source[k].bfloat16().float()), k
        assert torch.equal(v, w2[k]), k
