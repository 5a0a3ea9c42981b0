"""Adversarial cases for command-line flags, training data files and output paths.

Flags: every integer, unsigned and floating-point option of every subcommand (read from its --help) gets
values that are not numbers of its type or not finite; a few flags also get values outside their range.
Data: files that are not regular, empty, truncated, lying llm.c headers, tokens beyond the vocabulary.
Outputs: every output flag pointed at a directory, a missing directory, a path under a regular file.
"""

import json
import os
import re
import struct
import subprocess

from cases import Case, rotate

SUBCOMMANDS = ("profile", "plan", "simulate", "train")
BAD_NUMBERS = {
    "INT": ["nan", "1e3", "1.5", "9223372036854775808", "-9223372036854775809", "0x10", "ten", ""],
    "UINT": ["-1", "18446744073709551616", "1.5", "nan", "+-3", "seven"],
    "FLOAT": ["nan", "inf", "-inf", "1e400", "-1e999", "NaN", "fast", "1.5.5"],
}


def numeric_options(pd2bw, sub):
    """[(flag, type)] of the numeric options `pd2bw SUB --help` lists."""
    text = subprocess.run([pd2bw, sub, "--help"], capture_output=True, text=True, check=True).stdout
    found = []
    for m in re.finditer(r"^\s+(?:-\w,)?(--[\w-]+)(?:,--[\w-]+)*\s+(INT|UINT|FLOAT)\b", text, re.M):
        found.append((m.group(1), m.group(2)))
    return found


def base_argv(ws, sub, plan):
    """A command line of `sub` that would run, without the flag under test."""
    return {
        "profile": ["profile", "-o", ws.fresh("profile"), "-q"],
        "plan": ["plan", "--profile", str(ws.tiny_profile), "-o", ws.fresh("plan"), "-q"],
        "simulate": ["simulate", "--plan", plan, "--profile", str(ws.tiny_profile), "-q"],
        "train": ["train", "--plan", plan, "-q"],
    }[sub]


# Values in range for the parser but outside what the flag means; each must name the flag.
OUT_OF_RANGE = [
    ("train", ["--steps", "0"], "--steps"), ("train", ["--steps", "-5"], "--steps"),
    ("train", ["--lr", "0"], "--lr"), ("train", ["--lr", "-1"], "--lr"),
    ("train", ["--min-lr", "-1e-3"], "--min-lr"), ("train", ["--min-lr", "1"], "--min-lr"),
    ("train", ["--warmup", "-1"], "--warmup"), ("train", ["--weight-decay", "-0.1"], "--weight-decay"),
    ("train", ["--clip", "-1"], "--clip"), ("train", ["--keep", "0"], "--keep"),
    ("train", ["--checkpoint-every", "-2"], "--checkpoint-every"), ("train", ["--stop-after", "-1"], "--stop-after"),
    ("train", ["--checkpoint-every", "2"], "--checkpoint-every"), ("train", ["--resume"], "--resume"),
    ("train", ["--dtype", "fp8"], "--dtype"),
    ("plan", ["--global-batch", "0"], "--global-batch"), ("plan", ["--global-batch", "-8"], "--global-batch"),
    ("plan", ["--nodes", "0"], "--nodes"), ("plan", ["--gpus-per-node", "-1"], "--gpus-per-node"),
    ("plan", ["--top", "101"], "--top"), ("plan", ["--threads", "-1"], "--threads"),
    ("plan", ["--intra-gbps", "0"], "--intra-gbps"), ("plan", ["--inter-gbps", "-5"], "--inter-gbps"),
    ("plan", ["--intra-latency-us", "-1"], "--intra-latency-us"), ("plan", ["--depth", "-2"], "--depth"),
    ("plan", ["--device-memory", "nanGiB"], "--device-memory"), ("plan", ["--device-memory", "infGiB"], "--device-memory"),
    ("plan", ["--device-memory", "1e400"], "--device-memory"), ("plan", ["--device-memory", "99999999TiB"], "--device-memory"),
    ("plan", ["--reserve", "-1GiB"], "--reserve"), ("plan", ["--microbatch", "-2"], "--microbatch"),
    ("plan", ["--microbatch", "99999999999999999999"], "--microbatch"),
    ("simulate", ["--steps", "0"], "--steps"), ("simulate", ["--steps", "1001"], "--steps"),
    ("profile", ["--d-model", "0"], "--d-model"), ("profile", ["--heads", "3"], "heads"),
    ("profile", ["--d-model", "4611686018427387904"], "overflows int64"),
    ("profile", ["--vocab", "-1"], "vocab"), ("profile", ["--seq", "0"], "--seq"),
    ("profile", ["--iters", "0"], "--iters"), ("profile", ["--link-ranks", "1"], "--link-ranks"),
    ("profile", ["--link-max-bytes", "2GiB"], "--link-max-bytes"), ("profile", ["--microbatch", "0"], "--microbatch"),
]


def flag_cases(ws, plan):
    cases = []
    for sub in SUBCOMMANDS:
        for index, (flag, kind) in enumerate(numeric_options(ws.pd2bw, sub)):
            for value in rotate(BAD_NUMBERS[kind], 3 * index, 4):
                argv = base_argv(ws, sub, plan) + [flag, value]
                cases.append(Case("flags", f"{sub} {flag} {value!r}", argv, 2, re.escape(flag)))
    for sub, extra, fragment in OUT_OF_RANGE:
        cases.append(Case("flags", f"{sub} {' '.join(extra)}", base_argv(ws, sub, plan) + extra, 2, re.escape(fragment)))
    return cases


def llmc(count, tokens, magic=20240520, version=1):
    header = struct.pack("<256i", magic, version, count, *([0] * 253))
    return header + struct.pack(f"<{len(tokens)}H", *tokens)


def data_cases(ws, plan):
    train = ["train", "--plan", plan, "--steps", "1", "-q", "--data"]
    fifo = ws.fresh("fifo", "")
    os.mkfifo(fifo)
    sparse = ws.fresh("huge", ".bin")
    with open(sparse, "wb") as f:
        f.truncate(17 << 30)  # sparse: over the 16 GiB cap without using the disk
    files = [
        ("a FIFO", fifo, "it is a FIFO \\(named pipe\\), not a regular file"),
        ("/dev/zero", "/dev/zero", "\"/dev/zero\": it is a character device"),
        ("a directory", str(ws.root), "it is a directory"),
        ("a missing file", ws.fresh("missing", ".bin"), "No such file or directory"),
        ("a 17 GiB file", sparse, "larger than the 16 GiB"),
        ("an empty file", ws.write("empty", b"", ".bin"), "is empty"),
        ("a short text", ws.write("short", b"tiny", ".txt"), "has 4 tokens; a sequence needs 66"),
        ("a header only", ws.write("hdr", llmc(0, [])[:100], ".bin"), "shorter than the 1024-byte header"),
        ("a truncated header", ws.write("trunc", llmc(10, [1] * 10)[:600], ".bin"), "shorter than the 1024-byte header"),
        ("a count beyond the file", ws.write("count", llmc(1000, [1] * 10), ".bin"), "announces 1000 tokens"),
        ("a negative count", ws.write("neg", llmc(-5, [1] * 10), ".bin"), "token count is -5, must be > 0"),
        ("an odd trailing byte", ws.write("odd", llmc(10, [1] * 10) + b"x", ".bin"), "announces 10 tokens .* has 1045 bytes"),
        ("a token past GPT-2's vocabulary", ws.write("vocab", llmc(100, [60000] * 100), ".bin"),
         "token 60000 at index 0 is outside the GPT-2 vocabulary"),
        ("GPT-2 ids for a byte-level model", ws.write("gpt2", llmc(100, [300] * 100), ".bin"),
         "has token ids up to 300, but the model's vocabulary is 256"),
        ("version 2", ws.write("ver", llmc(100, [1] * 100, version=2), ".bin"), "version is 2"),
    ]
    return [Case("data", name, train + [path], 2, fragment) for name, path, fragment in files]


# A valid plan whose model is too large for int64 sizes: training must refuse it, naming the overflow
# (or, when the sizes fit, the host memory they would need).
OVERFLOW, MEMORY = "overflows int64", "needs at least .* of host memory"
BLOCKS = "/model/blocks: is .* but a gpt model of /num_layers"  # the plan checks, before any size
HUGE_MODELS = [
    ({"d_model": 2**40}, OVERFLOW), ({"d_model": 2**31, "heads": 2**31}, OVERFLOW), ({"vocab": 2**62}, OVERFLOW),
    ({"vocab": 2**40}, MEMORY), ({"blocks": 2**62}, BLOCKS), ({"blocks": 2**63 - 1}, BLOCKS),
    ({"blocks": 2**63 - 3}, BLOCKS), ({"seq_len": 2**61}, OVERFLOW), ({"seq_len": 2**56}, OVERFLOW),
    ({"d_model": 2**30, "vocab": 2**33}, OVERFLOW), ({"d_model": 3 * 2**30, "heads": 3}, OVERFLOW),
]


def size_cases(ws, plan):
    cases = []
    base = json.loads(open(plan).read())
    for change, fragment in HUGE_MODELS:
        p = json.loads(json.dumps(base))
        p["model"].update(change)
        # Kept consistent for the plan checks every verb runs, so the sizes themselves are what is refused.
        p["predictions"]["tokens_per_s"] = p["predictions"]["samples_per_s"] * p["model"]["seq_len"]
        path = ws.write("huge-plan", json.dumps(p))
        cases.append(Case("sizes", f"train a plan with {change}", ["train", "--plan", path, "--steps", "1", "-q"], 2,
                          fragment))
    return cases


def output_cases(ws, plan):
    blocker = ws.write("regular", "x", ".txt")
    targets = [
        ("a directory", str(ws.root), "it is a directory"),
        ("a missing directory", ws.path("no/such/dir/out.json"), "does not exist"),
        ("a path under a regular file", blocker + "/out.json", "is not a directory"),
        ("an empty path", "", "empty|--"),
    ]
    tiny = str(ws.tiny_profile)
    flags = [
        ("plan -o", lambda t: ["plan", "--profile", tiny, "-q", "-o", t], "-o"),
        ("profile -o", lambda t: ["profile", "-q", "--iters", "1", "-o", t], "-o"),
        ("simulate --trace", lambda t: ["simulate", "--plan", plan, "--profile", tiny, "-q", "--trace", t], "--trace"),
        ("simulate --svg", lambda t: ["simulate", "--plan", plan, "--profile", tiny, "-q", "--svg", t], "--svg"),
        ("simulate --json", lambda t: ["simulate", "--plan", plan, "--profile", tiny, "-q", "--json", t], "--json"),
        ("train --report", lambda t: ["train", "--plan", plan, "--steps", "1", "-q", "--report", t], "--report"),
        ("train --log", lambda t: ["train", "--plan", plan, "--steps", "1", "-q", "--log", t], "--log"),
        ("train --checkpoint-dir", lambda t: ["train", "--plan", plan, "--steps", "1", "-q", "--checkpoint-dir", t],
         "--checkpoint-dir"),
    ]
    # A checkpoint directory is made when missing (with its parents), and is itself a directory.
    dir_targets = [("a path under a regular file", blocker + "/ck", "which is a file, not a directory"),
                   ("a regular file", blocker, "is not a directory"), ("an empty path", "", "empty")]
    cases = []
    for flag_name, argv, flag_fragment in flags:
        for target_name, target, why in dir_targets if flag_name.endswith("--checkpoint-dir") else targets:
            fragment = f"({flag_fragment}).*({why})|({why}).*({flag_fragment})"
            cases.append(Case("output", f"{flag_name} to {target_name}", argv(target), 2, fragment))
    if os.geteuid() == 0:
        full = ws.fresh("full", "")
        os.mknod(full, 0o666 | 0o020000, os.makedev(1, 7))
        for flag_name, argv, _ in flags[:6]:
            cases.append(Case("output", f"{flag_name} to /dev/full (a mknod copy)", argv(full), 1,
                              "No space left on device"))
    return cases
