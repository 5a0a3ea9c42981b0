"""pd2bw's GPT sizes (torch-free, so commands can check a plan before they import torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPTConfig:
    vocab: int
    seq_len: int
    d_model: int
    heads: int
    blocks: int
    tie_embeddings: bool = False

    @staticmethod
    def from_model(model: dict) -> "GPTConfig":
        kind = model.get("kind", "gpt")
        if kind != "gpt":
            raise ValueError(f"the model is a {kind}; only pd2bw's gpt is written as a PyTorch model")
        cfg = GPTConfig(int(model["vocab"]), int(model["seq_len"]), int(model["d_model"]), int(model["heads"]),
                        int(model["blocks"]), bool(model.get("tie_embeddings", False)))
        if min(cfg.vocab, cfg.seq_len, cfg.d_model, cfg.heads) < 1 or cfg.blocks < 0 or cfg.d_model % cfg.heads:
            raise ValueError(f"invalid gpt model {model}: sizes must be positive and d_model divisible by heads")
        return cfg

    @property
    def layer_count(self) -> int:
        return self.blocks + 2


def layer_names(config: GPTConfig) -> list[str]:
    return ["embedding"] + [f"block.{i}" for i in range(config.blocks)] + ["head"]
