"""A kubeconfig that cannot be one stops every command at once, in one line that says what to
change (exit 2), before anything is served (the real commands, as subprocesses).

Before: a file that was not valid YAML gave a 60-line traceback (``yaml.YAMLError`` was not
among the errors caught); an empty one or a YAML list gave Python's own messages
("'NoneType' object does not support item assignment"); a directory was "no such file";
``migfit serve`` logged the failure and waited for ever for a cluster that would never sync,
and ``migfit webhook`` kept serving, never ready, until restarted — which cannot mend a file.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from migfit import errors, kube
from migfit.certs import certificates

ROOT = Path(__file__).resolve().parents[2]
FIX = "pass --kubeconfig PATH to a readable kubeconfig"
GOOD = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
users: [{name: u, user: {token: abc}}]
current-context: ctx
"""
CASES = {
    "bad-yaml": ("not: [valid\n", "not valid YAML at line 2, column 1: expected ',' or ']', "
                 "but got '<stream end>' (while parsing a flow sequence at line 1, column 6)"),
    "empty": ("", "empty, or no clusters, contexts or users"),
    "a-list": ("- a\n- b\n", "not a kubeconfig (a YAML list, not a mapping)"),
    "prefs-only": ("apiVersion: v1\nkind: Config\npreferences: {}\n",
                   "empty, or no clusters, contexts or users"),
}


def _write(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["migfit", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def _one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_that_is_no_kubeconfig_is_one_line(tmp_path: Path, case: str) -> None:
    text, message = CASES[case]
    path = _write(tmp_path, case, text)
    _one_line(_run("status", "--kubeconfig", path), f"cannot load kubeconfig {path!r}: {message}")
    _one_line(_run("advise", env={"KUBECONFIG": path}),
              f"{message}; fix the file or take it out of $KUBECONFIG")


def test_a_directory_is_named_so(tmp_path: Path) -> None:
    _one_line(_run("status", "--kubeconfig", str(tmp_path)), "a directory, not a file; " + FIX)


def test_an_unknown_context_names_the_ones_there_are(tmp_path: Path) -> None:
    path = _write(tmp_path, "config", GOOD)
    _one_line(_run("status", "--kubeconfig", path, "--context", "nope"),
              f"--context nope: no such context in kubeconfig {path} (it has: ctx)")


def test_the_servers_stop_at_once_before_serving(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad", CASES["bad-yaml"][0])
    empty = _write(tmp_path, "empty", "")
    # (the ports are never bound: the check comes first)
    _one_line(_run("serve", "--kubeconfig", bad, "--webhook-port", "1", "--extender-port", "2"),
              "not valid YAML")
    _one_line(_run("extender", "--port", "1", "--no-publish", "--kubeconfig", bad),
              "not valid YAML")
    cert, key, _ca = certificates.self_signed_for_localhost()
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    _one_line(_run("webhook", "--port", "1", "--tls-cert", str(tmp_path / "tls.crt"),
                   "--tls-key", str(tmp_path / "tls.key"), "--kubeconfig", empty),
              "empty, or no clusters, contexts or users")


def test_kubeconfig_lists_skip_missing_files_and_merge_contexts(tmp_path: Path) -> None:
    """$KUBECONFIG as kubectl reads it: files that do not exist are skipped, contexts of all
    the files count, and a bad file among good ones is named."""
    good = _write(tmp_path, "good", GOOD)
    other = _write(tmp_path, "other", GOOD.replace("name: ctx", "name: ctx2"))
    listed = os.pathsep.join([str(tmp_path / "missing"), good, other])
    kube.check(kube.Origin(listed, "ctx2"))
    kube.check(kube.Origin(listed, None))
    # kubectl skips an empty file and one of preferences alone in a list; so does the check
    empty = _write(tmp_path, "empty", "")
    prefs = _write(tmp_path, "prefs", CASES["prefs-only"][0])
    kube.check(kube.Origin(os.pathsep.join([good, empty, prefs]), "ctx"))
    with pytest.raises(errors.ConfigError, match="empty, or no clusters, contexts or users"):
        kube.check(kube.Origin(os.pathsep.join([empty, prefs]), None))
    bad = _write(tmp_path, "bad", "- x\n")
    with pytest.raises(errors.ConfigError, match=f"cannot load kubeconfig '{bad}': not a kube"):
        kube.check(kube.Origin(os.pathsep.join([good, bad]), None))
    kube.check(kube.Origin(None, None))  # in-cluster: nothing to read here


BAD_CONTEXT = GOOD.replace("{cluster: c, user: u}", "{cluster: nope, user: u}")
NOT_INSTALLED = GOOD.replace(
    "{token: abc}", "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
    "command: /nonexistent/aws-iam-authenticator, args: [token]}}")
COMMANDS = {
    "status": ["status"],
    "advise": ["advise"],
    "explain": ["explain", "default/p"],
    "serve": ["serve", "--webhook-port", "1", "--extender-port", "2"],
    "webhook": ["webhook", "--port", "1", "--tls-cert", "{dir}/tls.crt",
                "--tls-key", "{dir}/tls.key"],
    "extender": ["extender", "--port", "1"],
    "extender --no-publish": ["extender", "--port", "1", "--no-publish"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_kubeconfig_that_cannot_work_stops_every_command_at_start(
        tmp_path: Path, command: str) -> None:
    """A context naming a cluster the file lacks, and an exec plugin that is not installed:
    one line naming what to change, exit 2, in every command. Before, the webhook and
    ``extender --no-publish`` retried them for ever (/healthz 200, /readyz 503), and the
    plugin read "[Errno 2] No such file or directory" as if the kubeconfig were missing,
    below the client's own ERROR line saying it again."""
    cert, key, _ca = certificates.self_signed_for_localhost()
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    args = [a.format(dir=tmp_path) for a in COMMANDS[command]]
    for text, expected in (
            (BAD_CONTEXT, "context ctx names cluster 'nope', which it does not have (it has: "
                          "c); fix the context's cluster or pass another --context NAME"),
            (NOT_INSTALLED, "user u: exec credential plugin /nonexistent/aws-iam-authenticator:"
                            " not found; install it or fix the kubeconfig user's exec.command")):
        path = _write(tmp_path, "config", text)
        try:
            done = subprocess.run(["migfit", *args, "--kubeconfig", path], cwd=ROOT,
                                  capture_output=True, text=True, timeout=20,
                                  env={**os.environ, "HOME": str(tmp_path)})
        except subprocess.TimeoutExpired:
            pytest.fail(f"migfit {command} still running after 20 s with {expected!r}")
        _one_line(done, f"cannot load kubeconfig {path!r}: {expected}")
