#!/usr/bin/env bash
# The cpu backend's kernel levels end to end: --version names the level, PD2BW_CPU_KERNELS forces one
# (an unknown value or a level the CPU lacks stops with a usage error), and the baseline and the
# default (the best this CPU has) both train the small model, each twice to the same bits, to losses
# within 1e-4 relative of each other (the levels round their GEMMs and the tanh GELU differently).
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
P="$SRC/schemas/examples/gpt-tiny.profile.json"
PLAN="$TMP/plan.json"

"$PD2BW" --version >"$TMP/version" 2>&1
grep -qE "^cpu kernels: (baseline|avx2|avx512) \(best of this CPU\)" "$TMP/version" && ok ||
  fail "--version does not name the cpu kernel level: $(cat "$TMP/version")"
PD2BW_CPU_KERNELS=baseline "$PD2BW" --version 2>&1 | grep -q "^cpu kernels: baseline (PD2BW_CPU_KERNELS=baseline)" &&
  ok || fail "--version does not show the forced level"
expect_exit 0 "" -- "$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 2 --device-memory 4GiB \
  --global-batch 8 --depth 2 --width 1 --microbatch 2 -o "$PLAN" -q
PD2BW_CPU_KERNELS=sse9 expect_exit 2 "pd2bw: error: PD2BW_CPU_KERNELS=sse9 is not a CPU kernel level" -- \
  "$PD2BW" train --plan "$PLAN" --steps 1 -q
if ! grep -q "avx512" "$TMP/version"; then
  PD2BW_CPU_KERNELS=avx512 expect_exit 2 "lacks the instructions" -- "$PD2BW" train --plan "$PLAN" --steps 1 -q
fi

for run in base-1 base-2 auto-1 auto-2; do
  level=auto
  [ "${run%-*}" = base ] && level=baseline
  PD2BW_CPU_KERNELS=$level expect_exit 0 "" -- "$PD2BW" train --plan "$PLAN" --steps 6 --report "$TMP/$run.json" -q
done
if "$PY" - "$TMP" "$(sed -n 's/^cpu kernels: \([a-z0-9]*\).*/\1/p' "$TMP/version")" <<'PYEOF'
import json, sys
tmp, best = sys.argv[1], sys.argv[2]
loss = {r: json.load(open(f"{tmp}/{r}.json"))["losses"] for r in ("base-1", "base-2", "auto-1", "auto-2")}
assert len(loss["base-1"]) == 6, loss
assert loss["base-1"] == loss["base-2"], "the baseline level does not repeat itself"
assert loss["auto-1"] == loss["auto-2"], "the default level does not repeat itself"
if best != "baseline":
    assert loss["auto-1"] != loss["base-1"], "the default level gave the baseline's bits: it did not run"
for a, b in zip(loss["base-1"], loss["auto-1"]):
    assert abs(a - b) <= 1e-4 * abs(a), (loss["base-1"], loss["auto-1"])
assert loss["auto-1"][-1] < loss["auto-1"][0], "the loss did not fall"
PYEOF
then ok; else fail "the kernel levels' losses differ beyond 1e-4 or do not repeat"; fi

finish
