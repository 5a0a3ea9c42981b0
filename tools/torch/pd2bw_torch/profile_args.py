"""The flags of `pd2bw-torch profile` and their checks, without importing torch, so that a bad flag is
refused at once (torch takes seconds to import)."""

from __future__ import annotations

import argparse
import os
import re
from typing import Sequence

from pd2bw_torch.errors import UsageError

MODELS = ("gpt", "gpt2-hf", "bert-hf", "plain-mlp", "plain-convnet")
BERT_VOCAB = 260  # pd2bw's bert: 256 bytes and 4 special tokens


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Measure a PyTorch model's layers per microbatch size and write a profile for 'pd2bw plan'. "
                     "Times are medians in ms; sizes in bytes.")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="gpt", choices=MODELS,
                   help="gpt: pd2bw's GPT; gpt2-hf / bert-hf: transformers' GPT2LMHeadModel / BertForMaskedLM "
                        "(built locally, no download); plain-mlp / plain-convnet: plain PyTorch models (default gpt)")
    g.add_argument("--blocks", "--layers", type=int, default=4,
                   help="transformer blocks L (L + 2 layers: embedding, blocks, head); plain models: hidden "
                        "layers / residual blocks (default 4)")
    g.add_argument("--d-model", type=int, default=64, help="model width C; plain-convnet: channels (default 64)")
    g.add_argument("--heads", type=int, default=4, help="attention heads H, must divide C (default 4)")
    g.add_argument("--seq", type=int, default=64, help="tokens per sample T (default 64)")
    g.add_argument("--vocab", type=int, default=None, help=f"vocabulary size V (default 256; bert-hf {BERT_VOCAB})")
    g.add_argument("--classes", type=int, default=10, help="plain models: output classes (default 10)")
    g.add_argument("--image", type=int, default=32, help="plain-convnet: image side, pixels (default 32)")
    g.add_argument("--tie-embeddings", action="store_true", help="gpt: the head reuses the token table")
    g.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="gpt: load the weights of a pd2bw checkpoint (a --checkpoint-dir of pd2bw train)")
    g.add_argument("--name", default=None, help="model name in the profile (default <model>-L<blocks>-C<d-model>)")
    g = p.add_argument_group("measurement")
    g.add_argument("--microbatch", default="1,2,4,8",
                   help="microbatch sizes to time, samples, comma-separated, strictly increasing (default 1,2,4,8)")
    g.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (layers timed with CUDA events) (default cpu)")
    g.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"), help="compute dtype (default fp32)")
    g.add_argument("--warmup", type=int, default=2, help="untimed forward+backward runs per layer and size (default 2)")
    g.add_argument("--iters", type=int, default=7, help="timed runs per layer and size; the median is kept (default 7)")
    g.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"),
                   help="optimizer whose state is measured: adamw (2 moments) | sgd (momentum) (default adamw)")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads (default 0: torch's choice)")
    g.add_argument("--seed", type=int, default=1234, help="seed of the weights and the batches (default 1234)")
    g.add_argument("--links-from", default=None, metavar="PROFILE",
                   help="copy the measured links of this pd2bw profile (default none: plan with --cluster or flags)")
    p.add_argument("-o", "--output", default="profile.json", help="where to write the profile ('-' for stdout)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


def check_microbatches(sizes: Sequence[int]) -> list[int]:
    sizes = list(sizes)
    if not sizes or any(int(b) <= 0 for b in sizes) or any(b2 <= b1 for b1, b2 in zip(sizes, sizes[1:])):
        raise UsageError(f"microbatch sizes must be > 0 and strictly increasing, got {sizes}")
    return [int(b) for b in sizes]


def parse_microbatches(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"--microbatch must be comma-separated integers, got '{text}'") from None
    try:
        return check_microbatches(sizes)
    except UsageError:
        raise UsageError(f"--microbatch sizes must be > 0 and strictly increasing, got '{text}'") from None


def check_arguments(a: argparse.Namespace) -> None:
    """Every check that needs no torch. Raises UsageError naming the flag."""
    a.microbatches = parse_microbatches(a.microbatch)
    for flag, value in (("--blocks", a.blocks), ("--d-model", a.d_model), ("--heads", a.heads), ("--seq", a.seq),
                        ("--classes", a.classes), ("--image", a.image), ("--iters", a.iters)):
        if value <= 0:
            raise UsageError(f"{flag} must be > 0, got {value}")
    for flag, value in (("--warmup", a.warmup), ("--threads", a.threads)):
        if value < 0:
            raise UsageError(f"{flag} must be >= 0, got {value}")
    if a.vocab is not None and a.vocab <= 1:
        raise UsageError(f"--vocab must be > 1, got {a.vocab}")
    if a.model in ("gpt", "gpt2-hf", "bert-hf") and a.d_model % a.heads:
        raise UsageError(f"--heads {a.heads} does not divide --d-model {a.d_model}")
    if a.model != "gpt" and (a.tie_embeddings or a.checkpoint):
        raise UsageError(f"--tie-embeddings and --checkpoint are for --model gpt, not {a.model}")
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", a.device):
        raise UsageError(f"--device must be cpu or cuda[:N], got '{a.device}'")
    if a.output != "-":
        out_dir = os.path.dirname(os.path.abspath(a.output))
        if not os.path.isdir(out_dir):
            raise UsageError(f"-o {a.output}: the directory {out_dir} does not exist")
