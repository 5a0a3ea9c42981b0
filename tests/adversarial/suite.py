#!/usr/bin/env python3
"""The adversarial suite: several hundred generated hostile inputs, each with the exit code and the stderr
fragment pd2bw must give.

Usage: suite.py <pd2bw-binary> <source-dir> [--list] [--area AREA]

Areas: the three formats (cases_formats.py), files given in the wrong place, numeric flags of every
subcommand, training data files, models too large for int64 sizes, output paths (cases_cli.py) and
checkpoint directories (cases_checkpoint.py), and the cases of issue 28 (cases_hardening.py: links planted
where pd2bw writes, device memory at the edge of int64, inputs that would allocate more than the machine). Besides the exit code and the fragment, every case must: end within its time
limit (no hang), print "pd2bw: error:" when it fails, show no sanitizer report or internal error (the
asan preset halts on the first UBSan finding), leave no output file behind on failure and change no
input file. Prints the number of cases per area; exits 1 when any case fails.
"""

import collections
import concurrent.futures
import hashlib
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import Workspace  # noqa: E402
from cases_checkpoint import checkpoint_cases, snapshot  # noqa: E402
from cases_cli import data_cases, flag_cases, output_cases, size_cases  # noqa: E402
from cases_formats import format_cases, wrong_place_cases  # noqa: E402
from cases_hardening import hardening_cases  # noqa: E402

TIMEOUT_S = 120
FORBIDDEN = re.compile(r"runtime error:|AddressSanitizer|LeakSanitizer|internal error|Segmentation|terminate called")


def run(pd2bw, *args, **kw):
    return subprocess.run([pd2bw, *args], capture_output=True, text=True, timeout=TIMEOUT_S, **kw)


def base_files(ws):
    """A valid plan (2 stages x 2 replicas of the tiny model), and a checkpoint of it at step 2."""
    plan = ws.path("plan.json")
    r = run(ws.pd2bw, "plan", "--profile", str(ws.tiny_profile), "--nodes", "1", "--gpus-per-node", "4",
            "--depth", "2", "--width", "2", "--global-batch", "8", "-o", plan, "-q")
    if r.returncode != 0:
        sys.exit(f"cannot make the base plan: {r.stderr}")
    good = ws.path("good-ck")
    r = run(ws.pd2bw, "train", "--plan", plan, "--steps", "2", "--checkpoint-dir", good, "-q")
    if r.returncode != 0:
        sys.exit(f"cannot make the base checkpoint: {r.stderr}")
    return plan, good


def sha(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def check(ws, case):
    """'' when the case behaved, else what went wrong."""
    before = {p: sha(p) for p in case.unchanged}
    env = dict(os.environ, UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1", PD2BW_FAULT="")
    limit = getattr(case, "timeout", None) or TIMEOUT_S
    try:
        r = subprocess.run([ws.pd2bw, *case.argv], capture_output=True, text=True, timeout=limit, env=env,
                           input="")
    except subprocess.TimeoutExpired:
        return f"no answer within {limit} s (a hang, or work before an error)"
    err = r.stderr
    if r.returncode != case.exit:
        return f"exit {r.returncode}, wanted {case.exit}: {err.strip()[:300]}"
    if FORBIDDEN.search(err):
        return f"sanitizer or internal error: {err.strip()[:400]}"
    if case.exit != 0 and "pd2bw: error:" not in err:
        return f"no 'pd2bw: error:' line: {err.strip()[:300]}"
    if not re.search(case.fragment, err):
        return f"stderr lacks /{case.fragment}/: {err.strip()[:300]}"
    for p in case.absent:
        if os.path.exists(p):
            return f"left an output file behind: {p}"
    for p, digest in before.items():
        if sha(p) != digest:
            return f"changed its input {p}"
    if getattr(case, "snapshot", None) is not None and snapshot(case.snapshot_dir) != case.snapshot:
        return f"changed the checkpoint in {case.snapshot_dir}"
    return ""


def main():
    pd2bw, src = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="pd2bw-adversarial-") as root:
        ws = Workspace(root, src, pd2bw)
        plan, good = base_files(ws)
        examples = ws.examples
        sources = {
            "profile": [str(ws.tiny_profile), str(ws.src / "tests" / "schema" / "fixtures" / "curves.profile.json")],
            "cluster": [str(examples / "cluster-8x8-h200.json")],
            "plan": [plan],
        }
        manifest = os.path.join(good, "step-000002", "manifest.json")
        kinds = {"pd2bw.profile": str(ws.tiny_profile), "pd2bw.cluster": str(examples / "cluster-1x4-cpu.json"),
                 "pd2bw.plan": plan, "pd2bw.checkpoint": manifest}
        cases = (format_cases(ws, sources) + wrong_place_cases(ws, kinds) + flag_cases(ws, plan) +
                 data_cases(ws, plan) + size_cases(ws, plan) + output_cases(ws, plan) +
                 checkpoint_cases(ws, plan, good) + hardening_cases(ws, plan, good))
        if "--area" in sys.argv:
            area = sys.argv[sys.argv.index("--area") + 1]
            cases = [c for c in cases if c.area == area]
        if "--list" in sys.argv:
            for c in cases:
                print(f"{c.area:10} exit {c.exit}  {c.name}")
            return 0
        workers = max(1, os.cpu_count() or 1)
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            problems = list(pool.map(lambda c: check(ws, c), cases))
    counts = collections.Counter(c.area for c in cases)
    failed = [(c, p) for c, p in zip(cases, problems) if p]
    for c, p in failed:
        print(f"FAIL [{c.area}] {c.name}: pd2bw {' '.join(c.argv)}\n  {p}")
    print("cases per area: " + ", ".join(f"{a} {n}" for a, n in sorted(counts.items())))
    print(f"{len(cases) - len(failed)} passed, {len(failed)} failed, {len(cases)} in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
