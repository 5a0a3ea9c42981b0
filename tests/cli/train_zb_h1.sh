#!/usr/bin/env bash
# zb-h1 from a plan: a flush plan with its schedule set to "zb-h1" trains with the same losses as the
# flush plan (same synchronous math, split backward), with and without recompute and in bf16, and a checkpoint
# written under zb-h1 resumes bit-identically. The planner prices zb-h1 from a profile that times the
# backward in halves (what `pd2bw profile` writes): it plans, simulates, validates and trains it, and it
# refuses zb-h1 for a profile without the halves.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
P="$TMP/micro.profile.json"
micro_profile "$P"
"$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 4 --depth 2 --width 2 --schedule flush --global-batch 16 \
  -o "$TMP/flush.json" -q
# zb.json: the flush plan under zb-h1; *-rc.json: both with every stage recomputing.
"$PY" - "$TMP" <<'PYEOF'
import json, sys
t = sys.argv[1]
d = json.load(open(f"{t}/flush.json"))
assert d["schedule"] == "flush" and d["depth"] == 2 and d["microbatches_per_step"] >= 2, d["schedule"]
for name, schedule, recompute in (("zb", "zb-h1", False), ("flush-rc", "flush", True), ("zb-rc", "zb-h1", True)):
    e = json.loads(json.dumps(d))
    e["schedule"] = schedule
    if recompute:
        for s in e["stages"]:
            s["recompute"] = True
    json.dump(e, open(f"{t}/{name}.json", "w"), indent=2)
PYEOF
same_losses() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == 6 and [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}
for v in "" "-rc"; do
  expect_exit 0 "done: steps 1-6" -- "$PD2BW" train --plan "$TMP/flush$v.json" --steps 6 --log "$TMP/flush$v.jsonl"
  expect_exit 0 "zb-h1 b=" -- "$PD2BW" train --plan "$TMP/zb$v.json" --steps 6 --log "$TMP/zb$v.jsonl"
  same_losses "$TMP/zb$v.jsonl" "$TMP/flush$v.jsonl" && ok || fail "zb-h1$v losses differ from flush's"
done

# bf16 compute (fp32 masters) too: the halves round their outputs as the fused backward does.
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/flush.json" --steps 6 --dtype bf16 --log "$TMP/flush-bf16.jsonl"
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/zb.json" --steps 6 --dtype bf16 --log "$TMP/zb-bf16.jsonl"
same_losses "$TMP/zb-bf16.jsonl" "$TMP/flush-bf16.jsonl" && ok || fail "bf16 zb-h1 losses differ from flush's"

# A checkpoint written under zb-h1 resumes bit-identically.
expect_exit 0 "checkpoint: step 3" -- "$PD2BW" train --plan "$TMP/zb.json" --steps 6 --stop-after 3 \
  --checkpoint-dir "$TMP/ck" --checkpoint-every 3 --log "$TMP/parts.jsonl"
expect_exit 0 "done: steps 4-6" -- "$PD2BW" train --plan "$TMP/zb.json" --steps 6 --checkpoint-dir "$TMP/ck" \
  --resume --log "$TMP/parts.jsonl"
same_losses "$TMP/parts.jsonl" "$TMP/zb.jsonl" && ok || fail "the resumed zb-h1 run differs"

# The micro profile has no halves: planning or simulating zb-h1 from it is refused, and nothing is written.
expect_exit 2 "needs the backward timed in halves" -- "$PD2BW" plan --profile "$P" --schedule zb-h1 \
  --global-batch 16 -o "$TMP/refused.json"
[ ! -e "$TMP/refused.json" ] && ok || fail "a refused plan was written"
expect_exit 2 "does not have them at microbatch" -- "$PD2BW" simulate --plan "$TMP/zb.json" --profile "$P"

# A measured profile has them: zb-h1 is planned, replayed to its own prediction, checked and trained.
S="$TMP/split.profile.json"
expect_exit 0 "" -- "$PD2BW" profile --blocks 2 --d-model 32 --heads 2 --seq 32 --microbatch 1,2,4 --no-runtime-calibration \
  -o "$S" -q
expect_exit 0 "chosen: zb-h1" -- "$PD2BW" plan --profile "$S" --nodes 1 --gpus-per-node 4 --schedule zb-h1 \
  --depth 2 --width 2 --global-batch 16 -o "$TMP/zb-planned.json"
expect_exit 0 "" -- "$PD2BW" simulate --plan "$TMP/zb-planned.json" --profile "$S" --json "$TMP/zb-sim.json" -q
"$PY" - "$TMP" <<'PYEOF' && ok || fail "the zb-h1 plan's prediction is not its replay"
import json, sys
t = sys.argv[1]
plan, sim = json.load(open(f"{t}/zb-planned.json")), json.load(open(f"{t}/zb-sim.json"))
step = plan["predictions"]["step_ms"]
assert abs(sim["step_ms"] - step) <= 1e-9 * step, (sim["step_ms"], step)
# Each stage's planned memory covers its replayed peak.
for p, s in zip(plan["stages"], sim["stages"]):
    assert s["peak_bytes"] <= p["memory"]["total_bytes"], (s, p["memory"])
PYEOF
expect_exit 0 "" -- "$PD2BW" validate --profile "$S" "$TMP/zb-planned.json"
expect_exit 0 "zb-h1 b=" -- "$PD2BW" train --plan "$TMP/zb-planned.json" --steps 2 --log "$TMP/zb-planned.jsonl"
finish
