"""pd2bw's GPT as a PyTorch model: an ordered list of layers, split exactly as pd2bw splits it.

API
---
``GPTConfig(vocab, seq_len, d_model, heads, blocks, tie_embeddings=False)``
    The model's sizes; ``GPTConfig.from_model(obj)`` reads the ``"model"`` object of a pd2bw profile or
    plan (``kind`` must be ``"gpt"``).
``build_gpt(config, dtype=torch.float32) -> list[nn.Module]`` (``build_layer(config, i, dtype)``: one of them)
    ``config.blocks + 2`` layers, pd2bw's layer list: ``[Embedding, Block(0), ..., Block(blocks-1), Head]``.
    ``layer_names(config)`` gives their profile names ``"embedding"``, ``"block.{i}"``, ``"head"``.
    Embedding: ``(B, S) int64 tokens -> (B, S, C)``; Block: ``(B, S, C) -> (B, S, C)``;
    Head: ``(B, S, C) -> (B, S, V)`` logits. ``gpt_loss(logits, targets)`` is the head's loss (mean
    cross-entropy over every position), which pd2bw counts as part of the head layer.
``load_pd2bw_checkpoint(layers, ckpt_dir) -> int``
    Copies a pd2bw checkpoint's weights into ``layers`` (the full list or any subset of its modules,
    each carrying ``layer_index``) and returns the checkpoint's step. ``ckpt_dir`` is a step directory
    (``stage-*.safetensors`` + ``manifest.json``) or a ``--checkpoint-dir`` (its ``latest`` is read).
``read_checkpoint_tensors(ckpt_dir, prefix="") -> (dict[str, Tensor], manifest)``
    Every stage file's tensors named ``prefix + NAME`` (``"optimizer.m/"``, ``"optimizer.v/"``: the moments).
``param_names(layer) -> dict[str, Parameter]`` and ``layer_state(layers) -> dict[str, Tensor]``
    The layers' weights under pd2bw's checkpoint names (for comparing with a checkpoint).

Every detail follows pd2bw's executor: token + learned position embedding; pre-LN blocks
``x1 = x + c_proj(attn(c_attn(ln_1(x))))``, ``y = x1 + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x1))))`` with
layer-norm eps 1e-5, causal attention scaled by ``1/sqrt(C/H)``, q, k, v packed in that order along
``c_attn``'s output and split into heads of ``C/H`` consecutive features; a final layer norm and an LM
head without bias. Linear weights are stored (out, in), as ``nn.Linear`` keeps them. Parameter names are
Hugging Face GPT-2's (``wte.weight``, ``h.{i}.attn.c_attn.weight``, ``ln_f.weight``, ``lm_head.weight``).

Tied embeddings: the Head always owns an ``lm_head.weight``; with ``tie_embeddings`` it is a copy of the
token table (pd2bw does the same when the head and the embedding sit on different stages), loaded from
``wte.weight`` when the checkpoint has no ``lm_head.weight``. A trainer must then add the two copies'
gradients before each update (``Head.tied`` says so). Initialisation is not pd2bw's: load a checkpoint.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# Re-exported: the checkpoint helpers and the config are part of this module's API (see above).
from pd2bw_torch.ckpt import (CheckpointError, checkpoint_layer_count, read_manifest,  # noqa: F401
                              resolve_checkpoint_dir)
from pd2bw_torch.models.config import GPTConfig, layer_names  # noqa: F401

LAYER_NORM_EPS = 1e-5


class Embedding(nn.Module):
    """Layer 0: token + position embedding. Parameters wte.weight (V, C), wpe.weight (Tmax, C)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.layer_index = 0
        self.wte = nn.Embedding(config.vocab, config.d_model)
        self.wpe = nn.Embedding(config.seq_len, config.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.wte(tokens) + self.wpe(pos)


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads = config.heads
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model)
        self.c_proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, c = x.shape
        hd = c // self.heads
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (t.view(b, s, self.heads, hd).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(b, s, c)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, 4 * config.d_model)
        self.c_proj = nn.Linear(4 * config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """Layer block + 1: a pre-LN transformer block (parameters under "h.{block}.")."""

    def __init__(self, config: GPTConfig, block: int):
        super().__init__()
        self.layer_index = block + 1
        self.prefix = f"h.{block}."
        self.ln_1 = nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = x + self.attn(self.ln_1(x))
        return x1 + self.mlp(self.ln_2(x1))


class Head(nn.Module):
    """The last layer: ln_f and the LM head (no bias); logits out, loss by gpt_loss."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.layer_index = config.blocks + 1
        self.tied = config.tie_embeddings
        self.ln_f = nn.LayerNorm(config.d_model, eps=LAYER_NORM_EPS)
        self.lm_head = nn.Linear(config.d_model, config.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy over every position (B*S rows), as pd2bw's head."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_layer(config: GPTConfig, index: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Layer `index` of the model, 0 <= index < config.layer_count."""
    if not 0 <= index < config.layer_count:
        raise ValueError(f"layer {index} is outside the model's {config.layer_count} layers")
    if index == 0:
        layer: nn.Module = Embedding(config)
    elif index == config.layer_count - 1:
        layer = Head(config)
    else:
        layer = Block(config, index - 1)
    return layer.to(dtype)


def build_gpt(config: GPTConfig, dtype: torch.dtype = torch.float32) -> list[nn.Module]:
    return [build_layer(config, i, dtype) for i in range(config.layer_count)]


def param_names(layer: nn.Module) -> dict[str, nn.Parameter]:
    """The layer's parameters under pd2bw's checkpoint names."""
    prefix = getattr(layer, "prefix", "")
    return {prefix + name: p for name, p in layer.named_parameters()}


def layer_state(layers: list[nn.Module]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for layer in layers:
        out.update({k: v.detach() for k, v in param_names(layer).items()})
    return out


def read_checkpoint_tensors(ckpt_dir: str, prefix: str = "") -> tuple[dict[str, torch.Tensor], dict]:
    """The tensors of every stage file named prefix + NAME, under NAME, and the manifest. prefix "" gives
    the current weights; "optimizer.m/" and "optimizer.v/" the optimizer's moments (2BW's "prev/" too)."""
    from safetensors.torch import load_file

    _, manifest, paths = read_manifest(ckpt_dir)
    tensors: dict[str, torch.Tensor] = {}
    for path in paths:
        for name, t in load_file(path).items():
            if name.startswith(prefix) and "/" not in name[len(prefix):]:
                tensors[name[len(prefix):]] = t
    return tensors, manifest


def load_pd2bw_checkpoint(layers: list[nn.Module], ckpt_dir: str) -> int:
    tensors, manifest = read_checkpoint_tensors(ckpt_dir)
    for layer in layers:
        for name, p in param_names(layer).items():
            src = tensors.get(name)
            if src is None and name == "lm_head.weight" and getattr(layer, "tied", False):
                src = tensors.get("wte.weight")
            if src is None:
                raise CheckpointError(f"the checkpoint in {ckpt_dir} has no tensor {name}; was it written for "
                                      "this model?")
            if tuple(src.shape) != tuple(p.shape):
                raise CheckpointError(f"checkpoint tensor {name} has shape {tuple(src.shape)}, the model's is "
                                      f"{tuple(p.shape)}")
            with torch.no_grad():
                p.copy_(src.to(p.dtype))
    return int(manifest.get("step", 0))
