"""The models `pd2bw-torch profile --model NAME` builds, each as an ordered list of layers with its batch
maker, loss and the profile's ``model`` description.

- ``gpt``: pd2bw's own GPT (models/gpt.py), optionally loaded from a pd2bw checkpoint;
- ``gpt2-hf``, ``bert-hf``: Hugging Face's GPT2LMHeadModel and BertForMaskedLM (models/hf.py), configured
  locally from the size flags;
- ``plain-mlp``, ``plain-convnet``: plain PyTorch models of the package (models/plain.py).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pd2bw_torch.errors import UsageError
from pd2bw_torch.profile_args import BERT_VOCAB

MASK_FRACTION = 0.15  # BERT's masked-LM share of the positions


@dataclass
class ModelSpec:
    layers: list[nn.Module]
    names: list[str]  # unique profile names, in model order
    kinds: list[str]  # "embedding", "block", "head", ...
    model: dict  # the profile's "model" object, dtype left out
    make_input: Callable[[int], torch.Tensor]  # microbatch size -> the first layer's input
    make_target: Callable[[int], torch.Tensor]  # microbatch size -> the loss's targets
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _generator(seed: int, b: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1000003 + b)


def _tokens(vocab: int, seq: int, seed: int, salt: int, device) -> Callable[[int], torch.Tensor]:
    return lambda b: torch.randint(0, vocab, (b, seq), generator=_generator(seed + salt, b)).to(device)


def _lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions whose target is not -100 (transformers' ignore index)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def _mlm_targets(vocab: int, seq: int, seed: int, device) -> Callable[[int], torch.Tensor]:
    def make(b: int) -> torch.Tensor:
        g = _generator(seed + 2, b)
        targets = torch.randint(0, vocab, (b, seq), generator=g)
        masked = torch.rand(b, seq, generator=g) < MASK_FRACTION
        masked[:, 0] = True  # at least one counted position per sample
        return targets.masked_fill(~masked, -100).to(device)
    return make


def _transformer_desc(a: argparse.Namespace, kind: str, vocab: int, tied: bool, **extra) -> dict:
    name = a.name or f"{a.model}-L{a.blocks}-C{a.d_model}"
    tiny = (a.blocks, a.d_model, a.heads, a.seq, vocab, tied) == (4, 64, 4, 64, 256, False)
    if a.model == "gpt" and a.name is None and tiny:
        name = "gpt-tiny"  # `pd2bw profile`'s name for its default model
    desc = {"kind": kind, "name": name, "blocks": a.blocks, "d_model": a.d_model, "heads": a.heads,
            "seq_len": a.seq, "vocab": vocab}
    if tied:
        desc["tie_embeddings"] = True
    desc.update(extra)
    return desc


def _pd2bw_gpt(a: argparse.Namespace, device) -> ModelSpec:
    from pd2bw_torch.models import gpt

    vocab = a.vocab or 256
    config = gpt.GPTConfig(vocab, a.seq, a.d_model, a.heads, a.blocks, a.tie_embeddings)
    layers = gpt.build_gpt(config)
    if a.checkpoint:
        try:
            gpt.load_pd2bw_checkpoint(layers, a.checkpoint)
        except (gpt.CheckpointError, OSError) as e:
            raise UsageError(str(e)) from e
    kinds = ["embedding"] + ["block"] * a.blocks + ["head"]
    return ModelSpec(layers, gpt.layer_names(config), kinds, _transformer_desc(a, "gpt", vocab, a.tie_embeddings),
                     _tokens(vocab, a.seq, a.seed, 0, device), _tokens(vocab, a.seq, a.seed, 1, device), gpt.gpt_loss)


def _hf(a: argparse.Namespace, device) -> ModelSpec:
    from pd2bw_torch.models import hf

    bert = a.model == "bert-hf"
    vocab = a.vocab or (BERT_VOCAB if bert else 256)
    build = hf.bert_layers if bert else hf.gpt2_layers
    layers, names = build(vocab, a.seq, a.d_model, a.heads, a.blocks)
    kinds = ["embedding"] + ["block"] * a.blocks + ["head"]
    desc = _transformer_desc(a, "bert" if bert else "gpt", vocab, True, **({"ln": "post"} if bert else {}))
    targets = _mlm_targets(vocab, a.seq, a.seed, device) if bert else _tokens(vocab, a.seq, a.seed, 1, device)
    return ModelSpec(layers, names, kinds, desc, _tokens(vocab, a.seq, a.seed, 0, device), targets, _lm_loss)


def _plain(a: argparse.Namespace, device) -> ModelSpec:
    from pd2bw_torch.models import plain

    conv = a.model == "plain-convnet"
    if conv:
        seq = plain.convnet(a.d_model, a.blocks, a.classes)
    else:
        seq = plain.mlp(a.d_model, a.d_model, a.blocks, a.classes)
    names = [n for n, _ in seq.named_children()]
    kinds = ["input"] + ["block"] * a.blocks + ["head"]
    shape = (3, a.image, a.image) if conv else (a.d_model,)
    # Not a transformer: one sample is one "token" (seq_len 1), the classes stand in for the vocabulary.
    desc = {"kind": "convnet" if conv else "mlp", "name": a.name or f"{a.model}-L{a.blocks}-C{a.d_model}",
            "blocks": a.blocks, "d_model": a.d_model, "heads": 1, "seq_len": 1, "vocab": a.classes}
    return ModelSpec(list(seq.children()), names, kinds, desc,
                     lambda b: torch.randn((b, *shape), generator=_generator(a.seed, b)).to(device),
                     lambda b: torch.randint(0, a.classes, (b,), generator=_generator(a.seed + 1, b)).to(device),
                     F.cross_entropy)


def build_model(a: argparse.Namespace, device: torch.device) -> ModelSpec:
    """The model of the flags (checked by profile_args.check_arguments), its layers in float32 on the CPU
    (the caller moves and casts them); the batches it makes land on ``device``."""
    torch.manual_seed(a.seed)
    if a.model == "gpt":
        return _pd2bw_gpt(a, device)
    if a.model in ("gpt2-hf", "bert-hf"):
        return _hf(a, device)
    return _plain(a, device)
