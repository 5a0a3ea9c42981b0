#!/usr/bin/env bash
# `pd2bw-torch profile` of models other than pd2bw's: transformers' GPT-2 and BERT, the package's plain MLP
# and convnet, and a hand-written nn.Sequential through the profile_layers() library call. Every profile
# passes `pd2bw validate` and times the backward in halves (B = 0 only for the first layer, W = 0 only
# for a layer without weights); B then W leave the gradients of the whole backward; on wide MLP blocks
# B + W is within [0.3, 5] times the whole backward. Skipped (77) without the torch venv.
source "$(dirname "$0")/lib.bash"
VENV="${PD2BW_TORCH_VENV:-$HOME/.cache/pd2bw/torch-venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, transformers" 2>/dev/null; then
  echo "skipped: no PyTorch venv with transformers at $VENV (tools/setup makes it)"
  exit 77
fi
if PYTHONPATH="$SRC/tools/torch" "$VENV/bin/python" "$SRC/tests/cli/torch_profile_models.py" "$TMP"; then ok
else fail "torch_profile_models.py"; fi
for name in gpt2-hf bert-hf plain-mlp plain-convnet library; do
  expect_exit 0 "" -- "$PD2BW" validate "$TMP/$name.json"
  grep -q "ok (pd2bw.profile 1.2.0)" "$TMP/out" && ok || fail "$name: $(cat "$TMP/out")"
done
finish
