"""The checks of `pd2bw-torch run` that need neither torch nor another rank: the plan, the export's split,
the checkpoint's manifest and tensor names, the data and the flags (prepare). A bad input stops every
rank alike, with one 'pd2bw-torch: error:' line, before torch is imported or a process group starts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from pd2bw_torch import ckpt
from pd2bw_torch import data as data_mod
from pd2bw_torch.errors import UsageError
from pd2bw_torch.models.config import GPTConfig

# pd2bw schedules torch runs without a CSV, and the built-in class for each.
BUILTIN_CLASSES = {"flush": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B",
                   "zb-h1": "ScheduleInterleavedZeroBubble",
                   "zb-v": "ScheduleZBVZeroBubble"}
SINGLE_STAGE_CLASSES = {"Schedule1F1B", "ScheduleGPipe"}
DTYPES = ("float", "double")


@dataclass
class PlanStage:
    index: int
    begin: int  # first layer
    end: int  # one past the last layer
    recompute: bool
    ranks: list[int]  # global rank of the stage in each replica (the plan's "ranks")
    position: int = 0  # pipeline rank: its rank's place in the replica's pipeline (torch's group rank)


@dataclass
class RunSetup:
    plan: dict
    config: GPTConfig
    stages: list[PlanStage]
    microbatches: int
    microbatch_size: int
    width: int  # data-parallel replicas
    dtype: str  # "float" | "double"
    start_step: int
    seed: int
    data: data_mod.TokenData
    checkpoint: str
    schedule_csv: str | None
    schedule: str  # the plan's, or flush for a 2bw plan exported with --as-flush


def read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read the {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"the {what} {path} is not JSON: {e}") from None


def plan_stages(plan: dict, config: GPTConfig) -> list[PlanStage]:
    """The plan's stages in order, checked to cover the model's layers exactly once."""
    width = int(plan.get("width", 1))
    layers = int(plan.get("num_layers", config.layer_count))
    if layers != config.layer_count:
        raise UsageError(f"the plan splits {layers} layers but its model has {config.layer_count} "
                         f"({config.blocks} blocks + embedding + head); re-plan from the model's profile")
    out, expect = [], 0
    for s in sorted(plan.get("stages", []), key=lambda s: s["layer_begin"]):
        if s["layer_begin"] != expect or s["layer_end"] <= s["layer_begin"]:
            raise UsageError(f"the plan's stages do not cover layers 0..{layers - 1} in order (stage {s['index']} "
                             f"starts at layer {s['layer_begin']}, expected {expect})")
        ranks = [int(r) for r in s["ranks"]]
        if len(ranks) != width:
            raise ValueError(f"stage {s['index']} has {len(ranks)} ranks, the plan's width is {width}")
        out.append(PlanStage(int(s["index"]), int(s["layer_begin"]), int(s["layer_end"]), bool(s.get("recompute")),
                             ranks))
        expect = s["layer_end"]
    if expect != layers:
        raise UsageError(f"the plan's stages cover {expect} layers, its model has {layers}")
    out.sort(key=lambda s: s.index)
    # Stages 0..d-1 sit on pipeline ranks 0..d-1 in every placement (loop or V); later chunks reuse them.
    order = list(dict.fromkeys(s.ranks[0] for s in out))
    for s in out:
        s.position = order.index(s.ranks[0])
    return out


def check_split(path: str, plan: dict, stages: list[PlanStage]) -> dict:
    """The export's split, which must be the plan's: its layer ranges, their ranks, microbatches and width."""
    split = read_json(path, "split")
    if "num_layers" in split and int(split["num_layers"]) != max(s.end for s in stages):
        raise UsageError(f"the split {path} is of a model of {split['num_layers']} layers, the plan's has "
                         f"{max(s.end for s in stages)}; export the split from this plan")
    for key, want in (("num_microbatches", plan["microbatches_per_step"]), ("microbatch_size", plan["microbatch_size"]),
                      ("data_parallel_width", plan.get("width", 1))):
        if key in split and int(split[key]) != int(want):
            raise UsageError(f"the split {path} has {key} {split[key]}, the plan {want}; export the split from "
                             "this plan")
    entries = split.get("stages")
    if not isinstance(entries, list):
        raise UsageError(f"the split {path} has no \"stages\" list; give the JSON of pd2bw export --to torch")
    ranges = []
    for e in entries:
        if "layer_begin" in e and "layer_end" in e:
            ranges.append((int(e["layer_begin"]), int(e["layer_end"]), int(e.get("pipeline_rank", -1))))
        elif "layers" in e and isinstance(e["layers"], list) and len(e["layers"]) == 2:
            ranges.append((int(e["layers"][0]), int(e["layers"][1]), -1))
        else:
            raise UsageError(f"the split {path} has a stage without its layer range")
    mine = sorted((s.begin, s.end) for s in stages)
    theirs = sorted(r[:2] for r in ranges)
    if theirs != mine:
        raise UsageError(f"the split {path} has the layer ranges {theirs}, the plan {mine}; export "
                         "the split from this plan")
    where = {(s.begin, s.end): s.position for s in stages}
    for begin, end, rank in ranges:
        if rank >= 0 and where[(begin, end)] != rank:
            raise UsageError(f"the split {path} puts layers {begin}..{end - 1} on pipeline rank {rank}, the plan "
                             f"on {where[(begin, end)]}; export the split from this plan")
    return split


def _read_plan(args, world: int) -> tuple[dict, GPTConfig, list[PlanStage], str]:
    """The plan, its model and stages, checked against the split and the process count, and the schedule
    to run (a 2bw plan runs as the flush plan its --as-flush export describes)."""
    plan = read_json(args.plan, "plan")
    if not isinstance(plan, dict) or plan.get("schema") != "pd2bw.plan":
        raise UsageError(f"{args.plan} is not a pd2bw plan (its \"schema\" is not \"pd2bw.plan\"); give the "
                         "output of pd2bw plan")
    try:
        config = GPTConfig.from_model(plan.get("model", {}))
        stages = plan_stages(plan, config)
        int(plan["microbatches_per_step"]), int(plan["microbatch_size"]), plan["optimizer"]
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise UsageError(f"the plan {args.plan} is damaged or of another version ({type(e).__name__}: {e}); "
                         "make it again with pd2bw plan") from None
    ranks = {r for s in stages for r in s.ranks}
    if ranks != set(range(world)):
        raise UsageError(f"the plan has {len(ranks)} ranks (pipeline ranks x replicas) but torchrun started {world} "
                         f"processes: torchrun --nproc-per-node {len(ranks)}")
    split: dict = {}
    if args.split:
        try:
            split = check_split(args.split, plan, stages)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
            raise UsageError(f"the split {args.split} is damaged or of another version ({type(e).__name__}: {e}); "
                             "export it again with pd2bw export --to torch") from None
    schedule = plan.get("schedule")
    if schedule == "2bw":
        if not (split.get("exported_as_flush") and split.get("schedule") == "flush"):
            raise UsageError("the plan's schedule is 2bw, which torch.distributed.pipelining cannot run (it keeps two "
                             "weight versions); run its flush plan: pd2bw export --to torch --as-flush, and give "
                             "its --split and --schedule-csv")
        schedule = "flush"
    if args.schedule_csv and not os.path.isfile(args.schedule_csv):
        raise UsageError(f"cannot read the schedule CSV {args.schedule_csv}")
    if not args.schedule_csv and schedule not in BUILTIN_CLASSES:
        raise UsageError(f"torch has no built-in class for the plan's schedule {schedule}: give "
                         "--schedule-csv from pd2bw export --to torch")
    return plan, config, stages, schedule


def _read_checkpoint(args, config: GPTConfig) -> dict:
    """The checkpoint's manifest, its files checked and its model's layer count the plan's."""
    try:
        _, manifest, paths = ckpt.read_manifest(args.checkpoint)
        names = [n for path in paths for n in ckpt.tensor_names(path) if "/" not in n]
    except ckpt.CheckpointError as e:
        raise UsageError(str(e)) from None
    have = ckpt.checkpoint_layer_count(names)
    if have != config.layer_count or manifest.get("model", "gpt") != "gpt":
        raise UsageError(f"the checkpoint {args.checkpoint} holds a {manifest.get('model', 'gpt')} of {have} layers, "
                         f"the plan's model has {config.layer_count}: give a checkpoint of the plan's model")
    return manifest


def prepare(args, world: int) -> RunSetup:
    """Every check that needs no other rank: a bad plan, split, checkpoint, data or flag stops all ranks
    alike before the process group starts."""
    plan, config, stages, schedule = _read_plan(args, world)
    manifest = _read_checkpoint(args, config)
    start = int(manifest.get("step", 0))
    if args.steps <= start:
        raise UsageError(f"--steps {args.steps} leaves nothing to run after the checkpoint's step {start}")
    for name in ("lr", "min_lr", "weight_decay", "clip"):
        if not getattr(args, name) >= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 0")
    if args.warmup < 0 or args.min_lr > args.lr:
        raise UsageError("need --warmup >= 0 and --min-lr <= --lr")
    dtype_name = args.dtype or manifest.get("dtype", "float")
    if dtype_name not in DTYPES:
        raise UsageError(f"the checkpoint was trained in {dtype_name}; give --dtype float or double")
    data = data_mod.TokenData(data_mod.data_path(args.data, manifest))
    if int(data.tokens.max()) >= config.vocab:
        raise UsageError(f"the data {data.label} has token ids up to {int(data.tokens.max())}, beyond the "
                         f"model's vocabulary of {config.vocab}")
    seed = args.seed if args.seed is not None else int(manifest.get("seed", 1234))
    return RunSetup(plan, config, stages, int(plan["microbatches_per_step"]), int(plan["microbatch_size"]),
                    int(plan.get("width", 1)), dtype_name, start, seed, data, args.checkpoint, args.schedule_csv,
                    schedule)
