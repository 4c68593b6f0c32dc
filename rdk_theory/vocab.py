"""Drafter-to-target vocabulary maps.

A :class:`VocabMap` holds the target size ``N_T`` and ``draft_to_target`` (length ``N_D``):
entry ``j`` is the target id of drafter token ``j``, or ``-1`` when the target lacks it. The
intersection ``I`` is the set of target ids reachable from the drafter; ``OOV = T \\ I``.

Builders:

* :func:`keep_most_frequent` + :meth:`VocabMap.from_kept_ids`: a *pruned* drafter (same
  tokenizer, LM head cut to a kept subset); every entry is a valid target id.
* :meth:`VocabMap.from_token_strings`: heterogeneous tokenizers, matched by the bytes each token
  stands for (:mod:`rdk_theory.tokens`), or, close to transformers' universal assisted
  generation, by string after rewriting only the word-start marker (``Ġ`` vs ``▁``) [2].
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Mapping, Sequence

import numpy as np

from . import _backend as B
from .tokens import canonical_tokens, detect_space_marker, mark_special, match_ranks
from .validation import (NEG_ATOL, InputError, as_count, as_draft_to_target, as_real_array,
                         as_real_tensor, check_float_ids, host, host_ids)

@dataclass(frozen=True, eq=False)
class VocabMap:
    """Map from drafter ids to target ids (``-1``: absent from the target).

    Attributes:
      n_target: ``N_T``, the target vocabulary size.
      draft_to_target: int64 array (N_D,), read-only.

    Two maps are equal when they have the same ``N_T`` and the same ids, and equal maps hash
    alike (a map can key a dict or a cache).
    """

    n_target: int
    draft_to_target: np.ndarray

    def __post_init__(self):
        arr = as_draft_to_target(self.draft_to_target, self.n_target)
        object.__setattr__(self, "n_target", int(self.n_target))
        object.__setattr__(self, "draft_to_target", arr)
        arr.setflags(write=False)

    def __eq__(self, other):
        if not isinstance(other, VocabMap):
            return NotImplemented
        return (self.n_target == other.n_target
                and np.array_equal(self.draft_to_target, other.draft_to_target))

    def __hash__(self):
        return hash((self.n_target, self.draft_to_target.tobytes()))

    @property
    def n_draft(self) -> int:
        return int(self.draft_to_target.shape[0])

    @property
    def intersection(self) -> np.ndarray:
        """Sorted target ids of ``I``."""
        return np.sort(self.draft_to_target[self.draft_to_target >= 0])

    @property
    def oov(self) -> np.ndarray:
        """Sorted target ids outside ``I``."""
        mask = np.ones(self.n_target, dtype=bool)
        mask[self.draft_to_target[self.draft_to_target >= 0]] = False
        return np.flatnonzero(mask)

    @property
    def in_target_mask(self) -> np.ndarray:
        """Boolean (N_T,): True on ``I``."""
        mask = np.zeros(self.n_target, dtype=bool)
        mask[self.draft_to_target[self.draft_to_target >= 0]] = True
        return mask

    @cached_property
    def scatter_plan(self):
        """``(keep, dst, is_identity)``: drafter columns that exist in T, their target ids, and
        whether the map is the identity (computed once; used by every proposal)."""
        keep = np.flatnonzero(self.draft_to_target >= 0)
        dst = self.draft_to_target[keep]
        identity = (keep.size == self.n_target == self.n_draft
                    and bool(np.all(dst == np.arange(self.n_target))))
        keep.setflags(write=False)  # read-only like the ids: every proposal scatters by these
        dst.setflags(write=False)
        return keep, dst, identity

    @cached_property
    def _device_indices(self) -> dict:
        return {}

    def on_device(self, name: str, device):
        """The index array ``name`` (``"keep"`` or ``"dst"`` of :attr:`scatter_plan`,
        ``"intersection"``, or ``"source"``: for each target id the drafter column that maps
        to it, -1 for none) as an int64 torch tensor on ``device``, copied there once per
        device: a decode loop on CUDA then makes no host-to-device copy per call. The tensor is
        the map's own (a copy, on the host too): every later call on that device reads it, so
        it must not be written."""
        key = (name, str(device))
        if key not in self._device_indices:
            import torch

            arrays = {"keep": lambda: self.scatter_plan[0], "dst": lambda: self.scatter_plan[1],
                      "intersection": lambda: self.intersection, "source": self._source}
            if name not in arrays:  # a bare KeyError named neither the method nor the choices
                raise InputError(f"on_device: name must be one of {', '.join(arrays)}, got {name!r}")
            if device is not None and not isinstance(device, (str, numbers.Integral,
                                                              torch.device)) or \
                    isinstance(device, (bool, np.bool_)):  # 1.5 was a raw TypeError
                raise InputError(f"on_device: device must be a torch device, a name or an "
                                 f"index, got {device!r}")
            given = device
            try:  # None (the default device) and ints as torch reads them
                device = device if device is None or isinstance(device, torch.device) else \
                    torch.device(device if isinstance(device, str) else int(device))
                with B.kept_tensors():  # not an inference tensor, which the cache would keep
                    index = torch.tensor(arrays[name](), dtype=torch.int64, device=device)
            except (RuntimeError, AssertionError) as exc:  # "cuda" on a build without it
                raise InputError(f"on_device: {given!r} is not a torch device here "
                                 f"({exc})") from None
            self._device_indices[key] = index
        return self._device_indices[key]

    def _source(self) -> np.ndarray:
        """``(N_T,)``: the drafter column whose token has each target id, -1 where none has
        (the map is one-to-one on the ids it keeps: ``as_draft_to_target`` refuses repeats)."""
        keep, dst, _ = self.scatter_plan
        source = np.full(self.n_target, -1, dtype=np.int64)
        source[dst] = keep
        return source

    def scatter_plan_for(self, values):
        """:attr:`scatter_plan`, with its index arrays on the device of ``values`` when that
        is a torch tensor."""
        keep, dst, identity = self.scatter_plan
        if B.is_torch(values) and not identity:
            keep, dst = self.on_device("keep", values.device), self.on_device("dst", values.device)
        return keep, dst, identity

    def __getstate__(self):
        """Pickle the map without its device copies (they may live on a device the reader
        lacks)."""
        return {k: v for k, v in self.__dict__.items() if k != "_device_indices"}

    def __setstate__(self, state):
        """Unpickle (and deep-copy): the ids come back read-only, as they were, so that no one
        can edit a map into sending two drafter tokens to one target id after its checks."""
        self.__dict__.update(state)
        self.draft_to_target.setflags(write=False)
        for plan in state.get("scatter_plan", ())[:2]:  # pickled after its first use
            plan.setflags(write=False)

    @property
    def is_pruned(self) -> bool:
        """True when every drafter token exists in the target (a pruned drafter)."""
        return bool(np.all(self.draft_to_target >= 0))

    @classmethod
    def identity(cls, n: int) -> "VocabMap":
        """Drafter and target share one vocabulary of size ``n``."""
        n = as_count(n, "n", 1)
        return cls(n, np.arange(n))

    @classmethod
    def from_kept_ids(cls, kept_ids: Sequence[int], n_target: int) -> "VocabMap":
        """A pruned drafter whose token ``j`` is target token ``kept_ids[j]``."""
        if isinstance(kept_ids, (set, frozenset, Mapping)):
            raise InputError(f"kept_ids must be ordered (a list or array: drafter token j is "
                             f"kept_ids[j]), got a {type(kept_ids).__name__}")
        try:
            kept, given = host_ids(kept_ids, "kept_ids")
        except InputError:
            raise
        except ValueError:  # ragged
            raise InputError("kept_ids must be a non-empty 1-D list of ids, got a ragged "
                             "nested list") from None
        if kept.ndim != 1 or kept.size == 0:
            raise InputError(f"kept_ids must be a non-empty 1-D list of ids, got shape {kept.shape}")
        if kept.dtype.kind not in "iuf" or (kept.dtype.kind == "f" and not (
                np.isfinite(kept).all() and (kept == np.round(kept)).all())):
            raise InputError(f"kept_ids must hold integer ids, got {kept.dtype} {kept[:4]}")
        if np.any(kept < 0):
            raise InputError(f"kept_ids must be target ids >= 0, got {int(kept.min())}")
        n_target = as_count(n_target, "n_target", 1)
        check_float_ids(given, n_target, "kept_ids")
        if kept.max() >= n_target:  # named here: the map's own message would offer -1
            raise InputError(f"kept_ids holds id {int(kept.max())}, but the target has {n_target} "
                             f"ids (0..{n_target - 1})")
        ids, counts = np.unique(kept, return_counts=True)
        if ids.size != kept.size:
            raise InputError(f"kept_ids lists target id {int(ids[counts > 1][0])} more than once")
        return cls(n_target, kept)

    @classmethod
    def from_token_strings(
        cls,
        draft_tokens: Sequence[str],
        target_tokens: Sequence[str],
        *,
        normalise: str = "bytes",
        draft_special_ids: Sequence[int] | None = (),
        target_special_ids: Sequence[int] | None = (),
        draft_space_marker: str | None = None,
        target_space_marker: str | None = None,
        draft_text_ids: Sequence[int] | None = (),
        target_text_ids: Sequence[int] | None = (),
    ) -> "VocabMap":
        """Match drafter and target tokens by string.

        ``draft_tokens[j]`` / ``target_tokens[t]`` are the token strings of ids ``j`` / ``t``.

        ``normalise``:
          * ``"bytes"`` (default): every token rewritten to the bytes it stands for in its
            tokenizer family (:mod:`rdk_theory.tokens`), special tokens matching only special
            tokens; this also normalises the word-start marker;
          * ``"marker"``: only the drafter's word-start marker rewritten to the target's
            (``Ġ`` <-> ``▁``, detected unless ``draft_space_marker`` / ``target_space_marker``
            give them: only this mode takes those), every occurrence of it, where
            transformers' universal assisted generation rewrites only a leading one (so
            ``ĠĠ`` matches ``▁▁`` here, not there); it misses newline/tab/non-ASCII tokens
            across families;
          * ``"none"``: strings compared as given.

        ``draft_special_ids`` / ``target_special_ids`` (ids in range, checked; None for none):
        in every mode a special token matches only a special token with the same string,
        never a text token that happens to be spelled like it.

        ``draft_text_ids`` / ``target_text_ids`` (``"bytes"`` only; ids in range, checked):
        tokens whose string is plain text rather than the family's encoding, i.e. a
        tokenizer's added non-special tokens (``{i for i, a in
        tokenizer.added_tokens_decoder.items() if not a.special}``), which
        ``convert_ids_to_tokens`` returns as their content: they are read as UTF-8, not
        through GPT-2's byte table.

        Tokens with equal keys (the strings compared) pair up in order: the drafter's first
        such token takes the target's first, the second the second, and drafter tokens left
        over map to ``-1`` (the map stays one-to-one). "First" is by id, except that with
        ``"bytes"`` a SentencePiece byte-fallback token (``<0x61>``) comes after the text token
        standing for the same bytes (``a``; :func:`rdk_theory.tokens.match_ranks`). An empty or
        ``None`` string (a hole in a tokenizer's id table) matches nothing. Any map keeps TLI
        lossless. A map that pairs more tokens raises vanilla's acceptance and the OOV cap
        ``p(I)``, not necessarily TLI's: TLI renormalises ``q`` on ``I``, and a token added to
        ``I`` takes its share of that mass, maybe from a token the target prefers (drafter
        ``q = (1/2, 1/2)`` on ``Ġa``, ``Ċ``, target ``p = (1, 0)`` on ``▁a``, ``<0x0A>``: TLI
        accepts 1 with ``Ċ`` unmatched, 1/2 with it matched).
        """
        draft_tokens = _strings(draft_tokens, "draft_tokens")
        target_tokens = _strings(target_tokens, "target_tokens")
        if len(draft_tokens) == 0 or len(target_tokens) == 0:
            raise InputError("token lists must be non-empty")
        if normalise != "marker" and (draft_space_marker, target_space_marker) != (None, None):
            raise InputError(f"draft_space_marker / target_space_marker apply to "
                             f"normalise='marker' only, not {normalise!r} (which would ignore "
                             "them)")
        for name, marker in (("draft_space_marker", draft_space_marker),
                             ("target_space_marker", target_space_marker)):
            if marker is not None:  # text, as the tokens are (a surrogate could spell a key)
                _strings([marker], name)
                if marker == "":  # would match nothing, silently: no rewrite at all
                    raise InputError(f"{name} must be a non-empty string (e.g. '\u2581' or "
                                     f"'\u0120'), or None to detect it")
        draft_special_ids = _ids_in_range(draft_special_ids, len(draft_tokens),
                                          "draft_special_ids")
        target_special_ids = _ids_in_range(target_special_ids, len(target_tokens),
                                           "target_special_ids")
        draft_text_ids = _ids_in_range(draft_text_ids, len(draft_tokens), "draft_text_ids")
        target_text_ids = _ids_in_range(target_text_ids, len(target_tokens), "target_text_ids")
        if normalise != "bytes" and (draft_text_ids or target_text_ids):
            raise InputError(f"draft_text_ids / target_text_ids apply to normalise='bytes' "
                             f"only, not {normalise!r} (which compares the strings as text)")
        draft_ranks = target_ranks = None
        if normalise == "bytes":
            draft_keys = canonical_tokens(draft_tokens, draft_special_ids, text_ids=draft_text_ids)
            target_keys = canonical_tokens(target_tokens, target_special_ids,
                                           text_ids=target_text_ids)
            draft_ranks, target_ranks = match_ranks(draft_tokens), match_ranks(target_tokens)
        elif normalise == "marker":
            ds = draft_space_marker if draft_space_marker is not None else detect_space_marker(draft_tokens)
            ts = target_space_marker if target_space_marker is not None else detect_space_marker(target_tokens)
            rewrite = bool(ds and ts and ds != ts)
            draft_keys = [tok.replace(ds, ts) if rewrite else tok for tok in draft_tokens]
            target_keys = list(target_tokens)
        elif normalise == "none":
            draft_keys, target_keys = list(draft_tokens), list(target_tokens)
        else:
            raise InputError(f"normalise must be 'bytes', 'marker' or 'none', got {normalise!r}")
        if normalise != "bytes":  # canonical_tokens has marked them already
            draft_keys = mark_special(draft_keys, draft_tokens, draft_special_ids)
            target_keys = mark_special(target_keys, target_tokens, target_special_ids)
        mapped = match_keys(draft_keys, target_keys, draft_ranks, target_ranks)
        return cls(len(target_tokens), mapped)


def _ids_in_range(ids, n: int, name: str) -> list[int]:
    """``ids`` (any iterable of ints, an array or a tensor) as a list of ints in ``[0, n)``;
    anything else is an :class:`InputError`."""
    if ids is None:
        return []
    ids = host(ids)
    if not isinstance(ids, np.ndarray):
        try:
            ids = list(ids)  # sets, generators, dict keys: the order does not matter
        except TypeError:
            raise InputError(f"{name} must be a collection of integer ids (or None), got "
                             f"{type(ids).__name__} {ids!r}") from None
    try:
        arr = np.asarray(ids)
    except ValueError:  # ragged
        arr = np.asarray(ids, dtype=object)
    if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu"):
        raise InputError(f"{name} must be a 1-D list of integer ids, got {arr.dtype} "
                         f"of shape {arr.shape}")
    bad = arr[(arr < 0) | (arr >= n)] if arr.size else arr
    if bad.size:
        raise InputError(f"{name} holds {int(bad[0])}, outside the {n} token ids (0..{n - 1})")
    return [int(i) for i in arr]


def _strings(tokens, name: str) -> list[str]:
    """Token strings as a list, ``None`` (a hole in the id table) read as ``""``.

    A mapping (``tokenizer.get_vocab()``: token -> id, not in id order) or a single string
    is refused rather than read in iteration order; so is a string that is not valid text
    (a lone surrogate, which no tokenizer produces but a JSON file can)."""
    if isinstance(tokens, (str, bytes, Mapping)):
        raise InputError(f"{name} must be the token strings in id order (e.g. "
                         f"tokenizer.convert_ids_to_tokens(range(n))), got a "
                         f"{type(tokens).__name__}")
    try:
        out = ["" if t is None else t for t in tokens]
    except TypeError:  # None, a number: not a sequence at all
        raise InputError(f"{name} must be a list of token strings in id order, got "
                         f"{type(tokens).__name__} {tokens!r}") from None
    bad = next((i for i, t in enumerate(out) if not isinstance(t, str)), None)
    if bad is not None:
        raise InputError(f"{name}[{bad}] is {type(out[bad]).__name__} {out[bad]!r}, not a string")
    for i, t in enumerate(out):
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(f"{name}[{i}] = {t!r} is not valid text (a lone surrogate)") from None
    return out


def match_keys(draft_keys: Sequence[str], target_keys: Sequence[str],
               draft_ranks: Sequence[int] | None = None,
               target_ranks: Sequence[int] | None = None) -> np.ndarray:
    """``draft_to_target`` (N_D,) int64 pairing equal keys one-to-one, as
    :meth:`VocabMap.from_token_strings` describes: within each key, drafter and target ids
    in order of (rank, id) (ranks default to 0) pair up; an empty key matches nothing."""
    free: dict[str, list[int]] = {}
    for t in _rank_order(target_keys, target_ranks):
        if target_keys[t]:
            free.setdefault(target_keys[t], []).append(t)
    for ids in free.values():
        ids.reverse()  # pop() gives the first
    mapped = np.full(len(draft_keys), -1, dtype=np.int64)
    for j in _rank_order(draft_keys, draft_ranks):
        ids = free.get(draft_keys[j])
        if ids:
            mapped[j] = ids.pop()
    return mapped


def _rank_order(keys, ranks):
    """Indices of ``keys`` by (rank, index)."""
    if ranks is None:
        return range(len(keys))
    return sorted(range(len(keys)), key=ranks.__getitem__)  # stable: ties keep id order


def check_vocab_map(vocab_map, name: str = "vocab_map") -> None:
    """InputError unless ``vocab_map`` is a :class:`VocabMap` (an id list is not one)."""
    if not isinstance(vocab_map, VocabMap):
        raise InputError(f"{name} must be a rdk_theory.VocabMap, got {type(vocab_map).__name__}: "
                         "build one with VocabMap(n_target, draft_to_target), "
                         "VocabMap.from_kept_ids or VocabMap.identity")


def pruned_draft_probs(draft_probs_full, vocab_map: VocabMap):
    """The pruned drafter's law ``q[kept] / q(kept)``, (..., K), from the full drafter's:
    float64 numpy, or a torch tensor of the input's dtype on its device.

    A drafter whose LM head is cut to the kept ids has the softmax of the kept logits, which is
    exactly this renormalised restriction; so one pass of the full drafter serves every K.
    ``vocab_map`` is a pruned map (:meth:`VocabMap.from_kept_ids`). The rows need not sum to 1
    exactly (they are renormalised here; a float32 softmax over 152K ids misses 1 by 1e-4),
    but must be finite and non-negative: logits are refused by their negative entries.
    """
    check_vocab_map(vocab_map)
    if not vocab_map.is_pruned:
        raise InputError("pruned_draft_probs needs a pruned map (every drafter id in the target)")
    is_torch = B.is_torch(draft_probs_full)  # a tensor is checked on its device
    full = (as_real_tensor if is_torch else as_real_array)(draft_probs_full, "draft_probs_full")
    if not bool(((full >= -NEG_ATOL) & (full < np.inf)).all()):  # NaN fails both
        raise InputError("draft_probs_full must be finite and non-negative (probabilities, "
                         "not logits)")
    full = B.positive_part(full)  # round-off negatives are 0 (a copy)
    top = int(vocab_map.draft_to_target.max())
    if full.ndim == 0 or full.shape[-1] <= top:  # checked here: on CUDA a bad index is fatal
        raise InputError(f"draft_probs_full has shape {tuple(full.shape)}, but the map keeps "
                         f"id {top}: its last axis must be the full drafter's vocabulary")
    if is_torch:  # stays on its device
        q = full.index_select(-1, vocab_map.on_device("dst", full.device))
    else:
        q = full[..., vocab_map.draft_to_target]
    with np.errstate(over="ignore"):
        mass = B.total(q, keepdims=True)
    if not bool((mass < np.inf).all()):  # finite rows whose sum overflows: scale them first
        peak = q.amax(-1, keepdim=True) if is_torch else q.max(axis=-1, keepdims=True)
        q = B.safe_divide(q, peak)  # every row's largest entry is now 1: the sum is finite
        mass = B.total(q, keepdims=True)
    empty = ~(mass > 0)  # also catches NaN
    if bool(empty.any()):
        _no_kept_mass(B.to_numpy(empty), B.to_numpy(mass))
    return q / mass


def _no_kept_mass(empty, mass):
    """Raise for the first row of ``draft_probs_full`` with no mass (or NaN) on the kept ids."""
    idx = tuple(int(i) for i in np.argwhere(empty)[0][:-1])
    where = f" row {', '.join(map(str, idx))}" if idx else ""
    raise InputError(f"draft_probs_full{where} puts mass {float(mass[idx].item()):.3g} on the "
                     "kept ids: the pruned drafter has no distribution there (keep more ids, "
                     "or drop that row)")


def _boxed_items(token_counts, raw: np.ndarray):
    """The counts as the caller's Python objects when numpy may have rounded them (an object
    array, or a list read as float64); None when ``raw`` is numpy's own exact reading."""
    listed = isinstance(token_counts, (list, tuple))
    if raw.ndim != 1 or raw.size == 0 or not (raw.dtype == object or (listed and raw.dtype.kind == "f")):
        return None
    return token_counts if listed else raw


def _exact_counts(token_counts, raw: np.ndarray) -> list | None:
    """The counts as exact Python numbers (ints and Fractions) when numpy's reading may have
    rounded them: an integer beyond 2^53 or a Fraction, in a list or an object array (float64
    would tie ``2^60`` with ``2^60 + 1``). Python compares int, float and Fraction exactly, and
    a float's value is a Fraction exactly. None when numpy's reading is exact, or when the
    items are not all real numbers (``as_real_array`` then names the problem); InputError for
    a NaN or infinity among exact counts."""
    items = _boxed_items(token_counts, raw)
    if items is None or not all(isinstance(c, (numbers.Real, np.bool_)) for c in items):
        return None  # (a bool is a count of 0 or 1 here too: one sent 2^70 to float64)
    if not any(isinstance(c, numbers.Rational)
               and not (isinstance(c, numbers.Integral) and abs(int(c)) <= 2**53) for c in items):
        return None  # floats and small integers: float64 holds every one exactly
    exact = []
    for c in items:
        if isinstance(c, numbers.Integral):
            exact.append(int(c))
        elif isinstance(c, numbers.Rational):
            exact.append(Fraction(c.numerator, c.denominator))
        elif math.isfinite(c):
            exact.append(Fraction(float(c)))
        else:
            raise InputError("token_counts must be finite and non-negative")
    return exact


def _most_frequent_exact(values: list, k) -> np.ndarray:
    """:func:`keep_most_frequent` of exact (Fraction) counts, compared as exact numbers."""
    if any(v < 0 for v in values):
        raise InputError("token_counts must be finite and non-negative")
    k = as_count(k, "k", 1)
    if k > len(values):
        raise InputError(f"k must be in [1, {len(values)}], got {k}")
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))  # ties: lower id first
    return np.sort(np.array(order[:k], dtype=np.int64))


def kept_size(frac: float, n: int) -> int:
    """How many of a drafter's ``n`` ids a kept fraction keeps: ``round(frac n)``, at least one
    (the synthetic and the real report alike)."""
    return max(1, int(round(frac * n)))


def keep_most_frequent(token_counts, k: int) -> np.ndarray:
    """Ids of the ``k`` most frequent tokens of a count vector (ties: lower id first), sorted.

    Parameters:
      token_counts: (N,) non-negative counts (e.g. unigram counts on a calibration corpus).
      k: how many ids to keep, ``1 <= k <= N``.
    """
    try:
        raw = np.asarray(host(token_counts, "token_counts"))
    except (ValueError, TypeError):  # ragged: as_real_array names the problem
        raw = None
    exact = None if raw is None else _exact_counts(token_counts, raw)
    if exact is not None:
        return _most_frequent_exact(exact, k)
    integer = raw is not None and raw.dtype.kind in "iu"  # ranked as integers, not float64
    # long double (x87's 64-bit mantissa) is ranked in its own precision: float64 tied 2^60 + 1
    wide = raw is not None and raw.dtype.kind == "f" and raw.dtype.itemsize > 8
    counts = raw if integer or wide else as_real_array(token_counts if raw is None else raw,
                                                       "token_counts")
    if counts.ndim != 1 or counts.size == 0:
        raise InputError(f"token_counts must be a non-empty 1-D vector, got shape {counts.shape}")
    if np.any(counts < 0) or not (integer or np.all(np.isfinite(counts))):
        raise InputError("token_counts must be finite and non-negative")
    k = as_count(k, "k", 1)
    if k > counts.size:
        raise InputError(f"k must be in [1, {counts.size}], got {k}")
    # ascending key = descending count (max - c is exact for numpy integers); a
    # stable sort puts the lower id first among ties
    key = (counts.max() - counts) if integer else -counts
    return np.sort(np.argsort(key, kind="stable")[:k])
