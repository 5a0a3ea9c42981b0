"""The case type of the adversarial suite and the pieces every generator shares.

A case is one pd2bw command line run on hostile input, with the exit code and a stderr fragment (a
regular expression) it must give. Generators build cases from real files (schemas/examples, a plan and a
checkpoint made at start-up) by mutating them, so the suite grows with the formats instead of being
listed by hand.
"""

import dataclasses
import json
import os
import pathlib
import re


@dataclasses.dataclass
class Case:
    area: str  # "profile", "cluster", "plan", "kind", "flags", "data", "checkpoint", "output"
    name: str
    argv: list  # the command line after the pd2bw binary
    exit: int  # the exit code it must give
    fragment: str  # a regular expression stderr must match
    absent: list = dataclasses.field(default_factory=list)  # paths that must not exist afterwards
    unchanged: list = dataclasses.field(default_factory=list)  # paths whose bytes must not change


class Workspace:
    """A temporary directory with the base files every generator starts from."""

    def __init__(self, root, src, pd2bw):
        self.root = pathlib.Path(root)
        self.src = pathlib.Path(src)
        self.pd2bw = pd2bw
        self.examples = self.src / "schemas" / "examples"
        self.tiny_profile = self.examples / "gpt-tiny.profile.json"
        self.counter = 0

    def path(self, name):
        return str(self.root / name)

    def fresh(self, stem, suffix=".json"):
        """A new, unique file name in the workspace (not created)."""
        self.counter += 1
        return self.path(f"{stem}-{self.counter:04d}{suffix}")

    def write(self, stem, text, suffix=".json"):
        p = self.fresh(stem, suffix)
        mode = "wb" if isinstance(text, bytes) else "w"
        with open(p, mode) as f:
            f.write(text)
        return p


# A value no reader may take in place of `value`, by its JSON type; None stands for JSON null. RAW
# marks a literal that is not JSON (spliced into the text), which every reader rejects as invalid JSON.
class Raw(str):
    pass


def hostile_values(value):
    if isinstance(value, bool):
        return ["yes", 1, None]
    if isinstance(value, int):
        return [-1, 1.5, str(value), None, True, 2**63, 2**64, Raw("1e400")]
    if isinstance(value, float):
        return [-1.0, "fast", None, [], Raw("NaN"), Raw("Infinity"), Raw("1e400")]
    if isinstance(value, str):
        return [5, None, [], "not-a-valid-value"]
    if isinstance(value, list):
        return [{}, "x", None, []]
    if isinstance(value, dict):
        return [[], "x", None]
    return []


def rotate(values, index, k):
    """k of `values`, starting at a position that moves with `index`: each field gets a few hostile
    values, and the fields of one type between them get every one."""
    if len(values) <= k:
        return list(values)
    return [values[(index + i) % len(values)] for i in range(k)]


def dump_with_raw(doc, raw_at, raw_text):
    """JSON text of `doc` with the value at pointer `raw_at` replaced by the literal `raw_text`."""
    marker = "__pd2bw_raw_marker__"
    set_at(doc, raw_at, marker)
    text = json.dumps(doc)
    return text.replace(json.dumps(marker), raw_text, 1)


def split_pointer(pointer):
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]] if pointer else []


def get_at(doc, pointer):
    node = doc
    for part in split_pointer(pointer):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def set_at(doc, pointer, value):
    parts = split_pointer(pointer)
    node = get_at(doc, "/" + "/".join(parts[:-1]) if len(parts) > 1 else "")
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def walk(doc, pointer=""):
    """Every (pointer, value) of `doc`, parents before children."""
    yield pointer, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from walk(v, f"{pointer}/{k.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from walk(v, f"{pointer}/{i}")


def pattern_of(pointer):
    """The pointer with array indices replaced by '*': one case per field, not per element."""
    return re.sub(r"/\d+(?=/|$)", "/*", pointer)


def pointer_fragment(pointer):
    """The regular expression for a message that starts at JSON pointer `pointer`."""
    return re.escape(pointer if pointer else "(root)") + ":"


def remove_if_exists(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
