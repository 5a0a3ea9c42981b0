#!/usr/bin/env python3
"""Checks the pd2bw JSON Schemas with a real validator (jsonschema, draft 2020-12).

Usage: test_json_schemas.py <pd2bw-binary> <source-dir>

- the three schema files are valid 2020-12 schemas, and every property carries a description;
- every file in schemas/examples/ and the writer fixtures in tests/schema/fixtures/ (which the C++ unit
  test pins to the writers' exact output) validate against the schema their "schema" field names;
- mutated copies (unknown key, negative number, missing key, wrong type) are rejected, and copies with
  the optional measurement keys (curves, optimizer bytes) added are accepted.

Other tests may import this file and call validate_file(path) on files pd2bw writes.
"""

import copy
import json
import pathlib
import sys

import jsonschema

KINDS = {"pd2bw.profile": "profile", "pd2bw.cluster": "cluster", "pd2bw.plan": "plan"}
SOURCE_DIR = pathlib.Path(__file__).resolve().parents[2]
_validators = {}


def schema_path(kind):
    return SOURCE_DIR / "schemas" / f"{kind}.schema.json"


def validator_for(kind):
    """A Draft202012Validator for "profile", "cluster" or "plan"."""
    if kind not in _validators:
        schema = json.loads(schema_path(kind).read_text())
        _validators[kind] = jsonschema.Draft202012Validator(schema)
    return _validators[kind]


def validate_document(doc):
    """Returns the list of schema violations of a parsed document (empty when it is valid)."""
    if not isinstance(doc, dict) or doc.get("schema") not in KINDS:
        return ['(root): "schema" must be one of ' + ", ".join(KINDS)]
    errors = validator_for(KINDS[doc["schema"]]).iter_errors(doc)
    return [f"{'/' + '/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors]


def validate_file(path):
    """Returns the list of schema violations of the JSON file at `path` (empty when it is valid)."""
    with open(path, encoding="utf-8") as f:
        return validate_document(json.load(f))


def walk_properties(node, where, problems):
    """Collects properties without a description anywhere in a schema."""
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            if "description" not in sub:
                problems.append(f"{where}/properties/{name}: no description")
        if node.get("type") == "object" and node.get("additionalProperties") is not False:
            problems.append(f"{where}: additionalProperties is not false")
        for key, sub in node.items():
            walk_properties(sub, f"{where}/{key}", problems)
    elif isinstance(node, list):
        for i, sub in enumerate(node):
            walk_properties(sub, f"{where}/{i}", problems)


def mutate(doc, pointer, value=None, delete=False):
    """A copy of `doc` with the value at a JSON pointer replaced (or deleted)."""
    out = copy.deepcopy(doc)
    parts = [p for p in pointer.split("/")[1:]]
    node = out
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    last = parts[-1]
    key = int(last) if isinstance(node, list) else last
    if delete:
        del node[key]
    else:
        node[key] = value
    return out


# Mutations every document of a kind must fail: (pointer, new value or None, delete?).
MUTATIONS = {
    "profile": [("/surprise", 1, False), ("/device/memory_bytes", -1, False), ("/model/heads", None, True),
                ("/layers/0/per_microbatch/0/fwd_ms", 0, False), ("/layers/0/extra", "x", False),
                ("/microbatch_sizes", [], False), ("/model/dtype", "fp8", False), ("/schema_version", "2.0.0", False),
                ("/layers/0/param_bytes", "12", False), ("/model/blocks", 1.5, False),
                # The optional measurement keys (added where absent, which must fail too).
                ("/layers/0/per_microbatch/0/fwd_ms_min", 0, False), ("/layers/0/optimizer_bytes", -1, False),
                ("/layers/0/per_microbatch/0/stash_bytes_computed", 1.5, False),
                ("/links/0/p2p_curve", [], False), ("/links/0/p2p_curve/0/ms", 0, False),
                ("/links/0/allreduce_curve/0/bytes", 0, False), ("/links/0/allreduce_ranks", 1, False),
                ("/links/0/allreduce_ranks", None, True), ("/device/multiprocessors", 0, False),
                ("/device/device_copy_gbps", -1.0, False), ("/device/driver_version", 580, False),
                ("/model/ln", "sideways", False), ("/model/ln", "Post", False), ("/model/ln", 1, False),
                ("/model/tie_embeddings", "yes", False)],
    "cluster": [("/surprise", 1, False), ("/levels/0/size", 0, False), ("/levels/0/p2p_latency_ms", -1, False),
                ("/device", None, True), ("/levels", [], False), ("/levels/0/bogus", True, False),
                ("/device/memory_bytes", "16GiB", False), ("/levels/0/p2p_curve/0/extra", 1, False),
                ("/device/driver_version", "580.159.04", False),  # a profile's measurement, not a cluster's
                ("/levels/0/allreduce_curve", None, True), ("/levels/1/allreduce_ranks", 4, False)],
    "plan": [("/surprise", 1, False), ("/microbatch_size", -2, False), ("/stages/0/memory/dominant", None, True),
             ("/schedule", "1f1b", False), ("/profile_sha256", "ABC", False), ("/cluster/schema", "x", False),
             ("/predictions/bubble_fraction", 1.5, False), ("/stages/0/recompute", 1, False),
             ("/ranks/0/extra", 0, False), ("/alternatives/0/step_ms", 0, False),
             ("/model/ln", "sideways", False), ("/model/ln", None, False)],
}

# Edits every document of a kind must still satisfy: the optional measurement keys (the plan embeds its
# cluster's levels, curves included).
CURVE = [{"bytes": 4096, "ms": 0.01}, {"bytes": 1048576, "ms": 0.05}]
ACCEPTED = {
    "profile": [("/layers/0/optimizer_bytes", 4096), ("/links/0/p2p_curve", CURVE),
                ("/device/driver_version", "580.159.04"), ("/device/cuda_version", "13.0"),
                ("/device/compute_capability", "9.0"), ("/device/multiprocessors", 132),
                ("/device/device_copy_gbps", 2072.7), ("/device/host_to_device_gbps", 55.5),
                ("/model/ln", "pre")],
    "cluster": [("/levels/0/p2p_curve", CURVE), ("/levels/0/allreduce_curve", CURVE), ("/levels/0/allreduce_ranks", 8)],
    "plan": [("/cluster/levels/0/p2p_curve", CURVE), ("/cluster/levels/0/allreduce_curve", CURVE),
             ("/cluster/levels/0/allreduce_ranks", 8), ("/model/ln", "post")],
}

# A bert model block, written into the writer fixtures' profile and plan: it must validate with each
# "ln" and without one, and fail with any other value.
BERT_MODEL = {"kind": "bert", "name": "bert-tiny", "blocks": 2, "d_model": 64, "heads": 4, "seq_len": 32,
              "vocab": 128, "dtype": "bf16", "tie_embeddings": True}
BAD_LN = ["mid", "PRE", "", None, True, ["post"]]


def check_bert_model(tally, source):
    for name in ("writer.profile.json", "writer.plan.json"):
        doc = json.loads((source / "tests" / "schema" / "fixtures" / name).read_text())
        for ln in ("pre", "post", "absent"):
            model = dict(BERT_MODEL)
            if ln != "absent":
                model["ln"] = ln
            errors = validate_document(mutate(doc, "/model", model))
            tally.check(not errors, f"{name} with a bert model, ln {ln}, validates", "; ".join(errors))
        for ln in BAD_LN:
            bad = mutate(doc, "/model", dict(BERT_MODEL, ln=ln))
            tally.check(bool(validate_document(bad)), f"{name} with a bert model, ln {ln!r}, is rejected")


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, label, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {label}{': ' + detail if detail else ''}")


def documents(source):
    """Example and fixture files that every schema check runs on."""
    files = sorted((source / "schemas" / "examples").glob("*.json"))
    files += sorted((source / "tests" / "schema" / "fixtures").glob("*.json"))
    return files


def main(argv):
    global SOURCE_DIR
    if len(argv) < 3:
        print("usage: test_json_schemas.py <pd2bw-binary> <source-dir>", file=sys.stderr)
        return 2
    SOURCE_DIR = pathlib.Path(argv[2]).resolve()
    tally = Tally()

    for kind in KINDS.values():
        schema = json.loads(schema_path(kind).read_text())
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
            tally.check(True, "")
        except jsonschema.exceptions.SchemaError as e:
            tally.check(False, f"{kind}.schema.json is not a valid schema", e.message)
        tally.check(schema.get("$schema") == "https://json-schema.org/draft/2020-12/schema", f"{kind}: $schema")
        tally.check(schema.get("$id") == f"https://pd2bw.dev/schemas/{kind}.schema.json", f"{kind}: $id")
        problems = []
        walk_properties(schema, f"{kind}.schema.json#", problems)
        tally.check(not problems, f"{kind}.schema.json lint", "; ".join(problems))

    files = documents(SOURCE_DIR)
    tally.check(len(files) >= 2, "examples found", str(SOURCE_DIR))
    kinds_seen = set()
    for path in files:
        doc = json.loads(path.read_text())
        errors = validate_document(doc)
        tally.check(not errors, f"{path.name} validates", "; ".join(errors))
        kind = KINDS.get(doc.get("schema"))
        kinds_seen.add(kind)
        for pointer, value, delete in MUTATIONS.get(kind, []):
            try:
                bad = mutate(doc, pointer, value, delete)
            except (KeyError, IndexError):
                continue  # the document has no such element (e.g. a plan without alternatives)
            tally.check(bool(validate_document(bad)), f"{path.name} with {pointer} mutated is rejected")
        good = doc
        try:
            for pointer, value in ACCEPTED.get(kind, []):
                good = mutate(good, pointer, value)
        except (KeyError, IndexError):
            good = None  # e.g. a profile without measured links
        if good is not None:
            errors = validate_document(good)
            tally.check(not errors, f"{path.name} with the optional keys added validates", "; ".join(errors))
    tally.check(kinds_seen >= set(KINDS.values()), "every kind has a document", str(sorted(map(str, kinds_seen))))
    check_bert_model(tally, SOURCE_DIR)

    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
