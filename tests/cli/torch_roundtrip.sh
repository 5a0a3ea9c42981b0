#!/usr/bin/env bash
# pd2bw's plans on PyTorch: pd2bw-torch profile (pd2bw's GPT in torch, tied embeddings) -> pd2bw plan ->
# export --to torch -> pd2bw train (the checkpoint of step 1 and the losses and weights of steps 2..4, in
# double) -> torchrun --nproc-per-node 2 pd2bw-torch run from that checkpoint with the exported CSV (gloo,
# float64). Per-step losses and final weights must equal pd2bw train's within 1e-10
# (tests/torch/compare_torch_run.py says why that tolerance). Two plans: flush, and zb-h1 (split backward)
# with every stage recomputing; the token table and the head's copy sit on different stages.
# Then the errors: a 2bw plan (its --as-flush export is accepted), a checkpoint of another layer count, a
# split of another plan, zb-h2 (no torch class) without a CSV, a process count that is not the plan's, and
# a torch without torch.distributed.pipelining. Skipped (77) where the PyTorch venv (tools/setup, or
# $PD2BW_TORCH_VENV) is missing.
source "$(dirname "$0")/lib.bash"
source "$SRC/tests/torch/roundtrip_lib.bash"
TP="$TMP/torch.profile.json"
"$RUN" profile --model gpt --blocks 2 --d-model 32 --heads 2 --seq 16 --microbatch 2 --warmup 1 --iters 1 \
  --threads 1 --tie-embeddings -o "$TP" -q || fail "pd2bw-torch profile"
prepare flush "$TP" "--schedule flush"
prepare zb "$TP" "--schedule zb-h1 --recompute always"
grep -q '"tie_embeddings": true' "$TMP/zb/plan.json" && grep -q ',[0-9]W[0-9]' "$TMP/zb/export.csv" \
  && grep -q '"recompute": true' "$TMP/zb/plan.json" && ok || fail "the zb case is not tied, split and recomputing"
launch flush
launch zb
check flush
check zb

# Errors, before any process group: each rank would print the same line, so one process (RANK 0 of 2,
# no MASTER_ADDR: a check that wrongly passed would stop at the rendezvous with another message) suffices.
err() { expect_exit 2 "$1" -- env RANK=0 WORLD_SIZE="${WS:-2}" "${@:3}"; }
F="$TMP/flush"
"$PD2BW" plan --profile "$TP" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 --global-batch 8 \
  --microbatch 2 --schedule 2bw -o "$TMP/2bw.json" -q || fail "2bw plan"
err "^pd2bw-torch: error: the plan's schedule is 2bw, which torch.distributed.pipelining cannot run" -- \
  "$RUN" run --plan "$TMP/2bw.json" --checkpoint "$F/ck/step-000001" --steps 4
# ... while its flush plan (export --as-flush) passes every check (up to the missing rendezvous).
"$PD2BW" export --to torch --plan "$TMP/2bw.json" --as-flush -o "$TMP/2bw-flush" >"$TMP/2bw-flush.out" \
  || fail "export --as-flush"
err "^pd2bw-torch: error: no MASTER_ADDR" -- "$RUN" run --plan "$TMP/2bw.json" --split "$TMP/2bw-flush.json" \
  --schedule-csv "$TMP/2bw-flush.csv" --checkpoint "$F/ck/step-000001" --steps 4
BLOCKS=3 small_profile "$TMP/l3.profile.json"
"$PD2BW" plan --profile "$TMP/l3.profile.json" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 --global-batch 8 \
  --microbatch 2 --schedule flush -o "$TMP/l3.plan.json" -q || fail "3-block plan"
err "checkpoint .* holds a gpt of 4 layers, the plan's model has 5" -- \
  "$RUN" run --plan "$TMP/l3.plan.json" --checkpoint "$F/ck/step-000001" --steps 4 --data "$TMP/corpus.txt"
json_edit "$F/export.json" "$TMP/other-split.json" \
  'd["stages"][0]["layer_end"] += 1; d["stages"][1]["layer_begin"] += 1'
err "the split .* has the layer ranges" -- \
  "$RUN" run --plan "$F/plan.json" --split "$TMP/other-split.json" --checkpoint "$F/ck/step-000001" --steps 4
"$PD2BW" plan --profile "$TP" --nodes 1 --gpus-per-node 2 --depth 2 --width 1 --global-batch 8 \
  --microbatch 2 --schedule zb-h2 -o "$TMP/zb-h2.json" -q || fail "zb-h2 plan"
err "no built-in class for the plan's schedule zb-h2: give --schedule-csv" -- \
  "$RUN" run --plan "$TMP/zb-h2.json" --checkpoint "$F/ck/step-000001" --steps 4
WS=3 err "torchrun started 3 processes: torchrun --nproc-per-node 2" -- \
  "$RUN" run --plan "$F/plan.json" --checkpoint "$F/ck/step-000001" --steps 4
# A torch without torch.distributed.pipelining (before 2.4): the import is refused as it would be there.
cat >"$TMP/no_pipelining.py" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv.pop(1))
class NoPipelining:
    def find_spec(self, name, path=None, target=None):
        if name == "torch.distributed.pipelining" or name.startswith("torch.distributed.pipelining."):
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None
sys.meta_path.insert(0, NoPipelining())
from pd2bw_torch.__main__ import main
sys.exit(main(sys.argv[1:]))
PYEOF
err "^pd2bw-torch: error: this PyTorch .* has no torch.distributed.pipelining" -- \
  "$VENV/bin/python" "$TMP/no_pipelining.py" "$SRC/tools/torch" run --plan "$F/plan.json" \
  --checkpoint "$F/ck/step-000001" --steps 4
finish
