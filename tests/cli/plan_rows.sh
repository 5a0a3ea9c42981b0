#!/usr/bin/env bash
# The rows of "alternatives that lost" where replays are too large to run for a list (the 3.8B example's
# block repeated to 2,000 layers, on 4,096 GPUs), with every schedule and with gpipe pinned: the kept
# alternatives (--top) all have rows; a row not replayed says so, and either is at least as slow as the
# winner by its objective (too large to replay for the list) or says that the replay budget left it out
# and by how much its objective is below the winner; every row's percentage agrees with its step; a row
# not replayed is marked as a lower bound in the file (step_bound), a representative as an upper bound,
# and no other row is; both plan files pass `pd2bw validate` (a lower bound below the winner's step is
# no contradiction); and the line naming the schedules without a row names exactly those.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
repeated_profile 1998 "$TMP/p.json"
ARGS=(--profile "$TMP/p.json" --nodes 512 --gpus-per-node 8 --device-memory 80GiB --intra-gbps 300 --inter-gbps 25
      --global-batch 8192)

check_rows() {  # PLAN LOG SEARCHED...: the checks above on one plan and its output
  "$PY" - "$@" <<'EOF2'
import json, re, sys
plan = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
searched = sys.argv[3:]
win = plan["predictions"]["step_ms"]
rows = plan["alternatives"]
errors = []
same = [a for a in rows if a["schedule"] == plan["schedule"]]
if len(same) < 3:
    errors.append(f"--top 3 kept {len(same)} rows of the winner's schedule")
for a in rows:
    pct = 100.0 * (a["step_ms"] / win - 1.0)
    why = a["why"]
    bound = "lower" if "not replayed" in why else "upper" if "an upper bound" in why else None
    if a.get("step_bound") != bound:
        errors.append(f"row {a['step_ms']} ms: step_bound {a.get('step_bound')}, its text says {bound}")
    if "not replayed (the replay budget ran out" in why:
        m = re.search(r"is ([0-9.]+)% below the winner's step", why)
        if not m or pct >= 0 or abs(float(m.group(1)) + pct) > 0.051:
            errors.append(f"row {a['step_ms']} ms ({pct:.2f}%): '{why[:80]}'")
        continue
    m = re.match(r"(at least )?([0-9.]+)% slower", why)
    if not m or abs(float(m.group(2)) - pct) > 0.051 or a["step_ms"] < win:
        errors.append(f"row {a['step_ms']} ms ({pct:.2f}%): '{why[:60]}'")
    elif ("not replayed" in why) != bool(m.group(1)):
        errors.append(f"row {a['step_ms']} ms: 'at least' and 'not replayed' disagree")
if not any("not replayed" in a["why"] for a in rows):
    errors.append("no row is marked as not replayed (the case no longer tests that path)")
missing = [s for s in searched if s != plan["schedule"] and all(a["schedule"] != s for a in rows)]
m = re.search(r"^no row for ([a-z0-9, -]+):", log, re.M)
named = m.group(1).split(", ") if m else []
if named != missing:
    errors.append(f"the log names {named} without a row, the plan has none for {missing}")
print("\n".join(errors))
sys.exit(1 if errors else 0)
EOF2
}

expect_exit 0 "alternatives that lost" -- "$PD2BW" plan "${ARGS[@]}" --top 3 -o "$TMP/all.json"
cp "$TMP/err" "$TMP/all.log"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/all.json"
check_rows "$TMP/all.json" "$TMP/all.log" 2bw flush gpipe zb-h1 interleaved zb-h2 zb-v && ok ||
  fail "the alternatives at 4,096 GPUs, every schedule (above)"
# Pinned, the replay budget leaves kept candidates that could win unreplayed.
expect_exit 0 "alternatives that lost" -- "$PD2BW" plan "${ARGS[@]}" --schedule gpipe --top 3 -o "$TMP/gpipe.json"
cp "$TMP/err" "$TMP/gpipe.log"
check_rows "$TMP/gpipe.json" "$TMP/gpipe.log" gpipe && ok || fail "the alternatives at 4,096 GPUs, gpipe (above)"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/gpipe.json"
grep -q "the replay budget ran out" "$TMP/gpipe.json" && ok ||
  fail "no gpipe row left out by the replay budget (the case no longer tests that path)"
finish
