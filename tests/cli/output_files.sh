#!/usr/bin/env bash
# Output files: a regular file is replaced (keeping its permissions), a device is written in place and
# stays a device, a symbolic link is followed and stays a link, /dev/full fails with exit 1, and a path
# that cannot be written is refused before any work. The device checks use nodes made with mknod in a
# temporary directory and run only as root.
source "$(dirname "$0")/lib.bash"
P="$SRC/schemas/examples/gpt-tiny.profile.json"
plan() { "$PD2BW" plan --profile "$P" --nodes 1 --gpus-per-node 2 --device-memory 4MiB --reserve 0 --global-batch 8 "$@"; }
plan -o "$TMP/plan.json" -q

# Regular files: replaced, permissions kept, no temporary left.
printf 'old' >"$TMP/kept.json"
chmod 640 "$TMP/kept.json"
expect_exit 0 "" -- plan -o "$TMP/kept.json" -q
[ "$(stat -c %a "$TMP/kept.json")" = 640 ] && ok || fail "replacing a file changed its mode to $(stat -c %a "$TMP/kept.json")"
"$PD2BW" validate "$TMP/kept.json" >"$TMP/v.out" && grep -q ": ok" "$TMP/v.out" && ok || fail "the replaced file is not a plan"
[ -z "$(find "$TMP" -name '*.tmp.*')" ] && ok || fail "a temporary was left: $(find "$TMP" -name '*.tmp.*')"

# Symbolic links: followed, the link stays; a dangling link creates its target; a chain is followed.
printf 'old' >"$TMP/real.json"
ln -s real.json "$TMP/link.json"
expect_exit 0 "" -- plan -o "$TMP/link.json" -q
[ -L "$TMP/link.json" ] && [ "$(readlink "$TMP/link.json")" = real.json ] && ok || fail "the link was replaced"
"$PD2BW" validate "$TMP/real.json" >"$TMP/v.out" && grep -q ": ok" "$TMP/v.out" && ok || fail "the link's target is not a plan"
ln -s new.json "$TMP/dangling.json"
expect_exit 0 "" -- plan -o "$TMP/dangling.json" -q
[ -L "$TMP/dangling.json" ] && [ -f "$TMP/new.json" ] && ok || fail "a dangling link did not create its target"
mkdir "$TMP/sub"
ln -s ../link.json "$TMP/sub/chain.json"
expect_exit 0 "" -- "$PD2BW" simulate --plan "$TMP/plan.json" --profile "$P" --json "$TMP/sub/chain.json" -q
[ -L "$TMP/sub/chain.json" ] && [ -L "$TMP/link.json" ] && grep -q '"steady_step_ms"\|"step_ms"' "$TMP/real.json" && ok ||
  fail "a chain of links was not followed to its file"

# Paths that cannot be written are refused before the work.
expect_exit 2 "-o \".*\" cannot be written: it is a directory" -- plan -o "$TMP/sub"
expect_exit 2 "directory \".*/missing\" does not exist" -- plan -o "$TMP/missing/plan.json"
printf 'x' >"$TMP/afile"
expect_exit 2 "is not a directory" -- plan -o "$TMP/afile/plan.json"
expect_exit 2 "--trace \".*\" cannot be written" -- "$PD2BW" simulate --plan "$TMP/plan.json" --profile "$P" \
  --trace "$TMP/missing/t.json"
expect_exit 2 "--report \".*\" cannot be written" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 1 \
  --report "$TMP/missing/r.json"
grep -q "step" "$TMP/err" && fail "train ran steps before refusing --report" || ok
expect_exit 2 "--log \".*\" cannot be written: directory .* does not exist" -- "$PD2BW" train --plan "$TMP/plan.json" \
  --steps 1 --log "$TMP/missing/log.jsonl"

if [ "$(id -u)" != 0 ]; then
  echo "skip: device nodes need root (mknod)"
  finish
  exit $?
fi

# Character devices: written in place; the node stays a device. c 1 3 is null, c 1 7 is full.
mknod -m 666 "$TMP/nul" c 1 3
mknod -m 666 "$TMP/full" c 1 7
ln -s nul "$TMP/nul-link"
expect_exit 0 "" -- plan -o "$TMP/nul" -q
expect_exit 0 "" -- plan -o "$TMP/nul-link" -q
expect_exit 0 "" -- "$PD2BW" simulate --plan "$TMP/plan.json" --profile "$P" --trace "$TMP/nul" --svg "$TMP/nul" \
  --json "$TMP/nul" -q
expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 2 --log "$TMP/nul" --report "$TMP/nul" -q
[ -c "$TMP/nul" ] && [ -L "$TMP/nul-link" ] && ok || fail "the null device or its link was replaced"
expect_exit 1 "error while writing \".*/full\": No space left on device" -- plan -o "$TMP/full" -q
expect_exit 1 "error while writing \".*/full\": No space left on device" -- "$PD2BW" simulate --plan "$TMP/plan.json" \
  --profile "$P" --svg "$TMP/full" -q
expect_exit 1 "cannot write the metrics log .*/full: No space left on device" -- "$PD2BW" train --plan "$TMP/plan.json" \
  --steps 2 --log "$TMP/full" -q
expect_exit 1 "No space left on device" -- "$PD2BW" train --plan "$TMP/plan.json" --steps 1 --report "$TMP/full" -q
[ -c "$TMP/full" ] && ok || fail "the full device was replaced"
finish
