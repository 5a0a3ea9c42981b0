#!/usr/bin/env bash
# `pd2bw-torch profile` of pd2bw's GPT written in PyTorch, beside `pd2bw profile` of the same model on the
# same CPU: the torch profile passes `pd2bw validate` (and the JSON Schema), `pd2bw plan` plans from it
# (zb-h1 too, which reads the split backward), and tools/compare-torch-profile puts the two side by side:
# parameter, optimizer, output and block/head input bytes equal; the terms that differ by design differ
# by exactly what the design says; block times (fastest runs) within 10x of each other. Skipped (77)
# without the torch venv.
source "$(dirname "$0")/lib.bash"
PY="${PD2BW_PYTHON:-/usr/bin/python3}"
TPY="${PD2BW_TORCH_VENV:-$HOME/.cache/pd2bw/torch-venv}/bin/python"
if [ ! -x "$TPY" ] || ! "$TPY" -c "import torch" 2>/dev/null; then
  echo "skipped: no PyTorch venv at ${PD2BW_TORCH_VENV:-$HOME/.cache/pd2bw/torch-venv} (tools/setup makes it)"
  exit 77
fi
PT="$SRC/tools/pd2bw-torch"
SEQ=64
DIMS=(--blocks 2 --d-model 64 --heads 4 --seq "$SEQ" --vocab 256 --microbatch 1,2 --warmup 1 --iters 5)

expect_exit 0 "wrote" -- "$PD2BW" profile "${DIMS[@]}" --link-max-bytes 64KiB --no-runtime-calibration \
  -o "$TMP/pd2bw.json"
expect_exit 0 "wrote $TMP/torch.json" -- "$PT" profile --model gpt "${DIMS[@]}" --threads 1 \
  --links-from "$TMP/pd2bw.json" -o "$TMP/torch.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/torch.json"
if grep -q "ok (pd2bw.profile 1.2.0): gpt-L2-C64 (fp32), 4 layers" "$TMP/out"; then ok
else fail "validate: $(cat "$TMP/out")"; fi
if "$PY" -c "import jsonschema" 2>/dev/null; then
  if "$PY" - "$SRC/schemas/profile.schema.json" "$TMP/torch.json" <<'EOF'; then ok; else fail "JSON Schema"; fi
import json, sys, jsonschema
jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))
EOF
fi

# The planner plans from it: the search, and a zb-h1 pipeline that needs the backward's halves.
expect_exit 0 "chosen:" -- "$PD2BW" plan --profile "$TMP/torch.json" --gpus-per-node 2 --global-batch 8 \
  -o "$TMP/plan.json"
expect_exit 0 "chosen: zb-h1" -- "$PD2BW" plan --profile "$TMP/torch.json" --gpus-per-node 2 --depth 2 --width 1 \
  --schedule zb-h1 --global-batch 8 -o "$TMP/plan-zb.json"
expect_exit 0 "" -- "$PD2BW" validate "$TMP/plan-zb.json" --profile "$TMP/torch.json"

# Side by side. Bytes: equal where both keep the same tensors; the rest differ by design, exactly:
# - the embedding's input: torch's token ids are int64, pd2bw's int32 (8 vs 4 bytes a token);
# - the embedding's stash: torch saves the int64 ids (wte) and the int64 positions (wpe), pd2bw the int32 ids;
# - a block's stash: torch also saves the (S, S) bool causal mask of masked_fill (one byte an entry);
# - the head's stash: torch's nll_loss also saves its fp32 total weight (4 bytes); its int64 targets
#   weigh what pd2bw's int32 targets and fp32 log-sum-exp rows weigh together.
expect_exit 0 "" -- "$SRC/tools/compare-torch-profile" "$TMP/pd2bw.json" "$TMP/torch.json" --json "$TMP/rows.json"
cat "$TMP/out"
if "$PY" - "$TMP/rows.json" "$SEQ" <<'EOF'; then ok; else fail "side-by-side bytes or times"; fi
import json, sys
rows, s = json.load(open(sys.argv[1])), int(sys.argv[2])
bad = []
def want(row, term, value):
    if row[term]["torch"] != value:
        bad.append(f"{row['layer']} b={row['microbatch']} {term}: torch {row[term]['torch']}, want {value} "
                   f"(pd2bw {row[term]['pd2bw']})")
for r in rows:
    b, layer = r["microbatch"], r["layer"]
    assert r["torch_layer"] == layer, (r["torch_layer"], layer)
    for term in ("param_bytes", "optimizer_bytes", "output_bytes"):
        want(r, term, r[term]["pd2bw"])
    pd = {t: r[t]["pd2bw"] for t in ("input_bytes", "stash_bytes")}
    if layer == "embedding":
        want(r, "input_bytes", 2 * pd["input_bytes"])
        want(r, "stash_bytes", 8 * b * s + 8 * s)
        assert pd["stash_bytes"] == 4 * b * s, pd
    else:
        want(r, "input_bytes", pd["input_bytes"])
        want(r, "stash_bytes", pd["stash_bytes"] + (s * s if layer.startswith("block.") else 4))
    if layer.startswith("block."):  # same order of magnitude; the tiny embedding is torch's per-op overhead
        # The fastest runs: a loaded CI machine delays some runs by many times their length.
        ratio = ((r["fwd_ms"]["torch_min"] + r["bwd_ms"]["torch_min"]) /
                 (r["fwd_ms"]["pd2bw_min"] + r["bwd_ms"]["pd2bw_min"]))
        if not 0.1 <= ratio <= 10:
            bad.append(f"{layer} b={b}: torch/pd2bw time ratio {ratio:.2f} is outside [0.1, 10]")
assert len(rows) == 8, len(rows)
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF

# The torch profile names pd2bw's layers, copies the links asked for, and splits every backward.
if "$PY" - "$TMP/torch.json" "$TMP/pd2bw.json" <<'EOF'; then ok; else fail "names, links or split"; fi
import json, sys
t, p = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [l["name"] for l in t["layers"]] == ["embedding", "block.0", "block.1", "head"]
assert t["links"] == p["links"] and t["provenance"]["tool"] == "pd2bw-torch profile"
for i, l in enumerate(t["layers"]):
    for e in l["per_microbatch"]:
        assert (e["bwd_input_ms"] > 0) == (i > 0) and e["bwd_weight_ms"] > 0, (l["name"], e)
        assert e["fwd_ms_min"] <= e["fwd_ms"] <= e["fwd_ms_p90"] and e["recompute_ms"] > 0, e
EOF

# Bad input: one line, exit 2, no file.
expect_exit 2 "pd2bw-torch: error: --microbatch sizes must be > 0 and strictly increasing" -- \
  "$PT" profile --microbatch 2,1 -o "$TMP/x.json"
expect_exit 2 "pd2bw-torch: error: --heads 3 does not divide --d-model 64" -- "$PT" profile --heads 3 -o "$TMP/x.json"
expect_exit 2 "pd2bw-torch: error: --links-from .*not a pd2bw profile" -- \
  "$PT" profile --links-from "$TMP/rows.json" -o "$TMP/x.json"
if [ ! -e "$TMP/x.json" ]; then ok; else fail "a refused command wrote a file"; fi
finish
