#!/usr/bin/env bash
# run_bert_parity.sh BERT_DUMP OUT_DIR: writes the pd2bw BERT cases with BERT_DUMP into OUT_DIR, then checks
# them with bert_parity.py under the torch venv's python: $PD2BW_TORCH_PYTHON, else
# ~/.cache/pd2bw/torch-venv/bin/python. Exits 77 (ctest: skipped) when that python or its torch and
# safetensors are missing.
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: run_bert_parity.sh BERT_DUMP OUT_DIR" >&2
  exit 2
fi
dump=$1
out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PD2BW_TORCH_PYTHON:-$HOME/.cache/pd2bw/torch-venv/bin/python}
if [[ ! -x $python ]]; then
  echo "skipped: no torch python at $python (set PD2BW_TORCH_PYTHON)"
  exit 77
fi
if ! "$python" -c 'import torch, safetensors' 2>/dev/null; then
  echo "skipped: $python cannot import torch and safetensors"
  exit 77
fi
rm -rf "$out"
mkdir -p "$out"
"$dump" "$out"
# The parity script reports failures with exit 1; keep any other code (77 included) from reading as a skip.
rc=0
"$python" "$here/bert_parity.py" "$out" || rc=$?
if [[ $rc -ne 0 ]]; then
  exit 1
fi
