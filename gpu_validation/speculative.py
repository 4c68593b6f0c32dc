"""End-to-end speculative generation with a real (pruned) drafter and target, temperature 1.

Each round: the drafter proposes ``gamma`` tokens, each drawn from the sampler's proposal ``r_t``
(built from the pruned drafter's law by the same builders as the study); one target call scores
them all; verification walks the drafts in order, accepting ``x_t`` with probability
``min(1, p_t(x_t) / r_t(x_t))``, and on the first rejection emits a token from the residual of
``p_t`` and ``r_t``; when all ``gamma`` are accepted, a bonus token is drawn from ``p``. A
sub-stochastic ``r_t`` drafts, with its missing mass ``1 - sum r_t``, a drafter token the
target lacks: always rejected, and the round's last draft (MATH.md section 2).
Tokens per target call = accepted drafts + 1.

The record keeps, for every drafted position that verification reached, ``alpha_t = alpha(p_t,
r_t)`` and whether it accepted, for the martingale check of :mod:`.agreement`. KV caches of both
models are cropped back to the accepted prefix after each round.
"""
from __future__ import annotations

import math

import numpy as np

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.sampling import draw, verify_draft
from rdk_theory.validation import InputError, as_count
from rdk_theory.vocab import pruned_draft_probs

from .collect import laws64


def _softmax_last(lm, logits) -> np.ndarray:
    """``lm``'s law (:meth:`gpu_validation.models.LoadedModel.probs`) as float64 numpy,
    renormalised in float64 (its float32 rows sum to 1 only to float32 round-off, ~1e-7)."""
    return laws64(lm.probs(logits).cpu().numpy())


def _recording_cache(model):
    """The cache the model would make for itself (transformers' ``DynamicCache`` of its
    config), set to record past states before the first token: a sliding-window layer then
    keeps its states until the next crop, so a crop past the window succeeds (without it,
    every crop past the window failed and each round recomputed the whole context; set after
    the first forward, a prompt longer than the window left the cache inconsistent). None,
    to let the model make its own, where this transformers has no such cache."""
    try:
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
    except (ImportError, TypeError, AttributeError):
        return None
    if hasattr(cache, "activate_past_recording"):
        cache.activate_past_recording()
    return cache


class _Cached:
    """A model with a KV cache; ``feed`` runs only the tokens the cache has not seen."""

    def __init__(self, lm, device):
        self.lm, self.device, self.cache, self.seen = lm, device, None, 0

    def feed(self, tokens: list[int]):
        """Return the logits (len(tokens) - seen, V) for the unseen suffix of ``tokens``."""
        import torch

        new = tokens[self.seen:]
        if self.cache is None:
            self.cache = _recording_cache(self.lm.model)
        with torch.inference_mode():
            out = self.lm.model(torch.tensor([new], device=self.device),
                                past_key_values=self.cache, use_cache=True)
        self.cache, self.seen = out.past_key_values, len(tokens)
        return out.logits[0]

    def crop(self, length: int):
        """Forget every token from position ``length`` on. A sliding-window cache that has
        dropped the states it would need refuses to crop (transformers' RuntimeError, which
        ended a Gemma 3 or Mistral run once the text outgrew the window, where the cache
        cannot record its past, or a prompt longer than the window was fed at once): the
        cache is then dropped whole, and the next ``feed`` recomputes the context from its
        first token. ``generate`` reads ``feed``'s rows from the end, so either way it gets
        the rows of the tokens it asked about."""
        if self.seen > length:
            try:  # a negative argument removes that many tokens in every transformers version
                self.cache.crop(length - self.seen)
            except RuntimeError as exc:
                if "crop" not in str(exc):  # a device error, out of memory: not this case
                    raise
                self.cache, self.seen = None, 0
                return
            self.seen = length


#: A proposal whose mass is within this of 1 is a law (round-off): its draft is drawn from it
#: directly. Below, the missing mass is a drafter token the target lacks.
FULL_MASS_ROUNDOFF = 1e-12


def _draft(r, rng) -> int:
    """A draft (a target id) from the proposal ``r``, or -1 with probability
    ``1 - sum r``: the drafter token outside the target, as MATH.md section 2 has it (drawing
    from ``r / sum r`` instead changed the output law of a sub-stochastic sampler). A law
    summing to 1 takes one draw, as before. A NaN or infinite entry is a sampler or kernel
    bug: FloatingPointError (read as 'no mass', it let the target emit and recorded nothing)."""
    mass = float(r.sum())
    if not math.isfinite(mass):
        raise FloatingPointError(f"a proposal's mass is not finite ({mass}): a sampler or kernel bug")
    if not mass > 0:
        return -1
    if mass < 1 - FULL_MASS_ROUNDOFF and not rng.random() < mass:
        return -1
    return draw(r, rng)


def generate(target, drafter, prompt_ids, vocab_map, make_proposal, *, gamma: int = 4,
             max_new_tokens: int = 64, rng, device: str = "cpu") -> dict:
    """Speculative sampling; ``make_proposal(q_kept (K,)) -> r (N_T,)`` is the sampler.

    Length: at least ``max_new_tokens`` new tokens. Generation stops after the first round
    that reaches ``max_new_tokens``, so a round may add up to ``gamma`` more (a round adds 1 to
    ``gamma + 1`` tokens); end-of-sequence tokens do not stop it (a fixed budget of
    verification rounds). The output is not cut back to ``max_new_tokens``. Which positions are
    reached depends on earlier acceptances (and the rule is a stopping time): each recorded
    acceptance is Bernoulli of its alpha given the past, but the count is not Poisson-binomial
    with the recorded alphas, so :func:`.agreement.martingale_agreement` tests it with a
    betting martingale, valid under that dependence.
    """
    gamma = as_count(gamma, "gamma", 1)  # 0 was plain target sampling, -2 a numpy error
    max_new_tokens = as_count(max_new_tokens, "max_new_tokens", 1)
    tokens = [int(t) for t in prompt_ids]
    if not tokens:  # an empty prompt failed inside the model's forward pass
        raise InputError("prompt_ids must hold at least one token")
    tgt, drf = _Cached(target, device), _Cached(drafter, device)
    start = len(tokens)
    calls, accept_lengths, alphas, accepted = 0, [], [], []
    while len(tokens) - start < max_new_tokens:
        drafts, props = [], []
        ctx = list(tokens)
        for _ in range(gamma):
            q = _softmax_last(drafter, drf.feed(ctx)[-1])
            r = make_proposal(pruned_draft_probs(q, vocab_map))
            x = _draft(r, rng)
            if x < 0:  # a drafter token the target lacks (mass 1 - sum r): always rejected
                if r.sum() > 0:  # verified as such below; with no mass at all, not drafted
                    drafts.append(-1)
                    props.append(r)
                break
            drafts.append(x)
            props.append(r)
            ctx.append(x)
        tgt.crop(len(tokens) - 1)
        real = [x for x in drafts if x >= 0]  # an absent token (last, if any) is not scored
        p_all = _softmax_last(target, tgt.feed(tokens + real)[-(len(real) + 1):])
        calls += 1
        n_acc = 0
        for t, (x, r) in enumerate(zip(drafts, props)):
            p = p_all[t]
            alphas.append(float(acceptance_rate(p, r, check=False)))
            token, ok = verify_draft(p, r, x, rng)  # the core's step: same r for ratio and residual
            accepted.append(ok)
            tokens.append(token)
            if not ok:
                break
            n_acc += 1
        else:
            tokens.append(draw(p_all[len(drafts)], rng))
        accept_lengths.append(n_acc)
        tgt.crop(len(tokens) - 1)
        drf.crop(len(tokens) - 1)
    new = tokens[start:]
    hist = np.bincount(accept_lengths, minlength=gamma + 1).tolist()
    return {"new_tokens": len(new), "target_calls": calls,
            "tokens_per_call": len(new) / max(calls, 1), "accept_length_histogram": hist,
            "alphas": alphas, "accepted": accepted, "gamma": gamma,
            "tokens": [int(t) for t in new], "text": target.tokenizer.decode(new)}


#: How far a computed acceptance may stray outside [0, 1]: float64 sums of N min(p, r) terms.
ALPHA_ROUNDOFF = 1e-12


def iid_tokens_per_call(alpha: float, gamma: int) -> float:
    """Theorem B with i.i.d. acceptance: ``(1 - alpha^(gamma+1)) / (1 - alpha)``; alpha in
    [0, 1] to round-off (1.5 gave 3.0 and NaN passed through; an alpha of 1 + 2.2e-16, as
    ``sum min(p, r)`` gives for r = p, is 1) and gamma >= 0."""
    gamma = as_count(gamma, "gamma")
    if not -ALPHA_ROUNDOFF <= alpha <= 1 + ALPHA_ROUNDOFF:
        raise InputError(f"alpha must be an acceptance rate in [0, 1], got {alpha!r}")
    alpha = min(max(float(alpha), 0.0), 1.0)
    if alpha >= 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
