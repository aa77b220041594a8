"""A tiny random causal LM and a tokenizer trained here, for tests that train or judge without
downloading anything: a word-level tokenizer fit on the test's own texts, a ChatML-like chat
template, and a random 2-layer Llama (hidden 64). ``tiny_lm(texts)`` gives both."""

from __future__ import annotations

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
SPECIAL = ["<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]


def tiny_tokenizer(texts, vocab_size: int = 2000):
    """A word-level tokenizer (whitespace pre-tokenizer) trained on ``texts``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(list(texts), trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=SPECIAL))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                        eos_token="<|im_end|>", bos_token="<|im_start|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(tokenizer, seed: int = 0):
    """A random 2-layer Llama sized for ``tokenizer`` (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                        max_position_embeddings=4096, pad_token_id=tokenizer.pad_token_id,
                                        eos_token_id=tokenizer.eos_token_id,
                                        bos_token_id=tokenizer.bos_token_id))


def tiny_lm(texts, seed: int = 0):
    """(model, tokenizer) for ``texts``."""
    tokenizer = tiny_tokenizer(texts)
    return tiny_model(tokenizer, seed), tokenizer


def save_tiny_lm(texts, path, seed: int = 0) -> str:
    """Write a tiny model and its tokenizer as a ``from_pretrained`` folder; returns its path."""
    model, tokenizer = tiny_lm(texts, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
