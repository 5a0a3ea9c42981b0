"""pd2bw-torch's command line: one subcommand per module.

A subcommand module provides ``add_arguments(parser)`` and ``main(args) -> int``; register it in
COMMANDS (name, module, one-line help). Modules are imported only when their command runs, so a broken
or missing dependency of one command does not stop the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from pd2bw_torch.errors import RunFailure, UsageError

# (command, module under pd2bw_torch, help)
COMMANDS = [
    ("profile", "profile", "measure a PyTorch model's layers and write a pd2bw profile.json"),
    ("run", "run", "run a pd2bw plan on pd2bw's GPT with torch.distributed.pipelining (under torchrun)"),
]


def _load(module: str):
    return importlib.import_module(f"pd2bw_torch.{module}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="pd2bw-torch", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = argv[0] if argv and not argv[0].startswith("-") else None
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == wanted:  # only the command that runs imports its module
            try:
                mod = _load(module)
            except ModuleNotFoundError as e:
                if e.name != f"pd2bw_torch.{module}":
                    raise
                print(f"pd2bw-torch: error: the command '{name}' is not installed in this copy", file=sys.stderr)
                return 2
            mod.add_arguments(p)
            p.set_defaults(func=mod.main)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        print(f"pd2bw-torch: error: {e}", file=sys.stderr)
        return 2
    except RunFailure as e:
        print(f"pd2bw-torch: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
