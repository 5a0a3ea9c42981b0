#!/usr/bin/env bash
# pd2bw under a real mpirun (OpenMPI), one process per rank: the same plans give the same losses and
# final weights, bit for bit, as the threads run; checkpoints resume across the two launchers; a rank
# that fails ends every process quickly and leaves the last checkpoint resumable; a job that does not
# match the plan is refused on every rank before anything is written; `pd2bw profile` measures the
# links between processes and `pd2bw plan` reads them. Skips (77) without mpirun or an MPI build.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
"$PD2BW" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }
# Root in CI, and more ranks than cores; OpenMPI's own allocations are not ours to leak-check.
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
P="$SRC/schemas/examples/gpt-tiny.profile.json"

plan() {  # plan NAME FLAGS...: a plan of the tiny model for 4 devices of 4 MiB
  local name="$1"
  shift
  expect_exit 0 "" -- "$PD2BW" plan -q --profile "$P" --device-memory 4MiB --reserve 0 --global-batch 32 "$@" \
    -o "$TMP/$name.json"
}
plan p22 --nodes 1 --gpus-per-node 4 --depth 2 --width 2
plan f22 --nodes 1 --gpus-per-node 4 --depth 2 --width 2 --schedule flush
plan p41 --nodes 1 --gpus-per-node 4 --depth 4 --width 1
plan n22 --nodes 2 --gpus-per-node 2 --depth 2 --width 2

# same_weights DIR_A DIR_B: the checkpoints' stage files are byte-identical, path by path.
same_weights() {
  (cd "$1" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.a"
  (cd "$2" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.b"
  [ -s "$TMP/w.a" ] && cmp -s "$TMP/w.a" "$TMP/w.b"
}
# same_losses LOG_A LOG_B: the same steps with the same losses, to the last bit.
same_losses() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert a and [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}

# 1. The same plan under mpirun and as threads: losses and final weights bit-identical.
for name in p22 f22 p41; do
  expect_exit 0 "as threads" -- "$PD2BW" train --plan "$TMP/$name.json" --steps 5 --log "$TMP/$name.t.jsonl" \
    --checkpoint-dir "$TMP/$name.t.ck"
  expect_exit 0 "4 ranks as processes \(mpi" -- "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/$name.json" --steps 5 \
    --log "$TMP/$name.m.jsonl" --checkpoint-dir "$TMP/$name.m.ck" --report "$TMP/$name.m.report.json"
  same_losses "$TMP/$name.t.jsonl" "$TMP/$name.m.jsonl" && ok || fail "$name: mpirun losses differ from threads"
  same_weights "$TMP/$name.t.ck" "$TMP/$name.m.ck" && ok || fail "$name: mpirun final weights differ from threads"
  grep -q '"steps_run": 5' "$TMP/$name.m.report.json" && ok || fail "$name: rank 0's report is missing"
done
# Rank 0 alone prints progress: one line per step, not one per rank.
[ "$(grep -c '^step ' "$TMP/err")" = 5 ] && ok || fail "progress lines are not printed once per step"

# 2. Resume across launchers: threads -> mpirun and mpirun -> threads continue the uninterrupted run.
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 6 -q --log "$TMP/whole.jsonl"
expect_exit 0 "checkpoint: step 3" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --stop-after 3 \
  --log "$TMP/tm.jsonl" --checkpoint-dir "$TMP/tm.ck"
expect_exit 0 "done: steps 4-6" -- "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --resume \
  --log "$TMP/tm.jsonl" --checkpoint-dir "$TMP/tm.ck"
same_losses "$TMP/whole.jsonl" "$TMP/tm.jsonl" && ok || fail "threads -> mpirun resume is not bit-identical"
# A finished run resumed again under mpirun (a job script that retries until exit 0): every process
# exits 0 saying the run is complete, and neither the log nor the checkpoints change.
cp "$TMP/tm.jsonl" "$TMP/tm.before.jsonl"
ls -R "$TMP/tm.ck" >"$TMP/tm.ck.before"
expect_exit 0 "the run is complete" -- "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --resume \
  --log "$TMP/tm.jsonl" --checkpoint-dir "$TMP/tm.ck"
cmp -s "$TMP/tm.before.jsonl" "$TMP/tm.jsonl" && ok || fail "resuming a finished run under mpirun changed the log"
ls -R "$TMP/tm.ck" | cmp -s "$TMP/tm.ck.before" - && ok || fail "resuming a finished run under mpirun changed the checkpoints"
expect_exit 0 "checkpoint: step 3" -- "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --stop-after 3 \
  --log "$TMP/mt.jsonl" --checkpoint-dir "$TMP/mt.ck"
expect_exit 0 "done: steps 4-6" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --resume --log "$TMP/mt.jsonl" \
  --checkpoint-dir "$TMP/mt.ck"
same_losses "$TMP/whole.jsonl" "$TMP/mt.jsonl" && ok || fail "mpirun -> threads resume is not bit-identical"

# 3. A rank fails at step 3 (an error, then a killed process): every process ends within 60 s, non-zero,
#    the error names the checkpoint of step 2, and that checkpoint resumes to the uninterrupted run's losses.
for action in throw kill; do
  ck="$TMP/fault-$action.ck"
  start=$(date +%s)
  PD2BW_FAULT="step:2:3:$action" timeout 60 "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 6 -q \
    --checkpoint-dir "$ck" --checkpoint-every 2 --log "$TMP/fault-$action.jsonl" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else fail "fault $action: mpirun exited $rc"; fi
  [ $(($(date +%s) - start)) -lt 60 ] && ok || fail "fault $action: the job took 60 s or more to end"
  sleep 1
  if pgrep -f -- "$TMP/p22.json" >/dev/null; then fail "fault $action: pd2bw processes outlived the job"; else ok; fi
  # The failed rank's own message says where to resume from.
  [ "$action" = kill ] || grep -qF "rank 2: injected fault (PD2BW_FAULT=step:2:3); the last complete checkpoint is step 2 \
in $ck; resume with --resume" "$TMP/err" && ok || { fail "fault $action: no rank-prefixed error naming the checkpoint"; head -5 "$TMP/err" >&2; }
  expect_exit 0 "done: steps 3-6" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 6 --resume --checkpoint-dir "$ck" \
    --log "$TMP/fault-$action.resumed.jsonl"
  head -n 2 "$TMP/whole.jsonl" | cat - "$TMP/fault-$action.resumed.jsonl" >"$TMP/fault-$action.all.jsonl"
  same_losses "$TMP/whole.jsonl" "$TMP/fault-$action.all.jsonl" && ok || fail "fault $action: the resumed run differs"
done

# 4. A job that does not match the plan: every rank says why, exit 2, nothing written.
expect_exit 2 "the plan has 4 ranks \(2 stages x 2 replicas\), but this job has 3 process\(es\)" -- "${MPI[@]}" -np 3 \
  "$PD2BW" train --plan "$TMP/p22.json" --steps 2 --log "$TMP/np3.jsonl" --checkpoint-dir "$TMP/np3.ck"
[ "$(grep -c 'the plan has 4 ranks' "$TMP/err")" = 3 ] && ok || fail "not every rank reported the rank count"
[ ! -e "$TMP/np3.jsonl" ] && [ ! -e "$TMP/np3.ck" ] && ok || fail "a refused job wrote files"
PD2BW_RANKS_PER_NODE=2 expect_exit 2 "the plan puts 4 rank\(s\) on each of 1 node\(s\), but this job runs 2 rank\(s\) on each of 2 node\(s\)" \
  -- "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 2
expect_exit 2 "--transport threads runs every rank of the plan in this process, but mpirun \(Open MPI\) started 4" -- \
  "${MPI[@]}" -np 4 "$PD2BW" train --plan "$TMP/p22.json" --steps 2 --transport threads
# Without a launcher, --transport mpi makes a job of one process (MPI's singleton).
expect_exit 2 "but this job has 1 process\(es\)" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 2 --transport mpi \
  --checkpoint-dir "$TMP/single.ck"
# A plan for 2 nodes x 2 devices runs on 2 (test) nodes of 2 processes and equals its threads run.
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/n22.json" --steps 3 -q --log "$TMP/n22.t.jsonl"
PD2BW_RANKS_PER_NODE=2 expect_exit 0 "4 ranks as processes \(mpi, 2 node\(s\)\)" -- "${MPI[@]}" -np 4 "$PD2BW" train \
  --plan "$TMP/n22.json" --steps 3 --log "$TMP/n22.m.jsonl"
same_losses "$TMP/n22.t.jsonl" "$TMP/n22.m.jsonl" && ok || fail "the 2-node plan differs from threads"

# 5. pd2bw profile under mpirun: curves between processes that validate and that pd2bw plan reads.
FAST=(--iters 2 --warmup 1 --link-max-bytes 64KiB --no-runtime-calibration)
expect_exit 0 "link node \(4 ranks as processes\)" -- "${MPI[@]}" -np 4 "$PD2BW" profile "${FAST[@]}" -o "$TMP/mp.json"
"$PD2BW" validate "$TMP/mp.json" | grep -q "ok (pd2bw.profile" && ok || fail "the mpirun profile does not validate"
PD2BW_RANKS_PER_NODE=2 expect_exit 0 "link cluster \(2 ranks as processes\)" -- "${MPI[@]}" -np 4 "$PD2BW" profile \
  "${FAST[@]}" -o "$TMP/mp2.json"
"$PD2BW" validate "$TMP/mp2.json" | grep -q "ok (pd2bw.profile" && ok || fail "the 2-node profile does not validate"
if "$PY" - "$TMP/mp.json" "$TMP/mp2.json" <<'PYEOF'
import json, sys
one, two = (json.load(open(p)) for p in sys.argv[1:3])
assert [(l["level"], l["allreduce_ranks"]) for l in one["links"]] == [("node", 4)], one["links"]
assert [(l["level"], l["allreduce_ranks"]) for l in two["links"]] == [("node", 2), ("cluster", 2)], two["links"]
for l in one["links"] + two["links"]:
    assert [p["bytes"] for p in l["p2p_curve"]] == [4096, 16384, 65536], l
    assert all(p["ms"] > 0 for p in l["p2p_curve"] + l["allreduce_curve"]), l
    assert l["p2p_gbps"] > 0 and l["allreduce_busbw_gbps"] > 0, l
assert "mpi transport" in two["provenance"]["notes"]
PYEOF
then ok; else fail "the profile's process links are not as measured"; fi
expect_exit 0 "chosen:" -- "$PD2BW" plan --profile "$TMP/mp2.json" --nodes 2 --gpus-per-node 2 --device-memory 4MiB \
  --reserve 0 --global-batch 32 -o "$TMP/from-mp2.json"
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))["cluster"]; assert all(l.get("p2p_curve") for l in c["levels"]), c' \
  "$TMP/from-mp2.json" && ok || fail "the plan did not take the measured curves"
finish
