#!/usr/bin/env bash
# A stalled rank under Slurm's srun (tests/cluster/slurm_lib.bash, one node): rank 3 of `srun -n 4
# --mpi=pmix pd2bw train` stops itself (SIGSTOP) before step 6; within --peer-timeout the others name
# it and the last complete checkpoint, srun ends the step non-zero, the checkpoint is intact, and
# `srun ... --resume` finishes with the losses of an uninterrupted run, bit for bit. Then every daemon
# stops and nothing of the cluster is left. Needs root (skips, 77, otherwise, or without Slurm, munge,
# an MPI build or Slurm's pmix plugin).
source "$(dirname "$0")/../cli/lib.bash"
source "$SRC/tests/cluster/slurm_lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
slurm_require_pd2bw "$PD2BW"
mkdir "$TMP/slurm"
slurm_up "$TMP/slurm" || { fail "the Slurm cluster did not start"; finish; exit 1; }
slurm srun --mpi=list 2>&1 | grep -q pmix || { echo "Slurm has no pmix plugin (srun --mpi=list): skipped"; exit 77; }

expect_exit 0 "" -- "$PD2BW" plan -q --profile "$SRC/schemas/examples/gpt-tiny.profile.json" --device-memory 4MiB \
  --reserve 0 --global-batch 32 --nodes 1 --gpus-per-node 4 --depth 2 --width 2 -o "$TMP/p22.json"
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/p22.json" --steps 8 -q --log "$TMP/whole.jsonl"
SRUN=(srun -n 4 --overcommit --mpi=pmix "$PD2BW" train --plan "$TMP/p22.json" --steps 8 -q --checkpoint-every 2
      --peer-timeout 5 --checkpoint-dir "$TMP/ck" --log "$TMP/run.jsonl")

start=$(date +%s)
PD2BW_FAULT="step:3:5:stop" slurm timeout 120 "${SRUN[@]}" >"$TMP/out" 2>"$TMP/err"
rc=$?
took=$(($(date +%s) - start))
if [ "$rc" != 0 ] && [ "$rc" != 124 ]; then ok; else fail "srun exited $rc"; fi
[ "$took" -lt 60 ] && ok || fail "the step took $took s to end (--peer-timeout 5)"
grep -qE "^pd2bw: error: rank [0-2]: rank 3 \(stage 1, replica 1\) sent nothing for 5 s: lost or stalled; the last \
complete checkpoint is step 4 in $TMP/ck; resume with --resume$" "$TMP/err" && ok ||
  { fail "no message naming rank 3 and the checkpoint"; sed 's/^/  | /' "$TMP/err" | head -8 >&2; }
checkpoint_intact "$TMP/ck" 4 2 && ok || fail "the checkpoint of step 4 is not intact"
expect_exit 0 "" -- slurm timeout 120 "${SRUN[@]}" --resume
same_step_losses "$TMP/whole.jsonl" "$TMP/run.jsonl" 8 && ok || fail "the resumed run's losses differ"
slurm_down
slurm_check_clean && ok || fail "processes of the Slurm cluster were left"
finish
