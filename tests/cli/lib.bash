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

# repeated_profile BLOCKS OUT: the 3.8B example with its block repeated BLOCKS times between its embedding
# and head, for tests of the planner at scale.
repeated_profile() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" - "$SRC/schemas/examples/gpt-3.8b.profile.json" "$1" "$2" <<'PYEOF'
import json, sys
prof = json.load(open(sys.argv[1]))
blocks = int(sys.argv[2])
embed, block, head = prof["layers"][0], prof["layers"][1], prof["layers"][-1]
prof["layers"] = [embed] + [dict(block, name="block.%d" % i) for i in range(blocks)] + [head]
prof["model"]["blocks"] = blocks
json.dump(prof, open(sys.argv[3], "w"))
PYEOF
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

# checkpoint_intact CK STEP STAGES: `latest` in CK names step STEP, whose manifest lists STAGES stage
# files, each matching its sha256.
checkpoint_intact() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" - "$1" "$2" "$3" <<'PYEOF'
import hashlib, json, os, sys
ck, step, stages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
name = open(os.path.join(ck, "latest")).read().strip()
assert name == "step-%06d" % step, name
m = json.load(open(os.path.join(ck, name, "manifest.json")))
assert m["step"] == step and len(m["stages"]) == stages, m
for s in m["stages"]:
    with open(os.path.join(ck, name, s["file"]), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == s["sha256"], s
PYEOF
}

# same_step_losses WANT GOT STEPS: the metrics logs WANT and GOT hold the same (step, loss) pairs, bit for
# bit, STEPS of them.
same_step_losses() {
  "${PD2BW_PYTHON:-/usr/bin/python3}" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
a, b = ([(r["step"], r["loss"]) for r in map(json.loads, open(p))] for p in sys.argv[1:3])
assert len(a) == int(sys.argv[3]) and a == b, (a, b)
PYEOF
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
}
