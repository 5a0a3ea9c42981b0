#!/usr/bin/env bash
# BERT's path end to end on the CPU: `pd2bw profile --model bert` -> `pd2bw plan` (a forced 2-stage
# pipeline) -> `pd2bw train` for 60 steps of masked-LM on the built-in corpus. The loss starts near
# ln(vocab) and must fall by more than a third; every progress line and log record says how many masked
# positions the loss counted; the prediction check is printed. Then bad input: a mask rate outside (0, 1),
# a vocabulary without room for the special tokens, and a GPT checkpoint resumed under a BERT plan (and back).
# Under mpirun (where there is one), 2bw and zb-h1 plans train bit-identically to the threads run.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"

expect_exit 0 "wrote $TMP/bert.json" -- "$PD2BW" profile --model bert --blocks 2 --d-model 32 --heads 4 --seq 32 \
  --microbatch 1,2,4 --iters 3 --no-runtime-calibration -o "$TMP/bert.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/bert.json"
expect_exit 0 "chosen:" -- "$PD2BW" plan --profile "$TMP/bert.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
  --device-memory 64MiB --reserve 0 --global-batch 16 -o "$TMP/plan.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/plan.json"
expect_exit 0 "prediction check" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 60 --log "$TMP/metrics.jsonl"
if grep -qE "^step +1/60 \| loss [0-9.]+ \(masked [0-9]+\)" "$TMP/err"; then ok; else fail "progress line lacks the masked count"; fi
if "$PY" - "$TMP/bert.json" "$TMP/plan.json" "$TMP/metrics.jsonl" <<'PYEOF'
import json, math, sys
profile, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert profile["model"]["kind"] == "bert" and profile["model"]["ln"] == "post", profile["model"]
assert profile["model"]["vocab"] == 260 and profile["model"]["tie_embeddings"] is True, profile["model"]
assert plan["model"]["kind"] == "bert" and plan["depth"] == 2, (plan["model"], plan["depth"])
records = [json.loads(line) for line in open(sys.argv[3])]
assert [r["step"] for r in records] == list(range(1, 61))
# Masked-LM over 15% of each row's content: about 0.15 x (32 - 3) x 16 rows per step.
assert all(50 <= r["masked_tokens"] <= 80 for r in records), [r["masked_tokens"] for r in records]
first, last = records[0]["loss"], sum(r["loss"] for r in records[-5:]) / 5
assert abs(first - math.log(260)) < 0.5, first
assert last < first * 2 / 3, (first, last)
print("bert loss %.3f -> %.3f" % (first, last))
PYEOF
then ok; else fail "bert profile -> plan -> train files or loss"; fi

# Under mpirun, one process per rank: the same losses and final weights, bit for bit, as the threads run,
# for the 2bw plan and a zb-h1 plan of the same profile.
if command -v mpirun >/dev/null && "$PD2BW" --version | grep -q "transports:.*mpi"; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/bert.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
    --schedule zb-h1 --global-batch 8 -o "$TMP/zb.json"
  for name in plan zb; do
    expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/$name.json" --steps 4 -q --log "$TMP/$name.t.jsonl" \
      --checkpoint-dir "$TMP/$name.t.ck"
    expect_exit 0 "" -- mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$PD2BW" train \
      --plan "$TMP/$name.json" --steps 4 -q --log "$TMP/$name.m.jsonl" --checkpoint-dir "$TMP/$name.m.ck"
    if cmp -s <(cut -d, -f1-2 "$TMP/$name.t.jsonl") <(cut -d, -f1-2 "$TMP/$name.m.jsonl") &&
       [ -s "$TMP/$name.t.jsonl" ]; then ok; else fail "$name: mpirun losses differ from threads"; fi
    if cmp -s <(cd "$TMP/$name.t.ck/step-000004" && sha256sum stage-*.safetensors) \
              <(cd "$TMP/$name.m.ck/step-000004" && sha256sum stage-*.safetensors); then ok
    else fail "$name: mpirun final weights differ from threads"; fi
  done
else
  echo "no mpirun or no MPI build: the mpirun part is skipped"
fi

expect_exit 2 "mask-rate must be in \(0, 1\)" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 2 --mask-rate 0
expect_exit 2 "mask-rate must be in \(0, 1\)" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 2 --mask-rate 1.5
json_edit "$TMP/bert.json" "$TMP/bert256.json" 'd["model"]["vocab"] = 256'
expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/bert256.json" --nodes 1 --gpus-per-node 1 --global-batch 4 \
  -o "$TMP/plan256.json"
expect_exit 2 "special tokens" -- "$PD2BW" train --plan "$TMP/plan256.json" --steps 2

# A GPT's checkpoint directory given to the BERT plan's --resume.
micro_profile "$TMP/gpt.json"
expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/gpt.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
  --global-batch 4 -o "$TMP/gpt-plan.json"
expect_exit 0 "checkpoint" -- "$PD2BW" train --plan "$TMP/gpt-plan.json" --steps 2 --checkpoint-dir "$TMP/ckpt"
expect_exit 2 "holds a gpt model, but this plan.s model is bert" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 4 \
  --checkpoint-dir "$TMP/ckpt" --resume
# And back: a BERT's checkpoint directory given to the GPT plan's --resume.
expect_exit 0 "checkpoint" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 2 --checkpoint-dir "$TMP/ckpt-bert"
expect_exit 2 "holds a bert model, but this plan.s model is gpt" -- "$PD2BW" train --plan "$TMP/gpt-plan.json" \
  --steps 4 --checkpoint-dir "$TMP/ckpt-bert" --resume
finish
