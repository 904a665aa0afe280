"""The ``migfit`` command line: one dispatcher, each command in the module that owns its concept.

The CLI is the entry of the composition root (the commands layer). It imports only the chosen
command's module, with a plain import inside ``_load`` (checked by mypy and seen by the
import-linter layers contract), so ``migfit profiles`` never loads aiohttp.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Protocol

from migfit import __version__, errors


class Command(Protocol):
    """What a command module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# Every command and its one-line summary, in the order of ``--help``. The summaries live here,
# not in the command modules, so that ``migfit --help`` imports none of them.
COMMANDS: dict[str, str] = {
    "serve": "run the webhook, the extender and the advisor on localhost (the bundled example "
             "cluster and a throwaway certificate unless told otherwise)",
    "webhook": "run the mutating admission webhook: gpu-memory annotations in, MIG resources out",
    "extender": "run the scheduler extender: filter and score nodes by free MIG instances",
    "profiles": "show the MIG catalog: every GPU model's profiles, sizes and allowed starts",
    "layout": "check whether MIG profiles fit one GPU, list a model's valid layouts, or plan one",
    "status": "show MIG instances per node and profile: allocatable, used, free, config state",
    "advise": "re-layout advice: which idle GPUs to re-partition so that waiting MIG pods can run",
    "explain": "why a pod is pending, in plain words, and what would fix it",
    "certs": "CA and serving certificates: init, rotate (and roll the CA), print the Secret and "
             "caBundle",
    "deploy": "generate the catalog-derived manifests under deploy/ (scheduler configuration)",
    "simulate": "replay a workload through the webhook's decision, the extender's filter and "
                "score and the advisor, against a model of kube-scheduler and the MIG Manager",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default when it has one worth showing (never ``(default: None)``),
    and only once: not when the help text already says it ("(default 60)", "text
    (default), ...")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if action.default in (None, False, "", [], ()) or action.default is argparse.SUPPRESS:
            return text
        if text is not None and "default" in text:
            return text
        return super()._get_help_string(action)


def _load(name: str) -> Command:
    """Import the module of one command (only that one: start-up stays fast)."""
    module: Command
    if name == "serve":
        from migfit.commands import serve as module
    elif name == "webhook":
        from migfit.commands import webhook as module
    elif name == "extender":
        from migfit.commands import extender as module
    elif name == "profiles":
        from migfit.commands import profiles as module
    elif name == "layout":
        from migfit.commands import layout as module
    elif name == "status":
        from migfit.commands import status as module
    elif name == "advise":
        from migfit.commands import advise as module
    elif name == "explain":
        from migfit.commands import explain as module
    elif name == "certs":
        from migfit.commands import certs as module
    elif name == "deploy":
        from migfit.commands import deploy as module
    elif name == "simulate":
        from migfit.simulate import cli as module
    else:
        raise KeyError(name)
    return module


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; with ``only``, import just that command's module."""
    parser = argparse.ArgumentParser(
        prog="migfit",
        description="Make NVIDIA MIG GPUs schedulable by memory on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"migfit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        cmd_parser = sub.add_parser(name, help=summary, description=summary,
                                    formatter_class=HelpFormatter)
        if name == only:
            command = _load(name)
            command.add_arguments(cmd_parser)
            cmd_parser.set_defaults(_command=command)
            _name_the_choices(cmd_parser)
    return parser


def _name_the_choices(parser: argparse.ArgumentParser) -> None:
    """A command's own subcommands by name where argparse shows its metavar: without one,
    ``migfit layout`` said only "the following arguments are required: SUBCOMMAND"."""
    for action in parser._actions:  # argparse keeps its subparsers there only
        if isinstance(action, argparse._SubParsersAction) and action.choices:
            action.metavar = "{" + ",".join(action.choices) + "}"


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace
               ) -> argparse.ArgumentParser:
    """The (sub)command parser that ``args`` were parsed by: the subcommands chosen, in turn."""
    while True:
        chosen = next((a for a in parser._actions  # argparse keeps its subparsers there only
                       if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, chosen.dest, None) if chosen is not None and chosen.dest else None
        if chosen is None or not isinstance(name, str) or name not in chosen.choices:
            return parser
        parser = chosen.choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    try:
        # Inside: building the parser imports the command's modules, where an early Ctrl-C
        # lands (a second or so after the start); it is 130 like any other, no traceback.
        parser = build_parser(first if first in COMMANDS else None)
        args, extra = parser.parse_known_args(args_list)
        if extra:
            # argparse reports a subcommand's unknown flags with the top-level usage; name the
            # command that refused them, with its own usage.
            _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
        command: Command | None = getattr(args, "_command", None)
        if command is None:
            # No command: a mistake, so the usage goes to stderr as argparse's own errors do.
            parser.print_usage(sys.stderr)
            print("migfit: error: give a COMMAND; `migfit --help` lists them", file=sys.stderr)
            return 2
        return command.run(args)
    except errors.UsageError as exc:
        print(f"migfit: error: {exc}", file=sys.stderr)
        return 2
    except errors.MigfitError as exc:
        print(f"migfit: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (``migfit profiles | head``): stop quietly, as Unix tools do,
        # and keep Python from failing again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0
    except OSError as exc:
        # A file that cannot be read or written, met where no command turned it into a
        # sentence: one line, never a traceback. (A port in use or a --host this machine
        # lacks is a UsageError from ``serving.start``, naming the command's own flag.)
        print(f"migfit: error: {str(exc) or type(exc).__name__}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
