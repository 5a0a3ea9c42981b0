"""Helpers shared by the Python scripts in tools/ (bench-*, make-*): durable file replacement, the check
that a pd2bw binary has the flags a script uses, and the provenance stamp (pd2bw version, git sha) that
benchmark records carry.

Scripts import it with `sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))`.
"""

import functools
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_atomic(path, text):
    """Replaces `path` with `text` the way pd2bw does (schemas::write_file_atomic): writes a temporary
    sibling, fsyncs and closes it, renames it onto `path`, then fsyncs the directory, so a reader (or a
    machine that lost power) sees the old file or the whole new one. Raises OSError; the temporary is
    removed on failure."""
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno != 22:  # EINVAL: this file system cannot sync a directory
            raise
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=None)
def pd2bw_version(binary):
    """The version `binary --version` reports ("0.1.0" from "pd2bw 0.1.0 (git ...)"), its whole first
    line when that does not parse, or "unknown" when the binary cannot run."""
    try:
        r = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = r.stdout.strip().splitlines()
    if r.returncode != 0 or not lines:
        return "unknown"
    words = lines[0].split()
    return words[1] if len(words) >= 2 and words[0] == "pd2bw" else lines[0]


@functools.lru_cache(maxsize=None)
def git_sha(repo=REPO):
    """`git rev-parse HEAD` of the checkout holding these scripts, or "unknown" outside a checkout (or
    without git)."""
    try:
        r = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    sha = r.stdout.strip()
    return sha if r.returncode == 0 and sha else "unknown"


def check_cli(tool, binary, flags_by_verb):
    """Exits with `tool: error: ...` (status 2) unless `binary` is an executable whose `VERB --help` lists
    every flag in flags_by_verb[VERB], so that a stale or foreign build fails before any benchmark runs."""
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        sys.stderr.write("%s: error: %s is not an executable; build it first (cmake --preset default && cmake "
                         "--build --preset default) or pass --bin\n" % (tool, binary))
        sys.exit(2)
    for verb, flags in flags_by_verb.items():
        text = subprocess.run([binary, verb, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout
        text = text.decode(errors="replace")
        missing = [f for f in flags if f not in text]
        if missing:
            sys.stderr.write("%s: error: `pd2bw %s --help` does not list %s\n" % (tool, verb, ", ".join(missing)))
            sys.exit(2)


def provenance(binary):
    """The fields every benchmark record starts with."""
    return {"pd2bw_version": pd2bw_version(binary), "git_sha": git_sha()}
