"""Toy language models with exact laws: Markov chains (n-gram tables) over small vocabularies.

A toy LM is anything with ``n_out`` (its output vocabulary size) and
``next_probs(context) -> (n_out,)`` where ``context`` is a tuple of *target* token ids (the text
generated so far, in the target's tokenization). Tables hold ``Fraction`` entries, so the
probability of every sequence is known exactly; ``float_copy()`` gives the float64 twin.

Provided:

* :class:`MarkovLM` — an order-``n`` n-gram table (order 0 is a unigram model: context-free).
* :func:`random_markov_lm` — integer weights (with exact zeros) normalised to Fractions.
* :func:`noisy_drafter` — a drafter that imitates a target imperfectly, over the full target
  vocabulary or over a *pruned* subset ``kept_ids`` (same tokenizer, LM head cut).
* :class:`RetokenizingLM` — a drafter over a *different tokenizer of the same strings*: it
  detokenizes the target context, re-tokenizes it greedily with its own vocabulary and runs
  its own Markov chain over its own tokens.
* :func:`toy_pair` — the ready-made (target, drafter, vocab map) triples used by the CLI and
  the tests: ``same``, ``pruned`` and ``hetero``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from rdk_theory.validation import InputError, as_count, as_prob_array, check_numpy_rng
from rdk_theory.vocab import VocabMap

BOS = -1  # padding id for contexts shorter than the model's order


def _normalise(weights) -> np.ndarray:
    """Integer weights -> an object array of Fractions summing to exactly 1."""
    total = int(sum(int(w) for w in weights))
    if total <= 0:
        raise InputError("a row of weights must have a positive total")
    return np.array([Fraction(int(w), total) for w in weights], dtype=object)


class MarkovLM:
    """An order-``order`` Markov chain: ``next_probs(context)`` looks at the last ``order`` ids.

    Parameters:
      n_out: output vocabulary size (N_T for a target, N_D for a drafter).
      order: context length used (0 = unigram).
      table: dict from context tuples (length ``order``, ids or ``BOS``) to (n_out,) arrays
        (object arrays of Fraction, or float64). A context missing from the table uses the
        entry under ``None`` (the back-off row), which must then exist.
    """

    def __init__(self, n_out: int, order: int, table: dict):
        self.n_out = as_count(n_out, "n_out", 1)  # int(2.5) made 2 outputs of a 2.5 request
        self.order = as_count(order, "order")
        if not isinstance(table, dict) or not table:
            raise InputError(f"table must be a non-empty dict of rows, got {type(table).__name__}"
                             f"{'' if not isinstance(table, dict) else ' with no rows'}")
        self.table = dict(table)
        for key, row in self.table.items():
            shape = np.shape(row)
            if shape != (self.n_out,):
                raise InputError(f"row {key} has shape {shape}, expected ({self.n_out},)")
            # a law, exactly for Fractions: a row of (3/2, -1/2) made every block law "lossless"
            as_prob_array(np.asarray(row), f"row {key}")

    @property
    def exact(self) -> bool:
        row = next(iter(self.table.values()))
        return isinstance(row, np.ndarray) and row.dtype == object

    def key(self, context: Sequence[int]) -> tuple:
        ctx = tuple(context)[-self.order:] if self.order else ()
        return (BOS,) * (self.order - len(ctx)) + ctx

    def next_probs(self, context: Sequence[int]) -> np.ndarray:
        k = self.key(context)
        row = self.table.get(k)
        if row is None:
            row = self.table.get(None)
            if row is None:
                raise InputError(f"context {k} is not in the table and there is no back-off row")
        return row

    def float_copy(self) -> "MarkovLM":
        return MarkovLM(self.n_out, self.order,
                        {k: np.asarray(v, dtype=np.float64) for k, v in self.table.items()})

    def sequence_prob(self, prefix: Sequence[int], seq: Sequence[int]):
        """``P(seq | prefix) = prod_t p(seq_t | prefix + seq_<t)`` (exact for Fraction tables)."""
        prob, ctx = 1, tuple(prefix)
        for tok in seq:
            tok = as_count(tok, "a token id")
            if tok >= self.n_out:  # -1 read p[-1], 99 was a raw IndexError
                raise InputError(f"token id {tok} is not below n_out = {self.n_out}")
            prob = prob * self.next_probs(ctx)[tok]
            ctx = ctx + (tok,)
        return prob

    def sequence_law(self, prefix: Sequence[int], length: int) -> dict:
        """The exact law of the next ``length`` tokens: ``{sequence: probability}`` (zeros dropped)."""
        law = {(): 1}
        for _ in range(int(length)):
            nxt = {}
            for seq, w in law.items():
                p = self.next_probs(tuple(prefix) + seq)
                for x in range(self.n_out):
                    if p[x] != 0:
                        nxt[seq + (x,)] = w * p[x]
            law = nxt
        return law

    def contexts(self, n_symbols: int):
        """Every table key reachable from BOS-padded starts (for calibration sets)."""
        return _contexts(self.order, n_symbols)


#: Entries (contexts x output tokens) a random toy table may hold: Fractions, built in Python.
MAX_TABLE_ENTRIES = 2_000_000


def _contexts(order: int, n_symbols: int, n_out: int = 1) -> list:
    """:meth:`MarkovLM.contexts` of an order-``order`` chain; InputError when their table of
    ``n_out`` entries each would pass :data:`MAX_TABLE_ENTRIES` (an order-12 chain over 5
    symbols ran out of memory building 305 million contexts)."""
    if order == 0:
        return [()]
    most = MAX_TABLE_ENTRIES // n_out  # contexts a table of n_out tokens each may have
    count, power = 0, 1
    for _ in range(order + 1):  # sum_k n^k: an upper bound (BOS-padded tails), summed only
        count += power  # until it passes the cap (order 1e5 took seconds to sum, and 1e4
        power *= n_symbols  # digits were too many to print in the message)
        if count > most:
            raise InputError(f"an order-{order} chain over {n_symbols} symbols has more than "
                             f"{most:,} contexts" + (f" of {n_out} tokens each" if n_out > 1
                                                     else "") + f": more than the "
                             f"{MAX_TABLE_ENTRIES:,} entries a toy table may hold")
    keys = []
    for k in range(order + 1):
        for tail in itertools.product(range(n_symbols), repeat=k):
            if k >= order:
                keys.append(tail[-order:])
            else:
                keys.append((BOS,) * (order - k) + tail)
    return list(dict.fromkeys(keys))


def random_markov_lm(rng, n_symbols: int, n_out: int | None = None, order: int = 1, *,
                     max_weight: int = 6, zero_prob: float = 0.25) -> MarkovLM:
    """A random order-``order`` chain with integer weights in ``0..max_weight`` (exact zeros).

    ``n_symbols`` is the context alphabet (target ids); ``n_out`` the output vocabulary
    (defaults to ``n_symbols``). Every row keeps at least one positive weight.
    """
    check_numpy_rng(rng, "random_markov_lm needs")
    n_symbols = as_count(n_symbols, "n_symbols", 1)
    n_out = n_symbols if n_out is None else as_count(n_out, "n_out", 1)
    max_weight = as_count(max_weight, "max_weight", 1)
    table = {}
    keys = _contexts(as_count(order, "order"), n_symbols, n_out)
    for key in keys:
        w = rng.integers(1, max_weight + 1, size=n_out)
        w[rng.random(n_out) < zero_prob] = 0
        if w.sum() == 0:
            w[rng.integers(n_out)] = 1
        table[key] = _normalise(w)
    return MarkovLM(n_out, order, table)


def noisy_drafter(target: MarkovLM, rng, *, kept_ids: Sequence[int] | None = None,
                  noise: int = 2, scale: int = 12) -> MarkovLM:
    """A drafter imitating ``target``: ``q ∝ round(scale * p) + U{0..noise}`` on the kept ids.

    With ``kept_ids`` (a pruned drafter: same tokenizer, LM head cut to those target ids) the
    drafter's output token ``j`` is target token ``kept_ids[j]``. Exact (Fraction) rows.
    """
    check_numpy_rng(rng, "noisy_drafter needs")
    if kept_ids is None:
        kept = np.arange(target.n_out)
    else:  # distinct target ids: [-1, 0] and [0, 0] were accepted, [9] an IndexError
        kept = VocabMap.from_kept_ids(kept_ids, target.n_out).draft_to_target
    noise, scale = as_count(noise, "noise"), as_count(scale, "scale")
    table = {}
    for key, row in target.table.items():
        p = np.array([float(v) for v in row])
        w = np.rint(scale * p[kept]).astype(int) + rng.integers(0, noise + 1, size=kept.size)
        if w.sum() == 0:
            w[rng.integers(kept.size)] = 1
        table[key] = _normalise(w)
    return MarkovLM(int(kept.size), target.order, table)


def greedy_tokenize(text: str, vocab: Sequence[str]) -> list[int]:
    """Longest-match-first tokenization of ``text`` with ``vocab`` (which must cover every character)."""
    ids, i = [], 0
    by_len = sorted(range(len(vocab)), key=lambda j: -len(vocab[j]))
    while i < len(text):
        for j in by_len:
            if vocab[j] and text.startswith(vocab[j], i):
                ids.append(j)
                i += len(vocab[j])
                break
        else:
            raise InputError(f"vocabulary cannot tokenize {text[i:]!r}")
    return ids


class RetokenizingLM:
    """A drafter over its own tokenizer of the same strings, conditioned on the target's text.

    ``next_probs(target_context)`` detokenizes the target context with ``target_tokens``,
    re-tokenizes it greedily with ``draft_tokens`` and returns the drafter chain's next-token
    law over its own vocabulary (size N_D).
    """

    def __init__(self, chain: MarkovLM, draft_tokens: Sequence[str], target_tokens: Sequence[str]):
        if chain.n_out != len(draft_tokens):
            raise InputError("chain output size must equal the number of drafter tokens")
        self.chain = chain
        self.draft_tokens = list(draft_tokens)
        self.target_tokens = list(target_tokens)
        self.n_out = chain.n_out

    @property
    def exact(self) -> bool:
        return self.chain.exact

    def next_probs(self, context: Sequence[int]) -> np.ndarray:
        text = "".join(self.target_tokens[i] for i in context)
        return self.chain.next_probs(tuple(greedy_tokenize(text, self.draft_tokens)))

    def float_copy(self) -> "RetokenizingLM":
        return RetokenizingLM(self.chain.float_copy(), self.draft_tokens, self.target_tokens)


@dataclass
class ToyPair:
    """A target, a drafter and the drafter->target vocabulary map, with a name."""

    name: str
    target: MarkovLM
    drafter: object
    vocab_map: VocabMap

    def calibration_probs(self) -> np.ndarray:
        """Float rows ``p_c``: the target's law at every context of its table (for kernels)."""
        return np.array([[float(v) for v in row] for k, row in self.target.table.items() if k is not None])

    def float_copy(self) -> "ToyPair":
        return ToyPair(self.name, self.target.float_copy(), self.drafter.float_copy(), self.vocab_map)


#: Toy tokenizers of one alphabet {a, b, c} for the heterogeneous pair.
HETERO_TARGET_TOKENS = ("a", "b", "c", "ab", "ca")
HETERO_DRAFT_TOKENS = ("a", "b", "c", "ab", "bc", "cc")
TOY_PAIRS = ("same", "pruned", "hetero")


def toy_pair(name: str = "pruned", seed: int = 0, *, order: int = 1) -> ToyPair:
    """Ready-made toy pairs (exact Fraction tables).

    * ``same``: N_T = N_D = 4, shared tokenizer, noisy drafter.
    * ``pruned``: N_T = 5; the drafter keeps the 3 most frequent target ids (by the target's
      stationary-ish mass: the row sums of its table).
    * ``hetero``: target tokens ``a b c ab ca``, drafter tokens ``a b c ab bc cc``; matched by
      string (``bc``, ``cc`` are absent from the target, ``ca`` is OOV for the drafter).
    """
    rng = np.random.default_rng(as_count(seed, "seed"))  # -1 was numpy's raw ValueError
    if name == "same":
        target = random_markov_lm(rng, 4, order=order)
        return ToyPair(name, target, noisy_drafter(target, rng), VocabMap.identity(4))
    if name == "pruned":
        target = random_markov_lm(rng, 5, order=order)
        mass = np.sum([[float(v) for v in row] for row in target.table.values()], axis=0)
        kept = np.sort(np.argsort(-mass, kind="stable")[:3])
        return ToyPair(name, target, noisy_drafter(target, rng, kept_ids=kept),
                       VocabMap.from_kept_ids(kept, 5))
    if name == "hetero":
        tt, dt = HETERO_TARGET_TOKENS, HETERO_DRAFT_TOKENS
        target = random_markov_lm(rng, len(tt), order=order)
        chain = random_markov_lm(rng, len(dt), order=order, zero_prob=0.1)
        return ToyPair(name, target, RetokenizingLM(chain, dt, tt),
                       VocabMap.from_token_strings(list(dt), list(tt)))
    raise InputError(f"unknown toy pair {name!r}; choose one of {', '.join(TOY_PAIRS)}")
