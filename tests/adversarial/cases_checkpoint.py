"""Adversarial cases for checkpoint directories: a real checkpoint (made at start-up) is copied and
damaged - every manifest field replaced by a value of the wrong type or range, removed or joined by an
unknown key; another run's identity; shards missing, truncated, flipped, replaced by a directory, a FIFO
or a link to the wrong shard; a manifest that is a FIFO or a directory; odd `latest` pointers and lock
files - and `train --resume` must refuse before the first step (exit 2, naming what is wrong) without
changing a file of the checkpoint. A stale or garbled `latest` is not an error: the newest complete
checkpoint resumes.
"""

import copy
import hashlib
import json
import os
import re
import shutil

from cases import Case, get_at, pattern_of, pointer_fragment, rotate, set_at, walk

# Keys a manifest may lack (older writers did not record them): "model", the model family, which a resume
# compares only when present.
OPTIONAL_MANIFEST_KEYS = ("model",)


def hostile_manifest_values(value):
    """Values the manifest reader can never accept (its strings are free text except a few)."""
    if isinstance(value, bool):
        return ["yes"]
    if isinstance(value, int):
        return [-1, 1.5, str(value), None, 2**64]
    if isinstance(value, str):
        return [5, None, []]
    if isinstance(value, list):
        return [{}, "x"]
    if isinstance(value, dict):
        return [[], "x"]
    return []


def snapshot(directory):
    """sha256 of every file below `directory` except the lock, by relative path."""
    out = {}
    for root, _, names in os.walk(directory):
        for n in names:
            p = os.path.join(root, n)
            if n == ".lock" or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


class CheckpointCase(Case):
    """A case whose directory must hold the same files afterwards."""


def manifest_mutations(manifest):
    seen = set()
    for pointer, value in walk(manifest):
        pattern = pattern_of(pointer)
        if pointer == "" or pattern in seen:
            continue
        seen.add(pattern)
        for bad in rotate(hostile_manifest_values(value), len(seen), 2):
            m = copy.deepcopy(manifest)
            set_at(m, pointer, bad)
            yield f"manifest {pattern} = {json.dumps(bad)}", pointer_fragment(pointer), m
        if isinstance(value, dict):
            for key in value:
                m = copy.deepcopy(manifest)
                del get_at(m, pointer)[key]
                yield f"manifest {pattern}/{key} removed", re.escape(f"{pointer}/{key}: missing"), m
    for key in manifest:
        if key in OPTIONAL_MANIFEST_KEYS:
            continue
        m = copy.deepcopy(manifest)
        del m[key]
        yield f"manifest /{key} removed", re.escape(f"/{key}: missing"), m
    m = copy.deepcopy(manifest)
    m["zz_unknown"] = 1
    yield "manifest /zz_unknown added", re.escape("/zz_unknown: unknown key"), m
    for field, value, fragment in [
        ("plan_sha256", "a" * 64, "was written with plan sha256 aaaaaaaaaaaa"),
        ("seed", 7, "was written with --seed 7"),
        ("dtype", "double", "was written with --dtype double"),
        ("data_label", "other.txt", "was written with data other.txt"),
        ("width", 1, "was written with shape 2bw d=2 w=1"),
        ("schedule", "flush", "was written with shape flush"),
        ("model", "bert", "holds a bert model, but this plan's model is gpt"),
        ("step", 1, "says it holds step 1"),
        ("step", 9, "says it holds step 9"),
        ("schema_version", "2.0.0", "/schema_version: unsupported version"),
        ("schema", "pd2bw.plan", "/schema: expected \"pd2bw.checkpoint\""),
        ("stages", [], "/stages: has 0 entries"),
    ]:
        m = copy.deepcopy(manifest)
        m[field] = value
        yield f"manifest {field} = {json.dumps(value)[:24]}", re.escape(fragment), m
    for name in ["../stage-000.safetensors", "/etc/passwd", ".", "a/b"]:
        m = copy.deepcopy(manifest)
        m["stages"][0]["file"] = name
        yield f"manifest stage file {name!r}", re.escape("/stages/0/file: must be a file name"), m


def damage_file(step_dir, how):
    """Damages stage 1's shard of the step directory in one of several ways."""
    shard = os.path.join(step_dir, "stage-001.safetensors")
    if how == "missing":
        os.remove(shard)
    elif how == "truncated":
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) // 2)
    elif how == "flipped":
        with open(shard, "r+b") as f:
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 0x40]))
    elif how == "a directory":
        os.remove(shard)
        os.mkdir(shard)
    elif how == "a FIFO":
        os.remove(shard)
        os.mkfifo(shard)
    elif how == "a link to stage 0":
        os.remove(shard)
        os.symlink("stage-000.safetensors", shard)
    elif how == "empty":
        open(shard, "w").close()
    elif how == "a link to /dev/zero":
        os.remove(shard)
        os.symlink("/dev/zero", shard)
    elif how == "a shard of another step":
        # The same bytes but for the step the file records, with the manifest's sha256 made to match:
        # only the cross-check of the stage file's own record against the manifest can see it.
        data = open(shard, "rb").read()
        assert b'"step":"2"' in data
        data = data.replace(b'"step":"2"', b'"step":"1"', 1)
        open(shard, "wb").write(data)
        manifest_path = os.path.join(step_dir, "manifest.json")
        m = json.load(open(manifest_path))
        m["stages"][1]["sha256"] = hashlib.sha256(data).hexdigest()
        json.dump(m, open(manifest_path, "w"), indent=2)


SHARD_DAMAGE = {
    "missing": "lacks the file of stage 1",
    "truncated": "corrupt checkpoint",
    "flipped": "corrupt checkpoint",
    "a directory": "has as the file of stage 1 (stage-001.safetensors) a directory",
    "a FIFO": "has as the file of stage 1 (stage-001.safetensors) a FIFO",
    "a link to /dev/zero": "a symbolic link to /dev/zero, which is a device",
    "a shard of another step": "the stage file says it holds stage 1 at step 1, but the manifest puts it at stage 1, step 2",
    "a link to stage 0": "corrupt checkpoint",
    "empty": "corrupt checkpoint",
}


def checkpoint_cases(ws, plan, good):
    """good: a checkpoint directory of `plan` at step 2 (step-000002/)."""
    cases = []
    step = "step-000002"
    manifest_text = open(os.path.join(good, step, "manifest.json")).read()
    manifest = json.loads(manifest_text)

    def copy_of(label):
        d = ws.fresh("ck", "")
        shutil.copytree(good, d, symlinks=True)
        return d

    def add(label, directory, fragment, exit_code=2, steps="4"):
        argv = ["train", "--plan", plan, "--steps", steps, "--checkpoint-dir", directory, "--resume"]
        c = Case("checkpoint", label, argv, exit_code, fragment)
        c.snapshot_dir = directory
        c.snapshot = snapshot(directory) if exit_code != 0 else None
        cases.append(c)

    for label, fragment, m in manifest_mutations(manifest):
        d = copy_of(label)
        with open(os.path.join(d, step, "manifest.json"), "w") as f:
            json.dump(m, f, indent=2)
        add(label, d, fragment)
    for how, fragment in SHARD_DAMAGE.items():
        d = copy_of(how)
        damage_file(os.path.join(d, step), how)
        add(f"stage file {how}", d, re.escape(fragment))
    broken = [
        ("manifest truncated", lambda d: open(os.path.join(d, step, "manifest.json"), "w").write(manifest_text[:100]),
         "not valid JSON"),
        ("manifest empty", lambda d: open(os.path.join(d, step, "manifest.json"), "w").close(), "not valid JSON"),
        ("manifest a FIFO", lambda d: (os.remove(os.path.join(d, step, "manifest.json")),
                                       os.mkfifo(os.path.join(d, step, "manifest.json"))), "FIFO"),
        ("manifest a directory", lambda d: (os.remove(os.path.join(d, step, "manifest.json")),
                                            os.mkdir(os.path.join(d, step, "manifest.json"))), "is a directory"),
        ("no manifest", lambda d: os.remove(os.path.join(d, step, "manifest.json")), "holds no complete checkpoint"),
        ("the step directory a file", lambda d: (shutil.rmtree(os.path.join(d, step)),
                                                 open(os.path.join(d, step), "w").close()),
         "holds no complete checkpoint"),
        ("the lock a directory", lambda d: (os.remove(os.path.join(d, ".lock")), os.mkdir(os.path.join(d, ".lock"))),
         "cannot lock the checkpoint directory"),
    ]
    for label, damage, fragment in broken:
        d = copy_of(label)
        damage(d)
        add(label, d, fragment)
    d = copy_of("at the end")
    add("resume at --steps (a finished run)", d, "the run is complete", exit_code=0, steps="2")
    d = copy_of("past the end")
    add("resume past --steps", d, re.escape("the checkpoint is at step 2, past --steps 1"), steps="1")
    # Not errors: what `latest` says never keeps the newest complete checkpoint from resuming.
    for label, text in [("latest garbled", "\x00garbage"), ("latest names a missing step", "step-000999\n"),
                        ("latest empty", "")]:
        d = copy_of(label)
        with open(os.path.join(d, "latest"), "w") as f:
            f.write(text)
        add(label, d, "resume: step-000002", exit_code=0, steps="3")
    return cases
