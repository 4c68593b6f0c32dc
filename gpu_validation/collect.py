"""Teacher-forced data collection: ``p`` and ``q`` per position, and calibration statistics.

On a text, the target and the drafter each read the same token ids once (teacher forcing);
row ``t`` of the result is the next-token law after the prefix ``ids[: t + 2]``. Position 0
(the law after one token, with no context) is dropped: there the 1.5B GGUF model disagrees with
its reference implementation (as measured when the models were pinned), so scoring starts at
position 1.

Shapes: ``p`` (C, N_T) and ``q`` (C, N_D), float32 (as the models produce them; the calculators
promote to float64). Files: ``.npz`` holding either the dense arrays or a top-k compression
(:mod:`gpu_validation.topk`). Calibration statistics for the kernels: the mean ``mu`` (N_T,) and
a factor ``C`` (r, N_T) with ``Omega ~= C^T C`` (exact when r equals the calibration size S).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rdk_theory.validation import as_count

TEXT_FILES = {
    "eval_prose": "eval_prose.txt",
    "eval_code": "eval_code.py.txt",
    "calib_prose": "calib_prose.txt",
    "calib_code": "calib_code.py.txt",
}
DATA_DIR = Path(__file__).resolve().parent / "data"
EVAL_TEXTS = ("eval_prose", "eval_code")
CALIB_TEXTS = ("calib_prose", "calib_code")


def read_text(name: str) -> str:
    """One of the texts shipped in ``gpu_validation/data`` (written for this project)."""
    return (DATA_DIR / TEXT_FILES[name]).read_text(encoding="utf-8")


def tokenize(tokenizer, text: str, max_tokens: int | None = None) -> list[int]:
    """The text's ids, the first ``max_tokens`` of them when given (at least 2: one position
    needs a token and its successor; 0 read the whole text, 1 misaligned ``next_ids``)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if max_tokens is None:
        return ids
    from rdk_theory.validation import as_count

    return ids[:as_count(max_tokens, "max_tokens", 2)]


@dataclass
class Collected:
    """Teacher-forced laws on a set of texts (rows aligned between target and drafter)."""

    p: np.ndarray  # (C, N_T) float32
    q: np.ndarray | None  # (C, N_D) float32, None when only the target was run
    next_ids: np.ndarray  # (C,) the token that actually followed (-1 after the last token)
    source: np.ndarray  # (C,) index into ``texts``
    texts: list[str] = field(default_factory=list)


def laws64(probs) -> np.ndarray:
    """Rows of next-token laws as float64, each divided by its float64 sum. The models' float32
    rows sum to 1 only to float32 round-off (~1e-7), which put the OOV cap ``p(I)`` of a
    drafter that keeps every id at 1 + 5e-8 on the real pair; from here on they sum to 1 to
    float64 round-off, as every calculator's law does."""
    out = np.asarray(probs, dtype=np.float64)
    sums = out.sum(axis=-1, keepdims=True)
    if out is probs or not out.flags.owndata:  # the caller's memory (a float64 array, memmap
        return out / sums  # or CPU tensor): one new array, the caller's left as it was
    return np.divide(out, sums, out=out)  # a copy made here is divided in place: one array


def next_token_probs(lm, ids: list[int], *, device: str = "cpu") -> np.ndarray:
    """The law (:meth:`gpu_validation.models.LoadedModel.probs`) at positions 1..L-1 of one
    forward pass, (L-1, V) float32."""
    import torch

    with torch.inference_mode():
        x = torch.tensor([ids], device=device)
        out = lm.probs(lm.model(x).logits[0, 1:]).cpu().numpy()
    if not np.isfinite(out).all():  # e.g. float16 logits that overflow: NaN after the softmax,
        from .models import ModelError  # which surfaced later as "the calibration rows do not vary"

        raise ModelError(f"{lm.spec} gave non-finite next-token probabilities (computing in "
                         f"{lm.info.get('dtype', 'its dtype')}): its logits overflow or are NaN; "
                         "try --dtype float32")
    return out


def collect(target, drafter, texts=EVAL_TEXTS, *, max_tokens: int | None = None,
            device: str = "cpu", progress=None) -> Collected:
    """Teacher-force ``target`` (and ``drafter``, same tokenizer) on each text.

    ``target``/``drafter`` are :class:`gpu_validation.models.LoadedModel`; ``drafter`` may be
    None. ``max_tokens`` caps the tokens read per text. The texts are tokenised first, so each
    text's laws are copied straight into arrays of the final size (concatenating per-text
    arrays held every law twice at the end: about 1.2 GB per model on the real pair).
    """
    if not texts:
        raise ValueError("collect needs at least one text")
    all_ids = [tokenize(target.tokenizer, read_text(name), max_tokens) for name in texts]
    rows = sum(len(ids) - 1 for ids in all_ids)
    laws = {"p": None, "q": None}
    nxt, src, at = [], [], 0
    for k, ids in enumerate(all_ids):
        for key, lm in (("p", target), ("q", drafter)):
            if lm is None:
                continue
            part = next_token_probs(lm, ids, device=device)
            if laws[key] is None:
                laws[key] = np.empty((rows, part.shape[1]), dtype=part.dtype)
            laws[key][at:at + len(part)] = part
            del part
        at += len(ids) - 1
        nxt.append(np.asarray(ids[2:] + [-1], dtype=np.int64))
        src.append(np.full(len(ids) - 1, k, dtype=np.int64))
        if progress is not None:
            progress.update(1)
    return Collected(laws["p"], laws["q"], np.concatenate(nxt), np.concatenate(src), list(texts))


def calibration_stats(calibration_probs, rank: int | None = None):
    """``(mu, factor)``: the calibration mean (N,) float64 and ``C`` (r, N) with Omega ~= C^T C.

    ``Omega = (1/S) sum_c (p_c - mu)(p_c - mu)^T`` is the population covariance (MATH.md 4),
    of the rows renormalised to sum 1 in float64.
    With ``rank`` < S the factor keeps the top singular directions of the centred matrix
    ``(P_c - mu) / sqrt(S)`` (the best rank-r approximation of Omega).
    """
    # renormalised in float64, the centred rows (and so Omega's rows) sum to 0 to round-off,
    # as the first-order kernel requires
    from rdk_theory.kernels import centred_rows

    if rank is not None:  # -1 kept S - 1 directions (a slice), 0 an empty factor
        rank = as_count(rank, "rank", 1)
    cal = laws64(calibration_probs)
    s = cal.shape[0]
    mu = cal.mean(axis=0)
    c = centred_rows(cal) / np.sqrt(s)  # equal rows: exactly 0, as the core's kernels
    if rank is None or rank >= s:
        return mu, c
    # SVD through the S x S Gram matrix: O(S^2 N), never N x N.
    gram = c @ c.T
    evals, evecs = np.linalg.eigh(gram)
    top = np.argsort(evals)[::-1][:rank]
    # rows of V^T are u^T c / sigma; factor = sigma * V^T = u^T c
    return mu, evecs[:, top].T @ c
