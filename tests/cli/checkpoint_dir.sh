#!/usr/bin/env bash
# The checkpoint directory: step directories, `latest`, --keep, the lock against a second trainer,
# the flat layout of earlier releases, and what is checked before the first step (a directory under a
# regular file, a read-only directory, too little free space). Then a full disk mid-run (a small tmpfs,
# where this test may mount one): the save fails with exit 1, the last good checkpoint stays intact and
# resumes bit-identically once there is room; a full disk under the metrics log fails the run too.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
# A small model keeps the many runs quick; two stages, one replica.
P="$TMP/micro.profile.json"
micro_profile "$P"
PLAN="$TMP/plan.json"
"$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 --global-batch 8 -o "$PLAN" -q
train() { "$PD2BW" train --plan "$PLAN" --checkpoint-every 2 "$@"; }
same_losses() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert [(r["step"], r["loss"]) for r in a] == [(r["step"], r["loss"]) for r in b], (a, b)
PYEOF
}

# --keep 2 leaves the two newest; `latest` names the newest; the lock file stays, unlocked.
expect_exit 0 "checkpoint: step 8 written" -- train --steps 8 --checkpoint-dir "$TMP/ck" --log "$TMP/ref.jsonl"
[ "$(cd "$TMP/ck" && echo step-*)" = "step-000006 step-000008" ] && [ "$(cat "$TMP/ck/latest")" = step-000008 ] &&
  ok || fail "after 4 saves with --keep 2: $(ls "$TMP/ck")"
expect_exit 0 "" -- train --steps 6 --checkpoint-dir "$TMP/k1" --keep 1 -q
[ "$(cd "$TMP/k1" && echo step-*)" = "step-000006" ] && ok || fail "--keep 1 left $(ls "$TMP/k1")"
expect_exit 2 "--keep must be >= 1" -- train --steps 2 --checkpoint-dir "$TMP/k0" --keep 0
expect_exit 2 "already holds a checkpoint \(step-000008\)" -- train --steps 9 --checkpoint-dir "$TMP/ck"

# Resume picks the newest complete checkpoint and says which, also past a stale `latest`.
echo step-000006 >"$TMP/ck/latest"
expect_exit 0 "resume: step-000008 .*newer than what 'latest' names \(step-000006\)" -- \
  train --steps 10 --checkpoint-dir "$TMP/ck" --resume
# An incomplete step directory (a save that never got its manifest) is not resumed, and is removed.
mkdir -p "$TMP/ck/step-000012"
cp "$TMP/ck/step-000010/stage-000.safetensors" "$TMP/ck/step-000012/"
expect_exit 0 "resume: step-000010 " -- train --steps 12 --checkpoint-dir "$TMP/ck" --resume
[ -e "$TMP/ck/step-000012/manifest.json" ] && ok || fail "the resumed run did not save step 12"
expect_exit 2 "holds no complete checkpoint" -- train --steps 4 --checkpoint-dir "$TMP/empty" --resume

# A second trainer on the same directory is refused while the first runs (held still by a fault point).
PD2BW_FAULT=step:0:1:stop "$PD2BW" train --plan "$PLAN" --checkpoint-every 2 --steps 4 --checkpoint-dir "$TMP/locked" -q \
  2>"$TMP/first.err" &
first=$!
# Wait until it has stopped itself (state T in /proc), or ended.
until [ "$(cut -d' ' -f3 "/proc/$first/stat" 2>"$TMP/proc.err")" = T ] || ! kill -0 "$first" 2>"$TMP/kill.err"; do
  sleep 0.1
done
expect_exit 2 "another pd2bw train is using the checkpoint directory .* held by pid $first" -- \
  train --steps 4 --checkpoint-dir "$TMP/locked"
expect_exit 2 "another pd2bw train" -- train --steps 4 --checkpoint-dir "$TMP/locked" --resume
kill -CONT "$first"
wait "$first" && [ -e "$TMP/locked/step-000004/manifest.json" ] && ok || fail "the first trainer did not finish"

# The flat layout of earlier releases (manifest.json beside the stage files) resumes; new saves go to
# step directories beside it and never remove it.
mkdir "$TMP/flat"
cp "$TMP/ck/step-000012/"* "$TMP/flat/"
expect_exit 0 "resume: manifest.json in .* \(step 12, the flat layout" -- \
  train --steps 14 --checkpoint-dir "$TMP/flat" --resume --keep 1
[ -e "$TMP/flat/manifest.json" ] && [ -e "$TMP/flat/step-000014/manifest.json" ] && ok || fail "flat layout: $(ls "$TMP/flat")"

# Checked before the first step: nothing trains, nothing is written.
printf 'x' >"$TMP/regular"
expect_exit 2 "is under \".*/regular\", which is a file" -- train --steps 2 --checkpoint-dir "$TMP/regular/ck"
expect_exit 2 "--checkpoint-dir .*/regular is not a directory" -- train --steps 2 --checkpoint-dir "$TMP/regular"
grep -q "^step" "$TMP/err" && fail "a step ran before the checkpoint directory was checked" || ok

if [ "$(id -u)" != 0 ]; then
  # Without root, permissions make a directory read-only (root ignores them; it uses a read-only mount).
  cp -r "$TMP/ck" "$TMP/ro" && chmod -R a-w "$TMP/ro"
  expect_exit 2 "cannot lock the checkpoint directory" -- train --steps 14 --checkpoint-dir "$TMP/ro" --resume
  chmod -R u+w "$TMP/ro"
  echo "skip: the full-disk and read-only-mount checks need root (tmpfs)"
  finish
  exit $?
fi
MNT="$TMP/mnt"
mkdir "$MNT"
if ! mount -t tmpfs -o size=1m tmpfs "$MNT" 2>"$TMP/mount.err"; then
  echo "skip: cannot mount a tmpfs here: $(cat "$TMP/mount.err")"
  finish
  exit 77
fi
trap 'umount "$MNT" 2>"$TMP/umount.err"; rm -rf "$TMP"' EXIT
# Room for one checkpoint (about 0.7 MB here) but not for a second one beside it.
expect_exit 1 "the checkpoint of step 4 was not written: .*No space left on device; the earlier checkpoints are intact" -- \
  train --steps 8 --checkpoint-dir "$MNT/ck" --log "$TMP/full.jsonl"
[ "$(cd "$MNT/ck" && echo step-*)" = "step-000002" ] && [ "$(cat "$MNT/ck/latest")" = step-000002 ] && ok ||
  fail "after the full disk: $(ls "$MNT/ck")"
expect_exit 0 "" -- "$PD2BW" validate "$PLAN"
# Read-only: refused before the first step, the checkpoint untouched.
sha_before="$(sha256sum "$MNT"/ck/step-000002/* | sha256sum)"
mount -o remount,ro "$MNT"
expect_exit 2 "cannot lock the checkpoint directory .*Read-only file system" -- \
  train --steps 8 --checkpoint-dir "$MNT/ck" --resume --log "$TMP/full.jsonl"
mount -o remount,rw,size=8m "$MNT"
[ "$(sha256sum "$MNT"/ck/step-000002/* | sha256sum)" = "$sha_before" ] && ok || fail "the read-only run changed the checkpoint"
# With room again, the run resumes from the last good checkpoint and ends as the uninterrupted run.
expect_exit 0 "resume: step-000002" -- train --steps 8 --checkpoint-dir "$MNT/ck" --resume --log "$TMP/full.jsonl"
same_losses "$TMP/ref.jsonl" "$TMP/full.jsonl" && ok || fail "the run resumed after a full disk differs"
cmp -s "$MNT/ck/step-000008/stage-001.safetensors" "$TMP/ck/step-000008/stage-001.safetensors" 2>"$TMP/cmp.err" ||
  cmp -s "$MNT/ck/step-000008/stage-001.safetensors" "$TMP/flat/step-000014/stage-001.safetensors" 2>"$TMP/cmp.err" &&
  fail "impossible: two different steps have the same weights" || ok
# Less room than one checkpoint: refused before the first step.
umount "$MNT" && mount -t tmpfs -o size=256k tmpfs "$MNT"
expect_exit 2 "has .* free, but one checkpoint of this run takes about" -- train --steps 2 --checkpoint-dir "$MNT/ck"
# A full disk under the metrics log fails the run (exit 1) instead of losing records.
umount "$MNT" && mount -t tmpfs -o size=4k tmpfs "$MNT"
expect_exit 1 "cannot write the metrics log .*No space left on device" -- \
  "$PD2BW" train --plan "$PLAN" --steps 60 --log "$MNT/log.jsonl" -q
finish
