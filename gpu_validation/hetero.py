"""Heterogeneous tokenizers: TLI maps between real vocabularies and the target's OOV cap p(I).

Three tokenizers ship with the built-in models: Qwen2.5-Coder (byte-level BPE, 151,936 ids),
SmolLM2 (byte-level BPE, 49,152) and Gemma 3 (SentencePiece, 262,144). A TLI map
``draft_to_target`` matches drafter and target tokens by string
(:meth:`rdk_theory.vocab.VocabMap.from_token_strings`); ``I`` is the set of target ids reached,
and ``p(I)`` bounds the acceptance of vanilla and TLI (statement O2, MATH.md 6).

Two normalisations are compared:

* ``marker``: the token strings as the tokenizers store them with the word-start
  marker rewritten (byte-level ``Ġ`` <-> SentencePiece ``▁``);
* ``bytes`` (the core's default, :mod:`rdk_theory.tokens`): every token first rewritten to the
  bytes it stands for, then matched exactly. Byte-level BPE stores byte ``b`` as the printable character of GPT-2's
  ``bytes_to_unicode`` table (newline ``Ċ``, ``é`` as ``Ã©``); SentencePiece writes a space
  as ``▁`` and byte-fallback tokens as ``<0x0A>``. The bytes are kept in a ``str`` through
  ``surrogateescape`` (injective, so half-characters stay distinct). Special tokens (BOS, chat
  markers) keep their string, in a namespace of their own: they never match ordinary text.

``marker`` misses tokens with newlines, tabs or non-ASCII bytes between tokenizer families and
can pair tokens that stand for different bytes (Qwen ``Ã©`` is "é", Gemma ``Ã©`` is "Ã©");
``bytes`` is the map used for the OOV caps. Laws come from teacher-forcing the *target* only
(no drafter model is run): ``p(I)`` needs nothing else.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from rdk_theory.tokens import (BYTE_DECODER, SPECIAL_PREFIX, canonical_tokens,  # noqa: F401
                               match_ranks, token_bytes, token_family)
from rdk_theory.acceptance import oov_cap
from rdk_theory.vocab import VocabMap, match_keys

from .collect import laws64


@dataclass
class TokenList:
    """A tokenizer's id -> string table, its special ids, its canonical (byte) strings and
    their match ranks (:func:`rdk_theory.tokens.match_ranks`)."""

    name: str
    tokens: list[str]
    special_ids: frozenset = frozenset()
    family: str = ""
    canonical: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    ranks: list[int] = field(default_factory=list)
    #: added non-special ids: their strings are plain text (:func:`canonical_tokens`)
    text_ids: frozenset = frozenset()

    def __post_init__(self):
        self.family = self.family or token_family(self.tokens)
        if not self.canonical:
            self.canonical = canonical_tokens(self.tokens, self.special_ids, self.family,
                                              self.text_ids)
        if not self.ranks:
            self.ranks = match_ranks(self.tokens, self.family)

    @property
    def n_duplicates(self) -> int:
        """Ids whose canonical string an earlier id already has (e.g. Gemma ``\\n``/``<0x0A>``);
        holes (empty strings, which match nothing) are not counted."""
        text = [s for s in self.canonical if s]
        return len(text) - len(set(text))

    def padded(self, width: int) -> "TokenList":
        """This list with holes (``""``: matching nothing) up to ``width`` ids: the rows of an
        LM head padded past its tokenizer (Qwen2.5 on the hub: 151,665 ids, 151,936 rows)."""
        extra = width - len(self.tokens)
        if extra <= 0:
            return self
        return TokenList(self.name, self.tokens + [""] * extra, self.special_ids, self.family,
                         self.canonical + [""] * extra, dict(self.info), self.ranks + [0] * extra,
                         self.text_ids)


def token_list_from_tokenizer(name: str, tokenizer, info=None) -> TokenList:
    n = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(n)))
    added = tokenizer.added_tokens_decoder
    special = {i for i, a in added.items() if a.special} | set(tokenizer.all_special_ids)
    text = {i for i, a in added.items() if not a.special and i < n} - special  # plain text
    return TokenList(name, [t if t is not None else "" for t in tokens], frozenset(special),
                     info=dict(info or {}), text_ids=frozenset(text))


def load_token_list(spec: str, *, fetch_missing: bool = False, log=print) -> TokenList:
    """The :class:`TokenList` of a built-in name, hub id or local path (tokenizer only)."""
    from . import models

    t0 = time.perf_counter()
    tok, info = models.load_tokenizer(spec, fetch_missing=fetch_missing, log=log)
    info["tokenizer_load_s"] = round(time.perf_counter() - t0, 2)
    return token_list_from_tokenizer(spec, tok, info)


def build_map(draft: TokenList, target: TokenList, normalisation: str = "bytes") -> VocabMap:
    """``draft_to_target`` by string: ``"bytes"`` (canonical strings, text tokens paired before
    byte-fallback twins, as the core's default) or ``"marker"`` (core)."""
    if normalisation == "marker":
        return VocabMap.from_token_strings(draft.tokens, target.tokens, normalise="marker",
                                           draft_special_ids=draft.special_ids,
                                           target_special_ids=target.special_ids)
    if normalisation == "bytes":
        return VocabMap(len(target.canonical), match_keys(draft.canonical, target.canonical,
                                                          draft.ranks, target.ranks))
    raise ValueError(f"normalisation must be 'bytes' or 'marker', got {normalisation!r}")


def map_summary(vm: VocabMap, draft: TokenList, target: TokenList) -> dict:
    """|I|, the fraction of each vocabulary matched, and matched pairs whose bytes differ."""
    j = np.flatnonzero(vm.draft_to_target >= 0)
    t = vm.draft_to_target[j]
    differ = sum(draft.canonical[a] != target.canonical[b] for a, b in zip(j, t))
    return {"drafter": draft.name, "target": target.name, "n_drafter": vm.n_draft,
            "n_target": vm.n_target, "intersection": int(j.size),
            "fraction_of_drafter": j.size / vm.n_draft, "fraction_of_target": j.size / vm.n_target,
            "matched_pairs_with_different_bytes": int(differ)}


def _laws(rows) -> np.ndarray:
    return rows if isinstance(rows, np.ndarray) and rows.dtype == np.float64 else laws64(rows)


def oov_cap_by_strings(laws, draft: TokenList, target: TokenList) -> np.ndarray:
    """``p(I)`` per row computed without a VocabMap: mass on target ids whose canonical string
    occurs in the drafter's vocabulary. Equals the map's ``p(I)`` when the target's canonical
    strings are unique (:attr:`TokenList.n_duplicates` = 0). ``laws``: the target's rows; a
    float64 array is taken as :func:`gpu_validation.collect.laws64` returns them (:func:`run`
    makes that once for every pair: renormalising it again in each call cost a full float64
    copy), any other (the models' float32 rows) goes through ``laws64`` here."""
    have = set(draft.canonical) - {""}  # holes match nothing
    mask = np.fromiter((s in have for s in target.canonical), dtype=bool,
                       count=len(target.canonical))
    return _laws(laws)[:, mask].sum(axis=1)


def oov_caps(laws, next_ids, source, texts, vm: VocabMap) -> dict:
    """Mean ``p(I)`` overall and per text, and the fraction of actual next tokens inside I
    (``laws`` as in :func:`oov_cap_by_strings`)."""
    cap = oov_cap(_laws(laws), vm, check=False)
    inside = vm.in_target_mask
    ok = next_ids >= 0
    out = {"mean": float(cap.mean()), "min": float(cap.min()),
           "next_token_in_I": float(inside[next_ids[ok]].mean())}
    out["per_text"] = {name: float(cap[source == i].mean()) for i, name in enumerate(texts)}
    return out


DEFAULT_TARGET = "smollm2-135m"
DEFAULT_DRAFT_VOCABS = ("qwen2.5-coder-1.5b", "gemma-3-270m")


def run(target: str = DEFAULT_TARGET, drafters=DEFAULT_DRAFT_VOCABS, *, out=None,
        device: str = "cpu", dtype: str = "auto", fetch_missing: bool = False,
        log=print) -> dict:
    """The heterogeneous-tokenizer study; writes ``hetero.json`` to ``out`` when given (a new
    file renamed onto that name: never through a symbolic link there, never half-written).

    1. loads the tokenizers of ``target`` and every drafter (no drafter weights); a drafter
       equal to the target is left out, a repeated one is read once;
    2. builds ``bytes`` and ``marker`` maps for every ordered pair of these tokenizers and
       records |I| and the matched fractions;
    3. teacher-forces the ``target`` model on the evaluation texts and records, for each
       drafter vocabulary, the OOV cap ``p(I)`` (two ways) and how often the actual next token
       lies in ``I``.
    """
    import json
    from pathlib import Path

    from rdk_theory._outdir import write_replacing

    from . import collect, models
    from .harness import _json_default, environment

    t0 = time.perf_counter()
    drafters = tuple(dict.fromkeys(drafters))  # a repeat once (its rows were written twice)
    names = [target] + [d for d in drafters if d != target]
    lists = {n: load_token_list(n, fetch_missing=fetch_missing, log=log) for n in names}
    pairs = []
    for d in names:
        for t in names:
            if d == t:
                continue
            row = {"normalisations": {}}
            for norm in ("bytes", "marker"):
                row["normalisations"][norm] = map_summary(build_map(lists[d], lists[t], norm),
                                                          lists[d], lists[t])
            row.update(drafter=d, target=t)
            pairs.append(row)
    lm = models.load(target, device=device, dtype=dtype, fetch_missing=fetch_missing, log=log)
    if len(lm.tokenizer) != len(lists[target].tokens):
        raise models.ModelError(f"{target}: tokenizer sizes differ between loads")
    if lm.output_width < len(lists[target].tokens):
        raise models.ModelError(f"{target}: its LM head has {lm.output_width:,} rows, fewer than "
                                f"its tokenizer's {len(lists[target].tokens):,} ids")
    target_list = lists[target].padded(lm.output_width)  # the laws' width
    ev = collect.collect(lm, None, collect.EVAL_TEXTS, device=device)
    p64 = laws64(ev.p)  # one float64 copy for every drafter below
    caps = []
    for d in drafters:
        if d == target:
            continue
        entry = {"drafter_vocab": d, "target": target}
        maps = {norm: build_map(lists[d], target_list, norm) for norm in ("bytes", "marker")}
        for norm, vm in maps.items():
            entry[norm] = oov_caps(p64, ev.next_ids, ev.source, ev.texts, vm)
            entry[norm]["intersection"] = int((vm.draft_to_target >= 0).sum())
        by_str = oov_cap_by_strings(p64, lists[d], target_list)
        entry["bytes"]["mean_by_strings"] = float(by_str.mean())
        entry["bytes"]["max_abs_diff_two_ways"] = float(np.max(np.abs(
            by_str - p64[:, maps["bytes"].intersection].sum(1))))
        caps.append(entry)
    report = {
        "kind": "rdk-theory gpu_validation heterogeneous tokenizers",
        "environment": environment(), "device": device,
        "tokenizers": {n: {"size": len(tl.tokens), "family": tl.family,
                           "special_ids": len(tl.special_ids),
                           "duplicate_canonical_strings": tl.n_duplicates, **tl.info}
                       for n, tl in lists.items()},
        "target_model": lm.info, "eval_texts": list(ev.texts),
        "eval_positions": int(ev.p.shape[0]), "pairs": pairs, "oov_caps": caps,
        "duration_s": time.perf_counter() - t0,
    }
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        text = json.dumps(report, indent=1, default=_json_default)
        # as harness._write: plain write_text wrote through a symbolic link at the name
        write_replacing(str(Path(out) / "hetero.json"), lambda tmp: Path(tmp).write_text(text))
    return report


def summary_lines(report: dict) -> list[str]:
    lines = [f"{'drafter':<20}{'target':<20}{'|I|':>8}{'of drafter':>12}{'of target':>11}"
             f"{'|I| marker':>12}{'bytes differ':>14}"]
    for r in report["pairs"]:
        b, m = r["normalisations"]["bytes"], r["normalisations"]["marker"]
        lines.append(f"{r['drafter']:<20}{r['target']:<20}{b['intersection']:>8,}"
                     f"{b['fraction_of_drafter']:>12.3f}{b['fraction_of_target']:>11.3f}"
                     f"{m['intersection']:>12,}{m['matched_pairs_with_different_bytes']:>14,}")
    for c in report["oov_caps"]:
        b, m = c["bytes"], c["marker"]
        per = ", ".join(f"{k} {v:.4f}" for k, v in b["per_text"].items())
        lines.append(f"OOV cap p(I), target {c['target']}, drafter vocab {c['drafter_vocab']}: "
                     f"{b['mean']:.4f} ({per}; marker map {m['mean']:.4f}); next token in I "
                     f"{b['next_token_in_I']:.4f}")
    return lines
