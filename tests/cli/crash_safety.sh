#!/usr/bin/env bash
# Crash safety of checkpoints: training is killed (SIGKILL, through PD2BW_FAULT) at named points - in a
# step, between the files of a save (before and after each shard, before and after the manifest, after
# the `latest` swap, while old checkpoints are removed), after a metrics record, while resuming - and
# every run resumed from what is left must end bit-identical to an uninterrupted run: the same loss at
# every step, each step logged once, and the same final weights. After every kill the directory still
# holds the last checkpoint committed before it.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
# A small model keeps the many runs quick; planned as d = 2 stages x w = 2 replicas: ranks [[0, 1],
# [2, 3]], and rank 2 writes stage 1's shard.
P="$TMP/micro.profile.json"
micro_profile "$P"
PLAN="$TMP/plan.json"
"$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 4 --depth 2 --width 2 --global-batch 8 -o "$PLAN" -q
"$PY" -c "import json,sys; p=json.load(open(sys.argv[1])); assert [s['ranks'] for s in p['stages']] == [[0, 1], [2, 3]], p['stages']" \
  "$PLAN" && ok || fail "the plan is not the 2 x 2 grid the fault points name"
STEPS=6
train() { "$PD2BW" train --plan "$PLAN" --steps "$STEPS" --checkpoint-every 2 --keep 2 -q "$@"; }

train --checkpoint-dir "$TMP/ref" --log "$TMP/ref.jsonl" && ok || fail "the uninterrupted run failed"

# final_state DIR: the final checkpoint's stage hashes, one line.
final_state() { "$PY" -c "import json,sys; print(' '.join(s['sha256'] for s in json.load(open(sys.argv[1]))['stages']))" \
  "$1/step-$(printf %06d "$STEPS")/manifest.json"; }
REF_STATE="$(final_state "$TMP/ref")"

# committed DIR: the newest step directory with a manifest (0 when none).
committed() {
  local best=0 d
  for d in "$1"/step-*/manifest.json; do
    [ -e "$d" ] || continue
    d="${d%/manifest.json}"; d="${d##*/step-}"; d=$((10#$d))
    [ "$d" -gt "$best" ] && best="$d"
  done
  echo "$best"
}

# trial NAME FAULT [STOP_FIRST]: with STOP_FIRST, a clean run stops after that many steps first and the
# fault strikes the resumed run. Then resumes (or starts over when nothing was committed) to the end.
trial() {
  local name="$1" fault="$2" stop_first="${3:-}" dir="$TMP/$1" log="$TMP/$1.jsonl" rc before after
  if [ -n "$stop_first" ]; then
    train --checkpoint-dir "$dir" --log "$log" --stop-after "$stop_first" || { fail "$name: the first run failed"; return; }
  fi
  before="$(committed "$dir")"
  local resume=()
  [ -n "$stop_first" ] && resume=(--resume)
  PD2BW_FAULT="$fault:kill" train --checkpoint-dir "$dir" --log "$log" "${resume[@]}" 2>"$TMP/$name.err"
  rc=$?
  [ "$rc" = 137 ] || { fail "$name: the fault $fault did not kill the run (exit $rc)"; return; }
  after="$(committed "$dir")"
  [ "$after" -ge "$before" ] || { fail "$name: the kill removed the checkpoint of step $before"; return; }
  if [ "$after" = "$STEPS" ]; then
    # The last save was durable before the kill: nothing is left to train, and the resume exits 0 (the run
    # is complete; -q keeps the note quiet), so a job script that resumes until exit 0 stops here.
    train --checkpoint-dir "$dir" --log "$log" --resume 2>"$TMP/$name.resume.err"
    rc=$?
    [ "$rc" = 0 ] && [ ! -s "$TMP/$name.resume.err" ] ||
      { fail "$name: resuming a finished run gave exit $rc"; return; }
  elif [ "$after" -gt 0 ]; then
    train --checkpoint-dir "$dir" --log "$log" --resume 2>"$TMP/$name.resume.err" ||
      { fail "$name: the resumed run failed"; sed 's/^/  | /' "$TMP/$name.resume.err" >&2; return; }
  else
    train --checkpoint-dir "$dir" --log "$log" 2>"$TMP/$name.resume.err" ||
      { fail "$name: the run started over failed"; sed 's/^/  | /' "$TMP/$name.resume.err" >&2; return; }
  fi
  if ! "$PY" - "$TMP/ref.jsonl" "$log" <<'PYEOF'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in got] == [r["step"] for r in ref], ("steps", [r["step"] for r in got])
assert [r["loss"] for r in got] == [r["loss"] for r in ref], "losses differ"
PYEOF
  then fail "$name: the log is not the uninterrupted run's"; return; fi
  [ "$(final_state "$dir")" = "$REF_STATE" ] || { fail "$name: final weights differ"; return; }
  [ "$(cat "$dir/latest")" = "step-$(printf %06d "$STEPS")" ] || { fail "$name: latest is $(cat "$dir/latest")"; return; }
  ok
}

trial lock        lock:0:0
trial step0       step:0:0
trial step1       step:1:1
trial step2       step:2:2
trial step3       step:3:3
trial step5       step:0:5
trial log2        log:0:2
trial shard_b0    shard-begin:0:2
trial shard_b2    shard-begin:2:2
trial shard0      shard:0:2
trial shard2      shard:2:2
trial manifest2   manifest:0:2
trial commit2     commit:0:2
trial latest2     latest:0:2
trial shard_b4    shard-begin:2:4
trial shard0_4    shard:0:4
trial shard2_4    shard:2:4
trial manifest4   manifest:0:4
trial commit4     commit:0:4
trial latest4     latest:0:4
trial prune6      prune:0:6
trial commit6     commit:0:6
trial resume0     resume:0:2 2
trial resume3     resume:3:4 4
trial resumed_st  step:1:3   2
finish
