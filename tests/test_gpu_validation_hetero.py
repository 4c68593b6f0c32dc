"""Heterogeneous-tokenizer maps on toy token lists (no tokenizer or model is loaded here)."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from gpu_validation import hetero
from gpu_validation.cli import add_run_arguments, config_from_args
from rdk_theory.acceptance import oov_cap
from rdk_theory.validation import InputError
from tests.tolerances import FLOAT64_ATOL, assert_close

# a byte-level drafter (GPT-2 style) and a SentencePiece target with byte-fallback tokens
DRAFT = ["<|endoftext|>", "Ġthe", "Ċ", "ĠÃ©", "Ã©", "the", "ĉ", "Ġ", "<s>"]
DRAFT_SPECIAL = {0}
TARGET = ["<pad>", "<s>", "▁the", "\n", "▁é", "Ã©", "the", "<0x0A>", "\t", "▁", "xyz"]
TARGET_SPECIAL = {0, 1}


def _lists():
    return (hetero.TokenList("d", DRAFT, frozenset(DRAFT_SPECIAL)),
            hetero.TokenList("t", TARGET, frozenset(TARGET_SPECIAL)))


def test_byte_decoder_inverts_the_gpt2_table():
    dec = hetero.BYTE_DECODER
    assert sorted(dec.values()) == list(range(256))
    assert dec["Ġ"] == ord(" ") and dec["Ċ"] == ord("\n") and dec["ĉ"] == ord("\t")
    assert dec["A"] == ord("A")


def test_token_bytes_per_family():
    assert hetero.token_bytes("ĠÃ©", "byte_level") == " é".encode()
    assert hetero.token_bytes("ĊĠĠ", "byte_level") == b"\n  "
    assert hetero.token_bytes("▁é", "sentencepiece") == " é".encode()
    assert hetero.token_bytes("<0x0A>", "sentencepiece") == b"\n"
    assert hetero.token_bytes("Ã©", "sentencepiece") == "Ã©".encode()
    # half a UTF-8 character stays distinct from every whole one (surrogateescape)
    half = hetero.canonical_tokens(["Ã"], family="byte_level")[0]
    assert half.encode("utf-8", "surrogateescape") == b"\xc3"
    d, t = _lists()
    assert (d.family, t.family) == ("byte_level", "sentencepiece")


def test_bytes_map_matches_what_the_tokens_stand_for():
    d, t = _lists()
    vm = hetero.build_map(d, t, "bytes")
    # drafter id -> target id: ' the', '\n', ' é', 'the', '\t', ' ' match; byte-level 'Ã©'
    # is "é" and the target has no bare "é"; specials never match text ('<s>' is special in T)
    assert vm.draft_to_target.tolist() == [-1, 2, 3, 4, -1, 6, 8, 9, -1]
    mapped = np.flatnonzero(vm.draft_to_target >= 0)
    assert len(set(vm.draft_to_target[mapped])) == mapped.size  # injective
    assert all(d.canonical[j] == t.canonical[vm.draft_to_target[j]] for j in mapped)
    s = hetero.map_summary(vm, d, t)
    assert s["intersection"] == 6 and s["matched_pairs_with_different_bytes"] == 0
    assert s["fraction_of_drafter"] == pytest.approx(6 / 9)


def test_marker_map_misses_bytes_and_pairs_different_ones():
    """The core's marker-only normalisation: the negative control of the bytes map."""
    d, t = _lists()
    vm = hetero.build_map(d, t, "marker")
    # matches ' the' and 'the', misses '\n', '\t', ' é', and pairs byte-level 'Ã©' ("é")
    # with the SentencePiece token 'Ã©' (the two characters): bytes differ. The drafter's
    # text '<s>' does not pair with the target's special '<s>' (special ids are honoured)
    assert vm.draft_to_target.tolist() == [-1, 2, -1, -1, 5, 6, -1, 9, -1]
    s = hetero.map_summary(vm, d, t)
    assert s["matched_pairs_with_different_bytes"] == 1  # 'Ã©'


def test_duplicates_and_the_two_ways_of_computing_p_of_i():
    d, t = _lists()
    assert t.n_duplicates == 1  # '\n' and '<0x0A>' stand for the same byte
    vm = hetero.build_map(d, t)
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(len(TARGET)), size=5)
    by_map, by_str = oov_cap(p, vm), hetero.oov_cap_by_strings(p, d, t)
    # the string way also counts the duplicate '<0x0A>' (id 7); the map reaches only id 3
    np.testing.assert_allclose(by_str - by_map, p[:, 7], atol=FLOAT64_ATOL)
    t2 = hetero.TokenList("t2", TARGET[:7], frozenset(TARGET_SPECIAL))  # no duplicates
    vm2 = hetero.build_map(d, t2)
    p2 = p[:, :7] / p[:, :7].sum(1, keepdims=True)
    np.testing.assert_allclose(oov_cap(p2, vm2), hetero.oov_cap_by_strings(p2, d, t2),
                               atol=FLOAT64_ATOL)


def test_oov_caps_summary():
    d, t = _lists()
    vm = hetero.build_map(d, t)
    p = np.zeros((3, len(TARGET)))
    p[0, 2], p[1, 10], p[2, [3, 10]] = 1.0, 1.0, 0.5
    caps = hetero.oov_caps(p, np.array([2, 10, -1]), np.array([0, 0, 1]), ["a", "b"], vm)
    assert caps["mean"] == pytest.approx(0.5) and caps["min"] == 0.0
    assert caps["next_token_in_I"] == 0.5  # id 2 in I, id 10 not, -1 ignored
    assert caps["per_text"] == {"a": 0.5, "b": 0.5}


def test_caps_take_float64_laws_as_they_are(monkeypatch):
    """run() makes the float64 laws once for every pair and normaliser; oov_caps and
    oov_cap_by_strings renormalised them again on each call (a full float64 copy of the
    evaluation rows each time). Float32 rows still go through laws64
    (test_study_and_hetero_caps_read_float32_rows_as_laws_summing_to_one)."""
    d, t = _lists()
    vm = hetero.build_map(d, t)
    p = np.random.default_rng(1).dirichlet(np.ones(len(TARGET)), size=3)

    def refuse(_):
        raise AssertionError("float64 laws renormalised again")

    monkeypatch.setattr(hetero, "laws64", refuse)
    caps = hetero.oov_caps(p, np.array([2, 10, -1]), np.array([0, 0, 1]), ["a", "b"], vm)
    assert caps["mean"] == pytest.approx(float(oov_cap(p, vm).mean()), abs=FLOAT64_ATOL)
    np.testing.assert_allclose(hetero.oov_cap_by_strings(p, d, t), oov_cap(p, vm) + p[:, 7],
                               atol=FLOAT64_ATOL)  # + the duplicate '<0x0A>', as above


@pytest.mark.parametrize("option, value", [
    ("--topk", "0"), ("--timing-sizes", "4096,x"), ("--positions", "0"), ("--positions", "-5"),
    ("--steps", "0"), ("--steps", "-5"), ("--e2e-tokens", "-3"), ("--seed", "-1"),
])
def test_cli_rejects_bad_run_options(capsys, option, value):
    """Refused in one line before any model loads (0 steps or positions used to fall back to
    the defaults silently; negative ones reached numpy as tracebacks)."""
    from rdk_theory.cli import main

    try:
        rc = main(["validate", option, value])
    except SystemExit as exc:  # an argparse usage error: the console script exits the same way
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and option in err[0], err


def test_cuda_without_a_gpu_is_a_one_line_error_for_both_studies(capsys, monkeypatch, tmp_path):
    """``--device cuda`` where torch sees no GPU: exit 2 and an ``error:`` line, before any
    model or tokenizer is touched (the heterogeneous study used to fail later, with a traceback),
    and before a built-in model is found unfetched (the empty cache: the heterogeneous study
    said "not fetched" first, the main one the device)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from rdk_theory.cli import main

    monkeypatch.setenv("RDK_THEORY_CACHE", str(tmp_path))

    for extra in ([], ["--hetero"]):
        assert main(["validate", "--device", "cuda", *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --device cuda") and "Traceback" not in err


def _config(*argv):
    """The RunConfig ``rdk-theory validate`` builds from ``argv`` (no model is loaded)."""
    p = argparse.ArgumentParser()
    add_run_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


def test_kept_sizes_set_the_end_to_end_sizes():
    cfg = _config("--kept", "8192,2048,512", "--topk", "32", "--target", "smollm2-135m")
    assert cfg.e2e_kept == (8192, 512) and cfg.topk == 32 and cfg.target == "smollm2-135m"
    cfg = _config()
    assert cfg.target == "qwen2.5-coder-1.5b" and cfg.topk is None


def test_bytes_map_prefers_text_tokens_to_byte_fallback_twins():
    """Gemma lists '<0x2C>' (id 44 + 3 here) before ',': hetero's bytes map, like the core's,
    pairs the drafter's ',' with the text token the target puts its mass on."""
    sp = hetero.TokenList("sp", ["<s>", "<pad>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
                          + ["\u2581the", ","], frozenset({0, 1, 2}))
    bl = hetero.TokenList("bl", ["\u0120the", ","])
    assert sp.ranks[3 + 0x2C] == 1 and sp.ranks[260] == 0 and bl.ranks == [0, 0]
    assert hetero.build_map(bl, sp).draft_to_target.tolist() == [259, 260]
    assert hetero.build_map(bl, sp) == rt_map(bl, sp)


def rt_map(draft, target):
    from rdk_theory import VocabMap

    return VocabMap.from_token_strings(draft.tokens, target.tokens,
                                       draft_special_ids=draft.special_ids,
                                       target_special_ids=target.special_ids)


def test_holes_and_padded_ids_match_nothing():
    """Ids without a string (holes) and padded LM-head rows match nothing and are not
    duplicates; oov_cap_by_strings leaves the drafter's holes out of I."""
    draft = hetero.TokenList("d", ["a", "", "<pad>", "b"])
    target = hetero.TokenList("t", ["a", "c", ""]).padded(5)
    assert target.canonical[3:] == ["", ""] and target.n_duplicates == 0
    assert draft.n_duplicates == 0
    vm = hetero.build_map(draft, target, "bytes")
    assert vm.draft_to_target.tolist() == [0, -1, -1, -1]
    p = np.array([[0.1, 0.2, 0.3, 0.2, 0.2]])
    assert_close(hetero.oov_cap_by_strings(p, draft, target), [0.1])


@pytest.mark.parametrize("option", ["--kept", "--e2e-kept", "--timing-sizes"])
@pytest.mark.parametrize("value", ["4096,0", "0"])
def test_a_zero_size_is_refused_naming_the_option(capsys, option, value):
    from rdk_theory.cli import main

    assert main(["validate", option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {option} must hold positive integers, got {value!r}"]


def test_defaults_of_the_run_options():
    """As --help states them: seed 0, the built-in pair, nothing fetched, timing on."""
    from gpu_validation.harness import FULL_KEPT, RunConfig

    cfg = _config()
    assert (cfg.seed, cfg.target, cfg.drafter) == (0, "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert cfg.fetch_missing is False and cfg.timing is True and cfg.kept == FULL_KEPT
    assert cfg == RunConfig()
    cfg = _config("--fetch", "--no-timing", "--seed", "5", "--e2e-tokens", "7")
    assert cfg.fetch_missing is True and cfg.timing is False and cfg.seed == 5
    assert cfg.e2e_tokens == 7
    assert _config("--timing-sizes", "4096,1024,4096").timing_sizes == (4096, 1024)


def test_quick_sets_the_quick_run_and_options_still_override_it():
    from gpu_validation.harness import RunConfig

    assert _config("--quick") == RunConfig.quick()
    cfg = _config("--quick", "--steps", "30", "--positions", "12")
    assert cfg.n_steps == 30 and cfg.max_positions == 12 and cfg.kept == RunConfig.quick().kept


def test_sizes_keep_the_order_given_and_drop_repeats():
    """Each list is read in the order given, a repeat once (the study's rows follow --kept)."""
    cfg = _config("--kept", "512,8192,512", "--timing-sizes", "1024,4096,1024",
                  "--e2e-kept", "512,8192")
    assert cfg.kept == (512, 8192) and cfg.timing_sizes == (1024, 4096)
    assert cfg.e2e_kept == (512, 8192)


def test_e2e_kept_overrides_the_sizes_kept_implies():
    cfg = _config("--kept", "8192,2048,512", "--e2e-kept", "2048")
    assert cfg.kept == (8192, 2048, 512) and cfg.e2e_kept == (2048,)
    cfg = _config("--e2e-kept", "512", "--kept", "8192,512")  # the order given does not matter
    assert cfg.e2e_kept == (512,)


def test_sizes_up_to_the_builtin_drafters_vocabulary_are_accepted_and_beyond_refused():
    """K = 151,936 keeps every id of qwen2.5-coder-0.5b: allowed. One more, in --kept or in
    --e2e-kept alone, is refused before any model loads, naming the option that holds it
    (an --e2e-kept size was reported as '--kept', an option the user never gave)."""
    assert _config("--kept", "151936").kept == (151936,)
    for opt, argv in (("--kept", ("--kept", "151937")),
                      ("--e2e-kept", ("--kept", "4096", "--e2e-kept", "151937"))):
        with pytest.raises(InputError, match=rf"^{opt} 151937 exceeds the vocabulary of "
                                             r"qwen2.5-coder-0.5b \(151,936 tokens\)$"):
            _config(*argv)


def test_hetero_reads_a_comma_separated_drafter_list(monkeypatch, tmp_path, capsys,
                                                      stub_backends):
    """'--drafter "a, b,a"' names two drafters, each once (' b' is b: it went to the hub as an
    id); each is checked before the study, which gets them in order."""
    from gpu_validation import cli, hetero
    from rdk_theory.cli import main

    checked, ran = [], []
    monkeypatch.setattr(cli, "check_specs",
                        lambda *specs, fetch_missing: checked.extend(specs))
    monkeypatch.setattr(hetero, "run", lambda target, drafters, **kw: ran.append(
        (target, drafters, kw["out"])) or {})
    monkeypatch.setattr(hetero, "summary_lines", lambda report: ["table"])
    out = str(tmp_path / "h")
    assert main(["validate", "--hetero", "--target", "t", "--drafter", "a, b,a", "--out", out]) == 0
    assert checked == ["t", "a", "b"] and ran == [("t", ("a", "b"), out)]
    assert capsys.readouterr().out == f"table\nwrote {out}/hetero.json\n"


@pytest.mark.parametrize("value", ["", " ", "a,,b", "a,b,", ",a", "a, ,b"])
def test_hetero_refuses_an_empty_drafter_name_before_loading(monkeypatch, capsys, value):
    """An empty item was dropped ('a,,b' ran as 'a,b', hiding the name the user lost); it is
    refused in one line, before any model is checked, as the size lists refuse theirs."""
    from gpu_validation import cli
    from rdk_theory.cli import main

    monkeypatch.setattr(cli, "check_specs", lambda *a, **k: pytest.fail("specs checked"))
    assert main(["validate", "--hetero", "--target", "t", "--drafter", value]) == 2
    assert capsys.readouterr().err == ("error: --drafter must be comma-separated model "
                                       f"names, got {value!r}\n")


def test_next_token_in_i_counts_token_id_0():
    """Only the -1 after a text's last token is left out of 'next token in I': id 0 is a
    token like any other (a test of ``> 0`` for ``>= 0`` dropped it unseen)."""
    from rdk_theory.vocab import VocabMap

    vm = VocabMap.from_kept_ids(np.array([0, 2]), 3)
    p = np.full((4, 3), 1 / 3)
    caps = hetero.oov_caps(p, np.array([0, 0, 1, -1]), np.zeros(4, dtype=int), ["a"], vm)
    assert caps["next_token_in_I"] == 2 / 3  # ids 0, 0 in I, id 1 not; -1 ignored


def test_map_summary_fractions_are_of_each_vocabulary():
    """|I| over the drafter's 9 ids and over the target's 11 (the target fraction divided by
    the drafter's size went unseen: only the drafter fraction was asserted)."""
    d, t = _lists()
    s = hetero.map_summary(hetero.build_map(d, t), d, t)
    assert (s["n_drafter"], s["n_target"], s["intersection"]) == (9, 11, 6)
    assert s["fraction_of_target"] == pytest.approx(6 / 11)


def test_token_list_from_tokenizer_reads_special_ids_from_both_sources():
    """Special ids are the added tokens marked special and the tokenizer's all_special_ids
    (a BOS that is not an added token is special too): such a special never matches text."""
    from types import SimpleNamespace

    class _Tok:
        added_tokens_decoder = {0: SimpleNamespace(special=True), 3: SimpleNamespace(special=False)}
        all_special_ids = [1]

        def __len__(self):
            return 4

        def convert_ids_to_tokens(self, ids):
            return ["<pad>", "<s>", "Ġthe", None][:len(ids)]

    tl = hetero.token_list_from_tokenizer("x", _Tok())
    assert tl.special_ids == frozenset({0, 1}) and tl.tokens[3] == ""
    assert tl.text_ids == frozenset({3})  # added, not special: its string is plain text
    assert tl.padded(6).text_ids == tl.text_ids
    text = hetero.TokenList("d", ["<s>", "Ġthe"])
    assert hetero.build_map(text, tl).draft_to_target.tolist() == [-1, 2]


@pytest.mark.parametrize("option", ["--kept", "--e2e-kept", "--timing-sizes"])
@pytest.mark.parametrize("value", ["", " ", "4096,,1024", "4096,", ",4096"])
def test_an_empty_size_list_or_item_is_refused_naming_the_option(option, value):
    """An empty list meant the default sizes ('if args.kept:'), and an empty item was skipped
    ('4096,,1024' read as (4096, 1024)); now both are refused in one line."""
    with pytest.raises(InputError, match=rf"^{option} must be comma-separated integers, "
                                         rf"got {value!r}$"):
        _config(option, value)


def test_an_empty_size_list_is_one_error_line_on_the_command_line(capsys):
    """Refused before the models are looked at (missing ones here: the old code, reading ''
    as the default sizes, stopped at them instead of loading anything)."""
    from rdk_theory.cli import main

    missing = "./no/such/model.gguf"
    assert main(["validate", "--kept", "", "--target", missing, "--drafter", missing]) == 2
    assert capsys.readouterr().err == "error: --kept must be comma-separated integers, got ''\n"
