#!/usr/bin/env bash
# A rank of `pd2bw train` under mpirun that stalls (SIGSTOP) or whose whole node is killed (kill -9 of
# both its ranks) in the middle of a step: every other rank stops within a bounded time, with a message
# naming the lost rank and where the last complete checkpoint is; the job exits non-zero; that
# checkpoint is intact (manifest, shard hashes, `latest`); `--resume` on all four ranks then finishes
# with losses bit-identical to an uninterrupted run. Skips (77) without mpirun or an MPI build.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
"$PD2BW" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
P="$SRC/schemas/examples/gpt-tiny.profile.json"
# 2 (test) nodes of 2 ranks: stage 0 and 1 of replica 0 on node 0, of replica 1 on node 1.
expect_exit 0 "" -- "$PD2BW" plan -q --profile "$P" --device-memory 4MiB --reserve 0 --global-batch 32 --nodes 2 \
  --gpus-per-node 2 --depth 2 --width 2 -o "$TMP/n22.json"
export PD2BW_RANKS_PER_NODE=2
TRAIN=("$PD2BW" train --plan "$TMP/n22.json" --steps 8 -q --checkpoint-every 2)

# The uninterrupted run (threads give the same losses as mpirun: train_mpi.sh).
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/n22.json" --steps 8 -q --log "$TMP/whole.jsonl"
for bad in -1 0.5; do
  expect_exit 2 "^pd2bw: error: --peer-timeout must be 0 \(wait forever\) or a finite number of seconds >= 1, got" -- \
    "$PD2BW" train --plan "$TMP/n22.json" --steps 1 --peer-timeout "$bad"
done
expect_exit 2 "^pd2bw: error: --peer-timeout: inf is not a finite number" -- "$PD2BW" train --plan "$TMP/n22.json" \
  --steps 1 --peer-timeout inf

# rank_pid R: the pid of this test's pd2bw process of rank R.
rank_pid() {
  local p
  for p in $(pgrep -f -- "$TMP/n22.json"); do
    tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
# wait_stopped PID: waits (up to 60 s) until the process is stopped (state T).
wait_stopped() {
  local i
  for i in $(seq 600); do
    [ "$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null)" = T ] && return 0
    sleep 0.1
  done
  return 1
}
# intact CK STEP: `latest` names step STEP, whose manifest and its two stage files match.
intact() { checkpoint_intact "$1" "$2" 2; }
# resumes NAME: --resume on all four ranks finishes the run with the uninterrupted run's losses, bit for bit.
resumes() {
  expect_exit 0 "" -- "${MPI[@]}" "${TRAIN[@]}" --resume --checkpoint-dir "$TMP/$1.ck" --log "$TMP/$1.jsonl"
  same_step_losses "$TMP/whole.jsonl" "$TMP/$1.jsonl" 8 && ok || fail "$1: the resumed run's losses differ"
}
# no_leftovers NAME: no process of this test's job outlived it.
no_leftovers() {
  sleep 1
  if pgrep -f -- "$TMP/n22.json" >/dev/null; then fail "$1: pd2bw processes outlived the job"; else ok; fi
}

# 1. Rank 3 stops itself (SIGSTOP) before step 6: its peers notice within --peer-timeout 5 s; rank 0
#    (or another survivor) names it and the checkpoint of step 4, and the job ends.
start=$(date +%s)
PD2BW_FAULT="step:3:5:stop" timeout 60 "${MPI[@]}" "${TRAIN[@]}" --peer-timeout 5 --checkpoint-dir "$TMP/stop.ck" \
  --log "$TMP/stop.jsonl" >"$TMP/out" 2>"$TMP/err"
rc=$?
took=$(($(date +%s) - start))
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else fail "stall: mpirun exited $rc"; fi
[ "$took" -lt 60 ] && ok || fail "stall: the job took $took s to end (--peer-timeout 5)"
grep -qE "^pd2bw: error: rank [0-2]: rank 3 \(stage 1, replica 1\) sent nothing for 5 s: lost or stalled; the last \
complete checkpoint is step 4 in $TMP/stop.ck; resume with --resume$" "$TMP/err" && ok ||
  { fail "stall: no message naming rank 3 and the checkpoint"; sed 's/^/  | /' "$TMP/err" | head -8 >&2; }
no_leftovers stall
intact "$TMP/stop.ck" 4 && ok || fail "stall: the checkpoint of step 4 is not intact"
resumes stop

# 2. Node 1 is lost: rank 2 stops itself before step 6, and then both of node 1's ranks (2 and 3) are
#    killed (-9) while rank 3 is in the middle of that step. mpirun notices and names the dead rank;
#    rank 0 says where to resume from. OpenMPI 4.1 waits odls_base_sigkill_timeout whole seconds of
#    the clock between its SIGTERM and its SIGKILL: with the default 1 that can be a millisecond, too
#    short for rank 0 to run its SIGTERM handler on a busy machine; 2 gives it at least a second.
PD2BW_FAULT="step:2:5:stop" OMPI_MCA_odls_base_sigkill_timeout=2 timeout 120 "${MPI[@]}" "${TRAIN[@]}" \
  --checkpoint-dir "$TMP/kill.ck" \
  --log "$TMP/kill.jsonl" >"$TMP/out" 2>"$TMP/err" &
job=$!
for i in $(seq 600); do
  r2=$(rank_pid 2)
  r3=$(rank_pid 3)
  [ -n "$r2" ] && [ -n "$r3" ] && break
  sleep 0.1
done
if [ -n "$r2" ] && [ -n "$r3" ] && wait_stopped "$r2"; then
  kill -9 "$r2" "$r3"
  ok
else
  fail "kill: rank 2 never stopped"
fi
start=$(date +%s)
wait "$job"
rc=$?
took=$(($(date +%s) - start))
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else fail "kill: mpirun exited $rc"; fi
[ "$took" -lt 30 ] && ok || fail "kill: the job took $took s to end after node 1 was killed"
grep -qE "process rank [23] .* exited on signal 9" "$TMP/err" && ok || fail "kill: no message naming a lost rank"
grep -qF "pd2bw: error: rank 0: ended by SIGTERM" "$TMP/err" && \
  grep -qF "the last complete checkpoint is step 4 in $TMP/kill.ck; resume with --resume" "$TMP/err" && ok ||
  { fail "kill: rank 0 did not say where to resume from"; sed 's/^/  | /' "$TMP/err" | head -12 >&2; }
no_leftovers kill
intact "$TMP/kill.ck" 4 && ok || fail "kill: the checkpoint of step 4 is not intact"
resumes kill
finish
