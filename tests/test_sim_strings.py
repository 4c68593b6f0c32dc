"""SLEM / SLRS on toy tokenizers: psi both ways, losslessness, ordering, and the cost of psi."""
from __future__ import annotations

import numpy as np
import pytest

from rdk_theory.string_level import segmentations
from simulators.strings import (
    DRAFT_TOKENS,
    TARGET_TOKENS,
    cost_table,
    draft_target_token,
    markov_string_drafter,
    segmentation_count,
    string_step,
    toy_string_models,
)
from tests.stats import assert_matches_law


@pytest.mark.parametrize("seed", range(3))
def test_psi_slem_slrs_exact(seed):
    tgt, dr = toy_string_models(seed)
    for ctx in range(len(TARGET_TOKENS)):
        p = tgt.next_probs((ctx,))
        res = string_step(p, markov_string_drafter(dr, DRAFT_TOKENS, start=(ctx,)))
        assert list(res["psi"]) == list(res["psi_by_segmentations"])
        assert sum(res["psi"]) == 1  # the target vocabulary is a complete prefix code
        assert list(res["slrs_output_law"]) == list(p)
        assert res["slrs"] >= res["slem"]


def test_segmentation_count_matches_enumeration_and_grows_exponentially():
    for L in range(1, 7):
        s = ("ab" * L)[:L]
        assert segmentation_count(s, DRAFT_TOKENS) == len(segmentations(s, DRAFT_TOKENS))
    counts = [r["segmentations"] for r in cost_table(range(10, 31), enumerate_up_to=0)]
    ratios = np.array(counts[1:]) / np.array(counts[:-1])
    assert np.all(ratios > 1.5)  # golden-ratio growth for this drafter vocabulary
    # a token listed twice counts once, as in the enumeration (it counted twice: 2 against 1)
    for tokens in (["a", "a", "b"], ["ab", "a", "", "b", "ab"]):
        assert segmentation_count("ab", tokens) == len(segmentations("ab", tokens))


@pytest.mark.mc
def test_drafted_target_token_follows_psi():
    """n = 4000 simulated drafts (drafter generates text until it spells a target token):
    chi-square against psi at the per-test false-alarm rate."""
    tgt, dr = toy_string_models(0)
    nxt = markov_string_drafter(dr, DRAFT_TOKENS, start=(0,))
    psi = string_step(tgt.next_probs((0,)), nxt)["psi"]
    rng = np.random.default_rng(5)
    draws = [draft_target_token(nxt, rng) for _ in range(4000)]
    assert_matches_law(np.bincount(draws, minlength=3), np.array([float(x) for x in psi]), "drafted token vs psi")
