#!/usr/bin/env bash
# interleaved 1F1B, zb-h2 and zb-v from plan to training: each is planned from a profile that times the
# backward in halves (what `pd2bw profile` writes), replayed to its own prediction with every rank's
# planned memory covering its replayed peak, validated, and trained; each gives flush's losses bit for
# bit (the synchronous schedules compute flush's math, whatever the split or the chunks), as threads and
# under mpirun, on 2 and 4 ranks; a chunked run resumes bit-identically from its checkpoint.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
have_mpi=1
command -v mpirun >/dev/null && "$PD2BW" --version | grep -q "transports:.*mpi" || have_mpi=0

S="$TMP/split.profile.json"  # 6 blocks: 8 layers, enough for 4 ranks x 2 chunks
expect_exit 0 "" -- "$PD2BW" profile --blocks 6 --d-model 32 --heads 2 --seq 32 --microbatch 1,2 --no-runtime-calibration \
  -o "$S" -q
same_losses() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert a and [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}
expect_exit 0 "" -- "$PD2BW" plan --profile "$S" --nodes 1 --gpus-per-node 4 --schedule flush --depth 2 --width 1 \
  --global-batch 8 --microbatch 1 -o "$TMP/flush.json" -q
expect_exit 0 "done: steps 1-4" -- "$PD2BW" train --plan "$TMP/flush.json" --steps 4 --log "$TMP/flush.jsonl"

# check NAME SCHEDULE DEPTH FLAGS...: plan, replay, validate, train (threads and mpirun) against flush.
check() {
  local name="$1" schedule="$2" depth="$3"
  shift 3
  expect_exit 0 "chosen: $schedule" -- "$PD2BW" plan --profile "$S" --nodes 1 --gpus-per-node 4 --schedule "$schedule" \
    --depth "$depth" --width 1 --global-batch 8 --microbatch 1 "$@" -o "$TMP/$name.json"
  expect_exit 0 "" -- "$PD2BW" simulate --plan "$TMP/$name.json" --profile "$S" --json "$TMP/$name.sim.json" -q
  "$PY" - "$TMP/$name.json" "$TMP/$name.sim.json" <<'PYEOF' && ok || fail "$name: prediction or memory off its replay"
import json, sys
plan, sim = (json.load(open(p)) for p in sys.argv[1:3])
step = plan["predictions"]["step_ms"]
assert abs(sim["step_ms"] - step) <= 1e-9 * step, (sim["step_ms"], step)
d, v = plan["depth"], plan.get("chunks_per_rank", 1)
assert len(plan["stages"]) == d * v and len(sim["stages"]) == d, (len(plan["stages"]), len(sim["stages"]))
def position(c):
    if plan["schedule"] == "zb-v":
        return c if c < d else 2 * d - 1 - c
    return c % d
planned = [0] * d
for c, s in enumerate(plan["stages"]):
    planned[position(c)] += s["memory"]["total_bytes"]
for p in range(d):
    assert sim["stages"][p]["peak_bytes"] <= planned[p], (p, sim["stages"][p]["peak_bytes"], planned[p])
PYEOF
  expect_exit 0 "" -- "$PD2BW" validate --profile "$S" "$TMP/$name.json"
  expect_exit 0 "$schedule b=" -- "$PD2BW" train --plan "$TMP/$name.json" --steps 4 --log "$TMP/$name.jsonl"
  same_losses "$TMP/$name.jsonl" "$TMP/flush.jsonl" && ok || fail "$name: losses differ from flush's"
  if [ "$have_mpi" = 1 ]; then
    expect_exit 0 "as processes \(mpi" -- "${MPI[@]}" -np "$depth" "$PD2BW" train --plan "$TMP/$name.json" --steps 4 \
      --log "$TMP/$name.mpi.jsonl"
    same_losses "$TMP/$name.mpi.jsonl" "$TMP/flush.jsonl" && ok || fail "$name: mpirun losses differ from flush's"
  fi
}
check int2 interleaved 2 --chunks 2
check int4 interleaved 4 --chunks 2
check h2 zb-h2 2
check h24 zb-h2 4
check v2 zb-v 2
check v4 zb-v 4

# A chunked run stopped after step 2 and resumed gives the uninterrupted run's losses.
expect_exit 0 "checkpoint: step 2" -- "$PD2BW" train --plan "$TMP/int2.json" --steps 4 --stop-after 2 \
  --checkpoint-dir "$TMP/ck" --checkpoint-every 2 --log "$TMP/parts.jsonl"
expect_exit 0 "done: steps 3-4" -- "$PD2BW" train --plan "$TMP/int2.json" --steps 4 --checkpoint-dir "$TMP/ck" \
  --resume --log "$TMP/parts.jsonl"
same_losses "$TMP/parts.jsonl" "$TMP/int2.jsonl" && ok || fail "the resumed interleaved run differs"

# The planner's rules: interleaved needs m a multiple of d (Megatron's), zb-v exactly 2 chunks.
expect_exit 2 "cannot hold 3 chunks" -- "$PD2BW" plan --profile "$S" --schedule zb-v --chunks 3 -o "$TMP/no.json"
[ ! -e "$TMP/no.json" ] && ok || fail "a refused plan was written"
finish
