"""pd2bw-torch run: train pd2bw's GPT on a pd2bw plan with torch.distributed.pipelining.

Launched by torchrun, one process per rank of the plan: pipeline ranks x replicas (gloo on the CPU,
nccl on GPUs). Each rank builds the layers of its plan stages, loads them (and the optimizer moments)
from a pd2bw checkpoint, wraps each stage in a PipelineStage and runs the schedule: the CSV of
`pd2bw export --to torch` through _PipelineScheduleRuntime, or without a CSV the built-in class of the
plan's schedule. Data, learning-rate schedule, the replicas' gradient sum, gradient clipping and the
optimizer step are pd2bw train's, so its losses and weights can be compared with pd2bw's step for step.
One JSON line per step goes to stdout (and --metrics-log). Inputs are checked (runcheck.py) before torch
is imported, so a bad flag costs no torch start-up.
"""

from __future__ import annotations

import argparse
import json
import os

from pd2bw_torch import runcheck
from pd2bw_torch.errors import RunFailure, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = ("Run under torchrun with one process per rank of the plan (depth x width), e.g. torchrun "
                "--standalone --nproc-per-node 2 tools/pd2bw-torch run --plan plan.json --schedule-csv exp.csv "
                "--checkpoint ck --steps 8 --data corpus.txt. gpt plans only; 2bw plans are refused (no engine "
                "but pd2bw keeps two weight versions: export their flush plan).")
    arg = p.add_argument
    arg("--plan", required=True, metavar="FILE", help="plan JSON from pd2bw plan (model, stages, microbatches, "
        "schedule, replicas)")
    arg("--split", metavar="FILE", help="split JSON from pd2bw export --to torch; checked against the plan")
    arg("--schedule-csv", metavar="FILE", help="compute_only schedule CSV from pd2bw export --to torch (one row "
        "per pipeline rank); default: torch's built-in class for the plan's schedule (flush, gpipe, "
        "interleaved, zb-h1, zb-v)")
    arg("--checkpoint", required=True, metavar="DIR", help="pd2bw checkpoint: a --checkpoint-dir of pd2bw train "
        "(its latest) or one step-NNNNNN directory; weights and optimizer moments start from it")
    arg("--steps", type=int, required=True, metavar="N", help="optimizer steps in all, as pd2bw train --steps "
        "(the run continues from the checkpoint's step to this one; the lr schedule spans all of them)")
    arg("--data", metavar="FILE", help="training tokens, the file pd2bw train read (--data there); default: "
        "the file the checkpoint's manifest names")
    arg("--seed", type=int, metavar="N", help="data order seed; default: the checkpoint's")
    arg("--lr", type=float, default=0.003, metavar="LR", help="peak learning rate per step (default 0.003, as "
        "pd2bw train)")
    arg("--min-lr", type=float, default=0.0003, metavar="LR", help="learning rate at the end of the cosine "
        "decay (default 0.0003)")
    arg("--warmup", type=int, default=5, metavar="N", help="linear warm-up, in steps (default 5)")
    arg("--weight-decay", type=float, default=0.0, metavar="WD", help="decoupled weight decay on weight "
        "matrices (default 0)")
    arg("--clip", type=float, default=1.0, metavar="NORM", help="clip the global gradient norm to this (0 = "
        "off; default 1)")
    arg("--dtype", choices=["float", "double"], help="parameter and compute dtype; default: the checkpoint's "
        "(pd2bw train --dtype)")
    arg("--device", choices=["cpu", "cuda"], default="cpu", help="cpu (gloo; the default) or cuda (nccl, the "
        "process's LOCAL_RANK GPU)")
    arg("--metrics-log", metavar="FILE", help="also write the per-step JSON lines (step, loss, lr, grad_norm) "
        "to this file (not --log: torchrun would take that for its own --log-dir)")
    arg("--save-dir", metavar="DIR", help="write the final weights here, one stage-NNN.safetensors per "
        "pipeline rank (replica 0's), under pd2bw's tensor names")


def _require_pipelining():
    import torch

    try:
        from torch.distributed import pipelining  # noqa: F401
        from torch.distributed.pipelining import schedules
    except ImportError as e:
        raise UsageError(f"this PyTorch ({torch.__version__}) has no torch.distributed.pipelining ({e}); "
                         "install torch >= 2.6 (tools/setup installs the tested version)") from None
    if not hasattr(schedules, "_PipelineScheduleRuntime"):
        raise UsageError(f"this PyTorch ({torch.__version__}) lacks _PipelineScheduleRuntime; install torch "
                         ">= 2.6 (tools/setup installs the tested version)")
    return schedules


def _world() -> tuple[int, int, int]:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise UsageError("pd2bw-torch run must be started by torchrun, one process per pipeline rank: "
                         "torchrun --nproc-per-node D tools/pd2bw-torch run ...")
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def _emit(record: dict, log_file) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if log_file is not None:
        log_file.write(line + "\n")
        log_file.flush()


def main(args: argparse.Namespace) -> int:
    rank, world, local_rank = _world()
    setup = runcheck.prepare(args, world)  # every check that needs neither torch nor another rank
    schedules = _require_pipelining()
    if "MASTER_ADDR" not in os.environ:
        raise UsageError("no MASTER_ADDR: start pd2bw-torch run with torchrun, one process per pipeline rank")
    import torch
    import torch.distributed as dist

    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if args.device == "cuda" else torch.device("cpu")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    dist.barrier()  # every pair connected before the schedules' first batched p2p
    try:
        return _train(args, setup, schedules, rank, device)
    finally:
        dist.destroy_process_group()


def _train(args, setup: runcheck.RunSetup, schedules, rank: int, device) -> int:
    import math

    from pd2bw_torch import rungroups, runplan
    from pd2bw_torch.models import gpt
    from pd2bw_torch.optim import LrSchedule, OptimizerConfig, Pd2bwOptimizer

    groups = rungroups.make_groups(setup, rank)
    rs = runplan.build_rank(setup, rank, device, groups.pipeline)
    sched = runplan.make_schedule(setup, rs, schedules)
    opt = Pd2bwOptimizer(OptimizerConfig(setup.plan["optimizer"], args.weight_decay), rs.params)
    moments_m, _ = gpt.read_checkpoint_tensors(args.checkpoint, "optimizer.m/")
    moments_v, _ = gpt.read_checkpoint_tensors(args.checkpoint, "optimizer.v/")
    opt.load_state(runplan.with_tied_fallback(moments_m, setup.config),
                   runplan.with_tied_fallback(moments_v, setup.config))
    lr_sched = LrSchedule(args.lr, args.min_lr, min(args.warmup, args.steps), args.steps)
    reports = rs.holds_head and rs.replica == 0
    log_file = open(args.metrics_log, "w", encoding="utf-8") if args.metrics_log and reports else None
    try:
        for step in range(setup.start_step, args.steps):
            losses = _run_schedule(sched, setup, rs, step, device)
            norm = rungroups.reduce_grads(setup, rs, groups, device)
            if not math.isfinite(norm):
                raise RunFailure(f"step {step + 1}: the gradient is not finite; lower --lr")
            clip = args.clip / norm if args.clip > 0 and norm > args.clip else 1.0
            lr = lr_sched.at(step)
            opt.step(lr, step, clip / setup.width)  # the replicas' sum averaged, then clipped
            if rs.holds_head:
                loss = rungroups.step_loss(setup, losses, groups, device)
                if reports:
                    _emit({"step": step + 1, "loss": loss, "lr": lr, "grad_norm": norm}, log_file)
    finally:
        if log_file is not None:
            log_file.close()
    if args.save_dir:
        runplan.save_weights(args.save_dir, rs)
    return 0


def _run_schedule(sched, setup: runcheck.RunSetup, rs, step: int, device) -> list:
    """One step's forwards and backwards; the head's ranks get the microbatches' losses."""
    from pd2bw_torch import runplan

    for p in rs.params.values():
        p.grad = None
    tokens, targets = runplan.step_batch(setup, rs, step, device)
    losses: list = []
    if rs.holds_embedding and rs.holds_head:
        sched.step(tokens, target=targets, losses=losses)
    elif rs.holds_embedding:
        sched.step(tokens)
    elif rs.holds_head:
        sched.step(target=targets, losses=losses)
    else:
        sched.step()
    return losses
