#!/usr/bin/env bash
# A lost host under mpirun across two test hosts (tests/cluster/lib_hosts.bash), 2 ranks on each: in the
# middle of a step, (1) every process of host 2 is killed (-9: its ranks and OpenMPI's daemon), or
# (2) host 2's link is cut. Each time the ranks of host 1 end within a bounded time, a message names the
# lost rank(s) and the last complete checkpoint, which is intact, and `--resume` on both hosts finishes
# with losses bit-identical to an uninterrupted run. Skips (77) without root, network namespaces or an
# MPI build.
source "$(dirname "$0")/../cli/lib.bash"
source "$(dirname "$0")/lib_hosts.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
hosts_require
"$PD2BW" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
hosts_up 2
hosts_mpirun 2
H1="${HOSTS[0]}"
H2="${HOSTS[1]}"
expect_exit 0 "" -- "$PD2BW" plan -q --profile "$SRC/schemas/examples/gpt-tiny.profile.json" --device-memory 4MiB \
  --reserve 0 --global-batch 32 --nodes 2 --gpus-per-node 2 --depth 2 --width 2 -o "$TMP/n22.json"
TRAIN=("$PD2BW" train --plan "$TMP/n22.json" --steps 8 -q --checkpoint-every 2)
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/n22.json" --steps 8 -q --log "$TMP/whole.jsonl"

# rank_pid HOST R: the pid of rank R's process on HOST.
rank_pid() {
  local p
  for p in $(hosts_pids "$1"); do
    tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
# stopped_rank2 NAME PEER_TIMEOUT: starts the job in the background ($job) with rank 2 stopping itself
# before step 6 (checkpoints of steps 2 and 4 are complete, rank 3 is in the middle of its step) and
# waits until it has; sets $r2.
stopped_rank2() {
  # In a subshell that reports nothing itself, so that ending mpirun by force below stays quiet.
  (
    PD2BW_FAULT="step:2:5:stop" timeout 120 "${HOSTS_MPI[@]}" "${TRAIN[@]}" --peer-timeout "$2" \
      --checkpoint-dir "$TMP/$1.ck" --log "$TMP/$1.jsonl" >"$TMP/$1.out" 2>"$TMP/$1.err"
    exit $?
  ) 2>/dev/null &
  job=$!
  local i
  r2=""
  for i in $(seq 600); do
    [ -n "$r2" ] || r2=$(rank_pid "$H2" 2)
    [ -n "$r2" ] && [ "$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$r2/stat" 2>/dev/null)" = T ] && return 0
    sleep 0.1
  done
  fail "$1: rank 2 never stopped"
  return 1
}
# host1_ranks_end_within SECONDS: waits until no pd2bw process is left on host 1.
host1_ranks_end_within() {
  local i
  for i in $(seq $(($1 * 10))); do
    [ -z "$(rank_pid "$H1" 0)$(rank_pid "$H1" 1)" ] && return 0
    sleep 0.1
  done
  return 1
}
# intact CK STEP: `latest` names step STEP, whose manifest and its two stage files match.
intact() { checkpoint_intact "$1" "$2" 2; }
# resumes NAME: --resume on both hosts finishes with the uninterrupted run's losses, bit for bit.
resumes() {
  expect_exit 0 "" -- "${HOSTS_MPI[@]}" "${TRAIN[@]}" --resume --checkpoint-dir "$TMP/$1.ck" --log "$TMP/$1.jsonl"
  same_step_losses "$TMP/whole.jsonl" "$TMP/$1.jsonl" 8 && ok || fail "$1: the resumed run's losses differ"
}

# 1. Host 2's processes are killed: mpirun sees its daemon go, ends the job and says so; a rank of host 1
#    says where to resume from: rank 0 on mpirun's SIGTERM, or the rank whose MPI call failed first (the
#    dead peer's connection reset; tests/cli/train_lost_rank.sh, over shared memory, holds rank 0 to its
#    SIGTERM note). The watch waits 30 s here, so that it is mpirun that notices even on a busy machine
#    (rank 2 has been silent since it stopped).
if stopped_rank2 kill 30; then
  # shellcheck disable=SC2046  # one pid per word
  kill -9 $(hosts_pids "$H2")
  start=$(date +%s)
  wait "$job"
  rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else fail "kill: mpirun exited $rc"; fi
  [ "$took" -lt 30 ] && ok || fail "kill: the job took $took s to end after host 2 was killed"
  grep -qE "Remote daemon: .* on node $H2" "$TMP/kill.err" && ok ||
    fail "kill: mpirun did not name the lost host"
  grep -qF "the last complete checkpoint is step 4 in $TMP/kill.ck; resume with --resume" "$TMP/kill.err" && ok ||
    { fail "kill: no rank said where to resume from"; sed 's/^/  | /' "$TMP/kill.err" | grep -v "^  | *$" | head -40 >&2; }
  intact "$TMP/kill.ck" 4 && ok || fail "kill: the checkpoint of step 4 is not intact"
  resumes kill
fi

# 2. Host 2's link is cut while rank 2 is stopped, then rank 2 goes on (host 2 lives, unreachable).
#    OpenMPI cannot tell: pd2bw's watch names the silent ranks within --peer-timeout 5 and ends the
#    ranks of host 1. mpirun itself then waits for host 2's daemon (OpenMPI 4.1 notices a silent
#    daemon only when TCP gives up, minutes later), so the test ends it, as a user would.
if stopped_rank2 cut 5; then
  hosts_cut "$H2"
  kill -CONT "$r2"
  host1_ranks_end_within 30 && ok || fail "cut: the ranks of host 1 still run 30 s after the cut"
  grep -qE "^pd2bw: error: rank [01]: rank [23] \(stage [01], replica 1\)( and rank 3 \(stage 1, replica 1\))? sent \
nothing for 5 s: lost or stalled; the last complete checkpoint is step 4 in $TMP/cut.ck; resume with --resume$" \
    "$TMP/cut.err" && ok || { fail "cut: no message naming a rank of host 2"; sed 's/^/  | /' "$TMP/cut.err" | head -8 >&2; }
  # mpirun (under `timeout`, in the subshell) would wait for host 2's daemon for minutes.
  pkill -KILL -P "$(pgrep -P "$job")"
  wait "$job"
  # shellcheck disable=SC2046  # one pid per word
  kill -9 $(hosts_pids "$H2") 2>/dev/null
  ip -n "$H2" link set eth0 up && ip link set "pdv${HOSTS_ID}h2" up && ok || fail "cut: could not mend host 2's link"
  intact "$TMP/cut.ck" 4 && ok || fail "cut: the checkpoint of step 4 is not intact"
  resumes cut
fi
hosts_down
hosts_check_clean && ok || fail "test hosts were left behind"
finish
