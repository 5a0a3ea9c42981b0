# Helpers shared by the CLI tests (sourced, not run). Each test script gets the pd2bw binary and the
# source directory as $1 and $2, and counts its checks.
set -uo pipefail
PD2BW="$1"
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

ok() { passed=$((passed + 1)); }
fail() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }

# expect_exit CODE PATTERN -- CMD...: runs CMD, checks its exit code and that stderr matches PATTERN.
expect_exit() {
  local code="$1" pattern="$2"
  shift 3
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ "$rc" != "$code" ]; then
    fail "exit $rc (wanted $code): $*"; sed 's/^/  | /' "$TMP/err" | head -5 >&2; return
  fi
  if [ -n "$pattern" ] && ! grep -qE -- "$pattern" "$TMP/err"; then
    fail "stderr lacks /$pattern/: $*"; sed 's/^/  | /' "$TMP/err" | head -5 >&2; return
  fi
  ok
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}
