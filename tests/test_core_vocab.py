from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory.tokens import detect_space_marker
from tests.tolerances import assert_close


def test_keep_most_frequent_breaks_ties_by_lower_id_and_sorts():
    counts = np.array([5, 9, 5, 0, 9, 1])
    assert list(rt.keep_most_frequent(counts, 3)) == [0, 1, 4]
    assert list(rt.keep_most_frequent(counts, 1)) == [1]
    with pytest.raises(rt.InputError, match="k must be in"):
        rt.keep_most_frequent(counts, 7)


def test_pruned_map_properties():
    vm = rt.VocabMap.from_kept_ids([4, 1], 6)
    assert vm.is_pruned and vm.n_draft == 2
    assert list(vm.intersection) == [1, 4]
    assert list(vm.oov) == [0, 2, 3, 5]
    assert list(vm.in_target_mask) == [False, True, False, False, True, False]


def test_in_target_mask_of_a_map_with_absent_ids():
    """Mutation pass: a mask that forgot the -1 entries marked target id 3 as hit (every
    earlier test used a pruned map, which has no -1)."""
    vm = rt.VocabMap(4, [0, -1, 2])
    assert list(vm.in_target_mask) == [True, False, True, False]
    assert list(vm.oov) == [1, 3] and list(vm.intersection) == [0, 2]


def test_maps_compare_by_value_and_hash_alike():
    a, b = rt.VocabMap.from_kept_ids([0, 2], 3), rt.VocabMap(3, np.array([0.0, 2.0]))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != rt.VocabMap.from_kept_ids([0, 2], 4)  # same ids, another target
    assert a != rt.VocabMap.from_kept_ids([2, 0], 3)  # same set, other order: another map
    assert a != rt.VocabMap(3, [0, 2, -1])  # one more drafter token
    assert a != "VocabMap(3, [0, 2])"


@pytest.mark.parametrize("bad, match", [
    ([0, 6], "out of range"), ([0, -2], "out of range"), ([1, 1], "two drafter tokens"),
    ([0.5, 1], "integers"), ([], "non-empty"),
])
def test_bad_maps_are_rejected_with_the_offending_value(bad, match):
    with pytest.raises(rt.InputError, match=match):
        rt.VocabMap(6, np.array(bad))


def test_token_strings_normalise_word_start_markers():
    target = ["<s>", "\u2581the", "\u2581cat", "s", "\u2581sat", "."]  # SentencePiece style
    draft = ["\u0120the", "\u0120cat", "s", "\u0120dog", ".", "\u0120sat"]  # byte-level BPE style
    vm = rt.VocabMap.from_token_strings(draft, target)
    assert list(vm.draft_to_target) == [1, 2, 3, -1, 5, 4]
    assert not vm.is_pruned
    assert detect_space_marker(target) == "\u2581" and detect_space_marker(draft) == "\u0120"
    same = rt.VocabMap.from_token_strings(target, target)
    assert list(same.draft_to_target) == list(range(6))


def test_bytes_normalisation_matches_newlines_and_refuses_false_friends():
    """Byte-level 'Ċ' is a newline and 'Ã©' is "é"; SentencePiece writes '<0x0A>' and 'é'."""
    target = ["\u0120the", "\u010a", "\u00c3\u00a9", "x", "<s>"]  # byte-level (Qwen-like)
    draft = ["\u2581the", "<0x0A>", "\u00c3\u00a9", "\u00e9", "<s>"]  # SentencePiece (Gemma-like)
    by_bytes = rt.VocabMap.from_token_strings(draft, target, draft_special_ids=[4],
                                              target_special_ids=[4])
    assert list(by_bytes.draft_to_target) == [0, 1, -1, 2, 4]
    by_marker = rt.VocabMap.from_token_strings(draft, target, normalise="marker")
    # the marker-only rewrite misses the newline and pairs the two different "Ã©" tokens
    assert list(by_marker.draft_to_target) == [0, -1, 2, -1, 4]
    with pytest.raises(rt.InputError, match="normalise"):
        rt.VocabMap.from_token_strings(draft, target, normalise="unicode")


@pytest.mark.parametrize("normalise", ["bytes", "marker", "none"])
def test_special_tokens_match_only_special_tokens_in_every_mode(normalise):
    """A drafter's special '<s>' does not pair with a target text token spelled '<s>' (nor
    the other way round); two special '<s>' pair. Before, "marker" and "none" ignored the
    special ids and paired them all."""
    draft, target = ["<s>", "a", "<s>"], ["<s>", "a", "b"]
    kw = dict(normalise=normalise)
    both = rt.VocabMap.from_token_strings(draft, target, draft_special_ids=[0],
                                          target_special_ids=[0], **kw)
    assert list(both.draft_to_target) == [0, 1, -1]
    draft_only = rt.VocabMap.from_token_strings(draft, target, draft_special_ids=[0, 2], **kw)
    assert list(draft_only.draft_to_target) == [-1, 1, -1]
    target_only = rt.VocabMap.from_token_strings(draft, target, target_special_ids=[0], **kw)
    assert list(target_only.draft_to_target) == [-1, 1, -1]
    text = rt.VocabMap.from_token_strings(draft, target, **kw)  # no special ids: plain text
    assert list(text.draft_to_target) == [0, 1, -1]


@pytest.mark.parametrize("kw, message", [
    (dict(draft_special_ids=[3]), r"draft_special_ids holds 3, outside the 3 token ids \(0..2\)"),
    (dict(target_special_ids=[-1]), r"target_special_ids holds -1, outside the 3 token ids"),
    (dict(draft_special_ids=[0.5]), r"draft_special_ids must be a 1-D list of integer ids"),
    (dict(target_special_ids=[[0]]), r"target_special_ids must be a 1-D list of integer ids"),
    (dict(target_special_ids=[[0], 1]), r"target_special_ids must be a 1-D list of integer ids"),
    (dict(draft_special_ids={0, "a"}), r"draft_special_ids must be a 1-D list of integer ids"),
])
def test_special_ids_out_of_range_or_not_integers_are_refused(kw, message):
    for normalise in ("bytes", "marker", "none"):
        with pytest.raises(rt.InputError, match=message):
            rt.VocabMap.from_token_strings(["a", "b", "c"], ["a", "b", "c"], normalise=normalise,
                                           **kw)


@pytest.mark.parametrize("ids, message", [
    (0, "draft_special_ids must be a collection of integer ids"),  # a scalar: TypeError before
    (1.5, "draft_special_ids must be a collection of integer ids"),
])
def test_special_ids_that_are_not_a_collection_are_named(ids, message):
    with pytest.raises(rt.InputError, match=message):
        rt.VocabMap.from_token_strings(["a"], ["a"], draft_special_ids=ids)


def test_special_ids_none_means_none_and_token_lists_may_be_iterators():
    """None was a TypeError ('NoneType' object is not iterable), a generator of tokens one
    too ('no len()')."""
    vm = rt.VocabMap.from_token_strings(iter(["Ġa", "b"]), (t for t in ["▁a", "c"]),
                                        draft_special_ids=None, target_special_ids=None)
    assert list(vm.draft_to_target) == [0, -1]
    with pytest.raises(rt.InputError, match="non-empty"):
        rt.VocabMap.from_token_strings(iter([]), ["a"])


@pytest.mark.parametrize("normalise", ["bytes", "none"])
def test_space_markers_outside_marker_mode_are_refused_not_ignored(normalise):
    with pytest.raises(rt.InputError, match="apply to normalise='marker' only"):
        rt.VocabMap.from_token_strings(["Xa"], ["▁a"], normalise=normalise, draft_space_marker="X")
    vm = rt.VocabMap.from_token_strings(["Xa"], ["▁a"], normalise="marker", draft_space_marker="X")
    assert list(vm.draft_to_target) == [0]
    # a marker is text like the tokens: a lone surrogate could spell a special token's key
    with pytest.raises(rt.InputError, match="target_space_marker.* is not valid text"):
        rt.VocabMap.from_token_strings(["XspecialX<s>"], ["<s>"], target_special_ids=[0],
                                       normalise="marker", draft_space_marker="X",
                                       target_space_marker="\ud800")


def test_a_byte_level_text_token_never_matches_a_special_token():
    """'Ā' is byte 0 in the byte-level table, so a text token could spell the old NUL-tagged
    prefix of special keys and matched the target's special '<s>'."""
    draft = ["Ġthe", "ĀspecialĀ<s>"]
    target = ["<s>", "▁the"]
    vm = rt.VocabMap.from_token_strings(draft, target, target_special_ids=[0])
    assert list(vm.draft_to_target) == [1, -1]
    vm = rt.VocabMap.from_token_strings(["\x00special\x00<s>"], ["<s>"], target_special_ids=[0],
                                        normalise="none")
    assert list(vm.draft_to_target) == [-1]


@pytest.mark.parametrize("kept, message", [
    ({3, 1}, "kept_ids must be ordered"),
    ([[0, 1], [2]], "kept_ids must be a non-empty 1-D list of ids, got a ragged"),
    ([0, 2, 0], "kept_ids lists target id 0 more than once"),
    ([1, 4], r"kept_ids holds id 4, but the target has 4 ids \(0..3\)"),
    ([0.5], "kept_ids must hold integer ids"),
    ([np.nan], "kept_ids must hold integer ids"),
])
def test_kept_ids_that_are_unordered_or_ragged_are_named(kept, message):
    with pytest.raises(rt.InputError, match=message):
        rt.VocabMap.from_kept_ids(kept, 4)


def test_map_sizes_and_maps_are_checked_where_they_are_passed():
    """An id list where a map belongs, and a bad size, are InputErrors naming the argument
    (they were AttributeError, TypeError, or a message about draft_to_target)."""
    q = np.array([0.5, 0.5])
    for call in (lambda: rt.vanilla_proposal(q, [0, 1]), lambda: rt.tli_proposal(q, [0, 1]),
                 lambda: rt.oov_cap(q, [0, 1]), lambda: rt.pruned_draft_probs(q, [0])):
        with pytest.raises(rt.InputError, match="vocab_map must be a rdk_theory.VocabMap, got list"):
            call()
    for n in ("3", None, 0, -1, True, 2.5):
        with pytest.raises(rt.InputError, match="n must be an integer >= 1"):
            rt.VocabMap.identity(n)
    with pytest.raises(rt.InputError, match="n_target must be an integer >= 1"):
        rt.VocabMap.from_kept_ids([0], True)
    assert rt.VocabMap.identity(np.int32(3)) == rt.VocabMap(3, np.arange(3))


def test_proposals_refuse_draft_rows_whose_width_is_not_the_maps():
    """Mutation pass: a draft row of 5 or 3 entries against a map of 4 drafter tokens must be
    an InputError naming the map's size; without the check the builders scattered a truncated
    or padded row and returned a plausible proposal."""
    vm = rt.VocabMap(5, [0, 1, 2, -1])
    for q in (np.full(5, 0.2), np.array([0.5, 0.5, 0.0])):
        for build in (rt.vanilla_proposal, rt.tli_proposal, rt.build_proposals):
            with pytest.raises(rt.InputError, match="draft_to_target has 4 entries"):
                build(q, vm)


@pytest.mark.parametrize("ids", [{0}, frozenset({0}), np.array([0]), range(1), [0],
                                 {0: "<s>"}.keys(), (i for i in [0]), "torch"])
def test_special_ids_may_be_any_iterable_of_ints(ids):
    if ids == "torch":
        ids = pytest.importorskip("torch").tensor([0])
    vm = rt.VocabMap.from_token_strings(["<s>", "a"], ["<s>", "a"], draft_special_ids=ids,
                                        target_special_ids=[0], normalise="marker")
    assert list(vm.draft_to_target) == [0, 1]


def test_marker_rewrite_covers_every_marker_and_first_ids_win():
    """'ĠĠ' (two spaces) is '▁▁' in a SentencePiece vocabulary: every marker is rewritten. A
    target string listed twice keeps its first id, and of two drafter tokens that match the
    same target token only the first is mapped (the map stays one-to-one)."""
    target = ["\u2581\u2581", "\u2581a", "b", "\u2581a", "c"]
    draft = ["\u0120\u0120", "\u0120a", "b", "b", "\u0120c"]
    vm = rt.VocabMap.from_token_strings(draft, target, normalise="marker")
    assert list(vm.draft_to_target) == [0, 1, 2, -1, -1]
    by_bytes = rt.VocabMap.from_token_strings(draft, target)
    assert list(by_bytes.draft_to_target) == [0, 1, 2, -1, -1]


# A Llama-2 / Gemma-style SentencePiece vocabulary: the 256 byte-fallback tokens come before the
# text tokens, so ',' (id 260) has a twin '<0x2C>' (id 47) standing for the same byte.
SP_VOCAB = (["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
            + ["\u2581the", ",", ".", "a", "\u2581"])
BYTE_LEVEL_VOCAB = ["\u0120the", ",", ".", "a", "\u0120"]


def test_bytes_map_pairs_text_tokens_before_their_byte_fallback_twins():
    """The target's mass sits on its text tokens (the tokenizer emits '<0x2C>' only for bytes
    no text token covers): the byte-level drafter's ',' must reach ',' (id 260), not '<0x2C>'."""
    to_sp = rt.VocabMap.from_token_strings(BYTE_LEVEL_VOCAB, SP_VOCAB)
    assert to_sp.draft_to_target.tolist() == [259, 260, 261, 262, 263]
    p = np.zeros(len(SP_VOCAB))
    p[259:] = 0.2  # all of the target's mass on its text tokens
    q = np.full(len(BYTE_LEVEL_VOCAB), 0.2)  # the drafter proposes exactly those tokens
    assert rt.oov_cap(p, to_sp) == pytest.approx(1.0)
    assert rt.acceptance_rate(p, rt.tli_proposal(q, to_sp)) == pytest.approx(1.0)
    # the other way: the SentencePiece drafter's text tokens are matched, their twins left over
    from_sp = rt.VocabMap.from_token_strings(SP_VOCAB, BYTE_LEVEL_VOCAB)
    assert np.flatnonzero(from_sp.draft_to_target >= 0).tolist() == [259, 260, 261, 262, 263]
    # a vocabulary against itself: every twin pairs with itself, the map is the identity
    same = rt.VocabMap.from_token_strings(SP_VOCAB, SP_VOCAB)
    assert same.draft_to_target.tolist() == list(range(len(SP_VOCAB)))


def test_equal_strings_pair_up_in_id_order_and_holes_match_nothing():
    """Two drafter tokens with the same key take the target's two tokens of that key in order;
    an empty or None string (a hole in a tokenizer's id table) matches nothing."""
    vm = rt.VocabMap.from_token_strings(["x", "", "x", None, "y"], [None, "x", "", "x", "y"],
                                        normalise="none")
    assert vm.draft_to_target.tolist() == [1, -1, 3, -1, 4]
    with pytest.raises(rt.InputError, match=r"draft_tokens\[1\] is int 7, not a string"):
        rt.VocabMap.from_token_strings(["a", 7], ["a"])


@pytest.mark.parametrize("tokens, message", [
    ({"b": 1, "a": 0}, "token strings in id order"),  # tokenizer.get_vocab(): not in id order
    ("ab", "token strings in id order"),  # one string is not a token list
    (["a", "\ud800"], r"draft_tokens\[1\] = '\\ud800' is not valid text"),
])
def test_token_lists_that_are_not_id_ordered_strings_are_refused(tokens, message):
    """A dict was read in iteration order ({'b': 1, 'a': 0} mapped drafter id 0 'a' to target
    id 1), a str character by character, and a lone surrogate was a UnicodeEncodeError."""
    with pytest.raises(rt.InputError, match=message):
        rt.VocabMap.from_token_strings(tokens, ["a", "b"], normalise="none")


def test_keep_most_frequent_ranks_float_counts_largest_first():
    """Fractional counts (e.g. smoothed frequencies) keep the largest too, ties to the lower
    id: the float branch's key had its sign flipped and nothing but a loose report bound saw."""
    assert rt.keep_most_frequent([0.5, 2.5, 1.5, 2.5, 0.25], 2).tolist() == [1, 3]
    assert rt.keep_most_frequent(np.array([0.5, 2.5, 1.5, 2.5, 0.25]), 3).tolist() == [1, 2, 3]
    assert rt.keep_most_frequent([1.5, 0.0, 1.5], 1).tolist() == [0]


def test_keep_most_frequent_ranks_integer_counts_exactly():
    """Counts above 2^53 differ by one: float64 tied them and kept the lower id."""
    assert rt.keep_most_frequent(np.array([2**53, 2**53 + 1]), 1).tolist() == [1]
    big = np.array([2**64 - 2, 2**64 - 1, 5], dtype=np.uint64)
    assert rt.keep_most_frequent(big, 1).tolist() == [1]
    assert rt.keep_most_frequent([3, 1, 3, 2], 2).tolist() == [0, 2]  # ties: lower id
    # Python ints beyond int64 (an object array): went through float64 and tied too
    assert rt.keep_most_frequent([2**70, 2**70 + 1, 7], 1).tolist() == [1]
    assert rt.keep_most_frequent([2**70, 2**70, 7], 1).tolist() == [0]
    assert rt.keep_most_frequent([2**63, 2**63 + 1, 1], 1).tolist() == [1]  # a float64 list
    assert rt.keep_most_frequent([2**70, np.int64(3)], 1).tolist() == [0]  # mixed: no overflow
    assert rt.keep_most_frequent([np.uint64(5), 2**70], 1).tolist() == [1]
    with pytest.raises(rt.InputError, match="non-negative"):
        rt.keep_most_frequent([2**70, -1], 1)
    with pytest.raises(rt.InputError):  # ragged: still a named error, not numpy's ValueError
        rt.keep_most_frequent([[1, 2], [3]], 1)
    # beside a float, numpy reads a wide integer as float64: 2^60 and 2^60 + 1 tied (lower
    # id kept); they are compared exactly now, the float at its exact value
    assert rt.keep_most_frequent([2**60, 2**60 + 1, 5.0], 1).tolist() == [1]
    assert rt.keep_most_frequent(np.array([2**60, 2**60 + 1, 0.5], dtype=object), 1).tolist() == [1]
    assert rt.keep_most_frequent([2**60, 2**60 + 1, 2.0**61], 2).tolist() == [1, 2]
    for bad in (float("nan"), float("inf"), -0.5):
        with pytest.raises(rt.InputError, match="finite and non-negative"):
            rt.keep_most_frequent([2**60, bad], 1)


def test_keep_most_frequent_ranks_exactly_beside_a_bool_and_in_long_double():
    """A bool among wide integers (a count of 0 or 1, as it is alone) sent every count through
    float64, which tied 2^70 with 2^70 + 1; long double counts were rounded to float64 too."""
    assert rt.keep_most_frequent([2**70, 2**70 + 1, True], 1).tolist() == [1]
    assert rt.keep_most_frequent(np.array([2**60, 2**60 + 1, np.bool_(True)], dtype=object),
                                 1).tolist() == [1]
    assert rt.keep_most_frequent([np.bool_(False), np.bool_(True), 2**60], 2).tolist() == [1, 2]
    wide = np.array([2**60, 2**60 + 1, 3], dtype=np.longdouble)
    if wide[0] == wide[1]:  # long double is float64 on this platform (e.g. on ARM Macs)
        pytest.skip("long double has float64's precision here")
    assert rt.keep_most_frequent(wide, 1).tolist() == [1]
    for bad in (np.nan, np.inf, -1):
        with pytest.raises(rt.InputError, match="finite and non-negative"):
            rt.keep_most_frequent(np.array([1, bad], dtype=np.longdouble), 1)


def test_a_ragged_id_list_is_a_named_error():
    """numpy's ValueError came through for a ragged draft_to_target."""
    with pytest.raises(rt.InputError, match="draft_to_target must be a non-empty 1-D integer"):
        rt.VocabMap(4, [[0, 1], [2]])


def test_empty_specials_stay_holes_and_plain_vocabularies_are_plain():
    """A special id whose string is empty stays a hole (it became a special key matching
    other empty specials), and a vocabulary with no space marker is plain, not
    byte-level."""
    from rdk_theory.tokens import SPECIAL_PREFIX, mark_special, token_family

    assert mark_special(["a", "", "s"], ["a", "", "<s>"], [1, 2]) == ["a", "", SPECIAL_PREFIX + "<s>"]
    assert detect_space_marker(["a", "bc"]) is None and token_family(["a", "bc"]) == "plain"


def test_an_unpickled_or_deep_copied_map_stays_read_only():
    """pickle and deepcopy brought the ids back writable: an edit could then send two drafter
    tokens to one target id after the map's checks, and change its hash."""
    import copy
    import pickle

    vm = rt.VocabMap(3, [2, 0])
    for back in (pickle.loads(pickle.dumps(vm)), copy.deepcopy(vm)):
        assert back == vm and hash(back) == hash(vm)
        with pytest.raises(ValueError, match="read-only"):
            back.draft_to_target[1] = 2


def test_a_drafter_with_extra_columns_is_not_the_identity_map():
    """[0, -1, 1]: target ids 0, 1 in order, but the drafter has 3 columns; the plan called it
    the identity (proposals stayed right only because the scatter checked widths again)."""
    vm = rt.VocabMap(2, [0, -1, 1])
    assert vm.scatter_plan[2] is False and rt.VocabMap.identity(2).scatter_plan[2] is True
    q = np.array([0.5, 0.3, 0.2])
    assert_close(rt.vanilla_proposal(q, vm), [0.5, 0.2])


def test_pruned_draft_probs_of_rows_whose_sum_overflows():
    """Finite entries summing to inf gave rows of zeros (with only a RuntimeWarning)."""
    vm = rt.VocabMap.from_kept_ids([2, 0], 3)
    assert_close(rt.pruned_draft_probs([1e308, 0.3, 1e308], vm), [0.5, 0.5])
    torch = pytest.importorskip("torch")
    rows = torch.tensor([[1e308, 0.3, 1e308], [0.2, 0.3, 0.5]], dtype=torch.float64)
    assert_close(rt.pruned_draft_probs(rows, vm).numpy(), [[0.5, 0.5], [5 / 7, 2 / 7]])


def test_keep_most_frequent_ranks_fractions_exactly():
    """Fractions 1/6 apart at 1e20 were ranked as float64 (equal there): the tie went to id 0."""
    big = Fraction(10 ** 20)
    assert rt.keep_most_frequent([big + Fraction(1, 3), big + Fraction(1, 2)], 1).tolist() == [1]
    assert rt.keep_most_frequent([Fraction(1, 3), Fraction(1, 3), Fraction(1, 2)], 2).tolist() == [0, 2]
    with pytest.raises(rt.InputError, match="non-negative"):
        rt.keep_most_frequent([Fraction(-1, 3), Fraction(1, 2)], 1)


@pytest.mark.parametrize("call, message", [
    (lambda: rt.VocabMap.from_token_strings(None, ["a"]), "draft_tokens must be a list"),
    (lambda: rt.VocabMap.from_token_strings(["a"], 3.5), "target_tokens must be a list"),
    (lambda: rt.VocabMap.from_token_strings(["\u2581a"], ["\u0120a"], normalise="marker",
                                            draft_space_marker=""),
     "draft_space_marker must be a non-empty string"),
    (lambda: rt.VocabMap.from_kept_ids(np.array([2 ** 64 - 1], dtype=np.uint64), 3),
     "holds id 18446744073709551615,"),
])
def test_token_list_and_kept_id_errors_name_the_problem(call, message):
    """None or a number as a token list was a raw TypeError; an empty marker matched nothing
    silently; a uint64 id was printed through a float (...616)."""
    with pytest.raises(rt.InputError, match=message):
        call()


def test_added_text_tokens_are_read_as_text_not_through_the_byte_table():
    """convert_ids_to_tokens returns a byte-level tokenizer's added (non-special) tokens as
    their content. 'é-added' is spelled with characters of GPT-2's byte table, so it was read
    as the bytes E9 2D 61 ... (a key no tokenizer has) and missed the SentencePiece token
    with the same text; text_ids reads it as UTF-8."""
    from rdk_theory.tokens import canonical_tokens

    byte_level = ["Ġthe", "é-added", "Ã©"]
    assert canonical_tokens(byte_level)[1] != "é-added"  # what went wrong
    assert canonical_tokens(byte_level, text_ids=[1]) == [" the", "é-added", "é"]
    sentencepiece = ["▁the", "é-added", "é"]
    before = rt.VocabMap.from_token_strings(byte_level, sentencepiece)
    assert before.draft_to_target.tolist() == [0, -1, 2]
    vm = rt.VocabMap.from_token_strings(byte_level, sentencepiece, draft_text_ids=[1])
    assert vm.draft_to_target.tolist() == [0, 1, 2]
    with pytest.raises(rt.InputError, match="draft_text_ids holds 3, outside"):
        rt.VocabMap.from_token_strings(byte_level, sentencepiece, draft_text_ids=[3])
    with pytest.raises(rt.InputError, match="apply to normalise='bytes' only"):
        rt.VocabMap.from_token_strings(byte_level, sentencepiece, normalise="marker",
                                       target_text_ids=[1])


@pytest.mark.parametrize("n_target", [2**63, 2**64])
def test_a_target_size_beyond_int64_is_refused(n_target):
    """N_T = 2^64 let drafter id 2^63 pass the range check; the int64 cast then stored it as
    -2^63 (absent), so the map said 'not pruned' with an empty intersection."""
    with pytest.raises(rt.InputError, match="must be an integer <= 2\\^63 - 1 \\(int64\\)"):
        rt.VocabMap(n_target, np.array([2**63], dtype=np.uint64))
    top = rt.VocabMap(2**63 - 1, np.array([2**63 - 2], dtype=np.uint64))
    assert top.draft_to_target.tolist() == [2**63 - 2] and top.intersection.tolist() == [2**63 - 2]


def test_the_byte_level_table_is_gpt2s():
    """GPT-2's byte-to-unicode table (Radford et al., 2019; the table every byte-level BPE
    tokenizer ships): printable bytes stand for themselves, the other 68 take U+0100 on in byte
    order, so the space is 'Ġ', the newline 'Ċ', the tab 'ĉ' and the soft hyphen 0xAD 'Ń'
    (U+00AD itself is not printable there). A table whose printable range ended at U+00AD still
    had 256 entries, but read 'ÃŃ' ('í', C3 AD) as text: its token matched nothing."""
    from rdk_theory.tokens import BYTE_DECODER

    assert len(BYTE_DECODER) == 256 and sorted(BYTE_DECODER.values()) == list(range(256))
    assert (BYTE_DECODER["Ġ"], BYTE_DECODER["Ċ"], BYTE_DECODER["ĉ"]) == (32, 10, 9)
    assert BYTE_DECODER["\u0143"] == 0xAD and "\u00ad" not in BYTE_DECODER
    assert BYTE_DECODER["!"] == 33 and BYTE_DECODER["\u00a1"] == 0xA1 and BYTE_DECODER["\u00ae"] == 0xAE
    assert BYTE_DECODER["\u0100"] == 0 and BYTE_DECODER["\u0121"] == 127
    vm = rt.VocabMap.from_token_strings(["Ġthe", "ÃŃ", "a"], ["▁the", "í", "a"])
    assert vm.draft_to_target.tolist() == [0, 1, 2]


def test_sentencepiece_byte_tokens_above_0x7f_stand_for_their_own_byte():
    """'<0xC3>' is the byte 0xC3 (not 0xC3 mod 128 = 'C'): a byte-level drafter's 'Ã' (byte
    0xC3) reaches it, and 'C' reaches the text token 'C' (only bytes below 0x80 were tried)."""
    from rdk_theory.tokens import token_bytes

    assert token_bytes("<0xC3>", "sentencepiece") == b"\xc3"
    assert token_bytes("<0xff>", "sentencepiece") == b"\xff"
    sp = ["<0xC3>", "C", "\u2581the"]
    vm = rt.VocabMap.from_token_strings(["\u00c3", "C", "\u0120the"], sp)
    assert vm.draft_to_target.tolist() == [0, 1, 2]


def test_byte_level_token_with_a_char_outside_the_byte_alphabet_is_read_as_text():
    """A byte-level token holding a character that is not one of the 256 byte characters
    ('Ġ日', an added token) is its UTF-8 text, not a KeyError from the byte decoder (only
    tokens made entirely of byte characters were tried)."""
    from rdk_theory.tokens import token_bytes

    assert token_bytes("\u0120\u65e5", "byte_level") == "\u0120\u65e5".encode("utf-8")
    assert token_bytes("\u0120a", "byte_level") == b" a"


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_keep_most_frequent_ranks_unsigned_counts_by_count(dtype):
    """Unsigned integer counts rank as counts: negating them wraps around (-0 = 0 is the
    smallest key, -5 the largest), which kept the zero-count ids first."""
    counts = np.array([0, 5, 3, 0, 5], dtype=dtype)
    assert rt.keep_most_frequent(counts, 2).tolist() == [1, 4]
    assert rt.keep_most_frequent(counts, 3).tolist() == [1, 2, 4]


def test_a_plain_vocabulary_with_one_marker_led_token_stays_plain():
    """One token starting with 'Ġ' (a Latin letter, U+0120: Maltese 'Ġie') made a plain list
    with literal spaces byte-level: its 'é' read as byte 0xE9 matched nothing and its 'Ã©'
    was paired with the target's 'é', other bytes. Byte-level and SentencePiece lists write
    every space as their marker, so literal-space tokens outnumbering the marker say plain;
    the same holds for a lone '▁' token, which made '<0x41>' read as one byte."""
    from rdk_theory.tokens import token_family

    plain = [" the", "the", " café", "é", "Ã©", "Ġie"]
    sp = ["▁the", "the", "▁café", "é", "Ã©", "Ġie"]
    assert token_family(plain) == "plain" and token_family(sp) == "sentencepiece"
    assert rt.VocabMap.from_token_strings(plain, sp).draft_to_target.tolist() == [0, 1, 2, 3, 4, 5]
    plain_sp = [" a", " b", "▁", "<0x41>"]
    assert token_family(plain_sp) == "plain"
    assert rt.VocabMap.from_token_strings(plain_sp, ["A", "<0x41>"]).draft_to_target.tolist() == \
        [-1, -1, -1, 1]  # the literal string '<0x41>', not the byte 'A'
    # a real marker vocabulary still wins over a few literal-space tokens
    assert token_family(["Ġa", "Ġb", " c"]) == "byte_level"


@pytest.mark.parametrize("dtype, n_target, ok", [
    (np.float16, 2049, True), (np.float16, 2050, False), (np.float32, 2**24 + 1, True),
    (np.float32, 2**24 + 2, False), (np.float64, 4000, True)])
def test_ids_stored_as_floats_are_refused_where_the_dtype_cannot_hold_every_id(dtype, n_target, ok):
    """float16 holds whole numbers exactly only up to 2048: an id 3001 written as float16
    reads 3000, and 'acceptance' gave every alpha 0 with no word. A float dtype is taken only
    when it holds every id of the target's vocabulary."""
    ids = np.array([3, 5], dtype=dtype)
    for build in (lambda: rt.VocabMap(n_target, ids), lambda: rt.VocabMap.from_kept_ids(ids, n_target)):
        if ok:
            assert build().draft_to_target.tolist() == [3, 5]
        else:
            with pytest.raises(rt.InputError, match=f"stored as {np.dtype(dtype).name}, which "
                               "holds whole numbers exactly only up to"):
                build()


def test_a_map_that_pairs_more_tokens_can_lower_tli(capsys):
    """The docstring of from_token_strings said a better map only raises acceptance; it
    raises vanilla's and the OOV cap, not TLI's, which renormalises q on I (its example)."""
    d, t = ["Ġa", "Ċ"], ["▁a", "<0x0A>"]
    p, q = np.array([[1.0, 0.0]]), np.array([[0.5, 0.5]])
    full = rt.VocabMap.from_token_strings(d, t)
    part = rt.VocabMap.from_token_strings(d, t, normalise="marker")
    assert full.draft_to_target.tolist() == [0, 1] and part.draft_to_target.tolist() == [0, -1]
    tli = lambda vm: float(rt.acceptance_rate(p, rt.tli_proposal(q, vm))[0])  # noqa: E731
    assert (tli(full), tli(part)) == (0.5, 1.0)


@pytest.mark.parametrize("dtype, n_target", [("float16", 4000), ("bfloat16", 4000), ("float32", 2**25)])
def test_ids_in_a_float_tensor_are_checked_in_the_tensors_own_dtype(dtype, n_target):
    """A float tensor became float64 on the host before the check, after its ids were
    rounded (3001 read 3000 in float16, 3008 in bfloat16): the check reads the tensor's
    dtype. float64 tensors, and narrow ones over a vocabulary they hold, are taken."""
    torch = pytest.importorskip("torch")
    ids = torch.tensor([3001.0, 5.0], dtype=getattr(torch, dtype))
    for build in (lambda: rt.VocabMap(n_target, ids), lambda: rt.VocabMap.from_kept_ids(ids, n_target)):
        with pytest.raises(rt.InputError, match=f"stored as {dtype}, which holds whole numbers"):
            build()
    assert rt.VocabMap(4000, torch.tensor([3001.0, 5.0], dtype=torch.float64)).draft_to_target.tolist() == [3001, 5]
    assert rt.VocabMap(200, torch.tensor([101.0, 5.0], dtype=torch.bfloat16)).draft_to_target.tolist() == [101, 5]


def test_maps_take_object_arrays_of_ints_and_whole_float_sizes_alike():
    """An object array of Python ints was refused by ``VocabMap`` and ``from_kept_ids`` ("must
    hold integers, got dtype object") while ``keep_most_frequent`` took it, and ``VocabMap``
    refused a target size of 3.0 that ``from_kept_ids`` and ``identity`` take. An id beyond
    int64 is named rather than called ragged or "not integers"."""
    ids = np.array([0, 2], dtype=object)
    assert rt.VocabMap(3, ids) == rt.VocabMap(3, [0, 2]) == rt.VocabMap(3.0, [0, 2])
    assert rt.VocabMap.from_kept_ids(ids, 3) == rt.VocabMap(3, [0, 2])
    assert type(rt.VocabMap(3.0, [0, 2]).n_target) is int
    for bad in (2.5, True, 0):
        with pytest.raises(rt.InputError, match="target vocabulary size must be an integer >= 1"):
            rt.VocabMap(bad, [0])
    with pytest.raises(rt.InputError, match=r"draft_to_target holds 1180591620717411303424, "
                                            r"beyond the int64 ids"):
        rt.VocabMap(3, [0, 2**70])
    with pytest.raises(rt.InputError, match=r"kept_ids holds 1180591620717411303424"):
        rt.VocabMap.from_kept_ids([0, 2**70], 3)
    with pytest.raises(rt.InputError, match="must hold integers, got dtype object"):
        rt.VocabMap(3, np.array([True, 0], dtype=object))  # bools are not ids
