"""String-level verification across tokenizers: SLEM and SLRS acceptance (statement S, [2]).

When drafter and target tokenize text differently, the drafter proposes *strings*. For a target
token ``t`` with string ``s_t``, let

    psi(t) = P(the drafter's generated string starts with s_t),

the drafter's probability of "producing" target token ``t``. String-level exact match (SLEM)
lets the target draw ``t ~ p`` independently and accepts when the draft string agrees, so its
acceptance is ``sum_t p(t) psi(t)``. String-level rejection sampling (SLRS) accepts the drafted
target token with probability ``min(1, p(t) / psi(t))``, so its acceptance is
``sum_t min(p(t), psi(t))``; since ``min(a, b) >= a b`` on ``[0, 1]``, SLRS >= SLEM.

``psi`` is computed by enumerating the drafter's *segmentations* of ``s_t``: sequences of drafter
tokens ``d_1 .. d_m`` whose first ``m - 1`` tokens spell a proper prefix of ``s_t`` and whose last
token completes (or overruns) it. The drafter is a toy model given as a function
``next_token_probs(prefix_tokens) -> {token_string: probability}`` (a unigram drafter ignores its
argument). Exponential in ``len(s_t)`` in the worst case: toy tokenizers only. The acceptances
take arrays (a torch tensor, on any device, is copied to the host as numpy first,
floating point as float64).
"""
from __future__ import annotations

import itertools
from typing import Callable, Mapping, Sequence

import numpy as np

from .validation import InputError, host

NextTokenProbs = Callable[[tuple], Mapping[str, object]]


def unigram_drafter(token_probs: Mapping[str, object]) -> NextTokenProbs:
    """A drafter that draws each token i.i.d. from ``token_probs`` (strings -> probabilities)."""
    if any(len(tok) == 0 for tok in token_probs):
        raise InputError("drafter tokens must be non-empty strings")
    table = dict(token_probs)
    return lambda prefix: table


def prefix_probability(string: str, next_token_probs: NextTokenProbs, prefix: tuple = ()):
    """``P(drafter output starts with string)`` by recursion over the first drafter token.

    ``f(s) = sum_{d : s is a prefix of d} P(d) + sum_{d : d is a proper prefix of s} P(d) f(s[len d:])``.
    Exact on ``Fraction`` probabilities.
    """
    total = 0
    for tok, prob in next_token_probs(prefix).items():
        if not tok:
            raise InputError("drafter tokens must be non-empty strings")
        if tok.startswith(string):
            total = total + prob
        elif string.startswith(tok):
            total = total + prob * prefix_probability(string[len(tok):], next_token_probs, prefix + (tok,))
    return total


def segmentations(string: str, drafter_tokens: Sequence[str]) -> list[tuple[str, ...]]:
    """All drafter token sequences ``(d_1 .. d_m)`` that produce ``string`` as a prefix minimally.

    ``d_1 .. d_{m-1}`` spell a proper prefix of ``string`` and ``d_1 .. d_m`` spell a string that
    starts with ``string``. Brute force over all sequences of length ``<= len(string)``; a token
    listed twice counts once (a vocabulary is a set of strings).
    """
    toks = list(dict.fromkeys(t for t in drafter_tokens if t))
    out = []
    for m in range(1, len(string) + 1):
        for seq in itertools.product(toks, repeat=m):
            head = "".join(seq[:-1])
            full = head + seq[-1]
            if len(head) < len(string) and string.startswith(head) and full.startswith(string):
                out.append(seq)
    return out


def psi_by_segmentations(target_tokens: Sequence[str], next_token_probs: NextTokenProbs,
                         drafter_tokens: Sequence[str]):
    """``psi(t)`` for each target token string by summing over its enumerated segmentations."""
    out = []
    for s in target_tokens:
        if not s:
            raise InputError("target tokens must be non-empty strings")
        total = 0
        for seq in segmentations(s, drafter_tokens):
            prob = 1
            for i, tok in enumerate(seq):
                prob = prob * next_token_probs(tuple(seq[:i])).get(tok, 0)
            total = total + prob
        out.append(total)
    return np.array(out, dtype=object if _exact(out) else np.float64)


def psi(target_tokens: Sequence[str], next_token_probs: NextTokenProbs):
    """``psi(t) = P(drafter string starts with s_t)`` for each target token (recursive form)."""
    if any(not s for s in target_tokens):
        raise InputError("target tokens must be non-empty strings")
    vals = [prefix_probability(s, next_token_probs) for s in target_tokens]
    return np.array(vals, dtype=object if _exact(vals) else np.float64)


def _exact(vals) -> bool:
    from fractions import Fraction

    return any(isinstance(v, Fraction) for v in vals)


def slem_acceptance(target_probs, psi_values):
    """String-level exact match: ``sum_t p(t) psi(t)``."""
    p, s = np.asarray(host(target_probs, "target_probs")), np.asarray(host(psi_values, "psi"))
    if p.shape != s.shape:
        raise InputError(f"target_probs and psi must have one shape, got {p.shape}, {s.shape}")
    return (p * s).sum()


def slrs_acceptance(target_probs, psi_values):
    """String-level rejection sampling: ``sum_t min(p(t), psi(t))``."""
    p, s = np.asarray(host(target_probs, "target_probs")), np.asarray(host(psi_values, "psi"))
    if p.shape != s.shape:
        raise InputError(f"target_probs and psi must have one shape, got {p.shape}, {s.shape}")
    return np.minimum(p, s).sum()


__all__ = [
    "prefix_probability", "psi", "psi_by_segmentations", "segmentations", "slem_acceptance",
    "slrs_acceptance", "unigram_drafter",
]
