#!/usr/bin/env bash
# Both placements of a 2 x 2 plan on two test hosts, through tools/bench-cluster (short): the profile
# measured under mpirun across the hosts, `pd2bw plan`'s choice of placement, the other placement
# rewritten and validated, both trained under mpirun across the hosts with bit-identical losses, and
# predicted (plan, simulate) and measured step times recorded for both. Whether the measurement agrees
# with the planner's choice is printed, not asserted (no test asserts a wall time; the README's table
# is the bench's full run). Skips (77) without root, network namespaces, mpirun or an MPI build.
source "$(dirname "$0")/../cli/lib.bash"
source "$(dirname "$0")/lib_hosts.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
hosts_require
"$PD2BW" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }

expect_exit 0 "" -- "$PY" "$SRC/tools/bench-cluster" --bin "$PD2BW" --out "$TMP/bench.json" --repeats 1 --steps 3
cat "$TMP/out"
if "$PY" - "$TMP/bench.json" <<'PYEOF'
import json, sys
b = json.load(open(sys.argv[1]))
rows = {r["placement"]: r for r in b["placements"]}
assert sorted(rows) == ["replicas-inner", "stages-inner"], rows
assert [p for p, r in rows.items() if r["chosen"]] == [b["chosen"]], (rows, b["chosen"])
# Two real levels were measured and planned with.
assert sorted(b["links"]) == ["cluster", "node"], b["links"]
assert b["links"]["cluster"]["p2p_gbps"] < b["links"]["node"]["p2p_gbps"], b["links"]
# Same math on either placement: the same losses, bit for bit, over every step.
assert b["losses_identical"] and len(b["losses"]) == 3, b["losses"]
for r in rows.values():
    assert r["simulated_step_ms"] > 0 and r["measured_step_ms"]["median"] > 0, r
    assert len(r["measured_step_ms"]["runs"]) == 1, r
# The planner keeps the placement its simulator replays faster, and its own prediction is the replay's.
chosen, other = rows[b["chosen"]], [r for r in rows.values() if not r["chosen"]][0]
assert chosen["simulated_step_ms"] <= other["simulated_step_ms"], rows
assert abs(chosen["plan_step_ms"] - chosen["simulated_step_ms"]) <= 1e-6 * chosen["simulated_step_ms"], chosen
print("planner: %s; measured fastest: %s" % (b["chosen"], b["measured_fastest"]))
PYEOF
then ok; else fail "bench-cluster's record is not as expected"; fi
# The bench's hosts are gone.
id=$(sed -n 's/^test hosts: \([0-9a-f]*\) .*/\1/p' "$TMP/out")
[ -n "$id" ] && (HOSTS_ID="$id" hosts_check_clean) && ok || fail "bench-cluster left its test hosts behind"
finish
