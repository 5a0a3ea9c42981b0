#!/usr/bin/env bash
# Errors quote at most a few hundred characters of any input (issue 28): a plan whose schedule is a
# 10 MiB string and a 100,000-character flag value each give a short `pd2bw: error:` that says how many
# characters it left out. So does what plan and train print about a model with a 1 MiB name.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"

"$PD2BW" plan --profile "$SRC/schemas/examples/gpt-tiny.profile.json" --nodes 1 --gpus-per-node 2 --device-memory 4MiB \
  --reserve 0 --global-batch 4 -o "$TMP/plan.json" -q || fail "plan"
"$PY" - "$TMP/plan.json" "$TMP" <<'PYEOF'
import json, sys
plan, tmp = sys.argv[1:3]
d = json.load(open(plan))
d["schedule"] = "x" * (10 << 20)
json.dump(d, open(tmp + "/huge-schedule.plan.json", "w"))
PYEOF
short_error() {  # short_error LABEL CMD...: exit 2, a bounded message that counts what it left out
  local label="$1"
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$? bytes
  bytes=$(wc -c <"$TMP/err")
  [ "$rc" = 2 ] && ok || fail "$label: exit $rc, wanted 2"
  [ "$bytes" -lt 8000 ] && ok || fail "$label: the error is $bytes bytes long"
  grep -q "^pd2bw: error: .*characters\]" "$TMP/err" && ok || { fail "$label: no count of what was left out"; head -c 600 "$TMP/err" >&2; }
}
short_error "validate" "$PD2BW" validate "$TMP/huge-schedule.plan.json"
short_error "simulate" "$PD2BW" simulate --plan "$TMP/huge-schedule.plan.json"
short_error "flag" "$PD2BW" plan --schedule "$("$PY" -c 'print("s" * 100000)')" -o "$TMP/p.json"

# What a command prints about its inputs is bounded too: a profile whose model name is 1 MiB plans, and the
# plan trains, each printing a few kilobytes at most.
"$PY" - "$SRC/schemas/examples/gpt-tiny.profile.json" "$TMP/long-name.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["model"]["name"] = "n" * (1 << 20)
json.dump(d, open(sys.argv[2], "w"))
PYEOF
short_output() {  # short_output LABEL CMD...: exit 0 and under 8 kB on stderr
  local label="$1"
  shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$? bytes
  bytes=$(wc -c <"$TMP/err")
  [ "$rc" = 0 ] && ok || { fail "$label: exit $rc, wanted 0"; head -c 600 "$TMP/err" >&2; }
  [ "$bytes" -lt 8000 ] && ok || fail "$label: printed $bytes bytes"
}
short_output "plan" "$PD2BW" plan --profile "$TMP/long-name.json" --nodes 1 --gpus-per-node 2 --device-memory 4MiB \
  --reserve 0 --global-batch 4 -o "$TMP/long.plan.json"
short_output "train" "$PD2BW" train --plan "$TMP/long.plan.json" --steps 1
finish
