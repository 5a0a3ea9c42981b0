#!/usr/bin/env bash
# pd2bw under mpirun across two test hosts (tests/cluster/lib_hosts.bash: network namespaces, links shaped
# to 1 Gbit/s), two ranks on each: OpenMPI sees two nodes (shared memory inside a host, TCP between
# them); `pd2bw train` of 4-rank plans (depth 2 x width 2, depth 4) gives the threads run's losses and
# final weights bit for bit; `pd2bw profile` measures both link levels, and the level between hosts is
# the shaped one. Skips (77) without root, network namespaces, mpirun or an MPI build.
source "$(dirname "$0")/../cli/lib.bash"
source "$(dirname "$0")/lib_hosts.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
hosts_require
"$PD2BW" --version | grep -q "transports:.*mpi" || { echo "pd2bw built without MPI: skipped"; exit 77; }
P="$SRC/schemas/examples/gpt-tiny.profile.json"
hosts_up 2 1gbit
hosts_mpirun 2

# same_run LOG_A LOG_B CK_A CK_B: the same steps with the same losses to the last bit, and byte-identical
# checkpoint files.
same_run() {
  "$PY" - "$@" <<'PYEOF'
import hashlib, json, os, sys
a, b = ([(r["step"], r["loss"]) for r in map(json.loads, open(p))] for p in sys.argv[1:3])
assert a and a == b, (a, b)
def shards(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".safetensors"):
                p = os.path.join(d, f)
                out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out
sa, sb = shards(sys.argv[3]), shards(sys.argv[4])
assert sa and sa == sb, (sa, sb)
PYEOF
}

# 1. Train across the hosts; compare with the threads run of the same plan.
for shape in "2 2" "4 1"; do
  read -r depth width <<<"$shape"
  name="d${depth}w$width"
  expect_exit 0 "" -- "$PD2BW" plan -q --profile "$P" --device-memory 4MiB --reserve 0 --global-batch 32 \
    --nodes 2 --gpus-per-node 2 --depth "$depth" --width "$width" -o "$TMP/$name.json"
  expect_exit 0 "" -- "$PD2BW" train --plan "$TMP/$name.json" --steps 4 -q --log "$TMP/$name.t.jsonl" \
    --checkpoint-dir "$TMP/$name.t.ck"
  expect_exit 0 "4 ranks as processes \(mpi, 2 node\(s\)\)" -- "${HOSTS_MPI[@]}" "$PD2BW" train \
    --plan "$TMP/$name.json" --steps 4 --log "$TMP/$name.m.jsonl" --checkpoint-dir "$TMP/$name.m.ck"
  same_run "$TMP/$name.t.jsonl" "$TMP/$name.m.jsonl" "$TMP/$name.t.ck" "$TMP/$name.m.ck" && ok ||
    fail "$name: across two hosts the losses or weights differ from the threads run"
done

# 2. The ranks really ran on the hosts: each rank's hostname and address, as its process saw them.
expect_exit 0 "" -- "${HOSTS_MPI[@]}" sh -c \
  'echo "$OMPI_COMM_WORLD_RANK $(hostname) $(ip -o -4 addr show dev eth0 | awk "{print \$4}")"'
sort "$TMP/out" >"$TMP/where"
h1="${HOSTS[0]} ${HOSTS_ADDR[0]}/24" h2="${HOSTS[1]} ${HOSTS_ADDR[1]}/24"
printf '0 %s\n1 %s\n2 %s\n3 %s\n' "$h1" "$h1" "$h2" "$h2" | cmp -s - "$TMP/where" && ok ||
  fail "the ranks did not run two on each host: $(tr '\n' ' ' <"$TMP/where")"

# 3. pd2bw profile under the same launch: level node (shared memory inside host 1) and level cluster
#    (TCP between the hosts). At the largest message (4 MiB) the cluster level's p2p is 0.05-0.14 GB/s
#    (the shaping: 1 Gbit/s = 0.125 GB/s) and the node level's at least 2x that (5-25x when the machine
#    is not loaded).
expect_exit 0 "link cluster \(2 ranks as processes\)" -- "${HOSTS_MPI[@]}" "$PD2BW" profile --iters 3 --warmup 1 \
  --microbatch 1 --link-max-bytes 4MiB --no-runtime-calibration -o "$TMP/hosts.profile.json"
grep -E "^link " "$TMP/err"
"$PD2BW" validate "$TMP/hosts.profile.json" | grep -q "ok (pd2bw.profile" && ok || fail "the profile does not validate"
if "$PY" - "$TMP/hosts.profile.json" <<'PYEOF'
import json, sys
links = {l["level"]: l for l in json.load(open(sys.argv[1]))["links"]}
assert sorted(links) == ["cluster", "node"], links.keys()
node, cluster = links["node"], links["cluster"]
assert node["allreduce_ranks"] == 2 and cluster["allreduce_ranks"] == 2, links
assert node["p2p_curve"][-1]["bytes"] == cluster["p2p_curve"][-1]["bytes"] == 4 << 20
assert 0.05 <= cluster["p2p_gbps"] <= 0.14, cluster["p2p_gbps"]
assert node["p2p_gbps"] >= 2 * cluster["p2p_gbps"], (node["p2p_gbps"], cluster["p2p_gbps"])
# The allreduce between hosts is capped by the same links.
assert cluster["allreduce_busbw_gbps"] <= 0.14, cluster["allreduce_busbw_gbps"]
PYEOF
then ok; else fail "the measured levels do not show the shaping"; fi

# 4. Nothing is left once the hosts are down.
hosts_down
hosts_check_clean && ok || fail "the test hosts were not torn down"
finish
