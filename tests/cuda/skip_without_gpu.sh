#!/usr/bin/env bash
# The skip path of the GPU tests, checked on every machine (CI has no GPU; on a GPU machine
# CUDA_VISIBLE_DEVICES="" hides it): the GPU test binary says "no GPU" and exits 77, which ctest counts
# as skipped, and the commands that need the cuda backend stop with exit 2 and say why before they
# start. Arguments: the test_cuda binary, the pd2bw binary, the source directory.
TEST_CUDA="$1"
source "$3/tests/cli/lib.bash" "$2" "$3"
export CUDA_VISIBLE_DEVICES=""

"$TEST_CUDA" >"$TMP/out" 2>&1
rc=$?
if [ "$rc" = 77 ]; then ok; else fail "test_cuda exited $rc with no GPU visible, wanted 77"; fi
if grep -q "^no GPU" "$TMP/out"; then ok; else fail "test_cuda did not say 'no GPU'"; sed 's/^/  | /' "$TMP/out" | head -5 >&2; fi

if "$PD2BW" --version | grep -q "^backends:.*cuda"; then
  why="no CUDA device"  # built, but nothing to run on
else
  why="no backend named 'cuda'"
fi
expect_exit 2 "$why" -- "$PD2BW" profile --device cuda --dtype bf16 -o "$TMP/p.json" -q
"$PD2BW" plan --profile "$SRC/schemas/examples/gpt-tiny.profile.json" --nodes 1 --gpus-per-node 2 --device-memory 4MiB \
  --reserve 0 --global-batch 4 -o "$TMP/plan.json" -q || fail "plan"
expect_exit 2 "$why" -- "$PD2BW" train --plan "$TMP/plan.json" --device cuda --steps 1 -q
[ ! -e "$TMP/p.json" ] && ok || fail "profile wrote a file before refusing"
finish
