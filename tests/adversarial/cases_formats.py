"""Adversarial cases for the three file formats (profile, cluster, plan) and for files given in the
wrong place.

Every field of a real file (one element per array: the first) is replaced by values of the wrong type,
out of range or not JSON at all, every object loses each of its keys in turn and gains an unknown one.
A mutation the JSON Schema accepts is not hostile and is dropped; the others must give exit 2 with the
JSON pointer of the mutated field (or "not valid JSON" for a literal that is not JSON).
"""

import copy
import json
import re

import jsonschema

from cases import Case, Raw, dump_with_raw, get_at, hostile_values, pattern_of, pointer_fragment, rotate, set_at, walk

VALUES_PER_FIELD = 2

KINDS = ("profile", "cluster", "plan")


def validator(ws, kind):
    schema = json.loads((ws.src / "schemas" / f"{kind}.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def mutations(doc):
    """(label, pointer of the field the reader must name, mutated text or doc) for every field of doc."""
    seen = set()
    for pointer, value in walk(doc):
        pattern = pattern_of(pointer)
        if pattern in seen or pointer == "":
            continue
        seen.add(pattern)
        for bad in rotate(hostile_values(value), len(seen), VALUES_PER_FIELD):
            mutated = copy.deepcopy(doc)
            if isinstance(bad, Raw):
                yield f"{pattern} = {bad}", None, dump_with_raw(mutated, pointer, bad)
                continue
            set_at(mutated, pointer, bad)
            yield f"{pattern} = {json.dumps(bad)[:20]}", pointer, mutated
        if isinstance(value, dict):
            for key in value:
                mutated = copy.deepcopy(doc)
                del get_at(mutated, pointer)[key]
                yield f"{pattern}/{key} removed", f"{pointer}/{key}", mutated
            mutated = copy.deepcopy(doc)
            get_at(mutated, pointer)["zz_unknown"] = 1
            yield f"{pattern}/zz_unknown added", f"{pointer}/zz_unknown", mutated
    for key in doc:
        mutated = copy.deepcopy(doc)
        del mutated[key]
        yield f"/{key} removed", f"/{key}", mutated


def command(ws, kind, path, index):
    """The command that reads `path` as a `kind`, alternating between the readers that take one."""
    out = ws.fresh("out")
    tiny = str(ws.tiny_profile)
    small = ["--nodes", "1", "--gpus-per-node", "2", "--device-memory", "4MiB", "--reserve", "0", "--global-batch", "8"]
    choices = {
        "profile": [["validate", path], ["plan", "--profile", path, *small, "-o", out, "-q"]],
        "cluster": [["validate", path], ["plan", "--profile", tiny, "--cluster", path, "-o", out, "-q"]],
        "plan": [["validate", path], ["simulate", "--plan", path, "--profile", tiny, "-q"],
                 ["train", "--plan", path, "--steps", "1", "-q"]],
    }[kind]
    return choices[index % len(choices)], out


def format_cases(ws, sources):
    """sources: {kind: [path of a valid file, ...]}."""
    cases = []
    for kind in KINDS:
        check = validator(ws, kind)
        for source in sources[kind]:
            doc = json.loads(open(source).read())
            for label, pointer, mutated in mutations(doc):
                if isinstance(mutated, str):
                    text, fragment = mutated, "not valid JSON"
                else:
                    if check.is_valid(mutated):
                        continue  # the format allows it: not an adversarial input
                    text = json.dumps(mutated, indent=1)
                    fragment = pointer_fragment(pointer)
                    if label.endswith(" removed"):  # or a sibling that needs it: "/a/x: given without y"
                        key = re.escape(pointer.rsplit("/", 1)[1])
                        fragment += f"|: given without {key}\\b"
                path = ws.write(kind, text)
                argv, out = command(ws, kind, path, len(cases))
                cases.append(Case(kind, label, argv, 2, fragment, absent=[out], unchanged=[path]))
    return cases


# Which flag of which command reads a file of which kind.
PLACES = {
    "profile": lambda ws, f: ["plan", "--profile", f, "-o", ws.fresh("out"), "-q"],
    "cluster": lambda ws, f: ["plan", "--profile", str(ws.tiny_profile), "--cluster", f, "-o", ws.fresh("out"), "-q"],
    "plan": lambda ws, f: ["simulate", "--plan", f, "--profile", str(ws.tiny_profile), "-q"],
    "plan (train)": lambda ws, f: ["train", "--plan", f, "--steps", "1", "-q"],
}
NOUNS = {"pd2bw.profile": "profile", "pd2bw.cluster": "cluster", "pd2bw.plan": "plan",
         "pd2bw.checkpoint": "checkpoint manifest"}


def wrong_place_cases(ws, files):
    """files: {schema kind: path}. Each file in each place that wants another kind."""
    cases = []
    for kind, path in files.items():
        for place, argv in PLACES.items():
            wanted = place.split()[0]
            if NOUNS[kind] == wanted:
                continue
            fragment = re.escape(f"/schema: this is a {NOUNS[kind]} ({kind}), not a {wanted}")
            cases.append(Case("kind", f"{NOUNS[kind]} as --{place}", argv(ws, path), 2, fragment))
    return cases
