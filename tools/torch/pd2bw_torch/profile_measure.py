"""Measures one PyTorch layer at one microbatch size, the way `pd2bw profile` measures its own layers.

``measure_layer(case, warmup, iters)`` returns one ``per_microbatch`` entry of a pd2bw profile (times in
ms, sizes in bytes, for one microbatch): the forward, the backward and a recompute (a second forward, as
activation checkpointing runs it), each from a fresh autograd graph, reported as median, min and p90 of
``iters`` timed runs after ``warmup`` untimed forward+backward pairs; the backward's two halves, input
gradient (B) and weight gradients (W), run apart with ``torch.distributed.pipelining``'s own
``stage_backward_input`` / ``stage_backward_weight`` (what its zero-bubble schedules run); and the bytes:
input and output (every tensor the layer takes and returns), the stash (the storages autograd saves for
the backward, each counted once, parameters and buffers left out) and the bytes kept from the end of B to
the end of W. Times come from CUDA events on a GPU and ``time.perf_counter`` on the CPU.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

try:  # PyTorch's split backward (2.4+); without it the halves are not measured.
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
except ImportError:  # pragma: no cover - depends on the installed torch
    stage_backward_input = stage_backward_weight = None

# pd2bw's floor for a measured time (profile times must be > 0).
MIN_MS = 1e-6


@dataclass
class LayerCase:
    """One layer at one microbatch size. ``inputs``: the layer's positional arguments (detached tensors,
    batch first); ``loss_fn(output, target)``, set for the last layer only, makes the layer end in a
    scalar loss as pd2bw's head does (its time then counts in the layer's forward and backward).
    ``input_grad``: whether the backward computes the input's gradient (not for the first layer, whose
    input is data: its B half is empty and W its whole backward)."""

    layer: nn.Module
    inputs: tuple
    microbatch: int
    loss_fn: Callable | None = None
    target: torch.Tensor | None = None
    input_grad: bool = True


def spread(samples: list[float]) -> tuple[float, float, float]:
    """(median, min, p90) as `pd2bw profile` reports them: p90 is the nearest-rank 90th percentile."""
    s = sorted(samples)
    n = len(s)
    median = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    p90 = s[max(math.ceil(0.9 * n), 1) - 1]
    return median, s[0], p90


class Timer:
    """Times a call in ms: CUDA events on the current stream for a GPU, the host clock otherwise."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return max(MIN_MS, start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return max(MIN_MS, (time.perf_counter() - t0) * 1e3)


def tensors_of(value) -> list[torch.Tensor]:
    """The tensors in a layer's argument or result: a tensor, or a (nested) tuple/list of them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v)]
    return []


def nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def storage_key(t: torch.Tensor) -> tuple:
    s = t.untyped_storage()
    return (t.device.type, t.device.index, s.data_ptr(), s.nbytes())


def persistent_storages(layer: nn.Module) -> set:
    """The layer's parameters and buffers: weights, not stash."""
    return {storage_key(t) for t in list(layer.parameters()) + list(layer.buffers())}


class _Saved:
    """What the pack hook hands autograd: the saved tensor, in an object a weak reference can watch, so
    that after the B half we can see which saved tensors the graph still keeps for W."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor


def _forward(case: LayerCase):
    """One forward from fresh leaves: (leaf inputs that take a gradient, output tensors that carry one)."""
    args = [x.detach().requires_grad_(case.input_grad and x.is_floating_point()) if isinstance(x, torch.Tensor)
            else x for x in case.inputs]
    out = case.layer(*args)
    if case.loss_fn is not None:
        out = case.loss_fn(out, case.target)
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = [t for t in tensors_of(out) if t.requires_grad]
    return leaves, outs


class _Bench:
    """The layer's forward, backward and halves with the output gradients fixed up front."""

    def __init__(self, case: LayerCase):
        self.case = case
        self.params = [p for p in case.layer.parameters() if p.requires_grad]
        leaves, outs = _forward(case)
        self.has_input_grad = bool(leaves)
        # The last layer's loss starts from d(loss) = 1, as pd2bw's head; other layers get a random
        # output gradient, as a stage receives from the next one.
        self.grad_outs = None if case.loss_fn is not None else [torch.randn_like(o) for o in outs]
        self.leaves = self.outs = None
        self.param_groups = None

    def forward(self) -> None:
        self.leaves, self.outs = _forward(self.case)

    def backward(self) -> None:
        if self.outs:
            torch.autograd.backward(self.outs, self.grad_outs)
        self.drop()

    def backward_input(self) -> None:
        """B: the input gradients; keeps what W needs in param_groups (empty without an input gradient)."""
        if not self.has_input_grad or not self.outs:
            return
        _, self.param_groups = stage_backward_input(self.outs, self.grad_outs, self.leaves, iter(self.params))
        self.outs = None

    def backward_weight(self) -> None:
        """W: the weight gradients (the whole backward for a layer without an input gradient)."""
        if not self.has_input_grad:
            self.backward()
            return
        if self.param_groups:
            stage_backward_weight(iter(self.params), self.param_groups)
        self.drop()

    def drop(self) -> None:
        self.leaves = self.outs = self.param_groups = None


def _measure_stash(bench: _Bench, skip: set, split: bool) -> tuple[int, int]:
    """(stash bytes after a forward, bytes still kept after its B half): the distinct storages of the
    tensors autograd saved (skipping the layer's weights), plus, after B, the gradients kept for W."""
    held: list[weakref.ref] = []

    def pack(t: torch.Tensor):
        box = _Saved(t)
        held.append(weakref.ref(box))
        return box

    def unpack(box: _Saved) -> torch.Tensor:
        return box.tensor

    def live_bytes(extra: list[torch.Tensor]) -> int:
        seen: dict[tuple, int] = {}
        for ref in held:
            box = ref()
            if box is not None and box.tensor.layout == torch.strided:
                key = storage_key(box.tensor)
                if key not in skip:
                    seen[key] = key[3]
        for t in extra:
            seen[storage_key(t)] = storage_key(t)[3]
        return sum(seen.values())

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        bench.forward()
    stash = live_bytes([])
    if not split:
        bench.drop()
        return stash, 0
    if not bench.has_input_grad:
        kept = stash  # no B: everything waits for W
    elif not bench.params:
        bench.backward_input()
        kept = 0  # no W: nothing waits
    else:
        bench.backward_input()
        grads = [g for group in bench.param_groups or [] for gs in group.get("grads") or []
                 for g in (gs or ()) if isinstance(g, torch.Tensor)]
        kept = live_bytes(grads)
    bench.drop()
    return stash, kept


def measure_layer(case: LayerCase, warmup: int, iters: int, device: torch.device) -> dict:
    """One ``per_microbatch`` entry of a pd2bw profile for ``case`` (see the module comment)."""
    bench = _Bench(case)
    timer = Timer(device)
    for _ in range(warmup):
        bench.forward()
        bench.backward()
    split = stage_backward_input is not None
    stash, kept = _measure_stash(bench, persistent_storages(case.layer), split)
    fwd, bwd, rec = [], [], []
    for _ in range(iters):
        fwd.append(timer(bench.forward))
        bwd.append(timer(bench.backward))
        rec.append(timer(bench.forward))
        bench.drop()
    with torch.no_grad():  # what the layer hands on: every tensor of its result (the loss, for the last)
        out = case.layer(*case.inputs)
        out_bytes = nbytes(tensors_of(out if case.loss_fn is None else case.loss_fn(out, case.target)))
        del out
    (f_med, f_min, f_p90), (b_med, b_min, b_p90) = spread(fwd), spread(bwd)
    entry = {"microbatch": case.microbatch, "fwd_ms": f_med, "bwd_ms": b_med,
             "input_bytes": nbytes(tensors_of(case.inputs)), "output_bytes": out_bytes, "stash_bytes": stash,
             "fwd_ms_min": f_min, "fwd_ms_p90": f_p90, "bwd_ms_min": b_min, "bwd_ms_p90": b_p90,
             "recompute_ms": spread(rec)[0]}
    if split:
        b_half, w_half = [], []
        for _ in range(iters):
            bench.forward()
            b_half.append(timer(bench.backward_input))
            w_half.append(timer(bench.backward_weight))
        entry["bwd_input_ms"] = spread(b_half)[0] if bench.has_input_grad else 0.0
        entry["bwd_weight_ms"] = spread(w_half)[0] if bench.params else 0.0
        entry["bwd_weight_stash_bytes"] = kept
    return entry


def optimizer_state(layer: nn.Module, optimizer: str, warmup: int, iters: int, device: torch.device):
    """(state bytes, median ms of one step) of the optimizer pd2bw plans with, over the layer's parameters:
    AdamW's two moments or SGD's momentum, measured from the optimizer's own state after a step (its
    per-tensor step counters left out). (0, 0.0) for a layer without parameters."""
    params = [p for p in layer.parameters() if p.requires_grad]
    if not params:
        return 0, 0.0
    saved = [p.detach().clone() for p in params]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3)
    else:
        opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    timer = Timer(device)
    samples = [timer(opt.step) for _ in range(warmup + iters)][warmup:]
    state = [t for st in opt.state.values() for k, t in st.items()
             if k != "step" and isinstance(t, torch.Tensor)]
    state_bytes = nbytes(state)
    with torch.no_grad():  # leave the weights and gradients as they were
        for p, s, g in zip(params, saved, grads):
            p.copy_(s)
            p.grad = g
    return state_bytes, spread(samples)[0]
