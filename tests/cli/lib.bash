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

# micro_profile OUT: the tiny example's timings and sizes with a smaller model (2 blocks, d_model 32,
# 32 tokens), for tests that train many times; plan it with --depth/--width to get the pipeline wanted.
micro_profile() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" - "$SRC/schemas/examples/gpt-tiny.profile.json" "$1" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["model"].update(blocks=2, d_model=32, heads=2, seq_len=32)
d["layers"] = d["layers"][:3] + d["layers"][-1:]
json.dump(d, open(sys.argv[2], "w"))
PYEOF
}

# json_edit IN OUT EXPR: writes the JSON file IN to OUT with a Python statement applied to it as `d`.
json_edit() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(json.dumps(d))
PYEOF
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}
