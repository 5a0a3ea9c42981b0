#!/usr/bin/env bash
# pd2bw under a real Slurm (Debian's slurm-wlm and munge): the test starts munged, slurmctld and a
# slurmd in a temporary directory, then
#   1. `srun -n 4 --mpi=pmix pd2bw train` of a 4-rank plan gives the losses and final weights of the
#      threads run of the same plan, bit for bit;
#   2. `srun -n 3` for that plan is refused on every rank before anything is written;
#   3. the example job script (tests/cluster/job.sbatch, shown in the README) plans and trains under
#      sbatch in two jobs of 3 steps each, the second resuming from the first's checkpoint, and the
#      whole equals the threads run of the plan it made; its plan (d=2 w=1) uses 2 of the job's 4
#      tasks, and the script starts 2;
# and stops every daemon, checking that no process of the cluster is left. Needs root (skips, 77,
# otherwise, or without Slurm, munge, an MPI build or Slurm's pmix plugin).
source "$(dirname "$0")/../cli/lib.bash"
source "$SRC/tests/cluster/slurm_lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
slurm_require_pd2bw "$PD2BW"
P="$TMP/micro.profile.json"
micro_profile "$P"
TINY=(--device-memory 4MiB --reserve 0 --global-batch 32)
start=$(date +%s)

mkdir "$TMP/slurm"
slurm_up "$TMP/slurm" || { fail "the Slurm cluster did not start"; finish; exit 1; }
echo "cluster up after $(($(date +%s) - start)) s"
slurm srun --mpi=list 2>&1 | grep -q pmix || { echo "Slurm has no pmix plugin (srun --mpi=list): skipped"; exit 77; }
slurm sinfo -h -N -o '%N %t %c' | grep -q " idle $SLURM_CPUS$" && ok || fail "the node is not idle with $SLURM_CPUS CPUs"

# same_losses LOG_A LOG_B: the same steps with the same losses, to the last bit.
same_losses() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert a and [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}
# same_weights DIR_A DIR_B: the checkpoints' stage files are byte-identical, path by path.
same_weights() {
  (cd "$1" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.a"
  (cd "$2" && find . -name '*.safetensors' | sort | xargs sha256sum) >"$TMP/w.b"
  [ -s "$TMP/w.a" ] && cmp -s "$TMP/w.a" "$TMP/w.b"
}

# 1. srun -n 4 against the threads run of the same 4-rank plan.
expect_exit 0 "" -- "$PD2BW" plan -q --profile "$P" "${TINY[@]}" --nodes 1 --gpus-per-node 4 --depth 2 --width 2 \
  -o "$TMP/p22.json"
expect_exit 0 "as threads" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 4 --log "$TMP/t.jsonl" \
  --checkpoint-dir "$TMP/t.ck"
expect_exit 0 "4 ranks as processes \(mpi, 1 node\(s\)\)" -- slurm srun -n 4 --mpi=pmix "$PD2BW" train \
  --plan "$TMP/p22.json" --steps 4 --log "$TMP/s.jsonl" --checkpoint-dir "$TMP/s.ck"
same_losses "$TMP/t.jsonl" "$TMP/s.jsonl" && ok || fail "srun losses differ from threads"
same_weights "$TMP/t.ck" "$TMP/s.ck" && ok || fail "srun final weights differ from threads"
[ "$(grep -c '^step ' "$TMP/err")" = 4 ] && ok || fail "srun: progress lines are not printed once per step"

# 2. srun -n 3 for the 4-rank plan: every rank says why, exit 2, nothing written.
expect_exit 2 "rank 0: the plan has 4 ranks \(2 stages x 2 replicas\), but this job has 3 process\(es\)" -- \
  slurm srun -n 3 --mpi=pmix "$PD2BW" train --plan "$TMP/p22.json" --steps 2 --log "$TMP/n3.jsonl" \
  --checkpoint-dir "$TMP/n3.ck"
[ "$(grep -c 'the plan has 4 ranks' "$TMP/err")" = 3 ] && ok || fail "srun -n 3: not every rank said why"
[ ! -e "$TMP/n3.jsonl" ] && [ ! -e "$TMP/n3.ck" ] && ok || fail "srun -n 3: a refused job wrote files"

# 3. The example job script: two jobs of 3 steps, the second resumes; the whole equals the threads run.
# submit NAME: sbatch of the job script in $TMP/job (STEPS=6, STOP_AFTER=3); waits 60 s at most.
submit() {
  local id state
  if ! id=$(cd "$TMP/job" && STEPS=6 STOP_AFTER=3 PD2BW="$PD2BW" slurm sbatch --parsable \
      "$SRC/tests/cluster/job.sbatch" "$P" "${TINY[@]}" --depth 2 --width 1 2>"$TMP/sbatch.err"); then
    fail "$1: sbatch failed: $(head -1 "$TMP/sbatch.err")"; return
  fi
  state=$(slurm_wait_job "$id" 60) || { fail "$1: job $id did not end within 60 s"; return; }
  [ "$state" = COMPLETED ] && ok || { fail "$1: job $id ended $state"; sed 's/^/  | /' "$TMP/job/pd2bw-$id.out" >&2; }
  cp "$TMP/job/pd2bw-$id.out" "$TMP/$1.out"
}
mkdir "$TMP/job"
submit first
grep -q "checkpoint: step 3" "$TMP/first.out" && ok || fail "the first job did not save step 3"
"$PD2BW" validate "$TMP/job/plan.json" | grep -q "depth 2 x width 1" && ok || fail "the job's plan is not d=2 w=1"
submit second
grep -q "done: steps 4-6" "$TMP/second.out" && ok || fail "the second job did not resume at step 4"
grep -q "2 ranks as processes (mpi, 1 node(s))" "$TMP/second.out" && ok || fail "the job did not run 2 processes"
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/job/plan.json" --steps 6 -q --log "$TMP/job.t.jsonl"
same_losses "$TMP/job.t.jsonl" "$TMP/job/train.jsonl" && ok || fail "the sbatch jobs' losses differ from threads"

# Every daemon stops; nothing of the cluster is left.
slurm_down
slurm_check_clean && ok || fail "processes of the Slurm cluster were left running"
echo "took $(($(date +%s) - start)) s"
finish
