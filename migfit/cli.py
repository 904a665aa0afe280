"""The ``migfit`` command line: one dispatcher, each command in the module that owns its concept.

The CLI is the composition root. It names each command's module as a string and imports only
the chosen one, so ``migfit profiles`` never loads aiohttp, and the pure core never imports
the server packages (the import-linter contract in pyproject.toml checks the latter).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Protocol

from migfit import __version__, errors


class Command(Protocol):
    """What a command module provides."""

    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# command name -> module implementing ``Command``; the order is the order of ``--help``.
COMMANDS: dict[str, str] = {
    "serve": "extender.serve",
    "webhook": "webhook.cli",
    "extender": "extender.cli",
    "profiles": "migfit.commands.profiles",
    "layout": "migfit.commands.layout",
    "status": "migfit.commands.status",
    "advise": "extender.advice_cli",
    "explain": "extender.explain_cli",
    "certs": "certs.cli",
    "deploy": "migfit.commands.deploy",
    "simulate": "migfit.simulate.cli",
}


def _load(name: str) -> Command | None:
    try:
        module = importlib.import_module(COMMANDS[name])
    except ModuleNotFoundError as exc:
        # A command whose module is not part of this build yet is simply not offered.
        if exc.name and COMMANDS[name].startswith(exc.name):
            return None
        raise
    command: Command = module
    return command


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; with ``only``, import just that command's module."""
    parser = argparse.ArgumentParser(
        prog="migfit",
        description="Make NVIDIA MIG GPUs schedulable by memory on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"migfit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        command = _load(name)
        if command is None:
            continue
        cmd_parser = sub.add_parser(name, help=command.HELP, description=command.HELP)
        command.add_arguments(cmd_parser)
        cmd_parser.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    try:
        args = parser.parse_args(args_list)
        command: Command | None = getattr(args, "_command", None)
        if command is None:
            parser.print_help()
            return 2
        return command.run(args)
    except errors.UsageError as exc:
        print(f"migfit: error: {exc}", file=sys.stderr)
        return 2
    except errors.MigfitError as exc:
        print(f"migfit: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
