#!/usr/bin/env bash
# `pd2bw plan` and `pd2bw validate` end to end: plans for every example profile (GPT and BERT) are
# written, pass the C++ reader and the JSON Schema validator, are byte-identical across runs, and '-o -'
# writes stdout. The 3.8B GPT and BERT on the paper's cluster (8 x 8 GPUs, 16 GiB) plan alike.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
EX="$SRC/schemas/examples"

for prof in "$EX"/gpt-*.profile.json "$EX"/bert-*.profile.json; do
  name="$(basename "$prof" .profile.json)"
  expect_exit 0 "chosen:" -- "$PD2BW" plan --profile "$prof" --nodes 8 --gpus-per-node 8 \
    --device-memory 16GiB -o "$TMP/$name.plan.json"
  expect_exit 0 "" -- "$PD2BW" validate "$TMP/$name.plan.json"
  "$PD2BW" plan --profile "$prof" --nodes 8 --gpus-per-node 8 --device-memory 16GiB \
    -o "$TMP/$name.again.json" -q 2>/dev/null
  # The command line differs only in the output path, which provenance records.
  if diff <(grep -v command_line "$TMP/$name.plan.json") <(grep -v command_line "$TMP/$name.again.json") >/dev/null; then ok; else fail "$name: plan not deterministic"; fi
done

# The paper's finding, 3.8B BERT "similar to GPT" on 64 x 16 GiB (README, "BERT on 64 GPUs"): both 2bw
# at depth 8 x width 8, recomputing on the same early stages.
if "$PY" - "$TMP/gpt-3.8b.plan.json" "$TMP/bert-3.8b.plan.json" <<'EOF'
import json, sys
g, b = (json.load(open(p)) for p in sys.argv[1:])
shape = lambda p: (p["schedule"], p["depth"], p["width"], [s["recompute"] for s in p["stages"]])
ok = (shape(g) == shape(b) and shape(b)[:3] == ("2bw", 8, 8) and b["model"]["kind"] == "bert"
      and b["num_layers"] == 34 and b["model"]["ln"] == "post")
sys.exit(0 if ok else 1)
EOF
then ok; else fail "3.8B BERT and GPT plans on 64 x 16 GiB differ in schedule, depth, width or recompute"; fi
# GPipe stashing every microbatch (no recompute) fits a global batch of 128 for the 3.8B BERT (512
# tokens a sample) but not for the GPT (1024); both fit 64.
gpipe() { "$PD2BW" plan --profile "$EX/$1.profile.json" --nodes 8 --gpus-per-node 8 --device-memory 16GiB \
  --schedule gpipe --recompute never --global-batch "$2" -q -o "$TMP/gpipe.json"; }
for case in "bert-3.8b 64 0" "bert-3.8b 128 0" "bert-3.8b 256 3" "gpt-3.8b 64 0" "gpt-3.8b 128 3"; do
  read -r model batch want <<<"$case"
  gpipe "$model" "$batch" 2>/dev/null
  rc=$?
  [ "$rc" = "$want" ] && ok || fail "gpipe --recompute never $model global batch $batch: exit $rc, wanted $want"
done
# A bert plan's layers are its embedding, blocks and head; its model's ln must be the profile's.
json_edit "$TMP/bert-3.8b.plan.json" "$TMP/bert-blocks.json" 'd["model"]["blocks"] = 31'
expect_exit 2 "/model/blocks: is 31 but a bert model of /num_layers 34 layers" -- "$PD2BW" validate "$TMP/bert-blocks.json"
json_edit "$EX/bert-3.8b.profile.json" "$TMP/bert-pre.json" 'd["model"]["ln"] = "pre"'
expect_exit 2 "ln post in the plan, pre in the profile" -- \
  "$PD2BW" validate --profile "$TMP/bert-pre.json" "$TMP/bert-3.8b.plan.json"
json_edit "$EX/bert-3.8b.profile.json" "$TMP/bert-untied.json" 'del d["model"]["tie_embeddings"]'
expect_exit 2 "tie_embeddings true in the plan, false in the profile" -- \
  "$PD2BW" validate --profile "$TMP/bert-untied.json" "$TMP/bert-3.8b.plan.json"
json_edit "$EX/bert-3.8b.profile.json" "$TMP/bert-default.json" 'del d["model"]["ln"]'
expect_exit 0 "" -- "$PD2BW" validate --profile "$TMP/bert-default.json" "$TMP/bert-3.8b.plan.json"

# Identical command lines give byte-identical files.
(cd "$TMP" && "$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" -q -o same.json && cp same.json first.json &&
  "$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" -q -o same.json && cmp -s same.json first.json) && ok || fail "byte-identical rerun"

# The number of search threads does not change the plan.
"$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" --threads 1 -q -o "$TMP/t1.json"
"$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" --threads 4 -q -o "$TMP/t4.json"
if diff <(grep -v command_line "$TMP/t1.json") <(grep -v command_line "$TMP/t4.json") >/dev/null; then ok; else fail "--threads changed the plan"; fi

# -o - writes the plan to stdout and nothing else there.
"$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" -o - -q >"$TMP/stdout.json" 2>/dev/null
if "$PD2BW" validate "$TMP/stdout.json" >/dev/null 2>&1; then ok; else fail "-o - did not write a valid plan"; fi

# Pins are honoured.
for s in 2bw flush gpipe; do
  "$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" --schedule "$s" --microbatch 2 -q -o "$TMP/$s.json"
  if grep -q "\"schedule\": \"$s\"" "$TMP/$s.json" && grep -q '"microbatch_size": 2,' "$TMP/$s.json"; then ok; else fail "pin --schedule $s --microbatch 2"; fi
done
"$PD2BW" plan --cluster "$EX/cluster-8x8-h200.json" --max-depth 6 -q -o "$TMP/d6.json"
if "$PY" -c "import json,sys; sys.exit(0 if json.load(open('$TMP/d6.json'))['depth'] <= 6 else 1)"; then ok; else fail "--max-depth 6"; fi

# Measured link curves in the profile reach the planned cluster when the link speeds come from the
# profile, and stay behind for a level whose bandwidth a flag overrides.
CURVES="$SRC/tests/schema/fixtures/curves.profile.json"
expect_exit 0 "p2p time from a measured curve" -- "$PD2BW" plan --profile "$CURVES" --nodes 2 --gpus-per-node 4 \
  -o "$TMP/curves.json"
"$PD2BW" plan --profile "$CURVES" --nodes 2 --gpus-per-node 4 --intra-gbps 100 -q -o "$TMP/curves-flag.json"
if "$PY" - "$TMP/curves.json" "$TMP/curves-flag.json" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["cluster"]["levels"]
b = json.load(open(sys.argv[2]))["cluster"]["levels"]
ok = (len(a[0]["p2p_curve"]) == 3 and a[0]["allreduce_ranks"] == 8 and len(a[1]["p2p_curve"]) == 1
      and "p2p_curve" not in b[0] and "allreduce_ranks" not in b[0] and len(b[1]["p2p_curve"]) == 1)
sys.exit(0 if ok else 1)
EOF
then ok; else fail "profile curves in the planned cluster"; fi

# Every written plan passes the JSON Schema and the plan invariants.
if "$PY" "$SRC/tests/cli/check_plans.py" "$SRC" "$TMP"/*.json; then ok; else fail "check_plans.py"; fi

# The built-in default runs with no arguments at all.
(cd "$TMP" && "$PD2BW" plan -q) && [ -s "$TMP/plan.json" ] && ok || fail "plan with no arguments"
expect_exit 0 "pd2bw [0-9]+\.[0-9]+\.[0-9]+ \(git" -- sh -c "'$PD2BW' --version 1>&2"
finish
