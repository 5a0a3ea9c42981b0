#!/usr/bin/env bash
# Bad input never crashes: malformed or mismatched files, impossible flags and infeasible requests
# give "pd2bw: error:" on stderr and exit 2 (bad input) or 3 (no feasible plan).
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
EX="$SRC/schemas/examples"
P="$EX/gpt-1.3b.profile.json"

# mutate OUT EXPR: writes the 1.3b profile with a Python statement applied to `d`.
mutate() { json_edit "$P" "$1" "$2"; }

head -c 2000 "$P" >"$TMP/truncated.json"
expect_exit 2 "not valid JSON" -- "$PD2BW" plan --profile "$TMP/truncated.json" -o "$TMP/x.json"
expect_exit 2 "not valid JSON" -- "$PD2BW" validate "$TMP/truncated.json"
mutate "$TMP/type.json" 'd["layers"][3]["param_bytes"] = "big"'
expect_exit 2 "/layers/3/param_bytes" -- "$PD2BW" plan --profile "$TMP/type.json" -o "$TMP/x.json"
mutate "$TMP/neg.json" 'd["layers"][3]["per_microbatch"][1]["fwd_ms"] = -1.0'
expect_exit 2 "/layers/3/per_microbatch/1/fwd_ms: must be > 0" -- "$PD2BW" plan --profile "$TMP/neg.json" -o "$TMP/x.json"
sed 's/"fwd_ms": [0-9.]*/"fwd_ms": NaN/' "$P" >"$TMP/nan.json"
expect_exit 2 "not valid JSON" -- "$PD2BW" plan --profile "$TMP/nan.json" -o "$TMP/x.json"
mutate "$TMP/huge.json" 'd["layers"][0]["per_microbatch"][0]["fwd_ms"] = 1e308 * 10'
expect_exit 2 "error:" -- "$PD2BW" plan --profile "$TMP/huge.json" -o "$TMP/x.json"
mutate "$TMP/nolayers.json" 'd["layers"] = []'
expect_exit 2 "/layers" -- "$PD2BW" plan --profile "$TMP/nolayers.json" -o "$TMP/x.json"
mutate "$TMP/major.json" 'd["schema_version"] = "2.0.0"'
expect_exit 2 "schema_version" -- "$PD2BW" plan --profile "$TMP/major.json" -o "$TMP/x.json"
# A gpt's (or bert's) layers are its embedding, blocks and head: another count could never be trained.
mutate "$TMP/shape.json" 'd["model"]["blocks"] = 23'
expect_exit 2 "/model/blocks: is 23, but the profile lists 26 layers" -- "$PD2BW" plan --profile "$TMP/shape.json" \
  -o "$TMP/x.json"
expect_exit 2 "/model/blocks: is 23, but the profile lists 26 layers" -- "$PD2BW" validate "$TMP/shape.json"
[ ! -e "$TMP/x.json" ] && ok || fail "a refused profile was planned"
mutate "$TMP/other-kind.json" 'd["model"].update(kind="synthetic", blocks=23)'
expect_exit 0 "" -- "$PD2BW" plan -q --profile "$TMP/other-kind.json" -o "$TMP/other.json"
mutate "$TMP/unknown.json" 'd["model"]["colour"] = "blue"'
expect_exit 2 "/model/colour: unknown key" -- "$PD2BW" validate "$TMP/unknown.json"
mutate "$TMP/missing.json" 'del d["device"]["memory_bytes"]'
expect_exit 2 "/device/memory_bytes" -- "$PD2BW" validate "$TMP/missing.json"
expect_exit 2 "error:" -- "$PD2BW" plan --profile "$TMP/does-not-exist.json" -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --profile "$EX/cluster-8x8-h200.json" -o "$TMP/x.json"

# Clusters.
"$PY" -c "
import json; d = json.load(open('$EX/cluster-8x8-h200.json')); d['levels'][1]['size'] = 0
open('$TMP/zero.json', 'w').write(json.dumps(d))"
expect_exit 2 "/levels/1/size" -- "$PD2BW" plan --cluster "$TMP/zero.json" -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --nodes 0 -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --gpus-per-node -8 -o "$TMP/x.json"
expect_exit 2 "outside" -- "$PD2BW" plan --nodes 1000000000 --gpus-per-node 1000000000 -o "$TMP/x.json"
expect_exit 2 "more than" -- "$PD2BW" plan --nodes 1048576 --gpus-per-node 1048576 -o "$TMP/x.json"
expect_exit 2 "excludes|cannot be used" -- "$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" --nodes 2 -o "$TMP/x.json"

# Impossible flags.
expect_exit 2 "--device-memory" -- "$PD2BW" plan --device-memory 16XB -o "$TMP/x.json"
expect_exit 2 "--device-memory" -- "$PD2BW" plan --device-memory -16GiB -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --global-batch 0 -o "$TMP/x.json"
expect_exit 2 "--schedule" -- "$PD2BW" plan --schedule pipedream -o "$TMP/x.json"
expect_exit 2 "--microbatch 3 was not profiled" -- "$PD2BW" plan --microbatch 3 -o "$TMP/x.json"
expect_exit 2 "--microbatch" -- "$PD2BW" plan --microbatch two -o "$TMP/x.json"
expect_exit 2 "--recompute" -- "$PD2BW" plan --recompute sometimes -o "$TMP/x.json"
expect_exit 2 "--reserve" -- "$PD2BW" plan --reserve 200GiB -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --intra-gbps 0 -o "$TMP/x.json"
expect_exit 2 "global batch 7" -- "$PD2BW" plan --global-batch 7 --microbatch 2 -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW" plan --bogus-flag -o "$TMP/x.json"
expect_exit 2 "error:" -- "$PD2BW"
expect_exit 2 "error:" -- "$PD2BW" frobnicate

# No feasible plan: exit 3 with the closest candidate and each stage's overage.
expect_exit 3 "closest: " -- "$PD2BW" plan --nodes 1 --gpus-per-node 2 --device-memory 8GiB -o "$TMP/none.json"
expect_exit 3 "(stage|rank) 1 .* bytes over" -- "$PD2BW" plan --nodes 1 --gpus-per-node 2 --device-memory 8GiB -o "$TMP/none.json"
[ ! -e "$TMP/none.json" ] && ok || fail "a failed plan left an output file"

# Where only points too large to replay (m x d over the limit) fit, "no plan fits" would be false: 18
# blocks of 100 MB of parameters fit 0.8 GiB only about one per stage, so 2bw needs d >= 17 (it plans
# d = 19 at 1,024 samples), and 262,144 samples of b = 1 make that m x d >= 4.4 million.
json_edit "$EX/gpt-tiny.profile.json" "$TMP/deep.json" '
blocks = [dict(d["layers"][1], name=f"block.{i}", param_bytes=100_000_000) for i in range(18)]
d["layers"] = [d["layers"][0]] + blocks + [d["layers"][-1]]
d["model"]["blocks"] = 18'
deep=(plan --profile "$TMP/deep.json" --nodes 3 --gpus-per-node 8 --device-memory 0.8GiB --reserve 0 --microbatch 1
  --schedule 2bw -q)
"$PD2BW" "${deep[@]}" --global-batch 1024 -o "$TMP/deep-plan.json" && "$PY" -c "
import json, sys; d = json.load(open('$TMP/deep-plan.json'))['depth']; sys.exit(0 if d >= 17 else 1)" &&
  ok || fail "the deep profile did not plan d >= 17 at 1,024 samples"
expect_exit 3 "does not prove that none does: .* the first: 2bw b=1 m=262144 d=1[0-9] w=1" -- \
  "$PD2BW" "${deep[@]}" --global-batch 262144 -o "$TMP/none.json"
expect_exit 3 "m x d x v <= 4194304" -- "$PD2BW" "${deep[@]}" --global-batch 262144 -o "$TMP/none.json"
# At 0.3 GiB not even one block fits a stage, so memory rules out the large points too: "no plan fits" again.
deep[8]=0.3GiB
expect_exit 3 "no plan fits in device memory; closest: " -- "$PD2BW" "${deep[@]}" --global-batch 262144 \
  -o "$TMP/none.json"
# So it does where every block fits a stage alone but 100 times the stashes, never recomputed, fit no
# stage run at any depth: the memory walk, not the per-layer test, rules the large points out.
json_edit "$TMP/deep.json" "$TMP/stashes.json" '
for l in d["layers"][1:-1]:
    l["per_microbatch"] = [dict(x, stash_bytes=x["stash_bytes"] * 100) for x in l["per_microbatch"]]'
deep[2]="$TMP/stashes.json"
deep[8]=0.8GiB
expect_exit 3 "no plan fits in device memory; closest: " -- "$PD2BW" "${deep[@]}" --recompute never \
  --global-batch 262144 -o "$TMP/none.json"

# Plans edited into an inconsistent state are rejected by validate.
"$PD2BW" plan --nodes 2 --gpus-per-node 8 --device-memory 40GiB -q -o "$TMP/good.json"
"$PY" -c "
import json; d = json.load(open('$TMP/good.json')); d['stages'][0]['layer_end'] -= 1
open('$TMP/gap.json', 'w').write(json.dumps(d))"
expect_exit 2 "/stages/" -- "$PD2BW" validate "$TMP/gap.json"
finish
