#!/usr/bin/env bash
# `pd2bw profile` end to end: a small measured profile passes `pd2bw validate` and the JSON Schema,
# lists the model's layers, and `pd2bw plan` plans from it; '-o -' writes stdout; bad flags exit 2. On
# the cpu the profile has a runtime_calibration, and none with --no-runtime-calibration (plan says so).
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
SMALL=(--blocks 2 --d-model 16 --heads 2 --seq 8 --vocab 32 --warmup 1 --iters 3 --link-max-bytes 256KiB)

expect_exit 0 "wrote $TMP/small.json" -- "$PD2BW" profile "${SMALL[@]}" --microbatch 1,2,4 -o "$TMP/small.json"
if grep -q "stash computed" "$TMP/err" && grep -qE "^block +4 " "$TMP/err"; then ok; else fail "summary table"; fi
expect_exit 0 "" -- "$PD2BW" validate "$TMP/small.json"
if grep -q "ok (pd2bw.profile" "$TMP/out"; then ok; else fail "validate did not say ok"; fi

# The layer list is the executor's: embedding, block.0 .. block.{L-1}, head; the links are measured.
if "$PY" - "$TMP/small.json" <<'EOF'; then ok; else fail "layer list or links"; fi
import json, sys
p = json.load(open(sys.argv[1]))
names = [l["name"] for l in p["layers"]]
assert names == ["embedding", "block.0", "block.1", "head"], names
assert [l["kind"] for l in p["layers"]] == ["embedding", "block", "block", "head"]
assert p["microbatch_sizes"] == [1, 2, 4]
for l in p["layers"]:
    for t in l["per_microbatch"]:
        assert t["fwd_ms"] > 0 and t["bwd_ms"] > 0 and t["stash_bytes"] > 0, t
node = p["links"][0]
assert node["level"] == "node" and node["p2p_gbps"] > 0 and node["allreduce_busbw_gbps"] > 0, node
assert p["provenance"]["tool"] == "pd2bw profile"
r = p["runtime_calibration"]
assert [e["microbatch"] for e in r["per_microbatch"]] == [1, 2, 4], r
assert all(e["compute_scale"] > 0 for e in r["per_microbatch"]) and r["update_scale"] >= 0, r
EOF

# The JSON Schema accepts it too (when the validator is installed).
if "$PY" -c "import jsonschema" 2>/dev/null; then
  if "$PY" - "$SRC/schemas/profile.schema.json" "$TMP/small.json" <<'EOF'; then ok; else fail "JSON Schema"; fi
import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))
EOF
fi

# The planner plans from it, scaled by its runtime_calibration.
expect_exit 0 "runtime: the profile's runtime_calibration scales" -- "$PD2BW" plan --profile "$TMP/small.json" \
  --nodes 1 --gpus-per-node 2 --device-memory 64MiB --reserve 0 --global-batch 8 -o "$TMP/small.plan.json"
grep -q "chosen:" "$TMP/err" && ok || fail "plan did not choose"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/small.plan.json"

# -o - writes the profile to stdout and nothing else there; -q prints nothing on stderr.
# --no-runtime-calibration leaves the calibration out, says so in the notes, and plan says so too.
"$PD2BW" profile "${SMALL[@]}" --microbatch 1 --no-runtime-calibration -o - -q >"$TMP/stdout.json" 2>"$TMP/quiet.err"
if "$PD2BW" validate "$TMP/stdout.json" >/dev/null 2>&1; then ok; else fail "-o - did not write a valid profile"; fi
if [ ! -s "$TMP/quiet.err" ]; then ok; else fail "-q printed on stderr"; fi
if "$PY" - "$TMP/stdout.json" <<'EOF'; then ok; else fail "--no-runtime-calibration: the field or the note"; fi
import json, sys
p = json.load(open(sys.argv[1]))
assert "runtime_calibration" not in p, p["runtime_calibration"]
assert "runtime_calibration: not measured" in p["provenance"]["notes"], p["provenance"]["notes"]
EOF
expect_exit 0 "note: the profile has no runtime_calibration" -- "$PD2BW" plan --profile "$TMP/stdout.json" --nodes 1 \
  --gpus-per-node 2 --device-memory 64MiB --reserve 0 --global-batch 8 -o "$TMP/uncalibrated.plan.json"

# Bad flags: exit 2 with a message, before any measurement.
expect_exit 2 "does not divide" -- "$PD2BW" profile --heads 3 -o "$TMP/x.json"
expect_exit 2 "must be > 0" -- "$PD2BW" profile --d-model 0 -o "$TMP/x.json"
expect_exit 2 "must be > 0" -- "$PD2BW" profile --iters 0 -o "$TMP/x.json"
expect_exit 2 "strictly increasing" -- "$PD2BW" profile --microbatch 4,2 -o "$TMP/x.json"
expect_exit 2 "comma-separated" -- "$PD2BW" profile --microbatch 1,two -o "$TMP/x.json"
expect_exit 2 "unknown model family .t5." -- "$PD2BW" profile --model t5 -o "$TMP/x.json"
expect_exit 2 "--ln is bert.s option" -- "$PD2BW" profile --ln post -o "$TMP/x.json"
expect_exit 2 "must be cpu or cuda" -- "$PD2BW" profile --device tpu -o "$TMP/x.json"
expect_exit 2 "bf16 is not supported on the CPU" -- "$PD2BW" profile --dtype bf16 -o "$TMP/x.json"
expect_exit 2 "link-max-bytes" -- "$PD2BW" profile --link-max-bytes 12XB -o "$TMP/x.json"
expect_exit 2 "link-ranks" -- "$PD2BW" profile --link-ranks 1 -o "$TMP/x.json"
if [ ! -e "$TMP/x.json" ]; then ok; else fail "a refused command wrote a file"; fi
finish
