#!/usr/bin/env bash
# `pd2bw export --to torch`: for plans of every schedule torch can run (and a 2bw plan exported with
# --as-flush), torch's own _load_csv reads the CSV, each rank's actions are the generator's in order, every
# stage's F and B (or I and W) appear once per microbatch, dependencies hold across ranks in time, and the
# split JSON is the plan's (tests/cli/export_check.py). Then the errors: 2bw without --as-flush, a profile
# whose layer count is not the plan's, no -o. Skipped (77) where the PyTorch venv is missing.
source "$(dirname "$0")/lib.bash"
VENV="${PD2BW_TORCH_VENV:-$HOME/.cache/pd2bw/torch-venv}"
if ! "$VENV/bin/python" -c 'import torch.distributed.pipelining' 2>/dev/null; then
  echo "skipped: no PyTorch venv with torch.distributed.pipelining at $VENV (tools/setup makes it)"
  exit 77
fi
PROFILE="$SRC/schemas/examples/gpt-3.8b.profile.json"
CHECK="$(dirname "$0")/export_check.py"

# prepare NAME PLAN_FLAGS [EXPORT_FLAGS]: plan on the 3.8B example (8 GPUs), export, and replay the plan's
# op lists (for 2bw --as-flush: the flush plan's) in the simulator; the checks run once for all, below.
CASES=()
prepare() {
  local name="$1" pflags="$2" eflags="${3:-}" d="$TMP/$1"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  "$PD2BW" plan --profile "$PROFILE" --nodes 1 --gpus-per-node 8 --device-memory 80GiB --global-batch 64 $pflags \
    -q -o "$d/plan.json" || { fail "$name: plan"; return; }
  # shellcheck disable=SC2086
  "$PD2BW" export --plan "$d/plan.json" --to torch --profile "$PROFILE" -o "$d/out.csv" $eflags >"$d/stdout" \
    || { fail "$name: export"; return; }
  grep -q "^exported .*out.csv" "$d/stdout" && ok || fail "$name: no summary line"
  local plan="$d/plan.json"
  if [ -n "$eflags" ]; then
    json_edit "$d/plan.json" "$d/flush.json" 'd["schedule"] = "flush"'
    plan="$d/flush.json"
  fi
  "$PD2BW" simulate --plan "$plan" --profile "$PROFILE" --steps 1 --trace "$d/trace.json" -q \
    || { fail "$name: simulate"; return; }
  CASES+=("$plan" "$d/trace.json" "$d/out")
}

prepare flush "--schedule flush"
prepare gpipe "--schedule gpipe"
prepare zb-h1 "--schedule zb-h1"
prepare zb-h2 "--schedule zb-h2"
prepare zb-v "--schedule zb-v"
prepare interleaved "--schedule interleaved --depth 4 --width 2 --microbatch 8 --chunks 2"
prepare interleaved-m=d "--schedule interleaved --depth 4 --width 2 --microbatch 8 --chunks 4"
prepare 2bw-as-flush "--schedule 2bw --depth 4 --width 2" --as-flush
if "$VENV/bin/python" "$CHECK" torch "$PROFILE" "${CASES[@]}"; then ok; else fail "export_check.py torch"; fi
grep -q "flush plan of .* 2bw split" "$TMP/2bw-as-flush/stdout" && ok || fail "--as-flush output does not say flush"
grep -q '"exported_as_flush": true' "$TMP/2bw-as-flush/out.json" && ok || fail "--as-flush not in the split"

# Errors.
P2="$TMP/2bw-as-flush/plan.json"
expect_exit 2 "no engine but pd2bw.*" -- "$PD2BW" export --plan "$P2" --to torch -o "$TMP/e1"
grep -q -- "--as-flush" "$TMP/err" && ok || fail "2bw error does not name --as-flush"
[ ! -e "$TMP/e1.csv" ] && [ ! -e "$TMP/e1.json" ] && ok || fail "files written on error"
json_edit "$PROFILE" "$TMP/short.json" 'del d["layers"][1]; d["model"]["blocks"] -= 1'
expect_exit 2 "lists 33 layers, but .* splits a model of 34 layers" -- \
  "$PD2BW" export --plan "$TMP/flush/plan.json" --to torch --profile "$TMP/short.json" -o "$TMP/e2"
expect_exit 2 "needs -o" -- "$PD2BW" export --plan "$TMP/flush/plan.json" --to torch
expect_exit 2 "--to" -- "$PD2BW" export --plan "$TMP/flush/plan.json" --to deepspeed -o "$TMP/e3"
finish
