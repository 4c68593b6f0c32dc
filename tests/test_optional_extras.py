"""A missing optional dependency is one ``error: ...`` line naming what to install (exit status
2), never a traceback; where the command can do its job without it, a warning and a fallback.

Here: torch (the ``torch`` extra), transformers and gguf (the ``models`` extra) for every
command that loads a real model (``report`` with the real pair fetched, ``validate``, ``validate
--hetero``, ``models fetch --load``, ``python -m gpu_validation run``), and plugins (commands,
report sources) that fail to import.

A missing module is simulated in-process by a None in ``sys.modules`` (``import torch`` then
raises ModuleNotFoundError, even where torch was imported before), and in a subprocess by
meta path finders that do not find it. The fetched state is a stub (``models.is_fetched``,
``models.bf16_cached``) or, in the subprocess, a bf16 source stamp in an empty cache; the
loaders are stubs that fail the test if reached: nothing is fetched or loaded.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_validation import harness, hetero, models
from gpu_validation.registry import REGISTRY
from rdk_theory import cli
from rdk_theory import report as report_mod
from rdk_theory._optional import missing_modules
from rdk_theory.cli import main

ROOT = Path(__file__).resolve().parents[1]

NO_TORCH = "torch is not installed (pip install 'rdk-theory[torch]')"
NO_TRANSFORMERS = "transformers is not installed (pip install 'rdk-theory[models]')"
NO_BOTH = "torch and transformers are not installed (pip install 'rdk-theory[torch,models]')"
NO_GGUF = "gguf is not installed (pip install 'rdk-theory[models]')"
SYNTHETIC = ["--quick", "--vocab", "48", "--keep", "1,0.5"]  # the fallback, in a second


def _needs(*modules):
    """Skip unless each of ``modules`` is installed: a test that hides one module expects a
    message naming that one alone, and a report's exact stderr has no "figure skipped" line
    only with matplotlib (a venv with the test extra alone has none of them)."""
    import importlib.util

    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"needs {m}, which is not installed")


def _block(monkeypatch, *modules):
    """``import m`` raises ModuleNotFoundError for each of ``modules`` (until the test ends)."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.fixture
def fetched(monkeypatch, tmp_path):
    """Every built-in model fetched, with its bf16 copy (so gguf is not needed): stubs, in an
    empty cache."""
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "is_fetched", lambda model: True)
    monkeypatch.setattr(models, "bf16_cached", lambda model: True)


@pytest.fixture
def heavy(monkeypatch):
    """Every fetch, load and run: stubs that record the call and fail the test."""
    calls = []

    def stub(name):
        def fail(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was reached")
        return fail

    for mod, attr in ((models, "load"), (models, "load_tokenizer"), (models, "fetch"),
                      (harness, "collect_pair"), (harness, "run"), (hetero, "run")):
        monkeypatch.setattr(mod, attr, stub(f"{mod.__name__}.{attr}"))
    return calls


def _run(capsys, *argv, entry=main):
    code = entry(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the message --------------------------------------------------------------------------


def test_missing_modules_names_the_absent_together_and_the_broken_with_its_error(monkeypatch):
    assert missing_modules([("json", "none")]) is None
    _block(monkeypatch, "torch", "transformers", "gguf")
    assert missing_modules([("torch", "torch")]) == NO_TORCH
    assert missing_modules([("torch", "torch"), ("transformers", "models")]) == NO_BOTH
    assert missing_modules([("torch", "torch"), ("transformers", "models"), ("gguf", "models")]) \
        == "torch, transformers and gguf are not installed (pip install 'rdk-theory[torch,models]')"

    class Broken:  # present, but its import fails on something of its own
        def find_spec(self, name, path=None, target=None):
            if name == "rdk_broken_mod":
                raise ImportError("DLL load failed")
            return None

    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    assert missing_modules([("rdk_broken_mod", "x"), ("json", "none")]) == \
        "rdk_broken_mod could not be imported: DLL load failed"
    # an absent one first: nothing is imported (installing it comes first)
    assert missing_modules([("rdk_broken_mod", "x"), ("torch", "torch")]) == NO_TORCH


def test_backend_failure_asks_gguf_only_where_a_gguf_file_is_read(monkeypatch, tmp_path):
    """The bf16 copy loads without gguf; a built-in without it, or a .gguf path, needs it (and
    torch, even for the tokenizer: transformers' GGUF reader needs both)."""
    _needs("torch", "transformers")
    _block(monkeypatch, "gguf")
    monkeypatch.setattr(models, "bf16_cached", lambda model: True)
    assert models.backend_failure("smollm2-135m", "Qwen/Qwen2.5-0.5B") is None
    assert models.backend_failure(str(tmp_path / "m.gguf")) == NO_GGUF
    monkeypatch.setattr(models, "bf16_cached", lambda model: False)
    assert models.backend_failure("truncated:2:smollm2-135m") == NO_GGUF
    _block(monkeypatch, "torch")
    assert models.backend_failure("Qwen/Qwen2.5-0.5B", weights=False) is None  # a tokenizer
    assert models.backend_failure("smollm2-135m", weights=False) == \
        "torch and gguf are not installed (pip install 'rdk-theory[torch,models]')"


def test_the_loaders_refuse_before_reading_anything(monkeypatch, tmp_path):
    """Called directly (not through a command): a ModelError, not a traceback halfway."""
    _needs("transformers")
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))  # empty: a fetch would be reached
    _block(monkeypatch, "torch")
    _block(monkeypatch, "gguf")  # a built-in without its bf16 copy reads a GGUF: named too
    with pytest.raises(models.ModelError) as err:
        models.load("smollm2-135m", fetch_missing=True)
    assert str(err.value) == ("cannot load the models: torch and gguf are not installed "
                              "(pip install 'rdk-theory[torch,models]')")
    _block(monkeypatch, "transformers")
    with pytest.raises(models.ModelError) as err:
        models.load_tokenizer("Qwen/Qwen2.5-0.5B")
    assert str(err.value) == f"cannot load the models: {NO_TRANSFORMERS}"
    assert list(tmp_path.iterdir()) == []


# --- report -------------------------------------------------------------------------------


@pytest.mark.parametrize("missing, why", [(("torch",), NO_TORCH),
                                          (("transformers",), NO_TRANSFORMERS),
                                          (("torch", "transformers"), NO_BOTH)])
def test_report_auto_with_the_pair_fetched_but_no_torch_falls_back_with_one_warning(
        monkeypatch, capsys, tmp_path, fetched, heavy, missing, why):
    """It was a traceback from the first model load; now one warning naming what to install,
    then the synthetic LM's report, exit 0, and no model was loaded."""
    _needs("matplotlib", *({"torch", "transformers"} - set(missing)))
    _block(monkeypatch, *missing)
    code, out, err = _run(capsys, "report", *SYNTHETIC, "--out", str(tmp_path / "out"))
    assert code == 0 and heavy == []
    assert err == (f"warning: the real model pair is fetched but cannot be loaded: {why}: "
                   "using the synthetic Zipfian LM\n")
    assert json.loads((tmp_path / "out" / "report.json").read_text())["source"].startswith(
        "synthetic")


def test_report_auto_names_gguf_when_the_pair_has_no_bf16_copy(monkeypatch, capsys, tmp_path,
                                                               fetched, heavy):
    _needs("torch", "transformers", "matplotlib")
    monkeypatch.setattr(models, "bf16_cached", lambda model: False)
    _block(monkeypatch, "gguf")
    code, out, err = _run(capsys, "report", *SYNTHETIC, "--out", str(tmp_path / "out"))
    assert (code, heavy) == (0, [])
    assert err == (f"warning: the real model pair is fetched but cannot be loaded: {NO_GGUF}: "
                   "using the synthetic Zipfian LM\n")


def test_report_real_with_the_pair_fetched_but_no_torch_is_one_error_line(
        monkeypatch, capsys, tmp_path, fetched, heavy):
    _needs("transformers")
    _block(monkeypatch, "torch")
    code, out, err = _run(capsys, "report", "--source", "real", "--out", str(tmp_path / "out"))
    assert (code, out, heavy) == (2, "", [])
    assert err == f"error: the real model pair is fetched but cannot be loaded: {NO_TORCH}\n"
    assert not (tmp_path / "out").exists()  # the folder it would have made is not left behind


class _BrokenSource:
    name = "real"

    def __init__(self, exc):
        self.exc = exc

    def load(self):
        raise self.exc


@pytest.mark.parametrize("exc, why", [
    (ImportError("no module named 'torch'\nsecond line"),
     "ImportError: no module named 'torch'\\nsecond line"),
    (AttributeError("module 'gpu_validation.report_source' has no attribute 'gone'"),
     "AttributeError: module 'gpu_validation.report_source' has no attribute 'gone'"),
    (RuntimeError("boom"), "RuntimeError: boom")])
def test_a_real_report_source_that_fails_to_import_is_named_as_such(
        monkeypatch, capsys, tmp_path, exc, why):
    """It said '(gpu_validation missing)' under real, and under auto a warning of its own and
    then 'real models not fetched' (a stale entry point, not an ImportError, was a traceback).
    Now one line each, naming the failed import and its error."""
    _needs("matplotlib")
    monkeypatch.setattr(report_mod, "entry_points", lambda group: [_BrokenSource(exc)])
    code, out, err = _run(capsys, "report", "--source", "real", "--out", str(tmp_path / "r"))
    assert (code, out) == (2, "")
    assert err == f"error: the 'real' report source could not be loaded: {why}\n"
    assert not (tmp_path / "r").exists()
    code, out, err = _run(capsys, "report", *SYNTHETIC, "--out", str(tmp_path / "a"))
    assert code == 0
    assert err == (f"warning: the 'real' report source could not be loaded: {why}: using the "
                   "synthetic Zipfian LM\n")


def test_report_without_a_real_source_says_so(monkeypatch, capsys, tmp_path):
    """No 'real' entry point at all: auto no longer says the models are not fetched."""
    _needs("matplotlib")
    monkeypatch.setattr(report_mod, "entry_points", lambda group: [])
    code, out, err = _run(capsys, "report", *SYNTHETIC, "--out", str(tmp_path / "a"))
    assert code == 0
    assert err == "warning: no 'real' report source is installed: using the synthetic Zipfian LM\n"
    code, out, err = _run(capsys, "report", "--source", "real", "--out", str(tmp_path / "r"))
    assert (code, err) == (2, "error: no 'real' report source is installed (gpu_validation "
                              "missing)\n")


# --- validate, validate --hetero, models fetch --load, python -m gpu_validation run ---------


@pytest.mark.parametrize("argv, missing, want", [
    (["validate", "--quick"], ("torch",), f"cannot load the models: {NO_TORCH}"),
    (["validate", "--quick"], ("torch", "transformers"), f"cannot load the models: {NO_BOTH}"),
    (["validate", "--target", "Qwen/Qwen2.5-0.5B", "--drafter", "Qwen/Qwen2.5-0.5B", "--quick"],
     ("transformers",), f"cannot load the models: {NO_TRANSFORMERS}"),
    (["validate", "--device", "cuda", "--quick"], ("torch",), f"--device cuda: {NO_TORCH}"),
    (["validate", "--hetero"], ("transformers",), f"cannot load the models: {NO_TRANSFORMERS}"),
    # the device first, as in the main study (it was the models' message here)
    (["validate", "--hetero", "--device", "cuda"], ("torch",), f"--device cuda: {NO_TORCH}"),
    (["models", "fetch", "--load", "smollm2-135m"], ("torch",),
     f"cannot load the models: {NO_TORCH}"),
])
def test_commands_that_load_a_model_refuse_without_its_extra_before_any_work(
        monkeypatch, capsys, tmp_path, fetched, heavy, argv, missing, want):
    """One error line, exit 2, before anything is fetched, loaded or run, and no --out folder
    left behind; each was a traceback (from the first load, or the fetch's --load)."""
    _needs(*({"torch", "transformers"} - set(missing)), *(["gguf"] if argv[0] == "models" else []))
    if argv[:2] == ["models", "fetch"]:  # not loaded yet: the load reads the GGUF
        monkeypatch.setattr(models, "bf16_cached", lambda model: False)
    _block(monkeypatch, *missing)
    out_dir = tmp_path / "out"
    code, out, err = _run(capsys, *argv, *([] if argv[0] == "models" else ["--out", str(out_dir)]))
    assert (code, out, heavy) == (2, "", [])
    assert err == f"error: {want}\n"
    assert not out_dir.exists()


def test_models_fetch_load_with_the_bf16_copy_needs_no_torch(monkeypatch, capsys, fetched):
    """Nothing would be loaded (the bf16 copy is there): the fetch goes on without torch."""
    fetches = []
    monkeypatch.setattr(models, "fetch", lambda name: fetches.append(name))
    _block(monkeypatch, "torch", "transformers")
    code, out, err = _run(capsys, "models", "fetch", "--load", "smollm2-135m")
    assert (code, err, fetches) == (0, "", ["smollm2-135m"])
    assert out == "smollm2-135m: bf16 copy present, not loaded again\n"


def test_models_fetch_load_names_gguf_for_the_first_load(monkeypatch, capsys, fetched, heavy):
    _needs("torch", "transformers")
    monkeypatch.setattr(models, "bf16_cached", lambda model: False)
    _block(monkeypatch, "gguf")
    code, out, err = _run(capsys, "models", "fetch", "--load", "smollm2-135m")
    assert (code, out, heavy) == (2, "", [])
    assert err == f"error: cannot load the models: {NO_GGUF}\n"


def test_python_m_gpu_validation_run_refuses_without_torch(monkeypatch, capsys, tmp_path,
                                                          fetched, heavy):
    _needs("transformers")
    from gpu_validation.__main__ import main as gv_main

    _block(monkeypatch, "torch")
    code, out, err = _run(capsys, "run", "--quick", "--out", str(tmp_path / "out"),
                          entry=gv_main)
    assert (code, out, heavy) == (2, "", [])
    assert err == f"error: cannot load the models: {NO_TORCH}\n"


# --- plugin commands ----------------------------------------------------------------------


@pytest.mark.parametrize("exc, why", [
    (AttributeError("module 'simulators.cli' has no attribute 'register'"),
     "AttributeError: module 'simulators.cli' has no attribute 'register'"),
    (RuntimeError("plugin failed\nat import"), "RuntimeError: plugin failed\\nat import"),
    # a package's own exception is named with its package, as the report's message names it
    (__import__("json").JSONDecodeError("bad entry", "x", 0),
     "json.JSONDecodeError: bad entry: line 1 column 1 (char 0)"),
    (ImportError("cannot import name 'gone' from 'somewhere'"),
     "cannot import name 'gone' from 'somewhere'")])
def test_a_plugin_command_that_fails_to_import_is_one_warning_and_the_core_works(
        monkeypatch, capsys, tmp_path, exc, why):
    """A stale entry point or a plugin raising at import killed every command, the core's
    ``acceptance`` included; now one warning naming the command and the error."""
    import numpy as np

    class Broken:
        name = "zzz"

        def load(self):
            raise exc

    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points", lambda group: [*real(group=group), Broken()])
    np.savez(tmp_path / "c.npz", target_probs=np.array([[0.25, 0.75]]),
             draft_probs=np.array([[0.5, 0.5]]), draft_to_target=np.array([1, -1]))
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "c.npz"), "--json")
    assert code == 0 and out.startswith("{")
    assert err == f"warning: command 'zzz' unavailable: {why}\n"


# --- in a process where torch and transformers cannot be imported at all ------------------

_WRAPPER = """
import sys
BLOCKED = set(sys.argv[1].split(","))

class Hide:  # as if not installed: no finder finds it (find_spec returns None)
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)

sys.meta_path[:] = [Hide(f) for f in sys.meta_path]
from rdk_theory.cli import main
code = main(sys.argv[2:])
assert not BLOCKED & set(sys.modules), "a blocked module was imported"
sys.exit(code)
"""


def _cli_without(tmp_path, blocked, *argv):
    cache = tmp_path / "cache"
    for name in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"):  # the default pair, "fetched"
        (cache / f"{name}-bf16").mkdir(parents=True, exist_ok=True)
        (cache / f"{name}-bf16" / models.SOURCE_STAMP).write_text(
            json.dumps({"sha256": REGISTRY[name].sha256}))
    env = {**os.environ, "RDK_THEORY_CACHE": str(cache),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", _WRAPPER, ",".join(blocked), *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_report_and_validate_in_a_process_without_torch_and_transformers(tmp_path):
    _needs("matplotlib", "transformers", "gguf")
    r = _cli_without(tmp_path, ("torch", "transformers"), "report", *SYNTHETIC)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"warning: the real model pair is fetched but cannot be loaded: "
                        f"{NO_BOTH}: using the synthetic Zipfian LM\n")
    assert (tmp_path / "outputs" / "report" / "report.json").is_file()
    r = _cli_without(tmp_path, ("torch", "transformers"), "report", "--source", "real",
                     "--out", "real")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"error: the real model pair is fetched but cannot be loaded: {NO_BOTH}\n"
    r = _cli_without(tmp_path, ("torch",), "validate", "--quick", "--out", "val")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"error: cannot load the models: {NO_TORCH}\n"
    assert not (tmp_path / "real").exists() and not (tmp_path / "val").exists()
    # the first load of a model with no bf16 copy: refused before the fetch (no pip run)
    r = _cli_without(tmp_path, ("torch",), "models", "fetch", "--load", "smollm2-135m")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"error: cannot load the models: {NO_TORCH}\n"
