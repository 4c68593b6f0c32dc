"""``rdk-theory validate``: bad --out folders and model specs are one ``error:`` line, exit 2,
before any model is loaded, and a failed run leaves no empty folder of its own behind.

No model is loaded here: the loaders are replaced by stubs that fail the test if reached
(``loaded`` lists what reached them)."""
from __future__ import annotations

import pytest

from gpu_validation import harness, models
from rdk_theory.cli import main

FAST = ("--quick", "--no-timing")


def _fast(hetero) -> tuple:
    """FAST for the main run; nothing with --hetero, which refuses the study's options."""
    return () if hetero else FAST


def _drafter(tmp_path, hetero) -> str:
    """An existing folder as drafter: with --hetero one other than the target (tmp_path),
    which --hetero drops (a drafter list of the target alone is refused)."""
    return str(tmp_path.parent if hetero else tmp_path)


@pytest.fixture
def loaded(monkeypatch, stub_backends):
    """Every call of a model or tokenizer loader, which raises so that no run goes on."""
    calls = []

    def loader(spec, **kwargs):
        calls.append(spec)
        raise AssertionError(f"a loader was reached with {spec!r}")

    monkeypatch.setattr(models, "load", loader)
    monkeypatch.setattr(models, "load_tokenizer", loader)
    return calls


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("hetero", [(), ("--hetero",)])
@pytest.mark.parametrize("where", ["afile", "afile/sub"])
def test_an_out_that_is_a_file_or_under_one_is_refused_naming_out(tmp_path, capsys, loaded,
                                                                  where, hetero):
    """It said 'error: File exists: afile' or 'Not a directory: afile/sub' (after the study,
    with --hetero), not which option was wrong."""
    (tmp_path / "afile").write_text("")
    out = tmp_path / where
    assert main(["validate", *hetero, *_fast(hetero), "--target", str(tmp_path), "--drafter",
                 _drafter(tmp_path, hetero), "--out", str(out)]) == 2
    what = ("exists and is not a directory" if where == "afile"
            else f"lies under a file, {tmp_path / 'afile'}")
    assert _error_line(capsys) == f"error: --out {out} {what}"
    assert loaded == [] and [p.name for p in tmp_path.iterdir()] == ["afile"]


@pytest.mark.parametrize("command", [["report", "--source", "synthetic", "--quick"],
                                     ["validate", *FAST]])
@pytest.mark.parametrize("where", ["link", "link/sub"])
def test_an_out_at_or_under_a_broken_symbolic_link_is_refused_naming_out(tmp_path, capsys,
                                                                         loaded, command, where):
    """A link to a missing folder is not a folder makedirs can make (it said 'error: File
    exists: link', which did not name --out), and nothing is made or removed."""
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    out = tmp_path / where
    extra = ["--target", str(tmp_path), "--drafter", str(tmp_path)] if command[0] == "validate" else []
    assert main([*command, *extra, "--out", str(out)]) == 2
    what = "is" if where == "link" else f"lies under {tmp_path / 'link'},"
    assert _error_line(capsys) == (f"error: --out {out} {what} a broken symbolic link "
                                   f"(to {tmp_path / 'nowhere'})")
    assert loaded == [] and [p.name for p in tmp_path.iterdir()] == ["link"]


@pytest.mark.parametrize("hetero, name", [((), "time_vs_n.png"), ((), "report.json"),
                                          (("--hetero",), "hetero.json")])
def test_an_output_file_that_is_a_folder_is_refused_before_any_model_loads(
        tmp_path, capsys, loaded, hetero, name):
    """A folder where the run writes a file failed only at the end, after the study (for
    the figures, after report.json had been written)."""
    (tmp_path / name).mkdir()
    assert main(["validate", *hetero, *_fast(hetero), "--target", str(tmp_path), "--drafter",
                 _drafter(tmp_path, hetero), "--out", str(tmp_path)]) == 2
    assert _error_line(capsys) == (f"error: --out {tmp_path}: {name} is a folder; the run "
                                   "writes a file there")
    assert loaded == []


@pytest.mark.parametrize("hetero", [(), ("--hetero",)])
def test_a_failed_run_removes_only_the_empty_folders_it_made(tmp_path, capsys, monkeypatch,
                                                           stub_backends, hetero):
    """A model that failed to load left an empty --out (and its parents) behind; a folder that
    existed before is kept."""
    def load_fails(spec, **kwargs):
        raise models.ModelError(f"cannot load {spec!r}")

    monkeypatch.setattr(models, "load", load_fails)
    monkeypatch.setattr(models, "load_tokenizer", load_fails)
    (tmp_path / "kept").mkdir()
    assert main(["validate", *hetero, *_fast(hetero), "--target", str(tmp_path), "--drafter",
                 _drafter(tmp_path, hetero), "--out", str(tmp_path / "kept" / "a" / "b")]) == 2
    assert _error_line(capsys) == f"error: cannot load {str(tmp_path)!r}"
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert not any((tmp_path / "kept").iterdir())


def test_a_run_that_fails_after_writing_keeps_what_it_wrote(tmp_path, capsys, monkeypatch,
                                                           stub_backends):
    out = tmp_path / "a" / "b"

    def writes_then_fails(cfg, log):  # e.g. laws.npz written, then a later stage fails
        (out / "laws.npz").write_text("computed")
        raise models.ModelError("failed after writing")

    monkeypatch.setattr(harness, "collect_pair", writes_then_fails)
    assert main(["validate", *FAST, "--target", str(tmp_path), "--drafter", str(tmp_path),
                 "--out", str(out)]) == 2
    assert _error_line(capsys) == "error: failed after writing"
    assert (out / "laws.npz").read_text() == "computed"


@pytest.mark.parametrize("hetero", [(), ("--hetero",)])
@pytest.mark.parametrize("option, spec, message", [
    ("--target", "nope.gguf", "the local .gguf file nope.gguf does not exist"),
    ("--drafter", "./models/nope.gguf", "the local .gguf file ./models/nope.gguf does not exist"),
    ("--target", "./no-such-folder", "./no-such-folder: no such file or folder"),
    ("--drafter", "../no-such-folder", "../no-such-folder: no such file or folder"),
    ("--drafter", "~/no/such/rdk-model", "~/no/such/rdk-model: no such file or folder"),
    ("--drafter", "{tmp}/absent", "{tmp}/absent: no such file or folder"),
])
def test_a_missing_local_model_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch,
                                                                 loaded, option, spec, message,
                                                                 hetero):
    """A missing .gguf file or path went to transformers as a hub id ('Repo id must use
    alphanumeric chars ...'), for the drafter only after the target had loaded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    other = "--drafter" if option == "--target" else "--target"
    out = tmp_path / "run"
    assert main(["validate", *hetero, *_fast(hetero), other, str(tmp_path),
                 option, spec.format(tmp=tmp_path), "--out", str(out)]) == 2
    assert _error_line(capsys) == "error: " + message.format(tmp=tmp_path)
    assert loaded == [] and not out.exists()


@pytest.mark.parametrize("spec, message", [
    ("truncated:abc", "expected 'truncated:LAYERS:MODEL', got 'truncated:abc'"),
    ("truncated:x:smollm2-135m",
     "expected 'truncated:LAYERS:MODEL', got 'truncated:x:smollm2-135m'"),
    ("truncated:0:smollm2-135m", "truncated:0:smollm2-135m: a truncated model keeps at least 1 "
                                 "layer, not 0"),
    ("truncated:2:./nope.gguf", "the local .gguf file ./nope.gguf does not exist"),
    ("truncated:2:", "truncated:2:: names no model after the layer count"),
    # beyond a built-in's layers: refused once the 0.5B had loaded, after the target
    ("truncated:25:qwen2.5-coder-0.5b", "truncated:25:qwen2.5-coder-0.5b: qwen2.5-coder-0.5b "
                                        "has 24 layers; cannot keep 25"),
    ("truncated:19:Gemma-3-270m", "truncated:19:Gemma-3-270m: gemma-3-270m has 18 layers; "
                                  "cannot keep 19"),
])
def test_a_bad_truncated_drafter_is_refused_before_the_target_loads(tmp_path, capsys,
                                                                    monkeypatch, loaded, spec,
                                                                    message):
    """'truncated:abc' was parsed only when the drafter loaded, after the target (minutes on
    a CPU); the message is the same, now before any model."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["validate", *FAST, "--target", str(tmp_path), "--drafter", spec, "--fetch",
                 "--out", str(out)]) == 2
    assert _error_line(capsys) == f"error: {message}"
    assert loaded == [] and not out.exists()


def test_an_unfetched_builtin_drafter_is_refused_before_the_target_loads(tmp_path, capsys,
                                                                        monkeypatch, loaded):
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "cache"))
    assert main(["validate", *FAST, "--target", str(tmp_path), "--drafter", "smollm2-135m",
                 "--out", str(tmp_path / "run")]) == 2
    assert _error_line(capsys) == ("error: smollm2-135m is not fetched: run 'rdk-theory models "
                                   "fetch smollm2-135m' (or point --target/--drafter at a hub "
                                   "id or path)")
    assert loaded == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec", ["Qwen/Qwen2.5-0.5B", "models/mine", "gpt2",
                                  "QWEN2.5-CODER-0.5B", "truncated:2:Qwen/Qwen2.5-0.5B",
                                  "truncated:24:qwen2.5-coder-0.5b",
                                  "{tmp}/here.gguf", "./here.gguf"])
def test_hub_ids_builtin_names_and_existing_paths_reach_the_loader(tmp_path, monkeypatch,
                                                                   loaded, spec):
    """The false goal: the up-front check must not refuse what can load. Hub ids (one slash,
    no leading ./), built-in names (with --fetch) and existing files go on to the loader."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.gguf").write_bytes(b"GGUF")
    spec = spec.format(tmp=tmp_path)
    with pytest.raises(AssertionError, match="a loader was reached"):
        main(["validate", *FAST, "--target", spec, "--drafter", spec, "--fetch",
              "--kept", "8", "--out", str(tmp_path / "run")])
    assert loaded == [spec] and not (tmp_path / "run").exists()


def test_the_drafter_loads_first_so_a_drafter_that_cannot_load_costs_no_target_load(
        tmp_path, monkeypatch, loaded):
    """A hub-id drafter that does not exist fails only when it loads (nothing checks a hub id
    offline): it was loaded after the target, minutes of the larger model wasted."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="a loader was reached"):
        main(["validate", *FAST, "--target", "Qwen/Big", "--drafter", "nosuch/model",
              "--kept", "8", "--out", str(tmp_path / "run")])
    assert loaded == ["nosuch/model"]


@pytest.mark.parametrize("argv, message", [
    # an empty spec was replaced by the default model (Qwen 1.5B loaded for --target '')
    (["--target", ""], "error: an empty model name"),
    (["--drafter", ""], "error: an empty model name"),
    (["--hetero", "--target", ""], "error: an empty model name"),
    # no drafter at all: it loaded the target, printed an empty table and exited 0
    (["--hetero", "--drafter", ","], "error: --drafter must be comma-separated model names, "
                                     "got ','"),
    # the default kept sizes do not fit SmolLM2: named as the default, not as a --kept given
    (["--target", "smollm2-135m", "--drafter", "smollm2-135m"],
     "error: the default --kept size 65536 exceeds the vocabulary of smollm2-135m (49,152 "
     "tokens): choose sizes up to 49,152 with --kept"),
    # a truncated built-in drafter was checked only once both models had loaded
    (["--target", "smollm2-135m", "--drafter", "truncated:2:smollm2-135m", "--kept", "60000"],
     "error: --kept 60000 exceeds the vocabulary of smollm2-135m (49,152 tokens)"),
    # two built-ins of different tokenizers were refused only once both had loaded (with
    # --fetch: only the spec's form is checked before, as on a machine that fetched nothing)
    (["--target", "smollm2-135m", "--fetch"],
     "error: the pruned-drafter study needs target and drafter with the same tokenizer; "
     "smollm2-135m (49,152 ids) and qwen2.5-coder-0.5b (151,936) differ (see --hetero"),
    (["--drafter", "truncated:4:gemma-3-270m", "--fetch"],
     "error: the pruned-drafter study needs target and drafter with the same tokenizer; "
     "qwen2.5-coder-1.5b (151,936 ids) and gemma-3-270m (262,144) differ"),
    # a truncation of a truncation was accepted, and truncated twice at load time
    (["--drafter", "truncated:2:truncated:3:qwen2.5-coder-0.5b", "--fetch"],
     "error: truncated:2:truncated:3:qwen2.5-coder-0.5b: the model after the layer count is "
     "itself truncated"),
    # ignored, even when invalid, beside --no-timing (which this test adds)
    (["--timing-sizes", "99999999999"],
     "error: --timing-sizes does not apply with --no-timing (no timing sweep runs)"),
])
def test_specs_and_default_sizes_are_checked_as_given(tmp_path, capsys, loaded, argv, message):
    no_timing = [] if "--hetero" in argv else ["--no-timing"]  # --hetero refuses it
    assert main(["validate", *argv, *no_timing, "--out", str(tmp_path / "run")]) == 2
    assert _error_line(capsys).startswith(message)
    assert loaded == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv, message", [
    (["--drafter", ""], "error: an empty model name"),
    (["--target", "smollm2-135m", "--drafter", "truncated:x:smollm2-135m"],
     "error: expected 'truncated:LAYERS:MODEL', got 'truncated:x:smollm2-135m'"),
    (["--hetero", "--drafter", "smollm2-135m,/no/such.gguf"],
     "error: the local .gguf file /no/such.gguf does not exist"),
])
def test_a_malformed_spec_is_named_before_an_unfetched_model(tmp_path, monkeypatch, capsys,
                                                             loaded, argv, message):
    """With nothing fetched, '--drafter ""' was answered with the default target's "not
    fetched" (and fetching it brought the empty name only then): every spec's form is checked
    before any built-in's fetched state."""
    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path / "empty"))
    no_timing = [] if "--hetero" in argv else ["--no-timing"]
    assert main(["validate", *argv, *no_timing, "--out", str(tmp_path / "run")]) == 2
    assert _error_line(capsys).startswith(message)
    assert loaded == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize("hetero", [(), ("--hetero",)])
def test_a_corrupt_gguf_is_one_error_line_naming_it(tmp_path, capsys, hetero):
    """A file with the GGUF magic and garbage after it was struct.error's 38-line traceback
    (random bytes with --hetero: ValueError's), exit 1: the status of a failed check."""
    for module in ("torch", "transformers", "gguf"):  # the loaders really read the file
        pytest.importorskip(module)
    if hetero and not models.is_fetched(models.get_builtin("smollm2-135m")):
        pytest.skip("needs smollm2-135m fetched (rdk-theory models fetch smollm2-135m)")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    drafter = ("--drafter", "smollm2-135m") if hetero else ("--drafter", str(bad))
    study = () if hetero else ("--kept", "50", "--no-timing")  # --hetero refuses them
    assert main(["validate", *hetero, "--target", str(bad), *drafter, *study,
                 "--out", str(tmp_path / "run")]) == 2
    line = _error_line(capsys)
    assert line.startswith("error: cannot load ") and repr(str(bad)) in line, line


@pytest.mark.parametrize("drafters", ["{t}", "{t},{t}"])
def test_a_hetero_drafter_list_of_the_target_alone_is_refused(tmp_path, capsys, loaded,
                                                                drafters):
    """The emptiness check ran before hetero.run dropped every drafter equal to the target:
    it loaded the target, printed the table's header alone and exited 0 (hetero.json with no
    pairs). Now the list is read without the target, each once, and refused before any
    model loads."""
    given = drafters.format(t=tmp_path)
    out = tmp_path / "run"
    assert main(["validate", "--hetero", "--target", str(tmp_path), "--drafter", given,
                 "--out", str(out)]) == 2
    assert _error_line(capsys) == (f"error: --drafter {given!r} names no drafter vocabulary "
                                   "other than the target")
    assert loaded == [] and not out.exists()


def test_hetero_reads_each_drafter_once_without_the_target(tmp_path, monkeypatch, capsys,
                                                           stub_backends):
    """'--drafter a,t,a' with target t: the study gets ('a',) (a repeat printed its rows
    twice, and the target was checked as a drafter before hetero.run dropped it)."""
    from gpu_validation import cli, hetero

    checked, ran = [], []
    monkeypatch.setattr(cli, "check_specs",
                        lambda *specs, fetch_missing: checked.extend(specs))
    monkeypatch.setattr(hetero, "run", lambda target, drafters, **kw: ran.append(
        (target, drafters)) or {})
    monkeypatch.setattr(hetero, "summary_lines", lambda report: [])
    assert main(["validate", "--hetero", "--target", "t", "--drafter", "a,t,a",
                 "--out", str(tmp_path / "h")]) == 0
    assert checked == ["t", "a"] and ran == [("t", ("a",))]


@pytest.mark.parametrize("argv", [
    ["--quick"], ["--kept", "abc"], ["--kept", "4096"], ["--positions", "5"], ["--steps", "3"],
    ["--topk", "5"], ["--e2e-kept", "4096"], ["--e2e-tokens", "7"], ["--no-timing"],
    ["--timing-sizes", "99999999"], ["--seed", "0"], ["--seed", "3"],
])
def test_hetero_refuses_the_options_of_the_main_study(tmp_path, capsys, loaded, argv):
    """--hetero never read them: '--kept abc --topk 5 --quick' ran and exited 0, with no
    laws.npz though --topk promises one. Now the first one given is one error line, before
    any model loads (--seed 0, the default's value, too: it was given)."""
    out = tmp_path / "run"
    assert main(["validate", "--hetero", "--target", str(tmp_path), "--drafter",
                 str(tmp_path.parent), *argv, "--out", str(out)]) == 2
    assert _error_line(capsys) == (f"error: {argv[0]} does not apply to --hetero (the "
                                   "heterogeneous-tokenizer study reads --target, --drafter, "
                                   "--device, --dtype, --fetch and --out)")
    assert loaded == [] and not out.exists()


def test_study_and_hetero_options_are_every_option_of_validate():
    """--hetero refuses the study's options from a list (STUDY_OPTIONS) and names what it
    reads (HETERO_OPTIONS): an option added to 'validate' and to neither list would be ignored
    by --hetero without a word. The two lists split the parser's options exactly, each
    attribute is the option's own, and the help of --hetero names both lists."""
    import argparse

    from gpu_validation.cli import HETERO_OPTIONS, STUDY_OPTIONS, add_run_arguments

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    dest = {a.option_strings[-1]: a.dest for a in p._actions if a.option_strings
            and "--help" not in a.option_strings}
    study = dict(STUDY_OPTIONS)
    assert not set(study) & set(HETERO_OPTIONS)
    assert sorted(dest) == sorted([*study, *HETERO_OPTIONS, "--hetero"])
    assert study == {opt: dest[opt] for opt in study}
    # refused means given (anything but None or False): each study option defaults to one of
    # them, as objects (a default 0 is == False, and would have made --hetero refuse every run)
    assert all(p.get_default(attr) is None or p.get_default(attr) is False
               for attr in study.values())
    help_text = " ".join(p.format_help().split())
    assert ("It reads --target, --drafter, --device, --dtype, --fetch and --out; the study "
            "options (--quick, --kept, --positions, --steps, --topk, --e2e-kept, --e2e-tokens, "
            "--no-timing, --timing-sizes, --seed) do not apply to it and are refused") in help_text


def test_validate_help_names_the_quick_settings_and_the_size_limit(capsys):
    """--help spelled out neither the sizes --quick runs nor the timing sizes' limit: both are
    written there by hand (the harness loads torch), so they are checked against the code."""
    from gpu_validation import timing
    from gpu_validation.harness import RunConfig

    with pytest.raises(SystemExit):
        main(["validate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    q = RunConfig.quick()
    assert (f"kept sizes {','.join(map(str, q.kept))}, {q.max_positions} positions, "
            f"{q.n_steps} steps, {q.e2e_tokens} generated tokens (TLI, K = {q.e2e_kept[0]}), "
            f"timing at N = {','.join(map(str, q.timing_sizes))}") in text
    assert q.e2e_samplers == ("tli",) and len(q.e2e_kept) == 1
    assert f"each N at most {timing.MAX_SIZE:,}" in text
