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
take arrays shaped ``(..., V)`` and reduce the last axis, broadcasting the leading ones; a torch
tensor, on any device, is copied to the host as numpy first, floating point as float64.
Fractions stay exact; Fractions mixed with floats (exact ``p``, float ``psi``) give float64.
"""
from __future__ import annotations

import itertools
import numbers
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import numpy as np

from .validation import (NEG_ATOL, PROB_ATOL, InputError, as_real_array, check_broadcast,
                         common_tier, host, host_prob_array, rational_array)

NextTokenProbs = Callable[[tuple], Mapping[str, object]]


def unigram_drafter(token_probs: Mapping[str, object]) -> NextTokenProbs:
    """A drafter that draws each token i.i.d. from ``token_probs`` (non-empty strings ->
    probabilities summing to at most 1; floats or Fractions)."""
    if not isinstance(token_probs, Mapping):
        raise InputError(f"token_probs must map token strings to probabilities, got "
                         f"{type(token_probs).__name__}")
    _token_strings(list(token_probs), "drafter tokens")
    table = dict(token_probs)
    if table:
        _probabilities(list(table.values()), "token_probs' probabilities", sums="at most 1")
    return lambda prefix: table


def _token_strings(tokens, name: str, *, holes: bool = False) -> list:
    """``tokens`` as a list of strings, non-empty unless ``holes``; a bare string (read as its
    characters) and non-string entries are InputErrors."""
    if isinstance(tokens, (str, bytes)):
        raise InputError(f"{name} must be a list of token strings, got the string {tokens!r} "
                         "(it would be read as its characters)")
    try:
        tokens = list(tokens)
    except TypeError:
        raise InputError(f"{name} must be a list of token strings, got {type(tokens).__name__}") from None
    bad = next((t for t in tokens if not isinstance(t, str) or not (t or holes)), None)
    if bad is not None:
        raise InputError(f"{name} must be non-empty strings, got {bad!r}")
    return tokens


def _probabilities(values, name: str, *, sums: str | None = "1"):
    """A list or array of probabilities: Fractions (all of them Rational) as an exact object
    array, anything else as float64 (a tensor on any device copied to the host), checked by
    :func:`rdk_theory.validation.host_prob_array` to sum to ``sums`` ("1" or "at most 1")
    along the last axis, or with ``sums=None`` (``psi``: one probability per token, no sum)
    each in [0, 1] within the toolkit's tolerances."""
    values = host(values, name)  # a tensor copied to the host once
    arr = rational_array(values, name)  # None unless every entry is exact
    exact = arr is not None
    if not exact:
        arr = np.asarray(values)  # as given: float16 keeps its own tolerance
        if arr.dtype == object:
            arr = as_real_array(arr, name)  # Fractions mixed with floats: floats
    if sums is not None:
        return host_prob_array(arr, name, allow_sub_stochastic=sums == "at most 1")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise InputError(f"{name} must have a non-empty last axis, got shape {arr.shape}")
    if not exact:
        arr = as_real_array(arr, name)
        bad = ~np.isfinite(arr) | (arr < -NEG_ATOL) | (arr > 1 + PROB_ATOL)
        if bad.any():
            raise InputError(f"{name} holds {float(arr[bad][0])!r}: each entry is a probability in [0, 1]")
        return np.clip(arr, 0.0, 1.0)
    bad = next((v for v in arr.flat if not 0 <= v <= 1), None)
    if bad is not None:
        raise InputError(f"{name} holds {bad!r}: each entry is a probability in [0, 1]")
    return arr


def _drafter_call(next_token_probs, context: tuple, checked: dict | None = None,
                  vocabulary: frozenset | None = None) -> Mapping:
    """``next_token_probs(context)``, refusing a drafter that is not a callable returning a
    mapping of non-empty token strings to probabilities summing to at most 1: a dict of token
    probabilities passed as the drafter was a raw TypeError ('dict' object is not callable),
    a callable returning a list a raw AttributeError, and negative or string probabilities
    came back as psi values (-0.5, '0.5'). Each table is checked as :func:`unigram_drafter`
    checks its own, once per ``checked`` (a dict the caller keeps for one computation: the
    tables it holds keep their ids; a unigram drafter's one table is then checked once, not
    on every step of the recursion, which made psi 15 times slower). A table is taken as
    checked only while it holds what it held when checked: a drafter that refills one dict
    per call had its later tables, negative probabilities included, taken unchecked. With a
    ``vocabulary``, a token the table gives positive probability must be in it."""
    if not callable(next_token_probs) or isinstance(next_token_probs, type):
        raise InputError(f"next_token_probs must be a callable context -> {{token: "
                         f"probability}}, got {_what(next_token_probs)} (a dict of "
                         "token probabilities: wrap it with unigram_drafter)")
    out = next_token_probs(context)
    if not isinstance(out, Mapping):
        raise InputError(f"next_token_probs(context) must return a mapping token -> "
                         f"probability, got {type(out).__name__} for context {context!r}")
    seen = checked.get(id(out)) if checked is not None else None
    if seen is not None and seen[0] is out and seen[1] == out:
        return out
    _token_strings(list(out), f"drafter tokens after context {context!r}")
    if out:
        _probabilities(list(out.values()), f"drafter probabilities after context {context!r}",
                       sums="at most 1")
    if vocabulary is not None:
        missing = next((t for t, prob in out.items() if prob != 0 and t not in vocabulary), None)
        if missing is not None:
            raise InputError(f"the drafter gives token {missing!r} probability "
                             f"{out[missing]!r} after context {context!r}, but drafter_tokens "
                             "does not list it: psi would leave out its segmentations")
    if checked is not None:
        if len(checked) >= 256:  # a drafter that builds a new table per call: bounded memory
            checked.clear()
        checked[id(out)] = (out, dict(out))
    return out


def _what(x) -> str:
    """A value's kind for an error message: ``the class X`` for a class, else its type's name."""
    return f"the class {x.__name__}" if isinstance(x, type) else type(x).__name__


def check_target_string(string) -> None:
    """InputError unless ``string`` is a non-empty str: a target token (every drafter output
    starts with "", so psi("") would be 1 and no segmentation of it is minimal)."""
    if not isinstance(string, str) or not string:
        raise InputError(f"string must be a non-empty str (a target token), got {string!r}")


def prefix_probability(string: str, next_token_probs: NextTokenProbs, prefix: tuple = ()):
    """``P(drafter output starts with string)``, over the drafter's first tokens.

    ``f(s) = sum_{d : s is a prefix of d} P(d) + sum_{d : d is a proper prefix of s} P(d) f(s[len d:])``,
    unrolled with an explicit stack (one entry per partial segmentation, each carrying its
    probability), so a string of any length needs no recursion: 1,200 one-character drafter
    tokens overflowed Python's stack. Exact on ``Fraction`` probabilities (0 is the drafter's
    own zero: ``Fraction(0)`` for a Fraction drafter that never produces ``string``).
    ``string`` must be a non-empty str, as a target token in :func:`psi` (InputError
    otherwise; every output starts with ""), and ``prefix`` a sequence of token strings (a bare
    string was read as its characters, a number was a raw TypeError).
    """
    check_target_string(string)
    total = None
    stack = [(string, tuple(_token_strings(prefix, "prefix")), 1)]
    checked: dict = {}
    while stack:
        rest, context, weight = stack.pop()
        for tok, prob in _drafter_call(next_token_probs, context, checked).items():
            if total is None:
                total = 0 * prob  # the drafter's zero: Fraction(0) for Fractions, 0.0 for floats
            if tok.startswith(rest):
                total = total + weight * prob
            elif rest.startswith(tok):
                stack.append((rest[len(tok):], context + (tok,), weight * prob))
    return 0 if total is None else total


def segmentations(string: str, drafter_tokens: Sequence[str]) -> list[tuple[str, ...]]:
    """All drafter token sequences ``(d_1 .. d_m)`` that produce ``string`` as a prefix minimally.

    ``d_1 .. d_{m-1}`` spell a proper prefix of ``string`` and ``d_1 .. d_m`` spell a string that
    starts with ``string``. Brute force over all sequences of length ``<= len(string)``; a token
    listed twice counts once (a vocabulary is a set of strings), an empty one never.
    ``string`` must be a non-empty str, as in :func:`prefix_probability` (InputError otherwise:
    psi("") would be 1, while no sequence of non-empty tokens is a minimal segmentation of "").
    """
    check_target_string(string)
    toks = list(dict.fromkeys(t for t in _token_strings(drafter_tokens, "drafter tokens",
                                                        holes=True) if t))
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
    """``psi(t)`` for each target token string by summing over its enumerated segmentations.

    ``drafter_tokens`` must list every token the drafter gives positive probability (an
    InputError names one it does not): the segmentations are enumerated over it, and a token
    left out silently left out its share of ``psi`` (0.125 for 0.375)."""
    out = []
    targets = _token_strings(target_tokens, "target tokens")
    drafter_tokens = _token_strings(drafter_tokens, "drafter tokens", holes=True)  # a list:
    vocabulary = frozenset(drafter_tokens)  # a generator read here was empty for segmentations
    checked: dict = {}
    root = _drafter_call(next_token_probs, (), checked, vocabulary) if targets else {}
    zero = 0 * next(iter(root.values()), 0)  # the drafter's zero: Fraction(0) for Fractions
    for s in targets:
        total = zero
        for seq in segmentations(s, drafter_tokens):
            prob = 1
            for i, tok in enumerate(seq):
                table = _drafter_call(next_token_probs, tuple(seq[:i]), checked, vocabulary)
                prob = prob * table.get(tok, 0)
            total = total + prob
        out.append(total)
    return _psi_array(out)


def psi(target_tokens: Sequence[str], next_token_probs: NextTokenProbs):
    """``psi(t) = P(drafter string starts with s_t)`` for each target token, by the prefix
    recursion of :func:`prefix_probability` (unrolled on an explicit stack)."""
    vals = [prefix_probability(s, next_token_probs)
            for s in _token_strings(target_tokens, "target tokens")]
    return _psi_array(vals)


def _psi_array(vals) -> np.ndarray:
    """``psi`` values as an object array when they are exact (Fractions, and ints such as a
    drafter's int 0), else float64: a drafter mixing Fractions with floats gives floats."""
    exact = (any(isinstance(v, Fraction) for v in vals)
             and all(isinstance(v, numbers.Rational) for v in vals))
    return np.array(vals, dtype=object if exact else np.float64)


def _acceptance_inputs(target_probs, psi_values):
    """``(p, psi)``: a law and values in [0, 1] over one last axis, leading axes that broadcast."""
    p = _probabilities(target_probs, "target_probs")
    s = _probabilities(psi_values, "psi", sums=None)
    if p.shape[-1] != s.shape[-1]:
        raise InputError(f"target_probs and psi must cover the same target tokens (last axis), "
                         f"got shapes {p.shape} and {s.shape}")
    check_broadcast(p.shape[:-1], s.shape[:-1], ("target_probs", "psi"))
    return common_tier(p, s)


def slem_acceptance(target_probs, psi_values):
    """String-level exact match: ``sum_t p(t) psi(t)``, per context (the last axis summed)."""
    p, s = _acceptance_inputs(target_probs, psi_values)
    return (p * s).sum(axis=-1)


def slrs_acceptance(target_probs, psi_values):
    """String-level rejection sampling: ``sum_t min(p(t), psi(t))``, per context."""
    p, s = _acceptance_inputs(target_probs, psi_values)
    return np.minimum(p, s).sum(axis=-1)


__all__ = [
    "check_target_string", "prefix_probability", "psi", "psi_by_segmentations", "segmentations",
    "slem_acceptance", "slrs_acceptance", "unigram_drafter",
]
