"""`migfit --help` is instant (it imports no command), and no help text says `(default: None)`."""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys

import pytest

from migfit import cli

PROBE = """
import sys
from migfit import cli
try:
    cli.main(["--help"])
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules
               if m.startswith(("migfit.commands", "migfit.simulate", "aiohttp",
                                "kubernetes_asyncio", "cryptography", "migfit.extender")))
print("HEAVY", heavy)
"""


def test_top_level_help_lists_every_command_and_imports_none() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "HEAVY []" in done.stdout, done.stdout.splitlines()[-1]
    for name in cli.COMMANDS:
        assert f"    {name}" in done.stdout, name


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_no_help_text_shows_a_none_default(name: str) -> None:
    parser = cli.build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices[name].format_help()
    assert "(default: None)" not in text
    assert name in parser.format_help()



@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_no_option_says_its_default_twice(name: str) -> None:
    # "(default 60) (default: 60.0)": the formatter adds one only where the text has none.
    parser = cli.build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices[name]
    formatter = command._get_formatter()
    for action in command._actions:
        text = formatter._expand_help(action) if action.help else ""
        assert len(re.findall(r"\(default\b", text)) <= 1, (action.option_strings, text)


@pytest.mark.parametrize(("argv", "usage", "bad"), [
    (["advise", "--clusters", "x.yaml"], "usage: migfit advise ", "--clusters"),
    (["profiles", "--gpus", "A100-80GB"], "usage: migfit profiles ", "--gpus"),
    (["layout", "check", "--gpu", "A100-80GB", "--bogus", "3g.40gb"],
     "usage: migfit layout check ", "--bogus"),
    (["simulate", "--example", "--zzz"], "usage: migfit simulate ", "--zzz"),
    (["--nope"], "usage: migfit [-h]", "--nope"),
])
def test_an_unknown_flag_names_the_command_that_refused_it(
        argv: list[str], usage: str, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A new user's typo in a subcommand's flag is answered with that command's usage and
    name, not the top-level usage (argparse's own, which hides which command refused it)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    prog = usage.removeprefix("usage: ").split(" [")[0].strip()
    assert f"{prog}: error: unrecognized arguments: {bad}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_the_extenders_reload_interval_must_be_positive(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As the webhook's: a reload task given 0 or nan stopped at once and left the
    certificate frozen until its expiry, with the server serving on."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["extender", "--cluster", "examples/cluster.yaml", "--reload-interval", value])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--reload-interval: {value}: use a positive number of seconds" in err


def test_serve_refuses_a_request_timeout_it_would_ignore() -> None:
    """``migfit serve`` parsed --request-timeout and never used it; with a cluster file (the
    bundled one too) it is refused, as the other commands refuse it."""
    # In a child with a time limit: a regression would serve for ever.
    ports = []
    for _ in range(2):
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            ports.append(str(free.getsockname()[1]))
    done = subprocess.run([sys.executable, "-m", "migfit.cli", "serve", "--request-timeout",
                           "5s", "--webhook-port", ports[0], "--extender-port", ports[1]],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr[-500:]
    assert "--request-timeout applies to a Kubernetes API" in done.stderr


def _parsers(name: str) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser of one command and of each of its subcommands, with their names."""
    parser = cli.build_parser(name)
    todo = [(name, next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)).choices[name])]
    found = []
    while todo:
        prog, p = todo.pop()
        found.append((prog, p))
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{prog} {sub}", child) for sub, child in action.choices.items()]
    return found


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_option_has_help_naming_only_flags_its_command_has(name: str) -> None:
    """`migfit webhook --log-level` had no help; serve's --max-body-in-flight spoke of
    --max-body, which serve does not take."""
    for prog, parser in _parsers(name):
        flags = {s for a in parser._actions for s in a.option_strings}
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            assert action.help, (prog, action.option_strings)
            text = formatter._expand_help(action)
            # Not another program's flag named as such ("the extender's --config-sync",
            # dcgm-exporter's "-c/--collect-interval").
            named = set(re.findall(r"(?<![\w/-])(?<!'s )--[a-z][a-z0-9-]*", text))
            assert named <= flags, (prog, action.option_strings, named - flags)


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_and_subcommand_has_a_description(name: str) -> None:
    for prog, parser in _parsers(name):
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            assert parser.description, prog


def test_migfit_without_a_command_prints_its_usage_to_stderr() -> None:
    """It printed the whole help to stdout, with exit status 2."""
    done = subprocess.run([sys.executable, "-m", "migfit.cli"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: migfit ")
    assert done.stderr.splitlines()[-1].startswith("migfit: error: ")


@pytest.mark.parametrize("command, choices", [
    ("layout", "{check,list,plan}"), ("certs", "{init,rotate,manifests}"),
    ("deploy", "{render}")])
def test_a_command_without_its_subcommand_names_them(command: str, choices: str) -> None:
    """`migfit layout` said "the following arguments are required: SUBCOMMAND" and no more
    (an outside check)."""
    done = subprocess.run([sys.executable, "-m", "migfit.cli", command], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        f"migfit {command}: error: the following arguments are required: {choices}")


def _command_rows() -> dict[str, str]:
    """Each row of README's Commands table (its synopsis and what it does), by the
    (sub)command it names."""
    from readme import README  # tests/cli/readme.py, on the path as for the README tests

    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Commands\n"):]
    section = section[:section.index("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        found = re.match(r"^\| `(migfit [^`]*)` \|", line)
        if found is None:
            continue
        synopsis = found.group(1).replace("\\|", "|")
        words = synopsis.split()[1:]
        prog = words[0]
        for word in words[1:]:
            if not re.fullmatch(r"[a-z]+", word):
                break
            prog += f" {word}"
        rows[prog] = line.replace("\\|", "|")
    return rows


# Rows that name every flag of their command, but for --context and --request-timeout (the
# kubeconfig's refinements, which README describes once for every command).
EVERY_FLAG = ("profiles", "layout check", "layout list", "layout plan", "status",
              "deploy render")
# The other commands have too many flags for a row (serve some 30, extender 40, simulate
# 50): their rows name at least where the input comes from and how the output is chosen.
MAIN_FLAGS = {
    "serve": {"--cluster", "--kubeconfig"},
    "webhook": {"--tls-cert", "--tls-key", "--cluster", "--kubeconfig"},
    "extender": {"--tls-cert", "--tls-key", "--client-ca", "--cluster", "--kubeconfig"},
    "advise": {"--cluster", "--kubeconfig", "--defrag", "--json", "--details", "-o"},
    "explain": {"-n", "--cluster", "--kubeconfig", "-o"},
}


def test_the_readme_commands_table_names_the_flags_of_each_command() -> None:
    """advise's row lacked --json and --defrag (status's had --json), deploy render's
    --dir and --catalog."""
    rows = _command_rows()
    assert set(EVERY_FLAG) | set(MAIN_FLAGS) <= set(rows), sorted(rows)
    parsers = {prog: parser for name in cli.COMMANDS for prog, parser in _parsers(name)}
    for prog, row in rows.items():
        if prog not in parsers:
            continue  # "certs init / rotate / manifests": the row names no flag
        actions = [a for a in parsers[prog]._actions
                   if a.option_strings and a.help != argparse.SUPPRESS
                   and "--help" not in a.option_strings]
        named = set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", row))
        flags = {s for a in actions for s in a.option_strings}
        assert named <= flags, (prog, named - flags)  # nothing the command does not take
        wanted = ([a for a in actions if not {"--context", "--request-timeout"}
                   & set(a.option_strings)] if prog in EVERY_FLAG
                  else [a for a in actions if MAIN_FLAGS.get(prog, set()) & set(a.option_strings)])
        missing = [a.option_strings[-1] for a in wanted if not named & set(a.option_strings)]
        assert not missing, (prog, missing)


@pytest.mark.parametrize("prog", ["deploy render", "simulate", "profiles", "layout check",
                                  "webhook", "extender", "serve"])
def test_a_catalog_is_a_file_in_every_help(prog: str) -> None:
    """`deploy render --help` showed `--catalog CATALOG` where the others say `--catalog
    FILE`."""
    parsers = dict(_parsers(prog.split()[0]))
    text = parsers[prog].format_help()
    assert "--catalog FILE" in text and "--catalog CATALOG" not in text, prog


def test_serve_cert_dir_help_says_which_folders_it_takes() -> None:
    """It said only "where to write the throwaway CA and certificate", and serve refused a
    folder with files in it, or kept none of the CA across starts, without warning."""
    parser = dict(_parsers("serve"))["serve"]
    text = " ".join(parser.format_help().split())
    assert ("a new or empty folder, or one an earlier migfit serve wrote; each start writes "
            "a new CA there") in text, text
