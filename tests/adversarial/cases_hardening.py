"""Adversarial cases of issue 28 (a second hostile-input run): files pd2bw writes must never be written
through a link planted where it writes, the planner must answer for any device memory, and every verb must
refuse inputs whose allocations exceed the machine before it allocates them (exit 2 naming the input,
quickly: these cases have a short time limit, so a verb that allocates gigabytes first fails by timing out).
"""

import json
import os
import shutil

from cases import Case

QUICK_S = 30  # the time limit of a case that must be refused (or answered) at once


def quick(case, timeout=QUICK_S):
    case.timeout = timeout
    return case


def lock_cases(ws, plan, good):
    """A checkpoint directory whose .lock (or a step directory) is a link: refused, the target unchanged."""
    cases = []

    def copy_of():
        d = ws.fresh("ck-link", "")
        shutil.copytree(good, d, symlinks=True)
        return d

    resume = ["train", "--plan", plan, "--steps", "3", "-q", "--resume", "--checkpoint-dir"]
    for label, make, fragment in [
        ("a symbolic link to another file", lambda lock, victim: os.symlink(victim, lock),
         "its lock .*: it is a symbolic link"),
        ("a dangling symbolic link", lambda lock, victim: (os.remove(victim), os.symlink(victim, lock)),
         "its lock .*: it is a symbolic link"),
        ("a hard link to another file", lambda lock, victim: os.link(victim, lock), "its lock .*: it has 2 hard links"),
        ("a FIFO", lambda lock, victim: os.mkfifo(lock), "its lock .*: it is a FIFO"),
    ]:
        d = copy_of()
        victim = ws.write("victim", "precious\n", ".txt")
        os.remove(os.path.join(d, ".lock"))
        make(os.path.join(d, ".lock"), victim)
        c = Case("hardening", f"checkpoint lock {label}", resume + [d], 2, fragment,
                 absent=[] if os.path.exists(victim) else [victim],
                 unchanged=[victim] if os.path.exists(victim) else [])
        cases.append(quick(c))
    # A step directory that is a link: a save into it would land wherever it points.
    d = copy_of()
    elsewhere = ws.fresh("elsewhere", "")
    os.mkdir(elsewhere)
    os.symlink(elsewhere, os.path.join(d, "step-000003"))
    cases.append(quick(Case("hardening", "checkpoint step directory a symbolic link", resume + [d], 2,
                            "symbolic link named like a checkpoint", absent=[os.path.join(elsewhere, "manifest.json")])))
    return cases


def planner_cases(ws):
    """Device memories at the edge of int64: the planner answers at once (issue 28: 2^63 - 1 looped)."""
    cases = []
    base = json.loads(open(ws.tiny_profile).read())
    for memory in [2**63 - 1, 2**63 - 2, 2**63 - 2**32, 2**62]:
        p = json.loads(json.dumps(base))
        p["device"]["memory_bytes"] = memory
        path = ws.write("edge-memory", json.dumps(p))
        for reserve in [[], ["--reserve", "0"]]:  # --reserve 0: the whole memory is the static cap
            argv = ["plan", "--profile", path, "-q", "-o", ws.fresh("plan"), *reserve]
            cases.append(quick(Case("hardening", f"plan with device memory {memory} {' '.join(reserve)}", argv, 0, "")))
    return cases


def allocation_cases(ws, plan):
    """Inputs whose allocations exceed any machine: refused before allocating, naming the input (train: by
    the plan checks validate runs, which such a hand-edited plan breaks)."""
    cases = []
    out = ["-q", "-o", ws.fresh("profile")]
    for extra, fragment in [
        (["--blocks", "1000000000"], "--blocks"),
        (["--d-model", "1048576", "--heads", "1"], "--d-model"),
        (["--microbatch", "1,2147483648"], "--microbatch"),
        (["--vocab", "2000000000"], "--vocab"),
        (["--seq", "1000000000"], "--seq"),
    ]:
        argv = ["profile", *extra, *out]
        cases.append(quick(Case("hardening", f"profile {' '.join(extra)}", argv, 2, fragment)))
    base = json.loads(open(plan).read())
    for label, change, fragment in [
        ("10^9 microbatches", {"microbatches_per_step": 10**9}, "break the rules every plan follows"),
        ("microbatch 2^31", {"microbatch_size": 2**31}, "break the rules every plan follows"),
    ]:
        p = json.loads(json.dumps(base))
        p.update(change)
        p["global_batch"] = p["microbatch_size"] * p["microbatches_per_step"] * p["width"]
        path = ws.write("huge-batch-plan", json.dumps(p))
        argv = ["train", "--plan", path, "--steps", "1", "-q"]
        cases.append(quick(Case("hardening", f"train a plan with {label}", argv, 2, fragment)))
    # The same huge microbatch in a plan whose numbers agree with each other (its predictions redone for
    # the new batch): the plan checks pass it, and train's own estimate refuses it, naming the activations.
    p = json.loads(json.dumps(base))
    p["microbatch_size"] = 2**16
    p["global_batch"] = p["microbatch_size"] * p["microbatches_per_step"] * p["width"]
    pred = p["predictions"]
    pred["samples_per_s"] = p["global_batch"] / pred["step_ms"] * 1000
    pred["tokens_per_s"] = pred["samples_per_s"] * p["model"]["seq_len"]
    p["alternatives"] = []
    path = ws.write("consistent-huge-batch-plan", json.dumps(p))
    argv = ["train", "--plan", path, "--steps", "1", "-q"]
    cases.append(quick(Case("hardening", "train a consistent plan with microbatch 2^16", argv, 2,
                            "of activations"), 10))
    return cases


def profile_field_cases(ws):
    """Profile values the planner cannot price: said so, naming the field (not "no plan fits in memory"),
    and a field the planner would ignore refused instead of a plan that silently differs."""
    base = json.loads(open(ws.tiny_profile).read())
    slow = json.loads(json.dumps(base))
    for layer in slow["layers"]:
        for t in layer["per_microbatch"]:
            t["fwd_ms"] = t["bwd_ms"] = 1e308
    opt = json.loads(json.dumps(base))
    opt["layers"][1]["optimizer_bytes"] = 2**63 - 1
    cases = []
    for label, profile, extra, fragment in [
        ("layer times of 1e308", slow, ["--device-memory", "4MiB", "--reserve", "0"], "time overflows"),
        ("optimizer_bytes 2^63 - 1", opt, [], r"/layers/1/optimizer_bytes: is 9223372036854775807"),
    ]:
        path = ws.write("profile-field", json.dumps(profile))
        out = ws.fresh("plan")
        argv = ["plan", "--profile", path, "-q", "-o", out, *extra]
        cases.append(quick(Case("hardening", f"plan a profile with {label}", argv, 2, fragment, absent=[out])))
    return cases


def plan_rule_cases(ws, plan):
    """One set of plan checks for every verb: a plan whose model.blocks disagrees with its layers."""
    p = json.loads(open(plan).read())
    p["model"]["blocks"] += 3
    path = ws.write("blocks-plan", json.dumps(p))
    fragment = r"/model/blocks: is 7 but a gpt model of /num_layers 6 layers"
    return [quick(Case("hardening", f"{verb} a plan whose model.blocks disagrees with its layers", argv, 2, fragment))
            for verb, argv in [("validate", ["validate", path]),
                               ("train", ["train", "--plan", path, "--steps", "1", "-q"]),
                               ("simulate", ["simulate", "--plan", path, "--profile", str(ws.tiny_profile), "-q"])]]


def training_cases(ws, plan, good):
    """A finished run resumed again exits 0 (a job script resumes until 0); a loss that diverges while
    staying finite stops training unless --no-divergence-guard."""
    d = ws.fresh("ck-done", "")
    shutil.copytree(good, d, symlinks=True)
    manifest = os.path.join(d, "step-000002", "manifest.json")
    cases = [quick(Case("hardening", "resume a finished run", ["train", "--plan", plan, "--steps", "2", "--resume",
                                                               "--checkpoint-dir", d], 0, "the run is complete",
                        unchanged=[manifest]), 60)]
    diverge = ["train", "--plan", plan, "--lr", "1e6"]
    cases.append(quick(Case("hardening", "train with --lr 1e6 (a finite divergence)", diverge + ["--steps", "8", "-q"],
                            1, "training diverged and was stopped"), 60))
    cases.append(quick(Case("hardening", "train with --lr 1e6 --no-divergence-guard",
                            diverge + ["--steps", "3", "-q", "--no-divergence-guard"], 0, ""), 60))
    return cases


def long_input_cases(ws, plan):
    """An error quotes at most a few hundred characters of an input: a 10 MiB string comes back cut, with the
    count of what was left out, on an error line of a few thousand characters at most."""
    p = json.loads(open(plan).read())
    p["schedule"] = "x" * (10 << 20)
    path = ws.write("long-string-plan", json.dumps(p))
    fragment = r"(?m)^pd2bw: error: [^\n]{0,4500}characters\][^\n]{0,1000}$"
    return [quick(Case("hardening", f"{verb} a plan with a 10 MiB schedule string", argv, 2, fragment))
            for verb, argv in [("validate", ["validate", path]), ("train", ["train", "--plan", path, "-q"]),
                               ("simulate", ["simulate", "--plan", path, "-q"])]]


def hardening_cases(ws, plan, good):
    return (lock_cases(ws, plan, good) + planner_cases(ws) + allocation_cases(ws, plan) + profile_field_cases(ws) +
            plan_rule_cases(ws, plan) + training_cases(ws, plan, good) + long_input_cases(ws, plan))
