#!/usr/bin/env bash
# Other pipeline shapes on PyTorch (see torch_roundtrip.sh for the chain), each compared with pd2bw train
# (losses of steps 2..4 and final weights within 1e-10, double):
# - zb-v: two model chunks per rank in a V (rank 0 holds stages 0 and 3, rank 1 stages 1 and 2), with tied
#   embeddings, so the token table and the head's copy sit on one rank and their gradients are summed
#   there; torch's start-up messages between two stages of one rank are left out (gloo cannot send to
#   itself);
# - flush with two replicas (d = 2, w = 2, 4 processes), untied: each replica samples its own data,
#   gradients are summed over the replicas and averaged in the update, the loss is the mean over both.
# Skipped (77) without the PyTorch venv.
source "$(dirname "$0")/lib.bash"
source "$SRC/tests/torch/roundtrip_lib.bash"
small_profile "$TMP/tied.profile.json" --tie-embeddings
small_profile "$TMP/untied.profile.json"
prepare zbv "$TMP/tied.profile.json" "--schedule zb-v"
"${PD2BW_PYTHON:-/usr/bin/python3}" - "$TMP/zbv" <<'PYEOF' && ok || fail "the zbv plan is not a tied V"
import json, sys
plan, split = (json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ("plan", "export"))
assert plan["model"]["tie_embeddings"] and split["stage_to_rank"] == "v", (plan["model"], split)
assert [s["pipeline_rank"] for s in split["stages"]] == [0, 1, 1, 0], split["stages"]
PYEOF
SHAPE="--gpus-per-node 4 --depth 2 --width 2 --global-batch 16" prepare wide "$TMP/untied.profile.json" \
  "--schedule flush"
grep -q '"width": 2' "$TMP/wide/plan.json" && ok || fail "the wide plan has not 2 replicas"
launch zbv
launch wide 4
check zbv
check wide
finish
