#!/usr/bin/env bash
# The CLI's cuda path end to end on the emulated device (the cuda-emu preset): `pd2bw profile --device
# cuda` writes a valid profile whose device says it is emulated; a 2-stage plan trains with `--device
# cuda` to the cpu backend's fp32 losses within 1e-4 (relative); two cuda runs give the same bits; and
# under mpirun the nccl transport gives the mpi transport's losses. The same for a BERT: `pd2bw profile
# --model bert --device cuda` writes a valid profile, and a 2-stage plan trains on cuda to the cpu's
# losses; interleaved 1F1B, ZB-H2 and ZB-V on cuda give flush's losses bit for bit. Sizes are the micro model's (2 blocks, d_model 32): every GPU thread is a fiber here.
# Arguments: the pd2bw binary, the source dir.
source "$2/tests/cli/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"

expect_exit 0 "wrote $TMP/profile.json" -- "$PD2BW" profile --device cuda --blocks 2 --d-model 32 --heads 2 --seq 16 \
  --microbatch 1,2 --warmup 1 --iters 1 --link-ranks 2 --link-max-bytes 64KiB -o "$TMP/profile.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/profile.json"
if "$PY" - "$TMP/profile.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
dev = d["device"]
assert "emulated" in dev["name"], dev
assert dev["memory_bytes"] > 100 * 2**30, dev  # an H200's
PYEOF
then ok; else fail "the profile's device does not say it is emulated"; fi

expect_exit 0 "note: the profile was measured on the emulated CUDA device" -- "$PD2BW" plan --profile "$TMP/profile.json" \
  --nodes 1 --gpus-per-node 2 --global-batch 4 -o "$TMP/from-emulated.json"

micro_profile "$TMP/micro.json"
expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/micro.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
  --global-batch 4 --schedule flush -o "$TMP/plan.json" -q
train() {  # train NAME ARGS...: 3 steps of the plan ($PLAN, default plan.json), losses to $TMP/NAME.jsonl
  local name="$1"
  shift
  expect_exit 0 "" -- "$@" --plan "$TMP/${PLAN:-plan}.json" --steps 3 --log "$TMP/$name.jsonl" -q
}
train cpu "$PD2BW" train --device cpu
train cuda "$PD2BW" train --device cuda
train cuda2 "$PD2BW" train --device cuda
losses() { "$PY" -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1])))' "$1"; }
close_losses() {  # close_losses A B: the same number of steps, each loss within 1e-4 (relative)
  "$PY" - "$(losses "$1")" "$(losses "$2")" <<'PYEOF'
import sys
cpu, cuda = ([float(x) for x in a.split()] for a in sys.argv[1:3])
assert len(cpu) == len(cuda) == 3, (cpu, cuda)
for a, b in zip(cpu, cuda):
    assert abs(a - b) <= 1e-4 * abs(a), (cpu, cuda)
PYEOF
}
close_losses "$TMP/cpu.jsonl" "$TMP/cuda.jsonl" && ok ||
  fail "cuda losses $(losses "$TMP/cuda.jsonl") differ from the cpu's $(losses "$TMP/cpu.jsonl")"
[ "$(losses "$TMP/cuda.jsonl")" = "$(losses "$TMP/cuda2.jsonl")" ] && ok || fail "two cuda runs differ"

# Interleaved 1F1B and ZB-V (2 chunks per rank, a rank's chunks on one device) and ZB-H2 (the backward in
# its input and weight halves, W's deferred) train on cuda to flush's losses bit for bit: the same kernels
# on the same operands, each chunk's gradient summed in microbatch order. (The profile measured above: it
# times the backward in halves, which zb-h2 and zb-v need.)
for s in flush interleaved zb-h2 zb-v; do
  chunks=$(case $s in interleaved | zb-v) echo --chunks 2 ;; esac)
  expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/profile.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
    --global-batch 4 --microbatch 1 --schedule "$s" $chunks -o "$TMP/$s-b1.json" -q
  PLAN="$s-b1" train "$s-b1-cuda" "$PD2BW" train --device cuda
done
for s in interleaved zb-h2 zb-v; do
  [ "$(losses "$TMP/$s-b1-cuda.jsonl")" = "$(losses "$TMP/flush-b1-cuda.jsonl")" ] && ok ||
    fail "$s on cuda: $(losses "$TMP/$s-b1-cuda.jsonl"), flush: $(losses "$TMP/flush-b1-cuda.jsonl")"
done

expect_exit 0 "wrote $TMP/bert.json" -- "$PD2BW" profile --model bert --device cuda --blocks 1 --d-model 32 --heads 2 \
  --seq 16 --microbatch 1 --warmup 1 --iters 1 --link-ranks 2 --link-max-bytes 16KiB -o "$TMP/bert.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/bert.json"
json_edit "$TMP/micro.json" "$TMP/micro-bert.json" 'd["model"].update(kind="bert", ln="post", tie_embeddings=True, vocab=260)'
expect_exit 0 "" -- "$PD2BW" plan --profile "$TMP/micro-bert.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
  --global-batch 4 --schedule 2bw -o "$TMP/bert-plan.json" -q
PLAN=bert-plan train bert-cpu "$PD2BW" train --device cpu
PLAN=bert-plan train bert-cuda "$PD2BW" train --device cuda
close_losses "$TMP/bert-cpu.jsonl" "$TMP/bert-cuda.jsonl" && ok ||
  fail "bert: cuda losses $(losses "$TMP/bert-cuda.jsonl") differ from the cpu's $(losses "$TMP/bert-cpu.jsonl")"

if command -v mpirun >/dev/null && "$PD2BW" --version | grep -q "nccl"; then
  MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
  train mpi "${MPI[@]}" "$PD2BW" train --device cuda --transport mpi
  train nccl "${MPI[@]}" "$PD2BW" train --device cuda --transport nccl
  [ -s "$TMP/nccl.jsonl" ] && [ "$(losses "$TMP/nccl.jsonl")" = "$(losses "$TMP/mpi.jsonl")" ] && ok ||
    fail "nccl losses $(losses "$TMP/nccl.jsonl" 2>/dev/null) differ from mpi's $(losses "$TMP/mpi.jsonl" 2>/dev/null)"
fi
finish
