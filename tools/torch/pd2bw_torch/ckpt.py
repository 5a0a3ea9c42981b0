"""A pd2bw checkpoint's files, read without torch: which step directory, its manifest, its stage files
and the names in their safetensors headers. (models/gpt.py loads the tensors themselves.)

Layout (README "checkpoint"): D/latest names the newest D/step-NNNNNN/, which holds manifest.json (step,
seed, dtype, data label, stage files) and one stage-NNN.safetensors per pipeline rank with the rank's
weights under their Hugging Face GPT-2 names, and "prev/", "optimizer.m/", "optimizer.v/" entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into the model (missing file, tensor or shape mismatch)."""


def resolve_checkpoint_dir(ckpt_dir: str) -> str:
    """A step directory: ckpt_dir itself when it holds manifest.json, else the one its `latest` names."""
    if os.path.isfile(os.path.join(ckpt_dir, "manifest.json")):
        return ckpt_dir
    latest = os.path.join(ckpt_dir, "latest")
    if os.path.isfile(latest):
        with open(latest, encoding="utf-8") as f:
            step_dir = os.path.join(ckpt_dir, f.read().strip())
        if os.path.isfile(os.path.join(step_dir, "manifest.json")):
            return step_dir
    raise CheckpointError(f"{ckpt_dir} is not a pd2bw checkpoint (no manifest.json, no latest); give a "
                          "--checkpoint-dir of pd2bw train or one of its step-NNNNNN directories")


def read_manifest(ckpt_dir: str) -> tuple[str, dict, list[str]]:
    """(step directory, manifest, paths of its stage files), each file checked to exist and to have the
    sha256 the manifest records."""
    step_dir = resolve_checkpoint_dir(ckpt_dir)
    try:
        with open(os.path.join(step_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read the manifest of the checkpoint in {step_dir}: {e}") from None
    paths = []
    for st in manifest.get("stages", []):
        path = os.path.join(step_dir, str(st.get("file", "")))
        if not os.path.isfile(path):
            raise CheckpointError(f"the checkpoint in {step_dir} lacks the file of stage {st.get('stage')}: {path}")
        if "sha256" in st and _sha256(path) != st["sha256"]:
            raise CheckpointError(f"the checkpoint file {path} does not match its manifest's sha256: it was damaged "
                                  "after it was written; use another checkpoint")
        paths.append(path)
    if not paths:
        raise CheckpointError(f"the manifest of the checkpoint in {step_dir} lists no stage files")
    return step_dir, manifest, paths


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tensor_names(path: str) -> list[str]:
    """The tensor names in a safetensors file's header (8-byte little-endian length, then JSON)."""
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > os.path.getsize(path) - 8:
                raise ValueError(f"its header claims {n} bytes, more than the file holds")
            header = json.loads(f.read(n))
    except (OSError, struct.error, ValueError) as e:
        raise CheckpointError(f"{path} is not a safetensors file: {e}") from None
    return [k for k in header if k != "__metadata__"]


def checkpoint_layer_count(names) -> int:
    """The layer count (blocks + 2) of the gpt whose weight names these are (their h.{i}. prefixes)."""
    blocks = {int(n.split(".")[1]) for n in names if n.startswith("h.") and n.split(".")[1].isdigit()}
    return (max(blocks) + 1 if blocks else 0) + 2
