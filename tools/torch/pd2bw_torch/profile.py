"""`pd2bw-torch profile`: measures a PyTorch model's layers and writes a pd2bw profile.json for `pd2bw plan`.

Command line: ``pd2bw-torch profile --model gpt|gpt2-hf|bert-hf|plain-mlp|plain-convnet [sizes]
--microbatch 1,2,4 -o profile.json`` (``--help`` lists the flags with their units).

Library (profile_core.py, imported on first use so that the command checks its flags before torch loads)::

    from pd2bw_torch.profile import profile_layers, write_profile
    profile = profile_layers(nn.Sequential(...) or [layer, ...], sample_input, microbatches=[1, 2, 4],
                             loss_fn=F.cross_entropy, target=labels)
    write_profile(profile, "profile.json")
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from pd2bw_torch.errors import UsageError
from pd2bw_torch.profile_args import add_arguments, check_arguments

__all__ = ["add_arguments", "main", "profile_layers", "write_profile", "dump_profile", "device_desc"]
_LIBRARY = ("profile_layers", "write_profile", "dump_profile", "device_desc")


def __getattr__(name: str):
    if name in _LIBRARY:
        from pd2bw_torch import profile_core

        return getattr(profile_core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _links_from(path: str) -> list:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"--links-from {path}: cannot read it as JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != "pd2bw.profile" or not isinstance(doc.get("links"), list):
        raise UsageError(f"--links-from {path}: not a pd2bw profile with links; give one written by `pd2bw profile`")
    return doc["links"]


def _summary(profile: dict) -> str:
    rows = [f"{'layer':<24} {'b':>3} {'fwd ms':>8} {'bwd ms':>8} {'B (in) ms':>10} {'W (wt) ms':>10} "
            f"{'stash B':>10} {'params B':>10}"]
    for layer in profile["layers"]:
        for t in layer["per_microbatch"]:
            rows.append(f"{layer['name'][:24]:<24} {t['microbatch']:>3} {t['fwd_ms']:>8.3f} {t['bwd_ms']:>8.3f} "
                        f"{t.get('bwd_input_ms', 0):>10.3f} {t.get('bwd_weight_ms', 0):>10.3f} "
                        f"{t['stash_bytes']:>10} {layer['param_bytes']:>10}")
    return "\n".join(rows)


def main(args: argparse.Namespace) -> int:
    check_arguments(args)
    links = _links_from(args.links_from) if args.links_from else []

    import torch

    from pd2bw_torch.profile_core import profile_layers, write_profile
    from pd2bw_torch.profile_models import build_model

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: this torch sees no GPU; profile on a machine with one, or with --device cpu")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {args.device}: this machine has {torch.cuda.device_count()} GPU(s), from cuda:0")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    spec = build_model(args, device)
    layers = [m.to(device=device, dtype=dtype) for m in spec.layers]

    def first_input(b: int):
        x = spec.make_input(b)
        return x.to(dtype) if x.is_floating_point() else x

    say = None if args.quiet else (lambda what: print(f"pd2bw-torch profile: {what}", file=sys.stderr))
    profile = profile_layers(layers, first_input, args.microbatches, loss_fn=spec.loss_fn, target=spec.make_target,
                             names=spec.names, kinds=spec.kinds, model=spec.model, warmup=args.warmup,
                             iters=args.iters, optimizer=args.optimizer, device=device,
                             command_line=shlex.join(["pd2bw-torch", "profile", *sys.argv[2:]]), progress=say)
    profile["links"] = links
    write_profile(profile, args.output)
    if not args.quiet:
        print(_summary(profile), file=sys.stderr)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
