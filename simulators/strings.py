"""SLEM and SLRS [2] on toy tokenizers: psi by segmentations, acceptance, losslessness, cost.

Setting: one alphabet ``{a, b}``; the target tokenizes with the *complete prefix code*
``TARGET_TOKENS = (aa, ab, b)`` **[definition of the toy]**, so every long enough string starts
with exactly one target token and ``psi`` is a probability law over target tokens
(``sum_t psi(t) = 1``). The drafter tokenizes with ``DRAFT_TOKENS`` (overlapping, of lengths 1-3)
and is an order-1 Markov chain over its own tokens. ``psi(t)`` — the drafter's probability that
its generated string starts with target token ``t`` — comes from
:func:`rdk_theory.string_level.psi` (recursion) and :func:`rdk_theory.string_level.psi_by_segmentations`
(enumerating segmentations); both must agree exactly.

* SLEM: the target draws ``t ~ p`` and keeps it; the draft is accepted when it spells ``t``.
  Output ``= t ~ p``: lossless by construction (the output law, summed over the accept and
  reject branches, is ``p psi + p (1 - psi) = p``); acceptance ``sum_t p(t) psi(t)``.
* SLRS: the drafted target token ``t ~ psi`` is accepted with ``min(1, p(t)/psi(t))``, else a
  residual token is drawn; output law ``min(p, psi) + (1 - alpha) res = p`` (checked exactly with
  :func:`rdk_theory.acceptance.step_output_law`); acceptance ``sum_t min(p(t), psi(t))``.
* :func:`draft_target_token` simulates the drafter generating text and reads off the target
  token its string starts with: its empirical law is tested against ``psi``.
* :func:`segmentation_count` counts segmentations by dynamic programming; the count grows
  exponentially with the length of the target token, which is what makes ``psi`` by
  enumeration expensive (:func:`cost_table`).
"""
from __future__ import annotations

import time
from fractions import Fraction
from typing import Sequence

import numpy as np

from rdk_theory.acceptance import step_output_law
from rdk_theory.string_level import (check_target_string, psi, psi_by_segmentations, segmentations,
                                     slem_acceptance, slrs_acceptance)
from rdk_theory.validation import InputError, as_count, check_numpy_rng

from .toy_lm import MarkovLM, random_markov_lm

TARGET_TOKENS = ("aa", "ab", "b")
DRAFT_TOKENS = ("a", "b", "ab", "ba", "aab", "bb")


def markov_string_drafter(chain: MarkovLM, tokens: Sequence[str], start: tuple = ()):
    """``next_token_probs(prefix_strings) -> {token: prob}`` for a chain over drafter token ids.

    ``start`` holds drafter ids of the text before the step (the chain's context).
    """
    tokens = list(tokens)
    if len(tokens) != chain.n_out:  # fewer: the law was cut silently; more: an IndexError
        raise InputError(f"{len(tokens)} token strings for a chain over {chain.n_out} ids")
    if len(set(tokens)) != len(tokens):
        raise InputError("the token strings must be distinct (a prefix names its ids by them)")
    index = {t: i for i, t in enumerate(tokens)}

    def next_token_probs(prefix):
        unknown = [t for t in prefix if t not in index]
        if unknown:  # a raw KeyError
            raise InputError(f"prefix token {unknown[0]!r} is not one of the drafter's tokens")
        row = chain.next_probs(tuple(start) + tuple(index[t] for t in prefix))
        return {tokens[i]: row[i] for i in range(len(tokens)) if row[i] != 0}

    return next_token_probs


def toy_string_models(seed: int = 0):
    """``(target chain over TARGET_TOKENS, drafter chain over DRAFT_TOKENS)``, exact Fractions."""
    rng = np.random.default_rng(seed)
    target = random_markov_lm(rng, len(TARGET_TOKENS), order=1, zero_prob=0.15)
    drafter = random_markov_lm(rng, len(DRAFT_TOKENS), order=1, zero_prob=0.15)
    return target, drafter


def string_step(target_probs, drafter_next, *, target_tokens=TARGET_TOKENS, draft_tokens=DRAFT_TOKENS) -> dict:
    """Exact one-step quantities: ``psi`` (both ways), SLEM/SLRS acceptance, SLRS output law."""
    p = np.asarray(target_probs)
    if p.shape != (len(target_tokens),):
        raise InputError(f"target_probs must have {len(target_tokens)} entries, got {p.shape}")
    ps = psi(target_tokens, drafter_next)
    ps_seg = psi_by_segmentations(target_tokens, drafter_next, draft_tokens)
    return {
        "psi": ps,
        "psi_by_segmentations": ps_seg,
        "slem": slem_acceptance(p, ps),
        "slrs": slrs_acceptance(p, ps),
        "slrs_output_law": step_output_law(p, ps, check=False),
        # no SLEM output law: the target's own draw is emitted whether the draft spells it or
        # not, so SLEM's law is p by construction (a "check" of it could not fail)
    }


def draft_target_token(drafter_next, rng, *, target_tokens=TARGET_TOKENS, max_tokens: int = 64) -> int:
    """Generate drafter tokens until the text starts with a target token; return that token's id."""
    check_numpy_rng(rng, "draft_target_token needs")
    # a string was read as its characters; "" matched every text at once (id 0); a generator
    # is read once
    if isinstance(target_tokens, str):
        raise InputError("target_tokens must be a list of non-empty strings, not one string")
    target_tokens = list(target_tokens)
    if not target_tokens or not all(isinstance(t, str) and t for t in target_tokens):
        raise InputError("target_tokens must be a list of non-empty strings")
    max_tokens = as_count(max_tokens, "max_tokens", 1)  # 2.5 was a raw TypeError
    text, prefix = "", ()
    for _ in range(max_tokens):
        for i, t in enumerate(target_tokens):
            if text.startswith(t):
                return i
        probs = drafter_next(prefix)
        toks = list(probs)
        if not toks:
            raise InputError(f"the drafter has no next token after {prefix!r}")
        w = np.array([float(probs[t]) for t in toks])
        tok = toks[int(rng.choice(len(toks), p=w / w.sum()))]
        text, prefix = text + tok, prefix + (tok,)
    raise InputError("the drafter never spelled a target token")


def segmentation_count(string: str, draft_tokens: Sequence[str]) -> int:
    """Number of segmentations of ``string`` (as in :func:`rdk_theory.string_level.segmentations`).

    ``d_1..d_{m-1}`` tile a proper prefix ``string[:i]`` exactly and ``d_m`` starts with
    ``string[i:]``: ``count = sum_{i < n} tilings(string[:i]) * #{d : d startswith string[i:]}``.
    A token listed twice counts once, an empty one never, and ``string`` must be a non-empty
    str, as there.
    """
    check_target_string(string)
    if isinstance(draft_tokens, str):
        raise InputError("draft_tokens must be a list of strings, not one string")
    draft_tokens = list(draft_tokens)  # once: a generator read by the check came back empty
    if not all(isinstance(d, str) for d in draft_tokens):
        raise InputError("draft_tokens must be a list of strings")  # [1] was a raw TypeError
    draft_tokens = list(dict.fromkeys(d for d in draft_tokens if d))
    n = len(string)
    tilings = [0] * (n + 1)
    tilings[0] = 1
    for i in range(1, n + 1):
        tilings[i] = sum(tilings[i - len(d)] for d in draft_tokens
                         if d and len(d) <= i and string[i - len(d):i] == d)
    return sum(tilings[i] * sum(1 for d in draft_tokens if d.startswith(string[i:])) for i in range(n))


def cost_table(lengths=range(1, 25), draft_tokens=DRAFT_TOKENS, enumerate_up_to: int = 7) -> list[dict]:
    """Segmentations of the string ``abab...`` (length L) vs L, with enumeration time for small L."""
    rows = []
    for L in lengths:
        s = ("ab" * L)[:L]
        row = {"length": int(L), "segmentations": segmentation_count(s, draft_tokens)}
        if L <= enumerate_up_to:
            t0 = time.perf_counter()
            found = len(segmentations(s, draft_tokens))
            row["enumeration_seconds"] = time.perf_counter() - t0
            if found != row["segmentations"]:
                raise AssertionError(f"DP count {row['segmentations']} != enumeration {found} at L = {L}")
        rows.append(row)
    return rows


__all__ = ["DRAFT_TOKENS", "TARGET_TOKENS", "cost_table", "draft_target_token", "markov_string_drafter",
           "segmentation_count", "string_step", "toy_string_models"]
_ = Fraction
