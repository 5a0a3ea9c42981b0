"""Hugging Face ``transformers`` models split into pd2bw's layer list: embedding, blocks, head.

``gpt2_layers(vocab, seq_len, d_model, heads, blocks) -> (layers, names)``: a ``GPT2LMHeadModel`` built
from a local ``GPT2Config`` (no download; GPT-2's defaults otherwise, dropout included) split into
``GPT2Embedding`` (wte + wpe + dropout: (B, S) int64 ids -> (B, S, C)), its ``transformer.h`` blocks
((B, S, C) -> (B, S, C), causal attention by SDPA), and ``GPT2Head`` (ln_f + lm_head: (B, S, C) -> (B, S, V)
logits).

``bert_layers(vocab, seq_len, d_model, heads, blocks) -> (layers, names)``: a ``BertForMaskedLM`` from a
local ``BertConfig`` (intermediate size 4C) split into ``BertEmbedding`` (word + position + token-type
embeddings, layer norm, dropout: (B, S) int64 ids -> (B, S, C)), its ``bert.encoder.layer`` blocks
(bidirectional attention, no padding mask), and ``BertHead`` (the masked-LM transform and decoder:
(B, S, C) -> (B, S, V) logits).

Both models tie the LM head to the token table. Split into stages, the head keeps a copy of its own (as
pd2bw's runtime does), so the head layer here owns a copy of the table: its parameters count it.
``names`` are the module paths of each layer's parts in the Hugging Face model.
"""

from __future__ import annotations

import torch
from torch import nn


def _untie(head_linear: nn.Linear) -> None:
    """Gives the head a copy of the tied token table, as a pipeline stage holding the head keeps one."""
    head_linear.weight = nn.Parameter(head_linear.weight.detach().clone())


class GPT2Embedding(nn.Module):
    def __init__(self, transformer: nn.Module):
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        return self.drop(self.wte(ids) + self.wpe(pos))


class GPT2Head(nn.Module):
    def __init__(self, transformer: nn.Module, lm_head: nn.Linear):
        super().__init__()
        self.ln_f, self.lm_head = transformer.ln_f, lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


class HFBlock(nn.Module):
    """A transformers block called with the hidden states alone (no cache, no mask)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out[0] if isinstance(out, tuple) else out


def gpt2_layers(vocab: int, seq_len: int, d_model: int, heads: int, blocks: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab, n_positions=seq_len, n_embd=d_model, n_layer=blocks, n_head=heads,
                        bos_token_id=vocab - 1, eos_token_id=vocab - 1)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    _untie(model.lm_head)
    t = model.transformer
    layers = [GPT2Embedding(t)] + [HFBlock(b) for b in t.h] + [GPT2Head(t, model.lm_head)]
    names = ["transformer.wte+wpe"] + [f"transformer.h.{i}" for i in range(blocks)] + ["transformer.ln_f+lm_head"]
    return layers, names


class BertEmbedding(nn.Module):
    def __init__(self, embeddings: nn.Module):
        super().__init__()
        self.embeddings = embeddings

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids=ids)


class BertHead(nn.Module):
    def __init__(self, cls: nn.Module):
        super().__init__()
        self.cls = cls

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cls(x)


def bert_layers(vocab: int, seq_len: int, d_model: int, heads: int, blocks: int):
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab, hidden_size=d_model, num_hidden_layers=blocks, num_attention_heads=heads,
                        intermediate_size=4 * d_model, max_position_embeddings=seq_len)
    model = BertForMaskedLM._from_config(config, attn_implementation="sdpa")
    _untie(model.cls.predictions.decoder)
    b = model.bert
    layers = [BertEmbedding(b.embeddings)] + [HFBlock(l) for l in b.encoder.layer] + [BertHead(model.cls)]
    names = ["bert.embeddings"] + [f"bert.encoder.layer.{i}" for i in range(blocks)] + ["cls"]
    return layers, names
