"""Compares a `pd2bw-torch run` with the `pd2bw train` run it continues.

usage: compare_torch_run.py PD2BW_LOG TORCH_LOG PD2BW_STEP_DIR TORCH_SAVE_DIR FIRST_STEP LAST_STEP

- losses: the torch log must have exactly steps FIRST_STEP..LAST_STEP (1-based, as pd2bw's log), each loss
  within a relative 1e-10 of pd2bw's loss of that step;
- weights: the tensors pd2bw's checkpoint of LAST_STEP holds (current weights, not optimizer state) and
  the ones torch saved must have the same names and shapes, each element within 1e-10 absolute.

Both runs compute in float64 (pd2bw train --dtype double); they differ only in summation order (BLAS
kernels; torch scales gradients by 1/m after accumulating, pd2bw each microbatch's loss), which moves the
results by about 1e-15. A wrong formula, learning rate, data row or optimizer state moves them by more
than 1e-6. Exit 0 when all agree, 1 with the differences otherwise.
"""

import glob
import json
import os
import sys

from safetensors.torch import load_file

LOSS_RTOL = 1e-10
WEIGHT_ATOL = 1e-10


def read_log(path):
    with open(path, encoding="utf-8") as f:
        return {int(r["step"]): float(r["loss"]) for r in (json.loads(line) for line in f if line.strip())}


def read_weights(directory, current_only):
    out = {}
    files = sorted(glob.glob(os.path.join(directory, "stage-*.safetensors")))
    for path in files:
        out.update({k: v for k, v in load_file(path).items() if not current_only or "/" not in k})
    return out, len(files)


def main(argv):
    pd2bw_log, torch_log, step_dir, save_dir = argv[1:5]
    first, last = int(argv[5]), int(argv[6])
    errors = []
    ref, got = read_log(pd2bw_log), read_log(torch_log)
    if sorted(got) != list(range(first, last + 1)):
        errors.append(f"torch logged steps {sorted(got)}, expected {first}..{last}")
    for step in sorted(set(got) & set(ref)):
        if abs(got[step] - ref[step]) > LOSS_RTOL * abs(ref[step]):
            errors.append(f"step {step}: torch loss {got[step]!r}, pd2bw {ref[step]!r}")
    want, n_ref = read_weights(step_dir, True)
    have, n_got = read_weights(save_dir, False)
    if n_ref == 0 or n_got == 0:
        errors.append(f"no stage files ({n_ref} in {step_dir}, {n_got} in {save_dir})")
    if sorted(want) != sorted(have):
        errors.append(f"tensor names differ: only pd2bw {sorted(set(want) - set(have))}, "
                      f"only torch {sorted(set(have) - set(want))}")
    worst = 0.0
    for name in sorted(set(want) & set(have)):
        a, b = want[name].double(), have[name].double()
        if a.shape != b.shape:
            errors.append(f"{name}: shape {tuple(b.shape)}, pd2bw's {tuple(a.shape)}")
            continue
        diff = float((a - b).abs().max()) if a.numel() else 0.0
        worst = max(worst, diff)
        if not diff <= WEIGHT_ATOL:
            errors.append(f"{name}: max |torch - pd2bw| = {diff:.3e}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 1
    print(f"steps {first}..{last}: losses within {LOSS_RTOL:g} (rel), {len(want)} tensors within "
          f"{WEIGHT_ATOL:g} (worst {worst:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
