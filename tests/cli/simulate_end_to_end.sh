#!/usr/bin/env bash
# `pd2bw plan --explain` and `pd2bw simulate` end to end for 2bw, flush and gpipe, then the chunked
# interleaved and zb-v (one report row per rank, its chunks added up): the trace parses as JSON with
# one event per op of every rank, the SVG renders to a non-empty PNG with a real renderer (rsvg-convert),
# the simulated step and per-stage peak memory match the plan within 2%, and bad input exits 2.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
P="$SRC/schemas/examples/gpt-1.3b.profile.json"
command -v rsvg-convert >/dev/null || { echo "rsvg-convert missing: run tools/setup" >&2; exit 1; }

for s in 2bw flush gpipe; do
  expect_exit 0 "where the time goes" -- "$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 4 \
    --device-memory 24GiB --global-batch 32 --schedule "$s" --explain -o "$TMP/$s.plan.json"
  grep -qE "chosen +$s " "$TMP/err" || fail "--explain does not show the chosen $s plan"
  expect_exit 0 "step time: steady" -- "$PD2BW" simulate --plan "$TMP/$s.plan.json" --profile "$P" \
    --trace "$TMP/$s.trace.json" --svg "$TMP/$s.svg" --json "$TMP/$s.report.json"
  if rsvg-convert "$TMP/$s.svg" -o "$TMP/$s.png" && [ -s "$TMP/$s.png" ]; then ok; else fail "$s: SVG does not render"; fi
  if "$PY" - "$TMP/$s.plan.json" "$TMP/$s.trace.json" "$TMP/$s.report.json" "$TMP/$s.png" <<'PYEOF'
import json, struct, sys
plan, trace, report = (json.load(open(p)) for p in sys.argv[1:4])
d, m, w = plan["depth"], plan["microbatches_per_step"], plan["width"]
steps = report["steps"]
# Ops per step of stage i: m forwards and backwards, a receive and a send per neighbour and microbatch,
# m recomputes when the stage recomputes, an allreduce when replicated, and the update.
ops = 0
for i, st in enumerate(plan["stages"]):
    per = 2 * m + (2 * m if i > 0 else 0) + (2 * m if i < d - 1 else 0)
    per += m if st["recompute"] else 0
    per += (1 if w > 1 else 0) + 1
    ops += per * steps * w
xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
assert len(xs) == ops, (len(xs), ops)
assert {e["pid"] for e in xs} == set(range(d * w)), "one process per rank"
assert all({"step", "microbatch", "version"} <= set(e["args"]) for e in xs)
assert abs(report["step_ms"] / plan["predictions"]["step_ms"] - 1) <= 0.02, (report["step_ms"], plan["predictions"])
for st, sim in zip(plan["stages"], report["stages"]):
    assert abs(sim["peak_bytes"] / st["memory"]["total_bytes"] - 1) <= 0.02, (sim, st["memory"])
    assert sim["max_live_versions"] <= (2 if plan["schedule"] == "2bw" else 1)
png = open(sys.argv[4], "rb").read(24)
assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] > 500
PYEOF
  then ok; else fail "$s: trace/report/picture check"; fi
done

# Too few steps for 2bw (whose second step still compares with the first, which fills the pipeline): the
# report must say the replay is not steady, not call its number the steady step, and print the two
# measured steps, the last of which is already the steady step of a full replay (the JSON above).
expect_exit 0 "not steady after 4 steps: .*replay more steps" -- \
  "$PD2BW" simulate --plan "$TMP/2bw.plan.json" --profile "$P" --steps 4 --json "$TMP/2bw.short.json"
if "$PY" - "$TMP/2bw.report.json" "$TMP/2bw.short.json" "$TMP/err" <<'PYEOF'
import json, re, sys
full, short = (json.load(open(p)) for p in sys.argv[1:3])
text = open(sys.argv[3]).read()
assert full["steady"] and not short["steady"], (full["steady"], short["steady"])
assert abs(short["last_step_ms"] / full["step_ms"] - 1) <= 1e-9, (short["last_step_ms"], full["step_ms"])
assert short["previous_step_ms"] > 1.01 * short["last_step_ms"], short
assert short["step_ms"] == max(short["previous_step_ms"], short["last_step_ms"]), short
assert "step time: not yet steady, %.3f ms" % short["step_ms"] in text, text
took = re.search(r"took ([0-9.]+) and ([0-9.]+) ms", text).groups()
assert took == ("%.3f" % short["previous_step_ms"], "%.3f" % short["last_step_ms"]), (took, short)
PYEOF
then ok; else fail "2bw --steps 4: the report of a replay that is not steady"; fi

# Chunked plans (v = 2 model chunks per rank): the report has one row per rank, over all of its chunks. The
# reference is the placement rule written out below (interleaved: chunk c on rank c mod d; zb-v: the V,
# c < d on c, else on 2d - 1 - c) and the plan's own per-chunk numbers, added up per rank.
for s in interleaved zb-v; do
  expect_exit 0 "where the time goes" -- "$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 4 \
    --device-memory 24GiB --global-batch 32 --schedule "$s" --depth 4 --chunks 2 --explain -o "$TMP/$s.plan.json"
  grep -qE "chosen +$s v=2 .* d=4 " "$TMP/err" || fail "--explain does not show the chosen $s v=2 plan"
  grep -qE "memory: rank [0-3] of the pipeline \(chunks [0-7], [0-7]\) is fullest" "$TMP/err" \
    || fail "$s: --explain does not name the fullest rank and its chunks"
  expect_exit 0 "step time: steady" -- "$PD2BW" simulate --plan "$TMP/$s.plan.json" --profile "$P" \
    --trace "$TMP/$s.trace.json" --json "$TMP/$s.report.json"
  cp "$TMP/err" "$TMP/$s.table.txt"
  if "$PY" - "$TMP/$s.plan.json" "$TMP/$s.trace.json" "$TMP/$s.report.json" "$TMP/$s.table.txt" <<'PYEOF'
import json, re, sys
plan, trace, report = (json.load(open(p)) for p in sys.argv[1:4])
table = open(sys.argv[4]).read().splitlines()
d, v, w = plan["depth"], plan["chunks_per_rank"], plan["width"]
assert (d, v) == (4, 2) and len(plan["stages"]) == d * v, (d, v, len(plan["stages"]))
assert report["chunks_per_rank"] == v
position = (lambda c: c if c < d else 2 * d - 1 - c) if plan["schedule"] == "zb-v" else (lambda c: c % d)
assert len(report["stages"]) == d, len(report["stages"])
header = next(i for i, l in enumerate(table) if l.split()[:2] == ["rank", "layers"])
rows = [l.split() for l in table[header + 1:header + 1 + d]]
for p, sim in enumerate(report["stages"]):
    chunks = [c for c in range(d * v) if position(c) == p]
    mine = [plan["stages"][c] for c in chunks]
    planned = sum(st["memory"]["total_bytes"] for st in mine)
    assert sim["chunks"] == chunks, (p, sim["chunks"], chunks)
    assert sim["planned_peak_bytes"] == planned, (p, sim["planned_peak_bytes"], planned)
    assert sim["limit_bytes"] == mine[0]["memory"]["limit_bytes"] and planned <= sim["limit_bytes"]
    assert abs(sim["peak_bytes"] / planned - 1) <= 0.02, (p, sim["peak_bytes"], planned)
    assert sim["max_live_versions"] == 1
    # The printed row: rank, its chunks' layer ranges, and the rank's peak next to its planned total.
    layers = ",".join("%d-%d" % (st["layer_begin"], st["layer_end"] - 1) for st in mine)
    assert rows[p][0] == str(p) and rows[p][1] == layers, (rows[p], layers)
    assert re.search(r"\(\s*%.3f\)" % (planned / 2**30), table[header + 1 + p]), (table[header + 1 + p], planned)
assert abs(report["step_ms"] / plan["predictions"]["step_ms"] - 1) <= 0.02, (report["step_ms"], plan["predictions"])
xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
assert {e["pid"] for e in xs} == set(range(d * w)), "one process per rank"
PYEOF
  then ok; else fail "$s: per-rank report of a chunked plan"; fi
done

# Bad input: a profile that is not the plan's, an inconsistent plan, impossible flags.
expect_exit 2 "sha256" -- "$PD2BW" simulate --plan "$TMP/2bw.plan.json"
expect_exit 2 "sha256" -- "$PD2BW" simulate --plan "$TMP/2bw.plan.json" --profile "$SRC/schemas/examples/gpt-2.2b.profile.json"
"$PY" - "$TMP/2bw.plan.json" "$TMP/broken.plan.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["stages"][0]["layer_end"] += 1
json.dump(p, open(sys.argv[2], "w"))
PYEOF
expect_exit 2 "error: .*stages" -- "$PD2BW" simulate --plan "$TMP/broken.plan.json" --profile "$P"
expect_exit 2 "error:" -- "$PD2BW" simulate --plan "$TMP/2bw.plan.json" --profile "$P" --steps 0
expect_exit 2 "error:" -- "$PD2BW" simulate --profile "$P"
expect_exit 2 "error:" -- "$PD2BW" simulate --plan "$TMP/missing.json" --profile "$P"
expect_exit 2 "error:" -- "$PD2BW" simulate --plan "$P" --profile "$P"
finish
