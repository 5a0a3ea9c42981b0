#!/usr/bin/env bash
# The README's main path end to end on the CPU: `pd2bw profile` (default model) -> `pd2bw plan` (a forced
# 2-stage 2bw pipeline: memory forces the depth, and the schedule is pinned, since on a loaded machine the
# measured times can make a schedule of one weight version the planner's honest choice) -> `pd2bw train`
# on the built-in corpus. Checks the files each step writes, that the
# loss falls, that the run's prediction check (report) holds numbers for every stage, and that each stage's
# arena peak is within 5% of the planner's memory model.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"

expect_exit 0 "wrote $TMP/profile.json" -- "$PD2BW" profile --iters 3 -o "$TMP/profile.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/profile.json"
expect_exit 0 "chosen: 2bw" -- "$PD2BW" plan --profile "$TMP/profile.json" --nodes 1 --gpus-per-node 2 \
  --device-memory 4MiB --reserve 0 --global-batch 16 --schedule 2bw -o "$TMP/plan.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/plan.json"
expect_exit 0 "prediction check" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 30 --log "$TMP/metrics.jsonl" \
  --report "$TMP/report.json"
if "$PY" - "$TMP/profile.json" "$TMP/plan.json" "$TMP/metrics.jsonl" "$TMP/report.json" <<'PYEOF'
import hashlib, json, sys
profile_path, plan_path, log_path, report_path = sys.argv[1:5]
plan = json.load(open(plan_path))
assert plan["profile_sha256"] == hashlib.sha256(open(profile_path, "rb").read()).hexdigest()
assert plan["depth"] == 2, plan["depth"]
steps = [json.loads(line) for line in open(log_path)]
assert [s["step"] for s in steps] == list(range(1, 31))
losses = [s["loss"] for s in steps]
# Starts at the uniform guess over 256 bytes (ln 256 = 5.55) and must at least halve the gap to the
# corpus's unigram entropy (about 2.95 nats) within 30 steps.
assert abs(losses[0] - 5.545) < 0.1, losses[0]
assert min(losses[-5:]) < 4.25, losses[-5:]
report = json.load(open(report_path))
assert report["step_ms_measured"] > 0 and report["step_ms_planned"] > 0
assert len(report["stages"]) == 2
for s in report["stages"]:
    assert s["compute_ms_measured"] > 0 and s["compute_ms_planned"] > 0 and s["peak_bytes"] > 0, s
    assert s["weight_versions_allocated"] == 2
    # The stage arena's peak matches the planner's memory model (without the reserve) within 5%.
    assert abs(s["peak_bytes"] / s["planned_bytes_without_reserve"] - 1) <= 0.05, s
PYEOF
then ok; else fail "profile -> plan -> train files or loss"; fi
finish
