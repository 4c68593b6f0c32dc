"""Token strings -> the bytes they stand for, so vocabularies of different tokenizer families
can be matched (TLI maps between heterogeneous tokenizers, [2]).

Tokenizers store a token's text differently:

* byte-level BPE (GPT-2 family: Qwen, SmolLM2, Llama 3) writes byte ``b`` as a printable
  character of GPT-2's byte-to-unicode table: a space is ``Ġ``, a newline ``Ċ``, "é" is ``Ã©``;
* SentencePiece (Gemma, Llama 2, T5) writes a space as ``▁`` and byte-fallback tokens as
  ``<0x0A>``; other characters are themselves (so its ``Ã©`` is the two characters "Ã©").

Rewriting only the word-start marker (``Ġ`` <-> ``▁``, as transformers' universal assisted
generation does for a leading one) misses tokens holding newlines, tabs or non-ASCII text, and can pair tokens
that stand for different bytes; rewriting every token to its bytes does neither. Bytes are kept
in a ``str`` through ``surrogateescape`` (injective: half-characters stay distinct). Special
tokens (BOS, chat markers) keep their string in a namespace of their own and only ever match
special tokens.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

BYTE_LEVEL_SPACE = "\u0120"  # 'Ġ'
SENTENCEPIECE_SPACE = "\u2581"  # '▁'
KNOWN_SPACE_MARKERS = (BYTE_LEVEL_SPACE, SENTENCEPIECE_SPACE)
#: Prefix of special tokens' canonical strings. A lone high surrogate: no text key can hold
#: one (token strings with lone surrogates are refused, and bytes come back through
#: surrogateescape as U+DC80..U+DCFF only), while NUL + a tag could be spelled by byte-level
#: text ('Ā' is byte 0) and matched a special token.
SPECIAL_PREFIX = "\ud800special\ud800"
_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-unicode table: printable character -> byte value."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
                 + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    chars, extra = printable[:], 0
    byte_values = printable[:]
    for b in range(256):
        if b not in printable:
            byte_values.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(byte_values, chars)}


BYTE_DECODER = _byte_decoder()


def detect_space_marker(tokens: Sequence[str]) -> str | None:
    """The word-start marker most used in ``tokens`` (``Ġ`` or ``▁``), or None: none starts a
    token, or more tokens start with a literal space than with either marker. Byte-level and
    SentencePiece vocabularies write every space as their marker, so a literal space marks a
    plain vocabulary, where ``Ġ`` (a Latin letter, U+0120) or ``▁`` may still start a token:
    one such token made a plain list of thousands byte-level, and its ``é`` a byte 0xE9."""
    counts = {m: 0 for m in KNOWN_SPACE_MARKERS}
    spaces = 0
    for tok in tokens:
        if tok and tok[0] in counts:
            counts[tok[0]] += 1
        elif tok and tok[0] == " ":
            spaces += 1
    best = max(counts, key=counts.get)
    return best if counts[best] > 0 and counts[best] >= spaces else None


def token_family(tokens: Sequence[str]) -> str:
    """``"byte_level"`` (``Ġ`` marker), ``"sentencepiece"`` (``▁``) or ``"plain"``."""
    marker = detect_space_marker(tokens)
    return {BYTE_LEVEL_SPACE: "byte_level", SENTENCEPIECE_SPACE: "sentencepiece"}.get(marker, "plain")


def token_bytes(token: str, family: str) -> bytes:
    """The bytes a (non-special) token string stands for in its tokenizer family."""
    if family == "byte_level" and all(c in BYTE_DECODER for c in token):
        return bytes(BYTE_DECODER[c] for c in token)
    if family == "sentencepiece":
        m = _SP_BYTE.fullmatch(token)
        if m:
            return bytes([int(m.group(1), 16)])
        return token.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")
    return token.encode("utf-8", "surrogateescape")


def match_ranks(tokens: Sequence[str], family: str | None = None) -> list[int]:
    """Which of two tokens standing for the same bytes a string map pairs first (lower first):
    1 for a SentencePiece byte-fallback token (``<0x61>``), 0 for any other.

    A SentencePiece vocabulary may hold both ``a`` and its byte-fallback twin ``<0x61>`` (Gemma
    and Llama 2 list the 256 byte tokens first). The tokenizer emits a byte-fallback token only
    for bytes no text token covers, so the text token is the one a model puts its mass on: a map
    that paired the drafter's ``a`` with the target's ``<0x61>`` would send the drafter's mass
    to a token of probability ~0. ``family`` is detected when not given."""
    if (family or token_family(tokens)) != "sentencepiece":
        return [0] * len(tokens)
    return [1 if _SP_BYTE.fullmatch(t) else 0 for t in tokens]


def canonical_tokens(tokens: Sequence[str], special_ids: Iterable[int] = (),
                     family: str | None = None, text_ids: Iterable[int] = ()) -> list[str]:
    """Each token rewritten to its bytes (as ``str`` via ``surrogateescape``); special tokens
    prefixed with :data:`SPECIAL_PREFIX`. ``family`` is detected when not given.

    ``text_ids``: tokens whose string is plain text, not the family's encoding: a tokenizer's
    added (non-special) tokens, which ``convert_ids_to_tokens`` returns as their content. A
    byte-level added token ``é-x`` read through GPT-2's table would stand for the bytes
    ``E9 2D 78``, not the UTF-8 of ``é-x``, and match nothing it should."""
    family = family or token_family(tokens)
    text = set(text_ids)
    return mark_special([(t.encode("utf-8", "surrogateescape") if i in text
                          else token_bytes(t, family)).decode("utf-8", "surrogateescape")
                         for i, t in enumerate(tokens)], tokens, special_ids)


def mark_special(keys: Sequence[str], tokens: Sequence[str],
                 special_ids: Iterable[int]) -> list[str]:
    """``keys`` with the key of each special id replaced by :data:`SPECIAL_PREFIX` + its token
    string, so that special tokens match only special tokens with the same string (an empty
    string stays a hole and matches nothing)."""
    special = set(special_ids)
    return [SPECIAL_PREFIX + t if i in special and t else k
            for i, (k, t) in enumerate(zip(keys, tokens))]
