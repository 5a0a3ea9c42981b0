"""Checks of `pd2bw export` output, for tests/cli/export_torch.sh and export_megatron.sh.

torch PROFILE PLAN TRACE OUT [PLAN TRACE OUT ...]: for each case (one process, as importing torch is slow), OUT.csv is read by torch's own _PipelineScheduleRuntime._load_csv (which also
  validates it and lowers it to send/recv actions); each pipeline rank's actions equal, in order, the compute
  ops of the simulator's replay of the plan (TRACE: `pd2bw simulate --steps 1 --trace`, the generator's lists
  replayed); every stage's F and B (or I and W) appear once per microbatch; every dependency ran in an earlier
  column; OUT.json matches the plan (and the profile's layer names) and torch's stage-to-rank mapping.
megatron PLAN ARGS_FILE STDOUT: the arguments follow Megatron-LM's documented rules (arguments.py,
  transformer_config.py, pipeline_parallel_layer_layout.py) and place on each (pipeline rank, virtual stage)
  exactly the transformer blocks of the plan's chunk there; batch sizes and recompute agree with the plan.
Prints what it checked; exits 1 with the first failure.
"""
import csv
import json
import re
import sys


class Failed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failed(msg)


def replica0_positions(plan):
    """Global rank -> pipeline position, for the ranks of replica 0."""
    return {r["rank"]: r["stage"] for r in plan["ranks"] if r["replica"] == 0}


def trace_orders(plan, trace_path):
    letters = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}
    events = json.load(open(trace_path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    pos = replica0_positions(plan)
    out = {p: [] for p in pos.values()}
    for e in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: (e["pid"], e["ts"])):
        if e["pid"] in pos and e["cat"] in letters and e["args"]["step"] == 0:
            chunk = e["args"].get("chunk", pos[e["pid"]])  # written only for chunked plans
            out[pos[e["pid"]]].append(f'{chunk}{letters[e["cat"]]}{e["args"]["microbatch"]}')
    return out


def check_torch(plan_path, trace_path, base, profile_path=None):
    from torch.distributed.pipelining import _utils as U
    from torch.distributed.pipelining import schedules as S

    plan = json.load(open(plan_path))
    split = json.load(open(base + ".json"))
    d, v, m = plan["depth"], plan.get("chunks_per_rank", 1), plan["microbatches_per_step"]
    n = d * v
    rt = object.__new__(S._PipelineScheduleRuntime)  # torch's parser without a process group
    rt.pipeline_order, rt.pp_group_size, rt._num_stages, rt._n_microbatches, rt._stages = {}, d, n, m, []
    rt._load_csv(base + ".csv", format="compute_only")
    expect(len(rt.pipeline_order) == d, f"{len(rt.pipeline_order)} rows, want {d}")
    rows = list(csv.reader(open(base + ".csv")))
    # In order: each rank's actions are the generator's (the simulator's replay of them).
    want = trace_orders(plan, trace_path)
    for r in range(d):
        got = [str(a) for a in rt.pipeline_order[r] if a is not None]
        expect(got == want[r], f"rank {r}: CSV order {got[:12]}... differs from the generator's {want[r][:12]}...")
    # Once each per microbatch, and the backward kind the schedule calls for.
    split_bw = plan["schedule"] in ("zb-h1", "zb-h2", "zb-v") and not split["exported_as_flush"]
    slot = {}
    for r, row in enumerate(rows):
        for t, cell in enumerate(row):
            if cell:
                expect(cell not in slot, f"{cell} appears twice")
                slot[cell] = (t, r)
    kinds = "FIW" if split_bw else "FB"
    expect(len(slot) == n * m * len(kinds), f"{len(slot)} actions, want {n * m * len(kinds)}")
    for s in range(n):
        for mb in range(m):
            for k in kinds:
                expect(f"{s}{k}{mb}" in slot, f"{s}{k}{mb} missing")
    # Dependencies across ranks in time: the column of every action is after the columns of what it needs.
    bk = "I" if split_bw else "B"
    for s in range(n):
        for mb in range(m):
            deps = {f"{s}{bk}{mb}": [f"{s}F{mb}"] + ([f"{s + 1}{bk}{mb}"] if s + 1 < n else [])}
            if s > 0:
                deps[f"{s}F{mb}"] = [f"{s - 1}F{mb}"]
            if split_bw:
                deps[f"{s}W{mb}"] = [f"{s}I{mb}"]
            for a, needs in deps.items():
                for b in needs:
                    expect(slot[b][0] < slot[a][0], f"{a} at slot {slot[a][0]} does not follow {b} at {slot[b][0]}")
    check_split(plan, split, rt, base, profile_path, U)
    print(f"{base}: torch read {d} ranks x {max(len(r) for r in rows)} slots; order, counts, dependencies, split ok")


def check_split(plan, split, rt, base, profile_path, U):
    d, v = plan["depth"], plan.get("chunks_per_rank", 1)
    style = "v" if plan["schedule"] == "zb-v" else "loop"
    mapping = U.generate_stage_to_rank_mapping(d, d * v, style=style)
    expect(rt.stage_index_to_group_rank == mapping, f"torch infers {rt.stage_index_to_group_rank}, want {mapping}")
    expect(split["stage_to_rank"] == style, "stage_to_rank")
    w, b, m = plan["width"], plan["microbatch_size"], plan["microbatches_per_step"]
    for key, val in (("pipeline_depth", d), ("chunks_per_rank", v), ("num_stages", d * v), ("microbatch_size", b),
                     ("num_microbatches", m), ("data_parallel_width", w), ("world_size", w * d),
                     ("global_batch", b * m * w), ("num_layers", plan["num_layers"]), ("schedule_csv",
                     base.rsplit("/", 1)[-1] + ".csv")):
        expect(split[key] == val, f"split {key} = {split[key]}, want {val}")
    cls = split["torch_schedule_class"]
    from torch.distributed.pipelining import schedules as S
    expect(cls is None or hasattr(S, cls), f"torch has no class {cls}")
    layers = [l["name"] for l in json.load(open(profile_path))["layers"]] if profile_path else None
    expect(len(split["stages"]) == len(plan["stages"]), "stage count")
    for got, st in zip(split["stages"], plan["stages"]):
        for key in ("layer_begin", "layer_end", "recompute"):
            expect(got[key] == st[key], f"stage {st['index']} {key}")
        expect(got["stage"] == st["index"] and got["pipeline_rank"] == mapping[st["index"]], "stage rank")
        expect(got["global_ranks"] == st["ranks"], "global ranks")
        if layers:
            expect(got["layer_names"] == layers[st["layer_begin"]:st["layer_end"]], "layer names")
        else:
            expect("layer_names" not in got, "layer names without a profile")


def megatron_layers(a, pp):
    """Blocks per (pp_rank, vpp) as Megatron-LM builds them from the arguments, checking its rules."""
    n = a["--num-layers"]
    expect(sum(k in a for k in ("--pipeline-model-parallel-layout", "--num-virtual-stages-per-pipeline-rank",
                                "--num-layers-per-virtual-pipeline-stage")) <= 1, "more than one vpp argument")
    if "--pipeline-model-parallel-layout" in a:
        expect("--decoder-first-pipeline-num-layers" not in a and "--decoder-last-pipeline-num-layers" not in a,
               "layout with first/last")
        stages = a["--pipeline-model-parallel-layout"].replace(",", "").split("|")
        expect(len(stages) % pp == 0, "layout length not a multiple of pp")
        flat = "".join(stages)
        expect(set(flat) <= set("EtL") and flat.count("E") == 1 and flat.count("L") == 1, "layout letters")
        expect(flat[0] == "E" and flat[-1] == "L", "layout must start with E and end with L")
        expect(flat.count("t") == n, f"layout has {flat.count('t')} decoder layers, --num-layers {n}")
        vpp = len(stages) // pp
        return {(p, j): stages[j * pp + p].count("t") for p in range(pp) for j in range(vpp)}, vpp
    vpp = a.get("--num-virtual-stages-per-pipeline-rank", 1)
    first, last = a.get("--decoder-first-pipeline-num-layers"), a.get("--decoder-last-pipeline-num-layers")
    per_rank = {}
    if first is None and last is None:
        expect(n % pp == 0, "num layers not divisible by pp")
        per_rank = {p: n // pp for p in range(pp)}
    else:
        left, mid = n, pp
        for p, k in ((0, first), (pp - 1, last)):
            if k is not None:
                expect(k > 0 and k % vpp == 0, f"first/last {k} must be > 0 and divisible by vpp {vpp}")
                per_rank[p], left, mid = k, left - k, mid - 1
        expect(bool(left) == bool(mid), "middle layers without middle stages (or the reverse)")
        for p in range(pp):
            if p not in per_rank:
                expect(left % mid == 0, "middle layers not divisible by middle stages")
                per_rank[p] = left // mid
    for p, k in per_rank.items():
        expect(k % vpp == 0, f"rank {p}: {k} layers not divisible by vpp {vpp}")
    return {(p, j): per_rank[p] // vpp for p in range(pp) for j in range(vpp)}, vpp


def check_megatron(plan_path, args_path, stdout_path):
    plan = json.load(open(plan_path))
    lines = open(args_path).read().splitlines()
    printed = [l for l in open(stdout_path).read().splitlines() if not l.startswith("#")]
    expect(lines == printed, "the file differs from the printed arguments")
    a = {}
    for l in lines:
        expect(re.fullmatch(r"--[a-z-]+( [A-Za-z0-9|]+)?", l), f"unexpected line {l!r}")
        k, _, val = l.partition(" ")
        expect(k not in a, f"{k} twice")
        a[k] = int(val) if val.isdigit() else (val or True)
    d, w, v = plan["depth"], plan["width"], plan.get("chunks_per_rank", 1)
    b, m, layers = plan["microbatch_size"], plan["microbatches_per_step"], plan["num_layers"]
    pp = a["--pipeline-model-parallel-size"]
    expect(pp == d and a.get("--tensor-model-parallel-size", 1) == 1, "pp/tp size")
    got, vpp = megatron_layers(a, pp)
    expect(vpp == v, f"vpp {vpp}, plan v {v}")
    expect(vpp == 1 or pp > 1, "interleaving needs pp > 1")
    expect(sum(got.values()) == a["--num-layers"] == layers - 2, "layers do not sum to --num-layers")
    for st in plan["stages"]:
        c = st["index"]
        blocks = min(st["layer_end"], layers - 1) - max(st["layer_begin"], 1)
        expect(got[(c % d, c // d)] == max(blocks, 0), f"chunk {c}: Megatron builds {got[(c % d, c // d)]} blocks")
    dp = (w * d) // pp
    expect(a["--micro-batch-size"] == b and b * dp * m == a["--global-batch-size"] == plan["global_batch"],
           "micro x data-parallel x microbatches != global batch")
    recompute = [st["recompute"] for st in plan["stages"]]
    if any(recompute):
        most = max(got.values())
        expect(all(recompute) and a.get("--recompute-granularity") == "full" and
               a.get("--recompute-method") == "uniform" and a.get("--recompute-num-layers", 0) >= max(most, 1),
               "recompute flags")
    else:
        expect("--recompute-granularity" not in a, "recompute flags without recompute")
    inner = plan["placement"] == "stages-inner" and w > 1 and d > 1
    expect(("--use-tp-pp-dp-mapping" in a) == inner, "rank order flag")
    print(f"{args_path}: Megatron rules hold; pp {pp} x vpp {vpp}, blocks per chunk as planned, "
          f"{b} x {dp} x {m} = {plan['global_batch']}")


def main(argv):
    cases = [(check_megatron, argv[1:4])]
    if argv[0] == "torch":
        cases = [(check_torch, argv[i:i + 3] + [argv[1]]) for i in range(2, len(argv), 3)]
    failed = 0
    for fn, args in cases:
        try:
            fn(*args)
        except Exception as e:  # a Failed check, or torch refusing the file
            print(f"FAIL: {args[-2 if fn is check_torch else 1]}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
