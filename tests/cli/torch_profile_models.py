"""Helper of torch_profile_models.sh, run by the torch venv's python with tools/torch on the path.

Usage: torch_profile_models.py OUT_DIR. Writes OUT_DIR/<model>.json for transformers' GPT-2 and BERT and
the package's plain models (through the command's own main, in one process: torch loads once) and
OUT_DIR/library.json from profile_layers() on a hand-written nn.Sequential; checks each profile's split
backward; and checks that the two halves the profiler times, run back to back, leave exactly the
parameter and input gradients of the whole backward. Prints what failed and exits 1.
"""

import json
import sys

import torch
import torch.nn.functional as F
from torch import nn

from pd2bw_torch.__main__ import main
from pd2bw_torch.profile import profile_layers, write_profile
from pd2bw_torch.profile_measure import LayerCase, _Bench

COMMON = ["--microbatch", "1,2", "--warmup", "1", "--iters", "3", "--threads", "1", "-q"]
MODELS = {
    "gpt2-hf": ["--blocks", "1", "--d-model", "32", "--heads", "2", "--seq", "16"],
    "bert-hf": ["--blocks", "1", "--d-model", "32", "--heads", "2", "--seq", "16"],
    "plain-mlp": ["--blocks", "2", "--d-model", "384", "--microbatch", "32,64"],
    "plain-convnet": ["--blocks", "1", "--d-model", "8", "--image", "16"],
}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def check_split(name, profile, layer_has_params):
    for i, layer in enumerate(profile["layers"]):
        for t in layer["per_microbatch"]:
            where = f"{name} {layer['name']} b={t['microbatch']}"
            check((t["bwd_input_ms"] > 0) == (i > 0), f"{where}: B {t['bwd_input_ms']} (0 only for the first layer)")
            has = layer_has_params[i]
            check((t["bwd_weight_ms"] > 0) == has, f"{where}: W {t['bwd_weight_ms']} with params={has}")
            check((t["bwd_weight_stash_bytes"] > 0) == has, f"{where}: kept for W {t['bwd_weight_stash_bytes']}")
            check(t["stash_bytes"] > 0 and t["output_bytes"] > 0 and t["fwd_ms"] > 0, f"{where}: sizes {t}")


def halves_match_whole(layer, x):
    """B then W leave the gradients one whole backward leaves (to 1e-5 relative)."""
    bench = _Bench(LayerCase(layer, (x,), x.shape[0]))  # one output gradient for both runs
    grads = []
    for split in (False, True):
        layer.zero_grad(set_to_none=True)
        bench.forward()
        leaves = bench.leaves
        if split:
            bench.backward_input()
            bench.backward_weight()
        else:
            bench.backward()
        grads.append([leaves[0].grad] + [p.grad for p in layer.parameters()])
    return all(a is not None and b is not None and torch.allclose(a, b, rtol=1e-5, atol=1e-7)
               for a, b in zip(*grads))


def run_models(out_dir):
    for model, flags in MODELS.items():
        path = f"{out_dir}/{model}.json"
        rc = main(["profile", "--model", model, *COMMON, *flags, "-o", path])
        check(rc == 0, f"{model}: exit {rc}")
        profile = json.load(open(path))
        check_split(model, profile, [True] * len(profile["layers"]))
    # Wide MLP blocks: the halves add up to about the whole backward (loose: torch's split walks the
    # autograd graph in Python, a small layer's B + W can take twice the whole).
    mlp = json.load(open(f"{out_dir}/plain-mlp.json"))
    blocks = [t for layer in mlp["layers"] if layer["kind"] == "block" for t in layer["per_microbatch"]]
    ratio = sum(t["bwd_input_ms"] + t["bwd_weight_ms"] for t in blocks) / sum(t["bwd_ms"] for t in blocks)
    print(f"plain-mlp blocks: (B + W) / whole backward = {ratio:.2f}")
    check(0.3 <= ratio <= 5, f"plain-mlp: (B + W) / backward = {ratio:.2f}, outside [0.3, 5]")


def run_library(out_dir):
    torch.manual_seed(1)
    seq = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    profile = profile_layers(seq, torch.randn(3, 8), [1, 2, 4], loss_fn=F.cross_entropy,
                             target=torch.tensor([0, 3, 1]), warmup=1, iters=3)
    write_profile(profile, f"{out_dir}/library.json")
    check([layer["name"] for layer in profile["layers"]] == ["0", "1", "2"], "library: names from the Sequential")
    check([layer["kind"] for layer in profile["layers"]] == ["linear", "relu", "linear"], "library: kinds")
    relu = profile["layers"][1]
    check(relu["param_bytes"] == 0 and "optimizer_bytes" not in relu, f"library: the ReLU has no weights: {relu}")
    check(profile["layers"][0]["optimizer_bytes"] == 2 * 4 * (8 * 32 + 32), "library: AdamW's two fp32 moments")
    check_split("library", profile, [True, False, True])
    for b, t in zip([1, 2, 4], profile["layers"][1]["per_microbatch"]):
        check(t["input_bytes"] == t["output_bytes"] == b * 32 * 4, f"library: relu bytes at b={b}: {t}")
    check(profile["layers"][2]["per_microbatch"][0]["output_bytes"] == 4, "library: the loss is one fp32")
    check(halves_match_whole(nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16)), torch.randn(5, 16)),
          "B then W differ from the whole backward")


if __name__ == "__main__":
    run_models(sys.argv[1])
    run_library(sys.argv[1])
    print("\n".join(failures))
    sys.exit(1 if failures else 0)
