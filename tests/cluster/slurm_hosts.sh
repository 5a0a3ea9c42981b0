#!/usr/bin/env bash
# pd2bw under a real Slurm of two nodes: two test hosts (network namespaces, lib_hosts.bash), a slurmd
# in each (`slurmd -N <host>`), slurmctld and munged in the root namespace. Then
#   1. `srun -N 2 -n 4 --mpi=pmix` of a plan for 2 nodes x 2 devices gives the threads run's losses and
#      final weights, bit for bit, with 2 processes per host talking over TCP between the hosts;
#   2. the same job with the tasks dealt round-robin (ranks 0 and 2 on one host), which does not match
#      the plan's nodes, is refused by every rank before anything is written;
#   3. the example job script under `sbatch --nodes=2 --ntasks-per-node=2` plans for 2 nodes x 2 and
#      trains to the threads run's losses;
# and tears everything down, checking that no daemon, job process, namespace or link is left. Needs
# root (skips, 77, otherwise, or without network namespaces, Slurm, munge or an MPI build).
source "$(dirname "$0")/../cli/lib.bash"
source "$SRC/tests/cluster/lib_hosts.bash"
source "$SRC/tests/cluster/slurm_lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
hosts_require
slurm_require_pd2bw "$PD2BW"
P="$TMP/micro.profile.json"
micro_profile "$P"
TINY=(--device-memory 4MiB --reserve 0 --global-batch 32)
start=$(date +%s)

# The hosts first: slurm_up's trap then stops the daemons before the hosts' trap removes the hosts.
hosts_up 2 || { fail "the test hosts were not made"; finish; exit 1; }
mkdir "$TMP/slurm"
slurm_up "$TMP/slurm" "${HOSTS_SUBNET%.0/24}.254" "${HOSTS[0]}" "${HOSTS_ADDR[0]}" "${HOSTS[1]}" "${HOSTS_ADDR[1]}" ||
  { fail "the Slurm cluster did not start"; finish; exit 1; }
echo "hosts and cluster up after $(($(date +%s) - start)) s"
slurm srun --mpi=list 2>&1 | grep -q pmix || { echo "Slurm has no pmix plugin (srun --mpi=list): skipped"; exit 77; }
[ "$(slurm srun -N 2 -n 2 hostname | sort | tr '\n' ' ')" = "${HOSTS[0]} ${HOSTS[1]} " ] && ok ||
  fail "srun -N 2 did not run on both hosts"

same_losses() {  # LOG_A LOG_B: the same steps with the same losses, to the last bit
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert a and [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}
same_weights() {  # DIR_A DIR_B: the checkpoints' stage files are byte-identical, path by path
  (cd "$1" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.a"
  (cd "$2" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.b"
  [ -s "$TMP/w.a" ] && cmp -s "$TMP/w.a" "$TMP/w.b"
}

# 1. Two hosts x two tasks against the threads run of the same plan.
expect_exit 0 "" -- "$PD2BW" plan -q --profile "$P" "${TINY[@]}" --nodes 2 --gpus-per-node 2 --depth 2 --width 2 \
  -o "$TMP/n22.json"
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/n22.json" --steps 4 -q --log "$TMP/t.jsonl" --checkpoint-dir "$TMP/t.ck"
link1="/sys/class/net/pdv${HOSTS_ID}h1/statistics/rx_bytes"  # host 1's link, root side: what host 1 sent
sent=$(cat "$link1")
expect_exit 0 "4 ranks as processes \(mpi, 2 node\(s\)\)" -- slurm srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmix \
  "$PD2BW" train --plan "$TMP/n22.json" --steps 4 --log "$TMP/s.jsonl" --checkpoint-dir "$TMP/s.ck"
sent=$(($(cat "$link1") - sent))
echo "host 1 sent $sent bytes over its link in 4 steps"
# Stage 0's replicas on host 1 send stage 1 on host 2 the activations of every sample: 4 steps x 32
# samples x (32 tokens x 32 floats x 4 bytes) = 512 KiB at least, over TCP.
[ "$sent" -ge $((4 * 32 * 32 * 32 * 4)) ] && ok ||
  fail "host 1 sent $sent bytes over its link: fewer than its activations (not over TCP between the hosts?)"
same_losses "$TMP/t.jsonl" "$TMP/s.jsonl" && ok || fail "srun on two hosts: losses differ from threads"
same_weights "$TMP/t.ck" "$TMP/s.ck" && ok || fail "srun on two hosts: final weights differ from threads"

# 2. Tasks dealt round-robin over the hosts: ranks 0 and 1 of a plan node on different hosts.
expect_exit 2 "rank [0-3]: the plan puts .* with ranks \{0, 1\} \{2, 3\} together, but this job groups ranks \{0, 2\} \{1, 3\}" -- slurm srun -N 2 -n 4 --ntasks-per-node=2 --distribution=cyclic \
  --mpi=pmix "$PD2BW" train --plan "$TMP/n22.json" --steps 2 --log "$TMP/cyc.jsonl" --checkpoint-dir "$TMP/cyc.ck"
[ "$(grep -c '^pd2bw: error: rank' "$TMP/err")" = 4 ] && ok || fail "cyclic: not every rank said why"
[ ! -e "$TMP/cyc.jsonl" ] && [ ! -e "$TMP/cyc.ck" ] && ok || fail "cyclic: a refused job wrote files"

# 3. The example job script on both hosts.
mkdir "$TMP/job"
if id=$(cd "$TMP/job" && STEPS=4 PD2BW="$PD2BW" slurm sbatch --parsable --nodes=2 --ntasks-per-node=2 \
    "$SRC/tests/cluster/job.sbatch" "$P" "${TINY[@]}" --depth 2 --width 2 2>"$TMP/sbatch.err"); then
  if state=$(slurm_wait_job "$id" 60); then
    [ "$state" = COMPLETED ] && ok || { fail "the job ended $state"; sed 's/^/  | /' "$TMP/job/pd2bw-$id.out" >&2; }
  else
    fail "job $id did not end within 60 s"
  fi
  grep -q "cluster: 2 node(s) x 2 device(s)" "$TMP/job/pd2bw-$id.out" && ok || fail "the job did not plan 2 nodes x 2"
  grep -q "ranks as processes (mpi, 2 node(s))" "$TMP/job/pd2bw-$id.out" && ok || fail "the job did not span 2 hosts"
  expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/job/plan.json" --steps 4 -q --log "$TMP/job.t.jsonl"
  same_losses "$TMP/job.t.jsonl" "$TMP/job/train.jsonl" && ok || fail "the sbatch job's losses differ from threads"
else
  fail "sbatch failed: $(head -1 "$TMP/sbatch.err")"
fi

slurm_down
slurm_check_clean && ok || fail "processes of the Slurm cluster were left running"
hosts_down
hosts_check_clean && ok || fail "the test hosts were not all removed"
echo "took $(($(date +%s) - start)) s"
finish
