"""The process groups of `pd2bw-torch run` and the collectives pd2bw's step does around torch's schedule.

A plan of depth d and width w runs d*w processes. Replica r's pipeline is its own group (torch's
PipelineStage numbers the ranks within it), each stage's w copies form a replica group for the gradient
sum, and with tied embeddings each replica's embedding and head ranks form a pair. Every process creates
every group, in the same order (torch.distributed.new_group's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from pd2bw_torch.runcheck import PlanStage, RunSetup
from pd2bw_torch.runplan import RankStages


@dataclass
class Groups:
    replica: int  # this process's replica
    pipeline: object = None  # its replica's pipeline group (None: the world, width 1)
    replicas: dict[tuple, object] = field(default_factory=dict)  # a stage's ranks -> their group (width > 1)
    tied: object = None  # this replica's embedding and head ranks, where they differ (tied embeddings)
    heads: object = None  # the head stage's replicas (the step's mean loss)


def _stage_of_layer(setup: RunSetup, layer: int) -> PlanStage:
    return next(s for s in setup.stages if s.begin <= layer < s.end)


def make_groups(setup: RunSetup, rank: int) -> Groups:
    w = setup.width
    replica = next(s.ranks.index(rank) for s in setup.stages if rank in s.ranks)
    g = Groups(replica)
    for r in range(w):
        ranks = list(dict.fromkeys(s.ranks[r] for s in setup.stages))
        group = dist.new_group(ranks) if w > 1 else None
        if r == replica:
            g.pipeline = group
    if w > 1:
        for s in setup.stages:
            if tuple(s.ranks) not in g.replicas:
                g.replicas[tuple(s.ranks)] = dist.new_group(list(s.ranks))
        g.heads = g.replicas[tuple(_stage_of_layer(setup, setup.config.layer_count - 1).ranks)]
    if setup.config.tie_embeddings:
        emb, head = _stage_of_layer(setup, 0), _stage_of_layer(setup, setup.config.layer_count - 1)
        for r in range(w):
            pair = sorted({emb.ranks[r], head.ranks[r]})
            group = dist.new_group(pair) if len(pair) == 2 else None
            if r == replica:
                g.tied = group
    return g


def sum_tied_grads(setup: RunSetup, rs: RankStages, group) -> None:
    """Both copies of a tied token table get the sum of their gradients, as pd2bw does before an update."""
    if not setup.config.tie_embeddings:
        return
    mine = [rs.params[n] for n in ("wte.weight", "lm_head.weight") if n in rs.params]
    for p in mine:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if len(mine) == 2:
        total = mine[0].grad + mine[1].grad
        mine[0].grad.copy_(total)
        mine[1].grad.copy_(total)
    elif mine and group is not None:
        dist.all_reduce(mine[0].grad, group=group)


def grad_sum_of_squares(setup: RunSetup, rs: RankStages) -> float:
    """This rank's share of the squared global gradient norm (in float64); a tied head's copy of the token
    table is not counted (its gradient is the table's)."""
    total = 0.0
    for name, p in rs.params.items():
        if p.grad is None or (setup.config.tie_embeddings and name == "lm_head.weight"):
            continue
        total += float(p.grad.double().pow(2).sum().item())
    return total


def sum_replica_grads(setup: RunSetup, stage_params: list, g: Groups) -> None:
    """Each stage's gradients summed over its replicas (pd2bw scales the sum by 1/w in the update)."""
    if setup.width == 1:
        return
    for st, params in stage_params:
        for p in params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, group=g.replicas[tuple(st.ranks)])


def step_loss(setup: RunSetup, losses: list, g: Groups, device) -> float:
    """The mean loss over the step's microbatches of every replica (called on the head's ranks)."""
    total = torch.tensor([sum(float(x.double().item()) for x in losses)], dtype=torch.float64, device=device)
    if setup.width > 1:
        dist.all_reduce(total, group=g.heads)
    return float(total.item()) / (setup.microbatches * setup.width)


def reduce_grads(setup: RunSetup, rs: RankStages, g: Groups, device) -> float:
    """What pd2bw does between the step's last backward and its update: the replicas' gradient sum, the
    tied table's sum, and the global norm of the replica-averaged gradient (over the replica's pipeline)."""
    sum_replica_grads(setup, rs.stage_params, g)
    sum_tied_grads(setup, rs, g.tied)
    sq = grad_sum_of_squares(setup, rs) / float(setup.width * setup.width)
    total = torch.tensor([sq], dtype=torch.float64, device=device)
    dist.all_reduce(total, group=g.pipeline)
    return float(total.item()) ** 0.5
