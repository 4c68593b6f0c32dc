"""Tiny random Llama models for the harness tests (no hub, a few seconds to build)."""
from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "gpu_validation" / "data"


def build_tiny(root: Path) -> dict:
    """``{"narrow": dir, "wide": dir, "n_tokens": 300}`` under ``root``: one 300-id byte-level
    BPE tokenizer trained on the shipped texts; float32 Llama models with heads of 300 and 364
    rows (the wide one's last 64 rows are padding, as on the hub)."""
    import torch
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(tok_models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train([str(p) for p in sorted(DATA.glob("*.txt"))],
              trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="<s>")
    out = {}
    for name, extra, seed in (("narrow", 0, 0), ("wide", 64, 1)):
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=len(tok) + extra, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                          max_position_embeddings=4096, tie_word_embeddings=False)
        LlamaForCausalLM(cfg).save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = str(root / name)
    out["n_tokens"] = len(tok)
    return out
