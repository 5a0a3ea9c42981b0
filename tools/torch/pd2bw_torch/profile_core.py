"""The library behind `pd2bw-torch profile` (import it from pd2bw_torch.profile): measures a PyTorch
model's layers and builds a pd2bw profile for `pd2bw plan`.

Use::

    from pd2bw_torch.profile import profile_layers, write_profile
    profile = profile_layers(nn.Sequential(...) or [layer, ...], sample_input, microbatches=[1, 2, 4],
                             loss_fn=F.cross_entropy, target=labels)
    write_profile(profile, "profile.json")

``sample_input``: the first layer's input, batch first (a tensor or a tuple of them; its rows are cycled
to make each microbatch), or a function ``b -> input``; ``target`` the same for the loss. Each layer
is called with the previous layer's output (a tuple is spread into arguments). With ``loss_fn`` the last
layer ends in ``loss_fn(output, target)``, as pd2bw's head ends in its loss. Every layer is measured at
every microbatch size (profile_measure.py): forward, backward, recompute and the backward's halves, the
bytes in, out and stashed, and its parameters and optimizer state (AdamW's two moments or SGD's
momentum). The result is the profile as a dict, in the key order of schemas/profile.schema.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable, Sequence

import torch
from torch import nn

from pd2bw_torch import __version__
from pd2bw_torch.errors import UsageError
from pd2bw_torch.profile_args import check_microbatches
from pd2bw_torch.profile_measure import (LayerCase, measure_layer, optimizer_state, stage_backward_input,
                                         tensors_of)

DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def schema_version(layers: list[dict], device: dict) -> str:
    """The lowest version with every key the profile holds: 1.2 brought the split backward's keys
    (bwd_input_ms, ...), 1.1 the GPU keys of the device."""
    if any("bwd_input_ms" in t for layer in layers for t in layer["per_microbatch"]):
        return "1.2.0"
    return "1.1.0" if len(device) > 2 else "1.0.0"


def _microbatch_of(value, b: int):
    """Rows of a batch-first tensor (or tuple) cycled to b rows; a function is called with b."""
    if callable(value) and not isinstance(value, torch.Tensor):
        return value(b)
    if isinstance(value, (tuple, list)):
        return type(value)(_microbatch_of(v, b) for v in value)
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value[torch.arange(b, device=value.device) % value.shape[0]]
    return value


def _as_args(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _layer_list(layers, names, kinds):
    if isinstance(layers, nn.Sequential):
        pairs = list(layers.named_children())
        mods, default_names = [m for _, m in pairs], [n for n, _ in pairs]
    else:
        mods = list(layers)
        default_names = [f"layer.{i}" for i in range(len(mods))]
    if not mods:
        raise UsageError("the model has no layers")
    names = list(names) if names is not None else default_names
    kinds = list(kinds) if kinds is not None else [type(m).__name__.lower() for m in mods]
    if len(names) != len(mods) or len(kinds) != len(mods) or len(set(names)) != len(names):
        raise UsageError(f"{len(mods)} layers need as many unique names and kinds, got {len(names)} names and "
                         f"{len(kinds)} kinds")
    return mods, names, kinds


def _param_bytes(layer: nn.Module) -> int:
    seen = {p.untyped_storage().data_ptr(): p.numel() * p.element_size() for p in layer.parameters()}
    return sum(seen.values())


def _dtype_of(mods: list[nn.Module]) -> str:
    for m in mods:
        for p in m.parameters():
            if p.dtype not in DTYPES:
                raise UsageError(f"parameters of dtype {p.dtype} cannot be profiled; pd2bw plans fp32, bf16 or fp16")
            return DTYPES[p.dtype]
    return "fp32"


def device_desc(device: torch.device) -> dict:
    """The profile's device: a GPU's properties, or the host ("cpu") with its physical memory."""
    if device.type == "cuda":
        prop = torch.cuda.get_device_properties(device)
        return {"name": prop.name, "memory_bytes": int(prop.total_memory),
                "cuda_version": torch.version.cuda or "", "compute_capability": f"{prop.major}.{prop.minor}",
                "multiprocessors": int(prop.multi_processor_count)}
    return {"name": "cpu", "memory_bytes": os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")}


def _git_sha() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return (out.stdout.strip() or "unknown") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def method_notes(device: torch.device, warmup: int, iters: int, optimizer: str) -> str:
    clock = "CUDA events" if device.type == "cuda" else f"time.perf_counter ({torch.get_num_threads()} torch threads)"
    split = ("The backward's halves are torch.distributed.pipelining's stage_backward_input (B) and "
             "stage_backward_weight (W); the first layer takes no input gradient, so its B is 0 and W its whole "
             "backward." if stage_backward_input is not None else
             "This torch has no stage_backward_input, so the backward was not timed in halves.")
    return (f"Measured by pd2bw-torch profile with PyTorch {torch.__version__} on {device}, every layer at every "
            f"microbatch size with {clock}: {warmup} warm-up forward+backward pairs, then {iters} timed forwards, "
            "backwards and recomputes (a second forward), each from a fresh autograd graph; fwd_ms/bwd_ms are "
            "medians (with min and p90). " + split + " stash_bytes: the distinct storages autograd saved for the "
            "backward (saved_tensors_hooks; parameters and buffers left out); bwd_weight_stash_bytes: the saved "
            "storages still held after B plus the gradients B kept for W. input_bytes/output_bytes: every "
            "tensor the layer takes/returns (the last layer returns its loss). param_bytes: the layer's "
            f"parameters; optimizer_bytes: the state of torch.optim.{'AdamW' if optimizer == 'adamw' else 'SGD'} "
            "after one step (step counters left out), update_ms its step.")


def _measure_all(mods, names, sample_input, sizes, loss_fn, target, warmup, iters, device, progress):
    """per_microbatch lists, one per layer: each layer (in training mode) is fed the previous layer's
    output at every microbatch size."""
    for m in mods:
        m.train()
    per_layer: list[list[dict]] = [[] for _ in mods]
    for b in sizes:
        x = _as_args(_microbatch_of(sample_input, b))
        tgt = _microbatch_of(target, b) if loss_fn is not None else None
        for i, layer in enumerate(mods):
            if progress:
                progress(f"{names[i]} b={b}")
            last = i == len(mods) - 1 and loss_fn is not None
            case = LayerCase(layer, x, b, loss_fn if last else None, tgt if last else None, input_grad=i > 0)
            per_layer[i].append(measure_layer(case, warmup, iters, device))
            with torch.no_grad():
                x = _as_args(layer(*x))
    return per_layer


def profile_layers(layers, sample_input, microbatches: Sequence[int] | None = None, *,
                   loss_fn: Callable | None = None, target=None, names=None, kinds=None, model: dict | None = None,
                   warmup: int = 2, iters: int = 7, optimizer: str = "adamw", device: torch.device | None = None,
                   command_line: str = "", progress: Callable[[str], None] | None = None) -> dict:
    """Measures every layer at every microbatch size; returns the pd2bw profile as a dict (see the module
    comment). ``model``: the profile's model description (kind, name, blocks, d_model, heads, seq_len,
    vocab, and optionally tie_embeddings, ln); by default a "torch" model of len(layers) - 2 blocks.
    Raises UsageError for bad arguments."""
    mods, names, kinds = _layer_list(layers, names, kinds)
    if microbatches is None:
        first = tensors_of(sample_input)
        if callable(sample_input) or not first:
            raise UsageError("give the microbatch sizes, or a batch-first tensor as the sample input")
        microbatches = [first[0].shape[0]]
    sizes = check_microbatches(microbatches)
    if warmup < 0 or iters <= 0:
        raise UsageError(f"warm-up runs must be >= 0 and timed runs > 0, got {warmup} and {iters}")
    if optimizer not in ("adamw", "sgd"):
        raise UsageError(f"the optimizer must be adamw or sgd, got {optimizer}")
    if device is None:
        params = [p for m in mods for p in m.parameters()]
        device = params[0].device if params else torch.device("cpu")
    per_layer = _measure_all(mods, names, sample_input, sizes, loss_fn, target, warmup, iters, device, progress)
    out_layers = []
    for i, layer in enumerate(mods):
        state_bytes, update_ms = optimizer_state(layer, optimizer, warmup, iters, device)
        entry = {"name": names[i], "kind": kinds[i], "param_bytes": _param_bytes(layer), "per_microbatch": per_layer[i]}
        if state_bytes > 0:
            entry["optimizer_bytes"] = state_bytes
        if update_ms > 0:
            entry["update_ms"] = update_ms
        out_layers.append(entry)
    desc = dict(model or {"kind": "torch", "name": "torch-model", "blocks": max(1, len(mods) - 2), "d_model": 1,
                          "heads": 1, "seq_len": 1, "vocab": 1})
    tail = {k: desc.pop(k) for k in ("tie_embeddings", "ln") if k in desc}
    desc["dtype"] = _dtype_of(mods)
    desc.update(tail)
    dev = device_desc(device)
    return {"schema": "pd2bw.profile", "schema_version": schema_version(out_layers, dev),
            "provenance": {"tool": "pd2bw-torch profile", "version": f"{__version__} (torch {torch.__version__})",
                           "git_sha": _git_sha(), "command_line": command_line,
                           "notes": method_notes(device, warmup, iters, optimizer)},
            "model": desc, "device": dev, "microbatch_sizes": sizes, "layers": out_layers,
            "links": []}


def dump_profile(profile: dict) -> str:
    return json.dumps(profile, indent=2) + "\n"


def write_profile(profile: dict, path: str) -> None:
    """Writes the profile to ``path`` ("-": stdout), replacing a file atomically. Raises UsageError."""
    text = dump_profile(profile)
    if path == "-":
        sys.stdout.write(text)
        return
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UsageError(f"cannot write the profile to {path}: {e.strerror}") from e
