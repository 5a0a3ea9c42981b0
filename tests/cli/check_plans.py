#!/usr/bin/python3
"""Checks plan files written by `pd2bw plan` with a real JSON Schema validator (python3-jsonschema) and
the plan invariants: every layer in exactly one stage, contiguous stages, each stage within memory,
w * d ranks <= devices, m >= d for 2bw, global batch = b * m * w, the predicted step holds every
rank's work, alternatives are not faster.
Usage: check_plans.py SOURCE_DIR PLAN.json..."""
import json
import os
import sys

import jsonschema


def check(plan, schema):
    jsonschema.Draft202012Validator(schema).validate(plan)
    stages = plan["stages"]
    assert stages[0]["layer_begin"] == 0 and stages[-1]["layer_end"] == plan["num_layers"]
    for a, b in zip(stages, stages[1:]):
        assert a["layer_end"] == b["layer_begin"], "stages not contiguous"
    for s in stages:
        assert s["layer_begin"] < s["layer_end"]
        assert s["memory"]["total_bytes"] <= s["memory"]["limit_bytes"], "stage over memory"
        terms = ["weights", "master", "grads", "optimizer", "stash", "comm", "reserve"]
        assert s["memory"]["total_bytes"] == sum(s["memory"][t + "_bytes"] for t in terms)
    devices = 1
    for level in plan["cluster"]["levels"]:
        devices *= level["size"]
    assert plan["width"] * plan["depth"] == len(plan["ranks"]) <= devices
    if plan["schedule"] == "2bw":
        assert plan["microbatches_per_step"] >= plan["depth"]
    assert plan["global_batch"] == plan["microbatch_size"] * plan["microbatches_per_step"] * plan["width"]
    # The predicted (simulated) step holds every rank's work: m microbatches' compute plus the allreduce.
    m = plan["microbatches_per_step"]
    busiest = max(m * s["compute_ms"] + s["allreduce_ms"] for s in stages)
    assert plan["predictions"]["step_ms"] >= busiest * (1 - 1e-9), "step shorter than a rank's work"
    bottleneck = stages[plan["predictions"]["bottleneck_stage"]]
    assert bottleneck["step_ms"] == max(s["step_ms"] for s in stages)
    for alt in plan["alternatives"]:
        assert alt["step_ms"] >= plan["predictions"]["step_ms"]


def main():
    src, files = sys.argv[1], sys.argv[2:]
    with open(os.path.join(src, "schemas", "plan.schema.json")) as f:
        schema = json.load(f)
    passed = failed = 0
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("schema") != "pd2bw.plan":
            continue
        try:
            check(doc, schema)
            passed += 1
        except (AssertionError, jsonschema.ValidationError) as e:
            print(f"FAIL {path}: {e}", file=sys.stderr)
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
