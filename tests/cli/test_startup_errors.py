"""Start-up mistakes end in one line that says what to change: no traceback (the real command)."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from migfit.certs import certificates
from migfit.commands import serve

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = str(ROOT / "examples" / "cluster.yaml")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs") / "c"
    subprocess.run(["migfit", "certs", "init", "--out", str(out), "--service", "migfit-webhook",
                    "--namespace", "migfit-system"], check=True, capture_output=True, timeout=60)
    return out


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _spare_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _fails_in_one_line(cmd: list[str], *, code: int) -> str:
    """The one line ``migfit CMD`` fails with. A ``serve`` given neither port gets two free
    ones: another program on the default ports (a `migfit serve` of one's own, another test
    file's server) would fail the command on the port before what the test is about."""
    if cmd[:1] == ["serve"] and not {"--webhook-port", "--extender-port"} & set(cmd):
        cmd = [*cmd, "--webhook-port", _spare_port(), "--extender-port", _spare_port()]
    done = subprocess.run(["migfit", *cmd], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    if lines and lines[0].startswith("usage: "):  # argparse: the usage, then one error line
        assert lines[-1].startswith("migfit ") and ": error: argument " in lines[-1], lines
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("migfit: error: "), done.stderr
    return lines[0]


def _in_use(port: int, flag: str, host: str = "0.0.0.0") -> str:
    return (f"migfit: error: cannot listen on {host} port {port}: address already in use; "
            f"another process listens there: stop it or pass {flag} a free port")


def test_the_webhook_on_a_port_in_use(certs: Path, busy_port: int) -> None:
    line = _fails_in_one_line(
        ["webhook", "--port", str(busy_port), "--tls-cert", str(certs / "tls.crt"),
         "--tls-key", str(certs / "tls.key"), "--cluster", CLUSTER], code=2)
    assert line == _in_use(busy_port, "--port", "*")  # every address by default


@pytest.mark.parametrize("tls", [False, True])
def test_the_extender_on_a_port_in_use(certs: Path, busy_port: int, tls: bool) -> None:
    """Over plain HTTP it said aiohttp's `error while attempting to bind on address
    ('0.0.0.0', 8444): address already in use`, exit 1, and named serve's flags too."""
    args = ["--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key")]
    line = _fails_in_one_line(["extender", "--port", str(busy_port), "--cluster", CLUSTER,
                               *(args if tls else [])], code=2)
    assert line == _in_use(busy_port, "--port", "*")


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
@pytest.mark.parametrize("flag", ["--webhook-port", "--extender-port"])
def test_serve_on_a_port_in_use(busy_port: int, tmp_path: Path, flag: str, loop: str) -> None:
    other = "--extender-port" if flag == "--webhook-port" else "--webhook-port"
    done = subprocess.run(["migfit", "serve", flag, str(busy_port), other, _spare_port(),
                           "--host", "0.0.0.0", "--cert-dir", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "MIGFIT_EVENT_LOOP": loop})
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [_in_use(busy_port, flag)]
    assert not (tmp_path / "c").exists()  # nothing written for a server that cannot start


def test_serve_on_a_running_ones_ports_leaves_its_certificates_alone(
        busy_port: int, tmp_path: Path) -> None:
    """A second `migfit serve --cert-dir D` on the ports of a running one rewrote D's
    throwaway CA, then failed on the port: the first one's curl commands failed until it
    reloaded the new files (an outside check)."""
    cert_dir = tmp_path / "c"
    with serve.certificate_files(cert_dir):  # what the running one wrote (kept)
        pass
    before = {f.name: f.read_bytes() for f in cert_dir.iterdir()}
    done = subprocess.run(["migfit", "serve", "--extender-port", str(busy_port),
                           "--webhook-port", _spare_port(), "--host", "0.0.0.0",
                           "--cert-dir", str(cert_dir)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [_in_use(busy_port, "--extender-port")]
    assert {f.name: f.read_bytes() for f in cert_dir.iterdir()} == before


def test_serve_with_one_port_for_both_servers(tmp_path: Path) -> None:
    """It reported "address already in use" once the webhook had taken the port."""
    line = _fails_in_one_line(["serve", "--webhook-port", "19600", "--extender-port", "19600",
                               "--cert-dir", str(tmp_path / "c")], code=2)
    assert line == ("migfit: error: --webhook-port and --extender-port are both 19600: the "
                    "two servers need different ports")


@pytest.mark.parametrize("flag", ["--webhook-port", "--extender-port"])
def test_serve_with_a_port_out_of_range(flag: str) -> None:
    line = _fails_in_one_line(["serve", flag, "99999"], code=2)
    assert "99999 is not a port: use 1..65535" in line


def test_the_extender_with_a_port_out_of_range() -> None:
    line = _fails_in_one_line(["extender", "--port", "0", "--cluster", CLUSTER], code=2)
    assert "use 1..65535" in line


@pytest.mark.parametrize("command", ["extender", "serve"])
def test_a_host_that_does_not_resolve(command: str, tmp_path: Path) -> None:
    args = (["--cert-dir", str(tmp_path / "c")] if command == "serve"
            else ["--port", "18999", "--cluster", CLUSTER])
    line = _fails_in_one_line([command, "--host", "no-such-host.invalid", *args], code=2)
    assert line.startswith("migfit: error: cannot listen on no-such-host.invalid port "), line
    assert line.endswith("; give --host an address of this host (e.g. 127.0.0.1)"), line
    assert "free port" not in line


@pytest.mark.parametrize("value", ["0", "-2", "0%", "150%", "ten", "nan%", "%"])
def test_the_extender_with_a_max_relayouts_it_cannot_use(value: str) -> None:
    line = _fails_in_one_line(["extender", "--max-relayouts", value, "--cluster", CLUSTER],
                              code=2)
    assert "--max-relayouts" in line and "such as 10%" in line


@pytest.mark.parametrize("args, expected", [
    (["--apply-custom-configs"], "--apply-custom-configs needs --apply-relayout"),
    (["--apply-relayout", "--apply-custom-configs"], "migManager.config.name"),
    (["--apply-relayout", "--apply-custom-configs", "--configmap", "gpu-operator/mine",
      "--config-sync", "-1"], "--config-sync -1: use 0 to 3600 seconds"),
    (["--apply-relayout", "--apply-custom-configs", "--configmap", "gpu-operator/mine",
      "--config-sync", "nan"], "argument --config-sync: 'nan' is not a finite number"),
])
def test_the_extender_refuses_custom_configs_it_cannot_write_safely(
    args: list[str], expected: str,
) -> None:
    # The GPU Operator's own ConfigMap (the default --configmap) is created from its assets
    # and may be rewritten: the flag needs a ConfigMap of one's own.
    line = _fails_in_one_line(["extender", *args, "--cluster", CLUSTER], code=2)
    assert expected in line


@pytest.mark.parametrize("args, expected", [
    (["--max-body-in-flight", "0"], "--max-body-in-flight 0: use a positive number of bytes"),
    (["--max-body-in-flight", "-5"], "--max-body-in-flight -5: use a positive number of bytes"),
    (["--max-body-in-flight", "1000"],
     "--max-body-in-flight 1000: use at least the largest body accepted (33,554,432 bytes)"),
    (["--max-body", "4096", "--max-body-in-flight", "4095"],
     "--max-body-in-flight 4095: use at least the largest body accepted (4,096 bytes)"),
    (["--max-body-in-flight", "ten"], "--max-body-in-flight: invalid int value: 'ten'"),
    (["--write-timeout", "0"], "--write-timeout 0: use a positive number of seconds"),
    (["--write-timeout", "nan"], "argument --write-timeout: 'nan' is not a finite number"),
])
def test_the_extender_refuses_server_bounds_it_cannot_use(args: list[str],
                                                          expected: str) -> None:
    line = _fails_in_one_line(["extender", *args, "--cluster", CLUSTER], code=2)
    assert expected in line


def test_the_webhook_refuses_a_body_budget_below_its_largest_body(certs: Path) -> None:
    line = _fails_in_one_line(
        ["webhook", "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
         "--cluster", CLUSTER, "--max-body-in-flight", "100000"], code=2)
    assert "--max-body-in-flight 100000: use at least the largest body accepted " \
           "(3,145,728 bytes)" in line


def test_serve_refuses_a_body_budget_below_the_extenders_largest_body(
        tmp_path: Path, busy_port: int) -> None:
    """The flag is refused before the ports are tried: with a port in use as well, the port
    was named first, and the budget only once it had been freed (an outside check)."""
    line = _fails_in_one_line(["serve", "--max-body-in-flight", "4194304", "--cert-dir",
                               str(tmp_path / "c"), "--host", "0.0.0.0",
                               "--webhook-port", str(busy_port)], code=2)
    assert "--max-body-in-flight 4194304: use at least the largest body accepted " \
           "(33,554,432 bytes)" in line


def test_serve_names_the_extenders_largest_body_for_any_budget_below_it(tmp_path: Path) -> None:
    """One budget serves both servers: a value below the webhook's largest body named the
    webhook's (3 MiB), and a larger one then met the extender's (32 MiB)."""
    line = _fails_in_one_line(["serve", "--max-body-in-flight", "1", "--cert-dir",
                               str(tmp_path / "c")], code=2)
    assert "--max-body-in-flight 1: use at least the largest body accepted " \
           "(33,554,432 bytes)" in line


@pytest.mark.parametrize("flag, value", [("--context", "foo"), ("--request-timeout", "5")])
def test_serve_on_the_bundled_cluster_says_an_api_flag_needs_a_kubeconfig(
        tmp_path: Path, flag: str, value: str) -> None:
    """No --cluster was given: the message spoke of one, and of dropping "one of them"."""
    line = _fails_in_one_line(["serve", flag, value, "--cert-dir", str(tmp_path / "c")], code=2)
    assert line == (f"migfit: error: {flag} applies to a Kubernetes API, and migfit serve is "
                    f"serving the bundled example cluster: add --kubeconfig PATH to serve a "
                    f"live cluster, or drop {flag}")


@pytest.mark.parametrize("command, zero", [
    (["serve", "--kubeconfig", "kc"], "60s, the default"),
    (["webhook", "--kubeconfig", "kc"], "60s, the default"),
    (["extender", "--kubeconfig", "kc"], "60s, the default"),
    (["status"], "no limit"),
])
@pytest.mark.parametrize("value, why", [
    ("abc", "give a duration such as 30s, 1m or 500ms"), ("-1", "use 0 or more")])
def test_a_bad_request_timeout_says_what_0_means_to_the_command(
        command: list[str], zero: str, value: str, why: str) -> None:
    """The watching servers read 0 as their default page limit (60s, as --help says); the
    error told them "0: no timeout"."""
    line = _fails_in_one_line([*command, "--request-timeout", value], code=2)
    assert line == f"migfit: error: --request-timeout {value!r}: {why} (0: {zero})"


def test_a_mig_parted_config_that_is_not_yaml_is_one_line(tmp_path: Path) -> None:
    """PyYAML's message spans four lines (the source line and a caret); the cluster file's was
    already one line, the --mig-parted-config file's now is too."""
    bad = tmp_path / "config.yaml"
    bad.write_text("version: v1\nmig-configs: a: b\n")
    line = _fails_in_one_line(["advise", "--cluster", CLUSTER, "--mig-parted-config", str(bad)],
                              code=2)
    assert line == (f"migfit: error: {bad}: not valid YAML at line 2, column 15: mapping values "
                    "are not allowed here; pass --mig-parted-config a mig-parted config file "
                    "or the ConfigMap holding one")


@pytest.mark.parametrize("namespace", ["Bad_NS", "", "a-", "-a", "a" * 64, "ns.with.dots"])
@pytest.mark.parametrize("source", [["--cluster", CLUSTER], ["--kubeconfig", "kc", "--no-publish"]])
def test_the_extender_refuses_a_lease_namespace_kubernetes_would(
        namespace: str, source: list[str]) -> None:
    """It started with --cluster (where the Lease is not used yet): the same command line in
    API mode then failed at every try to take the Lease."""
    line = _fails_in_one_line(["extender", *source, f"--lease-namespace={namespace}"], code=2)
    assert line == (f"migfit: error: --lease-namespace {namespace!r}: not a namespace name "
                    "(lower-case letters, digits and '-', starting and ending with a letter or "
                    "digit, at most 63 characters); give the extender's own namespace, e.g. "
                    "migfit-system")


@pytest.mark.parametrize("command", ["extender", "serve"])
def test_a_dcgm_namespace_kubernetes_would_refuse_is_refused(command: str) -> None:
    """It was taken as given: the exporter pods were then looked for in no namespace."""
    source = ["--cluster", CLUSTER] if command == "extender" else []
    line = _fails_in_one_line([command, *source, "--dcgm-namespace=GPU_Operator"], code=2)
    assert line == ("migfit: error: --dcgm-namespace 'GPU_Operator': not a namespace name "
                    "(lower-case letters, digits and '-', starting and ending with a letter or "
                    "digit, at most 63 characters); give the namespace of the dcgm-exporter "
                    "pods, e.g. gpu-operator")


@pytest.mark.parametrize("args, expected", [
    (["extender", "--cluster", CLUSTER, "--keepalive-timeout", "-1"],
     "--keepalive-timeout -1: use a positive number of seconds"),
    (["extender", "--cluster", CLUSTER, "--grace", "-2.5"], "--grace -2.5: use 0 or more seconds"),
    (["extender", "--cluster", CLUSTER, "--relayout-timeout", "0"],
     "--relayout-timeout 0: use more than 0 seconds"),
    (["simulate", "--example", "--node-share", "0"],
     "--node-share 0: use a share in (0, 1], e.g. 0.125 for one node in eight"),
    (["webhook", "{certs}", "--waste-warning", "60"], "--waste-warning 60: use a fraction 0..1"),
    (["webhook", "{certs}", "--shutdown-timeout", "-1"],
     "--shutdown-timeout -1: use 0 or more seconds"),
])
def test_numbers_are_quoted_as_typed(certs: Path, args: list[str], expected: str) -> None:
    """They were quoted as Python prints a float: -1.0, 0.0, 60.0."""
    tls = ["--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
           "--cluster", CLUSTER]
    argv = [word for arg in args for word in (tls if arg == "{certs}" else [arg])]
    assert _fails_in_one_line(argv, code=2) == f"migfit: error: {expected}"


@pytest.mark.parametrize("value, example", [
    ("50%", "write the share as a fraction, such as 0.5 for 50%"),
    ("half", "write it in digits, such as 0.25"),
])
@pytest.mark.parametrize("flag", ["--waste-warning", "--waste-ceiling"])
def test_a_share_that_is_no_number_gets_an_example_the_flag_takes(
        flag: str, value: str, example: str) -> None:
    """"such as 60 or 0.25": 60 was then refused as outside 0..1."""
    line = _fails_in_one_line(["webhook", flag, value], code=2)
    assert line == f"migfit webhook: error: argument {flag}: {value!r} is not a finite number: " \
                   f"{example}"


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n"])
@pytest.mark.parametrize("command", [["advise"], ["explain", "default/x"]])
def test_an_empty_mig_parted_config_is_refused(tmp_path: Path, text: str,
                                               command: list[str]) -> None:
    """It ran as a config with no layout in it (exit 0), where an empty --cluster or
    --catalog file is refused."""
    empty = tmp_path / "config.yaml"
    empty.write_text(text)
    line = _fails_in_one_line([*command, "--cluster", CLUSTER, "--mig-parted-config",
                               str(empty)], code=2)
    assert line == (f"migfit: error: {empty}: the file is empty; a mig-parted config is YAML "
                    "with `version: v1` and `mig-configs:`, each config a list of entries with "
                    "devices, mig-enabled and mig-devices, as in the GPU Operator's "
                    "default-mig-parted-config (pass --mig-parted-config that file, or the "
                    "ConfigMap holding one)")


@pytest.mark.parametrize("name", ["Bad Name", "Migfit", "-x", "a" * 254, "migfit\n"])
def test_the_webhook_refuses_a_scheduler_name_the_api_server_would_refuse(
        certs: Path, name: str) -> None:
    """Every annotated pod would be rejected at creation (spec.schedulerName is a DNS-1123
    subdomain); before, the webhook started and rewrote pods with it."""
    line = _fails_in_one_line(["webhook", "--cluster", CLUSTER, "--tls-cert",
                               str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
                               f"--scheduler-name={name}"], code=2)
    assert f"--scheduler-name {name!r}: not a valid scheduler name" in line


def _server_args(server: str, cert: Path, key: Path) -> list[str]:
    """A server on a free port (were the certificate accepted, it would serve there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [server, "--cluster", CLUSTER, "--host", "127.0.0.1", "--port", str(port),
            "--tls-cert", str(cert), "--tls-key", str(key)]


@pytest.mark.parametrize("server", ["webhook", "extender"])
def test_an_expired_certificate_stops_a_server_at_start(
        certs: Path, tmp_path: Path, server: str) -> None:
    """It started and served it: every client refused the handshake, and with failurePolicy
    Fail every annotated pod's creation failed, while the pod looked healthy."""
    ca = certificates.Issued(cert_pem=(certs / "ca.crt").read_bytes(),
                             key_pem=(certs / "ca.key").read_bytes())
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    pair = certificates.issue_serving(ca=ca, sans=["migfit-webhook"], days=1, now=old)
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    line = _fails_in_one_line(_server_args(server, tmp_path / "tls.crt", tmp_path / "tls.key"),
                              code=2)
    assert line.startswith(f"migfit: error: the TLS certificate in {tmp_path / 'tls.crt'} "
                           f"expired at "), line
    assert line.endswith(": renew it (`migfit certs rotate --out DIR`, then apply the Secret; "
                         "or let cert-manager renew it)"), line


@pytest.mark.parametrize("server", ["webhook", "extender"])
def test_a_key_that_is_not_the_certificates_kind_is_named_at_start(
        certs: Path, tmp_path: Path, server: str) -> None:
    """OpenSSL's words were NO_CERTIFICATE_ASSIGNED, and "TLS library error" for the
    certificate given as the key."""
    ca = certificates.Issued(cert_pem=(certs / "ca.crt").read_bytes(),
                             key_pem=(certs / "ca.key").read_bytes())
    rsa = certificates.issue_serving(ca=ca, sans=["migfit-webhook"], key_type="rsa")
    (tmp_path / "rsa.key").write_bytes(rsa.key_pem)
    cert, rsa_key = certs / "tls.crt", tmp_path / "rsa.key"
    line = _fails_in_one_line(_server_args(server, cert, rsa_key), code=2)
    assert line == (f"migfit: error: the key in {rsa_key} is an RSA key, the certificate in "
                    f"{cert} holds an ECDSA key: they are not a pair; pass the key that was "
                    f"issued with the certificate")
    line = _fails_in_one_line(_server_args(server, cert, cert), code=2)
    assert line == (f"migfit: error: {cert} holds no private key (it looks like a "
                    f"certificate): pass the private key (tls.key) as the key file")


def test_advise_refuses_a_configmap_it_would_not_read() -> None:
    """With --cluster FILE there is no API to read --configmap from; it was silently ignored
    (while --context with --cluster is an error)."""
    for defrag in ([], ["--defrag"]):
        line = _fails_in_one_line(["advise", "--cluster", CLUSTER, "--configmap",
                                   "gpu-operator/x", *defrag], code=2)
        assert "with --cluster FILE, pass --mig-parted-config FILE" in line


def test_a_yaml_error_names_where_its_construct_began(tmp_path: Path) -> None:
    """PyYAML finds some mistakes a line late (a key without ':' on line 2 is noticed on line
    3): the line where the construct began is named too."""
    bad = tmp_path / "config.yaml"
    bad.write_text("version: v1\nmig-configs\nmore: x\n")
    line = _fails_in_one_line(["advise", "--cluster", CLUSTER, "--mig-parted-config", str(bad)],
                              code=2)
    assert ("not valid YAML at line 3, column 1: could not find expected ':' (while scanning a "
            "simple key at line 2, column 1)") in line


def test_serve_refuses_a_certs_init_folder_as_cert_dir(certs: Path) -> None:
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    line = _fails_in_one_line(["serve", "--cert-dir", str(certs)], code=2)
    assert "already holds" in line and "pass a new or empty folder" in line
    assert {p.name: p.read_bytes() for p in certs.iterdir()} == before


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_serve_with_a_cert_dir_it_cannot_make(tmp_path: Path, where: str) -> None:
    """A file as --cert-dir, or a folder that cannot be made, was a raw OSError, exit 1
    (`[Errno 17] File exists`, `[Errno 2] No such file or directory`)."""
    (tmp_path / "file").write_text("x\n")
    target = tmp_path / "file" if where == "file" else tmp_path / "file" / "sub"
    line = _fails_in_one_line(["serve", "--cert-dir", str(target)], code=2)
    assert "Errno" not in line and str(target) in line and "new or empty folder" in line


@pytest.mark.parametrize("text", ["a: [\n", '{"kind":"List","items":[]}\n', ""])
@pytest.mark.parametrize("command", ["serve", "extender"])
def test_a_cluster_file_that_is_no_cluster_is_refused_at_start(
        tmp_path: Path, text: str, command: str) -> None:
    """``serve`` kept running with such a file, never ready, with one ERROR line "(keeping
    the last good state)" though there was none, and /advice answered 200 with nothing.
    Now it stops at once with the line ``migfit status`` prints for the same file."""
    bad = tmp_path / "cluster.yaml"
    bad.write_text(text)
    status = _fails_in_one_line(["status", "--cluster", str(bad)], code=2)
    args = (["--cert-dir", str(tmp_path / "c")] if command == "serve"
            else ["--port", "18998", "--no-publish"])
    assert _fails_in_one_line([command, *args, "--cluster", str(bad)], code=2) == status
    assert not (tmp_path / "c").exists()


def test_an_empty_cluster_file_is_told_what_a_valid_one_needs(tmp_path: Path) -> None:
    """It said "(an empty cluster is a List with 'items: []')", and such a List was then
    refused for having no Node."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    line = _fails_in_one_line(["status", "--cluster", str(empty)], code=2)
    assert "items: []" not in line and "at least one Node" in line
    assert "kubectl get nodes,pods -A -o yaml" in line


def _unusable_cert_dir(tmp_path: Path) -> Path:
    """A --cert-dir whose stat fails with something other than "no such file": a folder
    under a parent without search permission (as a user), or a name too long (as root, whom
    permissions do not stop)."""
    if os.geteuid() != 0:
        parent = tmp_path / "locked"
        parent.mkdir()
        parent.chmod(0o600)  # no x: nothing under it can be looked up
        return parent / "certs"
    return tmp_path / ("c" * 300)


def test_serve_with_a_cert_dir_it_cannot_look_at(tmp_path: Path) -> None:
    """`--cert-dir /root/certs` as a user was `migfit: error: [Errno 13] Permission denied:
    '/root/certs'`, exit 1."""
    target = _unusable_cert_dir(tmp_path)
    try:
        line = _fails_in_one_line(["serve", "--cert-dir", str(target)], code=2)
    finally:
        target.parent.chmod(0o700)
    assert line.startswith(f"migfit: error: cannot use --cert-dir {target} ("), line
    assert line.endswith("): pass a new or empty folder you can write"), line
    assert "Errno" not in line


def test_serve_names_what_it_would_overwrite_and_what_it_would_not(tmp_path: Path) -> None:
    """A folder holding only `x` was told `already holds x, which migfit serve would
    overwrite`: serve writes tls.crt, tls.key and ca.crt, never x."""
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "x").write_text("mine\n")
    line = _fails_in_one_line(["serve", "--cert-dir", str(folder)], code=2)
    assert line == (f"migfit: error: --cert-dir {folder} is not empty (it holds x) and is not "
                    f"a folder an earlier migfit serve wrote: pass a new or empty folder")
    (folder / "tls.crt").write_text("not a certificate\n")
    line = _fails_in_one_line(["serve", "--cert-dir", str(folder)], code=2)
    assert line == (f"migfit: error: --cert-dir {folder} already holds tls.crt, which migfit "
                    f"serve would overwrite with a throwaway localhost certificate, and x; it "
                    f"is not a folder an earlier migfit serve wrote: pass a new or empty folder")
    assert (folder / "x").read_text() == "mine\n"


def test_serve_refuses_an_empty_cert_dir() -> None:
    """`--cert-dir ""` was the current folder, whose files it listed as ones it would
    overwrite."""
    line = _fails_in_one_line(["serve", "--cert-dir="], code=2)
    # Not `certs`: in the checkout, where the README runs serve, that is a source folder,
    # which serve then refused as not empty (an outside check).
    assert line.endswith("argument --cert-dir: empty: pass a folder, such as --cert-dir "
                         "./migfit-serve-certs"), line


@pytest.mark.parametrize("command", ["serve", "webhook", "extender"])
def test_a_cluster_directory_is_said_to_be_one(certs: Path, tmp_path: Path,
                                               command: str) -> None:
    """serve, webhook and extender said `--cluster examples: no such file`; status, `Is a
    directory`. Now all say what status says."""
    status = _fails_in_one_line(["status", "--cluster", str(tmp_path)], code=2)
    assert "Is a directory" in status
    args = {"serve": ["--cert-dir", str(tmp_path / "c")],
            "webhook": ["--tls-cert", str(certs / "tls.crt"), "--tls-key",
                        str(certs / "tls.key")],
            "extender": ["--port", "18997", "--no-publish"]}[command]
    assert _fails_in_one_line([command, *args, "--cluster", str(tmp_path)], code=2) == status


@pytest.mark.parametrize("server", ["webhook", "extender"])
@pytest.mark.parametrize("which", ["cert", "key"])
def test_a_tls_path_that_is_a_folder_or_a_device_is_said_to_be_one(
        certs: Path, tmp_path: Path, server: str, which: str) -> None:
    """`--tls-cert /etc/tls` (a Secret's mount folder) and `--tls-cert /dev/null` said
    "no such file" for a path that exists (an outside check)."""
    cert, key = certs / "tls.crt", certs / "tls.key"
    for bad, why in ((tmp_path, "a directory, not a file; name the file in it"),
                     (Path("/dev/null"), "not a regular file")):
        args = _server_args(server, bad if which == "cert" else cert,
                            bad if which == "key" else key)
        line = _fails_in_one_line(args, code=2)
        assert f"--tls-{which} {bad}: {why}" in line, line


def _configmap(name: str) -> dict[str, object]:
    text = "version: v1\nmig-configs:\n  all-3g.40gb:\n  - devices: all\n    mig-enabled: true\n" \
           "    mig-devices: {3g.40gb: 2}\n"
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "gpu-operator"},
            "data": {"config.yaml": text}}


def test_advise_reads_a_configmap_that_kubectl_printed_in_a_list(tmp_path: Path) -> None:
    """`kubectl get configmap -l ... -o yaml` prints a List: it failed with `version: Field
    required`, not saying a List was given (an outside check). One ConfigMap in it is read as
    that ConfigMap; several are refused, named."""
    alone, listed, several = tmp_path / "cm.yaml", tmp_path / "list.yaml", tmp_path / "two.yaml"
    alone.write_text(yaml.safe_dump(_configmap("custom-mig-parted-config")))
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                      "items": [_configmap("custom-mig-parted-config")]}))
    several.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                       "items": [_configmap("a"), _configmap("b")]}))
    runs = [subprocess.run(["migfit", "advise", "--cluster", CLUSTER, "--mig-parted-config",
                            str(f), "-o", "json"], capture_output=True, text=True, timeout=60,
                           cwd=ROOT) for f in (alone, listed)]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout
    line = _fails_in_one_line(["advise", "--cluster", CLUSTER, "--mig-parted-config",
                               str(several)], code=2)
    assert line == (f"migfit: error: {several}: a List of 2 object(s), 2 of them ConfigMaps "
                    "(a, b); pass --mig-parted-config one ConfigMap (kubectl get configmap "
                    "NAME -o yaml) or a mig-parted config file")
