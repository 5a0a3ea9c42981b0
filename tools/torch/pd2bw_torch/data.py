"""pd2bw train's training data in Python: the same token files and the same stateless sampler.

pd2bw picks row s of microbatch k of optimizer step j (0-based) on data-parallel replica r as the window
of seq tokens starting at offset row_seed(seed, TAG, j, k, r, s) mod (size - seq), the targets being the
window shifted by one token (executor/src/data.cpp, rng.cpp). That is integer arithmetic only, so it is
reproduced here exactly rather than dumped from the trainer: any deviation changes the losses, which the
round-trip test compares step by step.

Sources, as pd2bw train's --data: an llm.c token file (header of 256 little-endian int32, magic 20240520,
version 1, token count; then uint16 tokens, vocab 50257) or any other file's bytes (vocab 256). pd2bw's
built-in corpus lives only inside the pd2bw binary: train pd2bw with --data FILE to compare.
"""

from __future__ import annotations

import os

import numpy as np

from pd2bw_torch.errors import UsageError

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_DATA_TAG = 0x7064326277646174  # "pd2bwdat"
LLMC_MAGIC = 20240520
LLMC_HEADER_BYTES = 1024
GPT2_VOCAB = 50257
BYTE_VOCAB = 256


def _mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def row_seed(seed: int, tag: int, step: int, microbatch: int, replica: int, row: int) -> int:
    """pd2bw's rng.cpp row_seed: one splitmix64 step per value, chained."""
    h = seed & _MASK
    for value in (tag, step, microbatch, replica, row):
        state = ((h ^ (value & _MASK)) + _GOLDEN) & _MASK
        h = _mix64(state)
    return h


class TokenData:
    """A token stream and its vocabulary, read as pd2bw's TokenData::open reads a file."""

    def __init__(self, path: str):
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise UsageError(f"cannot read the training data {path}: {e.strerror}") from None
        if not raw:
            raise UsageError(f"training data {path} is empty; give the file pd2bw train read with --data")
        self.label = path
        if len(raw) >= 4 and int.from_bytes(raw[:4], "little") == LLMC_MAGIC:
            header = np.frombuffer(raw[:LLMC_HEADER_BYTES], dtype="<i4") if len(raw) >= LLMC_HEADER_BYTES else None
            count = int(header[2]) if header is not None else -1
            if header is None or header[1] != 1 or count <= 0 or len(raw) != LLMC_HEADER_BYTES + 2 * count:
                raise UsageError(f"{path}: not a valid llm.c token file (bad header or length)")
            self.tokens = np.frombuffer(raw[LLMC_HEADER_BYTES:], dtype="<u2").astype(np.int64)
            self.vocab = GPT2_VOCAB
        else:
            self.tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.int64)
            self.vocab = BYTE_VOCAB

    def sample(self, seed: int, step: int, microbatch: int, replica: int, b: int, seq: int):
        """(tokens, targets), each a (b, seq) int64 array: pd2bw's TokenData::sample."""
        size = len(self.tokens)
        if size < seq + 2:
            raise UsageError(f"training data {self.label} has {size} tokens, too few for sequences of {seq}")
        offsets = [row_seed(seed, _DATA_TAG, step, microbatch, replica, s) % (size - seq) for s in range(b)]
        rows = np.stack([self.tokens[o:o + seq + 1] for o in offsets])
        return rows[:, :seq], rows[:, 1:]


def data_path(given: str | None, manifest: dict) -> str:
    """--data if given, else the file the checkpoint's trainer read (its manifest's data label)."""
    if given:
        return given
    label = manifest.get("data_label", "")
    if label and label != "built-in corpus" and os.path.isfile(label):
        return label
    if label == "built-in corpus":
        raise UsageError("the checkpoint was trained on pd2bw's built-in corpus, which only the pd2bw binary "
                         "holds; train with pd2bw train --data FILE and give the same --data FILE here")
    raise UsageError(f"no --data given and the checkpoint's data file '{label}' is not readable here; give "
                     "--data FILE, the file pd2bw train read")
