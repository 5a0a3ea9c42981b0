"""The torch side of `pd2bw-torch run` (runcheck.prepare has checked its inputs): building a rank's
pipeline stages (build_rank), the schedule (make_schedule), the data of a step, the tied embedding's
gradient and the global gradient norm, and saving the final weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from pd2bw_torch.errors import UsageError
from pd2bw_torch.models import gpt
from pd2bw_torch.runcheck import BUILTIN_CLASSES, SINGLE_STAGE_CLASSES, RunSetup

DTYPES = {"float": torch.float32, "double": torch.float64}


@dataclass
class RankStages:
    pipeline_stages: list = field(default_factory=list)
    layers: list[nn.Module] = field(default_factory=list)
    params: dict[str, nn.Parameter] = field(default_factory=dict)
    stage_params: list = field(default_factory=list)  # (PlanStage, its params by name) per held stage
    replica: int = 0
    position: int = 0  # pipeline rank within the replica
    holds_embedding: bool = False
    holds_head: bool = False


class StageModule(nn.Module):
    """A plan stage's layers in order; with recompute, each block's activations are recomputed in the
    backward (torch.utils.checkpoint) instead of stashed."""

    def __init__(self, layers: list[nn.Module], recompute: bool):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.recompute = recompute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.recompute and isinstance(layer, gpt.Block):
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return x


def _stage_class():
    """PipelineStage, minus the start-up messages a stage would send to its own rank (a V placement puts
    two neighbouring stages on one rank): gloo cannot send to itself, and the schedules pass activations
    between stages of one rank without messages anyway."""
    from torch.distributed.pipelining import PipelineStage

    class Stage(PipelineStage):
        def _get_init_p2p_neighbors_ops(self):
            return [op for op in super()._get_init_p2p_neighbors_ops() if op.group_peer != self.group_rank]

    return Stage


def build_rank(setup: RunSetup, rank: int, device: torch.device, pipeline_group) -> RankStages:
    """This rank's plan stages as PipelineStages of its replica's pipeline group, their layers loaded from
    the checkpoint."""
    PipelineStage = _stage_class()

    out = RankStages()
    last = setup.config.layer_count
    for st in setup.stages:
        if rank not in st.ranks:
            continue
        out.replica, out.position = st.ranks.index(rank), st.position
        layers = [gpt.build_layer(setup.config, i, DTYPES[setup.dtype]) for i in range(st.begin, st.end)]
        gpt.load_pd2bw_checkpoint(layers, setup.checkpoint)
        layers = [layer.to(device) for layer in layers]
        out.layers += layers
        params: dict[str, nn.Parameter] = {}
        for layer in layers:
            params.update(gpt.param_names(layer))
        out.params.update(params)
        out.stage_params.append((st, params))
        out.holds_embedding |= st.begin == 0
        out.holds_head |= st.end == last
        stage = PipelineStage(StageModule(layers, st.recompute), st.index, len(setup.stages), device,
                              group=pipeline_group)
        out.pipeline_stages.append(stage)
    return out


def make_schedule(setup: RunSetup, rs: RankStages, schedules):
    """The CSV through _PipelineScheduleRuntime, or the plan schedule's built-in class."""
    m = setup.microbatches
    if setup.schedule_csv:
        sched = schedules._PipelineScheduleRuntime(rs.pipeline_stages, m, loss_fn=gpt.gpt_loss, scale_grads=True)
        try:
            sched._load_csv(setup.schedule_csv, format="compute_only")
        except (RuntimeError, ValueError, AssertionError, KeyError, IndexError) as e:
            raise UsageError(f"the schedule CSV {setup.schedule_csv} is not a valid compute_only schedule for "
                             f"{len(setup.stages)} stages and {m} microbatches: {e}") from None
    else:
        cls = getattr(schedules, BUILTIN_CLASSES[setup.schedule])
        arg = rs.pipeline_stages[0] if cls.__name__ in SINGLE_STAGE_CLASSES else rs.pipeline_stages
        sched = cls(arg, m, loss_fn=gpt.gpt_loss, scale_grads=True)
    mapping = getattr(sched, "stage_index_to_group_rank", None)
    if mapping:
        want = {s.index: s.position for s in setup.stages}
        got = {int(k): int(v) for k, v in dict(mapping).items()}
        if got != want:
            raise UsageError(f"the schedule puts stages on ranks {got}, the plan on {want}; export the CSV from "
                             "this plan")
    return sched


def with_tied_fallback(tensors: dict[str, torch.Tensor], config: gpt.GPTConfig) -> dict[str, torch.Tensor]:
    """A tied head's lm_head.weight is the token table where the checkpoint keeps no copy of its own."""
    if config.tie_embeddings and "lm_head.weight" not in tensors and "wte.weight" in tensors:
        return {**tensors, "lm_head.weight": tensors["wte.weight"]}
    return tensors


def step_batch(setup: RunSetup, rs: RankStages, step: int, device: torch.device):
    """The step's m microbatches stacked along the batch (microbatch k = rows k*b .. k*b + b - 1), as
    the schedule splits them: (tokens, targets) where this rank needs them, else None."""
    if not (rs.holds_embedding or rs.holds_head):
        return None, None
    seq, b = setup.config.seq_len, setup.microbatch_size
    pairs = [setup.data.sample(setup.seed, step, k, rs.replica, b, seq) for k in range(setup.microbatches)]
    tokens = torch.from_numpy(np.concatenate([p[0] for p in pairs])).to(device)
    targets = torch.from_numpy(np.concatenate([p[1] for p in pairs])).to(device)
    return (tokens if rs.holds_embedding else None), (targets if rs.holds_head else None)


def save_weights(directory: str, rs: RankStages) -> None:
    """Replica 0's ranks write their weights, one stage-NNN.safetensors per pipeline rank (as pd2bw names
    its checkpoint files); the other replicas hold the same weights."""
    from safetensors.torch import save_file

    if rs.replica != 0:
        return
    os.makedirs(directory, exist_ok=True)
    tensors = {n: p.detach().contiguous().cpu() for n, p in rs.params.items()}
    name = f"stage-{rs.position:03d}.safetensors"
    save_file(tensors, os.path.join(directory, name), metadata={"pipeline_rank": str(rs.position)})
