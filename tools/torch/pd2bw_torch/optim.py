"""pd2bw train's optimizer step in PyTorch: the learning-rate schedule, AdamW or SGD with momentum with
weight decay on matrices only, each element computed in float64 and rounded to the parameter's dtype
(executor/src/optimizer.cpp, lr_schedule.cpp), so float64 parameters follow pd2bw --dtype double.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LrSchedule:
    """Linear warm-up over warmup steps, then cosine decay from max_lr to min_lr at total_steps."""

    max_lr: float
    min_lr: float
    warmup_steps: int
    total_steps: int

    def at(self, step: int) -> float:
        """The learning rate of the 0-based update `step`."""
        if step < self.warmup_steps:
            return self.max_lr * (step + 1) / self.warmup_steps
        if step >= self.total_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (self.max_lr - self.min_lr)


@dataclass(frozen=True)
class OptimizerConfig:
    kind: str  # "adamw" | "sgd" (the plan's optimizer)
    weight_decay: float
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    momentum: float = 0.9


class Pd2bwOptimizer:
    """Updates named parameters in place; state per name: m (and v for AdamW), float64-computed."""

    def __init__(self, config: OptimizerConfig, params: dict[str, torch.nn.Parameter]):
        self.config = config
        self.params = params
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()} if config.kind == "adamw" else {}

    def load_state(self, moments_m: dict[str, torch.Tensor], moments_v: dict[str, torch.Tensor]) -> None:
        """Moments from a checkpoint (optimizer.m/, optimizer.v/), by parameter name; missing ones stay 0."""
        for name in self.params:
            if name in moments_m:
                self.m[name].copy_(moments_m[name])
            if name in self.v and name in moments_v:
                self.v[name].copy_(moments_v[name])

    @torch.no_grad()
    def step(self, lr: float, step: int, grad_scale: float) -> None:
        """Update `step` (0-based; AdamW's bias correction counts step + 1) with grads * grad_scale."""
        c = self.config
        bc1 = 1.0 - c.beta1 ** (step + 1)
        bc2 = 1.0 - c.beta2 ** (step + 1)
        for name, p in self.params.items():
            decay = c.weight_decay if p.dim() == 2 else 0.0
            p64 = p.double()
            g = (p.grad.double() if p.grad is not None else torch.zeros_like(p64)) * grad_scale
            if c.kind == "adamw":
                mt = c.beta1 * self.m[name].double() + (1.0 - c.beta1) * g
                vt = c.beta2 * self.v[name].double() + (1.0 - c.beta2) * (g * g)
                self.m[name].copy_(mt)
                self.v[name].copy_(vt)
                update = (mt / bc1) / (torch.sqrt(vt / bc2) + c.eps) + decay * p64
                p.copy_(p64 - lr * update)
            else:
                buf = c.momentum * self.m[name].double() + (g + decay * p64)
                self.m[name].copy_(buf)
                p.copy_(p64 - lr * buf)
