#!/usr/bin/env bash
# `pd2bw plan` -> `pd2bw train` end to end on the small CPU model: metrics JSONL, checkpoints, a resume that
# continues bit-identically (same losses as an uninterrupted run), and bad input that stops before the
# first step without overwriting anything.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
P="$SRC/schemas/examples/gpt-tiny.profile.json"
PLAN="$TMP/plan.json"
# 4 MiB per rank forces a pipeline: 2 stages x 2 replicas.
expect_exit 0 "chosen: 2bw" -- "$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 4 --device-memory 4MiB \
  --reserve 0 --global-batch 16 -o "$PLAN"
grep -q '"depth": 2' "$PLAN" && ok || fail "the tiny plan is not a 2-stage pipeline"

expect_exit 0 "done: steps 1-6" -- "$PD2BW" train --plan "$PLAN" --steps 6 --log "$TMP/whole.jsonl"
expect_exit 0 "checkpoint: step 3" -- "$PD2BW" train --plan "$PLAN" --steps 6 --stop-after 3 \
  --log "$TMP/parts.jsonl" --checkpoint-dir "$TMP/ck" --checkpoint-every 2
# Each save is a step directory of its own; `latest` names the newest, --keep (2) leaves two.
[ -s "$TMP/ck/step-000003/manifest.json" ] && [ -s "$TMP/ck/step-000003/stage-000.safetensors" ] &&
  [ -s "$TMP/ck/step-000002/manifest.json" ] && [ "$(cat "$TMP/ck/latest")" = "step-000003" ] && ok ||
  fail "checkpoint files missing"
expect_exit 0 "done: steps 4-6" -- "$PD2BW" train --plan "$PLAN" --steps 6 --log "$TMP/parts.jsonl" \
  --checkpoint-dir "$TMP/ck" --resume
if "$PY" - "$TMP/whole.jsonl" "$TMP/parts.jsonl" <<'PYEOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in a] == list(range(1, 7)) and [r["step"] for r in b] == list(range(1, 7)), (a, b)
assert [r["loss"] for r in a] == [r["loss"] for r in b], "resumed losses differ"
assert a[-1]["loss"] < a[0]["loss"], "the loss did not fall"
PYEOF
then ok; else fail "resume is not bit-identical"; fi

# bf16 compute (fp32 masters): the note says so, and a checkpointed bf16 run resumes bit-identically
# (the older 2BW version is stored widened to fp32 and narrowed back exactly).
expect_exit 0 "note: the plan was made for fp32 but --dtype is bf16" -- "$PD2BW" train --plan "$PLAN" --steps 6 \
  --dtype bf16 --log "$TMP/bf16-whole.jsonl"
expect_exit 0 "checkpoint: step 3" -- "$PD2BW" train --plan "$PLAN" --steps 6 --stop-after 3 --dtype bf16 \
  --log "$TMP/bf16-parts.jsonl" --checkpoint-dir "$TMP/ck-bf16"
expect_exit 0 "done: steps 4-6" -- "$PD2BW" train --plan "$PLAN" --steps 6 --dtype bf16 \
  --log "$TMP/bf16-parts.jsonl" --checkpoint-dir "$TMP/ck-bf16" --resume
if "$PY" - "$TMP/bf16-whole.jsonl" "$TMP/bf16-parts.jsonl" "$TMP/whole.jsonl" <<'PYEOF'
import json, sys
a, b, f = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
assert [r["loss"] for r in a] == [r["loss"] for r in b], "resumed bf16 losses differ"
assert [r["loss"] for r in a] != [r["loss"] for r in f], "bf16 gave the fp32 losses: it did not run in bf16"
assert abs(a[-1]["loss"] / f[-1]["loss"] - 1) < 0.02, (a[-1], f[-1])
PYEOF
then ok; else fail "bf16 resume is not bit-identical or bf16 is far from fp32"; fi
expect_exit 2 "written with --dtype bf16" -- "$PD2BW" train --plan "$PLAN" --steps 9 --checkpoint-dir "$TMP/ck-bf16" --resume

# Tied embeddings from the profile, with the embedding and the head on different stages.
"$PY" - "$P" "$TMP/tied.profile.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["model"]["tie_embeddings"] = True
json.dump(d, open(sys.argv[2], "w"))
PYEOF
expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/tied.profile.json" --nodes 1 --gpus-per-node 2 --depth 2 \
  --global-batch 8 -o "$TMP/tied.plan.json"
grep -q '"tie_embeddings": true' "$TMP/tied.plan.json" && ok || fail "the plan lost tie_embeddings"
expect_exit 0 "done: steps 1-3" -- "$PD2BW" train --plan "$TMP/tied.plan.json" --steps 3

# Bad input: errors before the first step, exit 2, nothing overwritten.
cp "$TMP/ck/step-000006/manifest.json" "$TMP/manifest.before"
expect_exit 2 "already holds a checkpoint" -- "$PD2BW" train --plan "$PLAN" --steps 9 --checkpoint-dir "$TMP/ck"
expect_exit 0 "the run is complete" -- "$PD2BW" train --plan "$PLAN" --steps 6 --checkpoint-dir "$TMP/ck" --resume
expect_exit 2 "dtype" -- "$PD2BW" train --plan "$PLAN" --steps 9 --checkpoint-dir "$TMP/ck" --resume --dtype double
expect_exit 2 "seed" -- "$PD2BW" train --plan "$PLAN" --steps 9 --checkpoint-dir "$TMP/ck" --resume --seed 7
"$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 2 --device-memory 4MiB --reserve 0 --global-batch 16 \
  -o "$TMP/other.json" -q
expect_exit 2 "plan sha256" -- "$PD2BW" train --plan "$TMP/other.json" --steps 9 --checkpoint-dir "$TMP/ck" --resume
printf 'garbage' | dd of="$TMP/ck/step-000006/stage-001.safetensors" bs=1 seek=100 conv=notrunc 2>"$TMP/dd.err"
expect_exit 2 "corrupt checkpoint" -- "$PD2BW" train --plan "$PLAN" --steps 9 --checkpoint-dir "$TMP/ck" --resume
cmp -s "$TMP/ck/step-000006/manifest.json" "$TMP/manifest.before" && ok || fail "a failed run changed the checkpoint"
expect_exit 2 "vocabulary" -- "$PD2BW" train --plan "$SRC/schemas/examples/../../tests/schema/fixtures/writer.plan.json" --steps 1
"$PY" - "$PLAN" "$TMP/blocks.plan.json" <<'PYEOF'
import json, sys
p = json.load(open(sys.argv[1]))
p["model"]["blocks"] = 5
json.dump(p, open(sys.argv[2], "w"))
PYEOF
expect_exit 2 "/model/blocks: is 5 but a gpt model of /num_layers 6" -- "$PD2BW" train --plan "$TMP/blocks.plan.json" --steps 1
printf 'short' >"$TMP/short.txt"
expect_exit 2 "tokens" -- "$PD2BW" train --plan "$PLAN" --data "$TMP/short.txt" --steps 1
expect_exit 2 "error:" -- "$PD2BW" train --plan "$PLAN" --steps 0
expect_exit 2 "error:" -- "$PD2BW" train --plan "$PLAN" --dtype half
expect_exit 2 "error:" -- "$PD2BW" train --plan "$TMP/missing.json"
expect_exit 2 "error:" -- "$PD2BW" train --plan "$P"
"$PD2BW" plan --nodes 8 --gpus-per-node 8 --device-memory 16GiB -o "$TMP/big.json" -q
expect_exit 2 "host memory" -- "$PD2BW" train --plan "$TMP/big.json" --steps 1 --device cpu
# A GPU's plan trains on cuda by default; here that is refused before anything starts (no device, no cuda
# in this build, or 64 ranks that cannot share one GPU).
expect_exit 2 "GPU|CUDA|cuda" -- "$PD2BW" train --plan "$TMP/big.json" --steps 1
expect_exit 2 "must be cpu or cuda" -- "$PD2BW" train --plan "$PLAN" --steps 1 --device tpu
finish
