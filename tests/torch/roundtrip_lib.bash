# Helpers of the pd2bw-torch round-trip tests (tests/cli/torch_roundtrip*.sh), sourced after
# tests/cli/lib.bash: the venv check (exit 77 without it), prepare (profile, plan, export, pd2bw train) and
# roundtrip (torchrun pd2bw-torch run from pd2bw's step-1 checkpoint, compared with pd2bw's steps 2..4).
VENV="${PD2BW_TORCH_VENV:-$HOME/.cache/pd2bw/torch-venv}"
if [ ! -x "$VENV/bin/python" ] || [ ! -x "$VENV/bin/torchrun" ]; then
  echo "skipped: no PyTorch venv with torchrun at $VENV (tools/setup makes it; or set PD2BW_TORCH_VENV)"
  exit 77
fi
if ! "$VENV/bin/python" -c 'import torch.distributed.pipelining, safetensors, numpy' 2>/dev/null; then
  echo "skipped: $VENV/bin/python cannot import torch.distributed.pipelining, safetensors and numpy"
  exit 77
fi
export PD2BW_TORCH_VENV="$VENV" OMP_NUM_THREADS=1
RUN="$SRC/tools/pd2bw-torch"
cp "$SRC/README.md" "$TMP/corpus.txt"  # any text: pd2bw's built-in corpus is inside the pd2bw binary only

# small_profile OUT [FLAGS]: pd2bw profile of the 32-wide GPT ($BLOCKS blocks, default 2) with 16-token
# sequences (quick).
small_profile() {
  local out="$1"
  shift
  "$PD2BW" profile --blocks "${BLOCKS:-2}" --d-model 32 --heads 2 --seq 16 --microbatch 2 --warmup 1 --iters 1 \
    --link-ranks 2 --link-max-bytes 16KiB "$@" -o "$out" -q || fail "pd2bw profile $*"
}

# prepare NAME PROFILE PLAN_FLAGS: plan the profile (b = 2; PLAN_FLAGS: the schedule and the shape, by
# default d = 2, w = 1, m = 4), export it and train 4 steps in double, a checkpoint after each.
prepare() {
  local name="$1" profile="$2" plflags="$3" d="$TMP/$1"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  "$PD2BW" plan --profile "$profile" --nodes 1 --microbatch 2 ${SHAPE:---gpus-per-node 2 --depth 2 --width 1 \
    --global-batch 8} $plflags -o "$d/plan.json" -q || fail "$name: plan"
  "$PD2BW" export --to torch --plan "$d/plan.json" -o "$d/export" >"$d/export.out" || fail "$name: export"
  "$PD2BW" train --plan "$d/plan.json" --steps 4 --dtype double --data "$TMP/corpus.txt" --checkpoint-dir "$d/ck" \
    --checkpoint-every 1 --keep 10 --log "$d/pd2bw.jsonl" -q || fail "$name: pd2bw train"
}

# launch NAME [PROCESSES]: starts torchrun pd2bw-torch run in the background, from pd2bw's step-1
# checkpoint to step 4 (PROCESSES: the plan's ranks, default 2); check NAME waits for it and compares it
# with pd2bw's steps 2..4. Runs launched together overlap their start-up (mostly importing torch).
declare -A TORCHRUN_PID
launch() {
  local name="$1" d="$TMP/$1"
  "$VENV/bin/torchrun" --standalone --nproc-per-node "${2:-2}" "$RUN" run --plan "$d/plan.json" \
    --split "$d/export.json" --schedule-csv "$d/export.csv" --checkpoint "$d/ck/step-000001" --steps 4 \
    --metrics-log "$d/torch.jsonl" --save-dir "$d/torch-out" >"$d/torchrun.out" 2>&1 &
  TORCHRUN_PID[$name]=$!
}
check() {
  local name="$1" d="$TMP/$1"
  if wait "${TORCHRUN_PID[$name]}"; then
    ok
  else
    fail "$name: torchrun pd2bw-torch run"; grep -v '^W[0-9]' "$d/torchrun.out" | tail -8 >&2; return
  fi
  if "$VENV/bin/python" "$SRC/tests/torch/compare_torch_run.py" "$d/pd2bw.jsonl" "$d/torch.jsonl" \
      "$d/ck/step-000004" "$d/torch-out" 2 4; then ok; else fail "$name: torch differs from pd2bw train"; fi
}
