#!/usr/bin/env bash
# Issue 28: every file pd2bw creates or truncates is opened by schemas::open_for_writing (no link
# followed, O_EXCL for a new file). This fails when a source opens a file for creating or truncating
# some other way (open with O_CREAT or O_TRUNC, fopen, std::ofstream), and checks the helper at work
# end to end: a checkpoint lock planted as a link to another file is refused and the file is unchanged.
# Usage: writes_no_follow.sh <pd2bw> <source-dir>
set -euo pipefail
pd2bw=$1
src=$2
cd "$src"
dirs=(executor/src profiler/src planner/src schemas/src tools/pd2bw)
# The helper itself is the one place allowed to pass O_CREAT.
found=$(grep -rnE 'O_CREAT|O_TRUNC|fopen\(|ofstream|::creat\(' "${dirs[@]}" --include='*.cpp' --include='*.hpp' \
  --include='*.cu' | grep -v -e '^schemas/src/write_open.cpp:' || true)
if [[ -n $found ]]; then
  echo "FAIL: files created or truncated without schemas::open_for_writing:" >&2
  echo "$found" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$pd2bw" plan --profile schemas/examples/gpt-tiny.profile.json --nodes 1 --gpus-per-node 2 --depth 2 --width 1 \
  --global-batch 4 -o "$tmp/plan.json" -q
"$pd2bw" train --plan "$tmp/plan.json" --steps 1 --checkpoint-dir "$tmp/ck" -q
printf 'precious\n' >"$tmp/victim"
rm "$tmp/ck/.lock"
ln -s "$tmp/victim" "$tmp/ck/.lock"
set +e
"$pd2bw" train --plan "$tmp/plan.json" --steps 2 --checkpoint-dir "$tmp/ck" --resume -q 2>"$tmp/err"
rc=$?
set -e
if [[ $rc -ne 2 ]] || ! grep -q 'pd2bw: error: .*symbolic link' "$tmp/err"; then
  echo "FAIL: a .lock linked to another file: exit $rc, wanted 2 naming the link:" >&2
  cat "$tmp/err" >&2
  exit 1
fi
if [[ $(cat "$tmp/victim") != precious ]]; then
  echo "FAIL: the lock's link target was overwritten" >&2
  exit 1
fi
echo "ok: no writer follows links; a linked lock is refused"
