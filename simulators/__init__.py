"""Simulators built on the core samplers (issue 4): exact sequence-level speculative decoding on
toy LMs, block efficiency and speedup, DSI, DISCO, SpecTr K-SEQ and SLEM/SLRS.

Modules (one concept each):

* :mod:`simulators.toy_lm` — Markov-chain toy LMs with exact (Fraction) laws; pruned and
  re-tokenizing drafters.
* :mod:`simulators.sequence` — exact law of one speculative iteration; sequence-level losslessness.
* :mod:`simulators.block` — tokens per target call, Leviathan speedup, best gamma, Monte Carlo.
* :mod:`simulators.dsi` — offline cost model of distributed speculative inference.
* :mod:`simulators.disco` — oracle / static / confidence-threshold speculation lengths.
* :mod:`simulators.spectr` — K-SEQ multi-draft runs against the LP optimum.
* :mod:`simulators.strings` — SLEM / SLRS on toy tokenizers and the cost of psi.
* :mod:`simulators.cli` — ``rdk-theory simulate ...``.
"""
from .block import expected_tokens, expected_tokens_iid, optimal_gamma, speedup
from .sequence import block_law, completed_law, is_lossless, make_proposal_fn, stream_law
from .toy_lm import MarkovLM, toy_pair

__all__ = ["MarkovLM", "block_law", "completed_law", "expected_tokens", "expected_tokens_iid",
           "is_lossless", "make_proposal_fn", "optimal_gamma", "speedup", "stream_law", "toy_pair"]
