#!/usr/bin/env bash
# `pd2bw plan` on a search space of thousands of candidates (the 3.8B example's block repeated to 400
# layers, on 128 GPUs, which has the split backward the zero-bubble schedules need): every
# searched schedule gives a plan that validates, the plan does not depend on the thread count, and the
# printed gap holds against the pinned searches: no schedule's best replay found by `--schedule S` is
# faster than the unpinned winner divided by (1 + its printed gap).
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
repeated_profile 398 "$TMP/p.json"
ARGS=(--profile "$TMP/p.json" --nodes 16 --gpus-per-node 8 --device-memory 80GiB --intra-gbps 300 --inter-gbps 25
      --global-batch 1024)

expect_exit 0 "no split of any candidate" -- "$PD2BW" plan "${ARGS[@]}" --threads 1 -o "$TMP/all.json"
cp "$TMP/err" "$TMP/all.log"
"$PD2BW" plan "${ARGS[@]}" --threads 2 -q -o "$TMP/all2.json"
if diff <(grep -v command_line "$TMP/all.json") <(grep -v command_line "$TMP/all2.json") >/dev/null; then ok
else fail "--threads 2 changed the plan at scale"; fi
expect_exit 0 "" -- "$PD2BW" validate "$TMP/all.json"

gap_of() {  # the printed proven gap as a fraction (0 when the plan is the best)
  "$PY" -c 'import re,sys; m=re.search(r"replays more than ([0-9.]+)% faster", open(sys.argv[1]).read()); print(float(m.group(1))/100 if m else 0.0)' "$1"
}
step_of() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["predictions"]["step_ms"])' "$1"; }
win=$(step_of "$TMP/all.json")
gap=$(gap_of "$TMP/all.log")
for s in 2bw flush gpipe zb-h1 zb-h2 interleaved; do
  expect_exit 0 "no split of any candidate" -- "$PD2BW" plan "${ARGS[@]}" --schedule "$s" -o "$TMP/$s.json"
  expect_exit 0 "" -- "$PD2BW" validate "$TMP/$s.json"
  t=$(step_of "$TMP/$s.json")
  if "$PY" -c 'import sys; w,g,t=map(float,sys.argv[1:]); sys.exit(0 if t * (1 + g) >= w * (1 - 1e-9) else 1)' "$win" "$gap" "$t"
  then ok; else fail "--schedule $s replays $t ms, below the unpinned winner $win ms / (1 + $gap)"; fi
done
finish
