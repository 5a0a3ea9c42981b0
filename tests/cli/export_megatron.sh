#!/usr/bin/env bash
# `pd2bw export --to megatron`: the Megatron-LM arguments of the 3.8B example plans on 64 GPUs (flush, 2bw
# as flush, interleaved; an uneven split, a layout, recompute on every stage) and of the tiny GPT (an even
# split, virtual stages) follow Megatron's documented rules and place the plan's blocks
# (tests/cli/export_check.py). Then the errors:
# schedules Megatron lacks (zb-h1, zb-v, gpipe), 2bw without --as-flush, recompute on some stages only.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
CHECK="$(dirname "$0")/export_check.py"
CLUSTER=(--nodes 8 --gpus-per-node 8 --intra-gbps 150 --inter-gbps 25)
C="${CLUSTER[*]}"
TINY="--profile $SRC/schemas/examples/gpt-tiny.profile.json --nodes 1"

# check NAME PLAN_FLAGS [EXPORT_FLAGS]: plan, export, check the arguments against the plan.
check() {
  local name="$1" pflags="$2" eflags="${3:-}" d="$TMP/$1"
  mkdir -p "$d"
  # shellcheck disable=SC2086
  "$PD2BW" plan $pflags -q -o "$d/plan.json" || { fail "$name: plan"; return; }
  # shellcheck disable=SC2086
  "$PD2BW" export --plan "$d/plan.json" --to megatron -o "$d/args" $eflags >"$d/stdout" \
    || { fail "$name: export"; return; }
  if "$PY" "$CHECK" megatron "$d/plan.json" "$d/args" "$d/stdout"; then ok; else fail "$name"; fi
}

check flush "$C --device-memory 16GiB --schedule flush --recompute always"
check 2bw-as-flush "$C --device-memory 16GiB --schedule 2bw --recompute always" --as-flush
check interleaved "$C --device-memory 16GiB --schedule interleaved --recompute always"
check no-recompute "$C --schedule flush --recompute never --device-memory 80GiB --global-batch 64"
# Megatron's even split, with and without virtual stages (the tiny GPT: 4 blocks).
check tiny-even "$TINY --gpus-per-node 4 --depth 2 --width 2 --schedule flush"
check tiny-vpp "$TINY --gpus-per-node 2 --depth 2 --width 1 --schedule interleaved --chunks 2"
grep -q "num-virtual-stages-per-pipeline-rank 2" "$TMP/tiny-vpp/args" && ok || fail "tiny-vpp: no virtual stages"
grep -q "flush plan of" "$TMP/2bw-as-flush/stdout" && ok || fail "--as-flush output does not say flush"

# Errors.
"$PD2BW" plan "${CLUSTER[@]}" --device-memory 16GiB --schedule zb-h1 -q -o "$TMP/zb-h1.json" || fail "plan zb-h1"
expect_exit 2 "cannot run the zb-h1 schedule" -- "$PD2BW" export --plan "$TMP/zb-h1.json" --to megatron
"$PD2BW" plan "${CLUSTER[@]}" --device-memory 16GiB --schedule zb-v -q -o "$TMP/zb-v.json" || fail "plan zb-v"
expect_exit 2 "cannot run the zb-v schedule" -- "$PD2BW" export --plan "$TMP/zb-v.json" --to megatron
expect_exit 2 "chunks per rank" -- "$PD2BW" export --plan "$TMP/zb-v.json" --to megatron --as-flush
"$PD2BW" plan "${CLUSTER[@]}" --device-memory 16GiB --schedule gpipe -q -o "$TMP/gpipe.json" || fail "plan gpipe"
expect_exit 2 "no GPipe schedule" -- "$PD2BW" export --plan "$TMP/gpipe.json" --to megatron
expect_exit 2 "no engine but pd2bw" -- "$PD2BW" export --plan "$TMP/2bw-as-flush/plan.json" --to megatron
json_edit "$TMP/flush/plan.json" "$TMP/some.json" 'd["stages"][-1]["recompute"] = False'
expect_exit 2 "recomputes activations on stages .* but not on 7" -- \
  "$PD2BW" export --plan "$TMP/some.json" --to megatron -o "$TMP/e1"
[ ! -e "$TMP/e1" ] && ok || fail "arguments written on error"
finish
