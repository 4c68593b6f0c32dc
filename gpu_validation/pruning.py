"""Pruned drafters: keep the K most frequent token ids of a calibration text.

A pruned drafter shares the target's tokenizer but its LM head is cut to a kept subset of ids;
its next-token law is the drafter's softmax restricted to the kept ids and renormalised, which
is exactly ``q[kept] / q(kept)`` computed from the full distribution
(:func:`rdk_theory.vocab.pruned_draft_probs`). So one teacher-forced pass of the full drafter
serves every kept size; the kept set's target mass is :func:`rdk_theory.acceptance.oov_cap`.

Frequencies: unigram counts of the calibration token ids. A few KB of text name only a few
thousand distinct ids, so ties (most ids have count 0) are broken by the lower id first
(:func:`rdk_theory.vocab.keep_most_frequent`); for byte-level BPE vocabularies a lower id is an
earlier merge, i.e. a more frequent pair in the tokenizer's own training data.
"""
from __future__ import annotations

import numpy as np

from rdk_theory.validation import InputError, check_float_ids, host_ids
from rdk_theory.vocab import VocabMap, keep_most_frequent, kept_size


def token_counts(token_ids, vocab_size: int) -> np.ndarray:
    """Unigram counts (vocab_size,) of a flat or nested sequence of token ids (integers, or
    floats with whole values; ``0.7`` was read as 0)."""
    parts = []
    for given in (token_ids if isinstance(token_ids, (list, tuple)) else [token_ids]):
        part, dtype = host_ids(given, "token_ids")  # a tensor (any device, bfloat16) too
        check_float_ids(dtype, vocab_size, "token_ids")  # before the concatenation, which
        parts.append(part.ravel())  # would make a float16 part float64
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)  # [] was a ValueError
    if ids.size and not (ids.dtype.kind in "iu" or (ids.dtype.kind == "f" and np.all(
            np.isfinite(ids)) and np.all(ids == np.round(ids)))):
        raise InputError(f"token ids must be integers, got {ids.dtype} {ids[:4]}")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise InputError(f"token ids must be in [0, {vocab_size}), got range "
                         f"[{ids.min()}, {ids.max()}]")
    return np.bincount(ids, minlength=vocab_size).astype(np.int64)


def pruned_vocab_map(counts, k: int) -> VocabMap:
    """The :class:`VocabMap` of a drafter that keeps the ``k`` most frequent ids of ``counts``."""
    return VocabMap.from_kept_ids(keep_most_frequent(counts, k), len(counts))


def kept_sizes_from_fractions(fractions, vocab_size: int) -> list[int]:
    """Kept sizes ``round(f * vocab_size)`` (at least 1) for fractions in (0, 1]."""
    out = []
    for f in fractions:
        if not 0 < f <= 1:
            raise InputError(f"keep fractions must be in (0, 1], got {f}")
        out.append(kept_size(f, vocab_size))  # the synthetic report's rule too
    return out
