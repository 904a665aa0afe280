"""``migfit certs`` run as a user runs it: the installed command in a subprocess."""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from migfit.certs import certificates, store

ROOT = Path(__file__).resolve().parents[2]


def migfit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("migfit")
    command = [exe] if exe else [sys.executable, "-m", "migfit.cli"]
    env = dict(os.environ)
    # The editable install may predate the certs package; make the checkout importable.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [*command, "certs", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def out(tmp_path: Path) -> Path:
    target = tmp_path / "certs"
    done = migfit(
        "init",
        "--service",
        "migfit-extender",
        "--namespace",
        "gpu-system",
        "--extra-san",
        "127.0.0.1",
        "--extra-san",
        "localhost",
        "--days",
        "90",
        "--out",
        target,
    )
    assert done.returncode == 0, done.stderr
    assert "migfit-extender.gpu-system.svc.cluster.local" in done.stdout
    return target


def test_init_then_openssl_verifies(out: Path) -> None:
    paths = store.CertificateDir(out)
    done = subprocess.run(
        ["openssl", "verify", "-CAfile", str(paths.ca_cert), str(paths.tls_cert)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert stat.S_IMODE(paths.tls_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.ca_key.stat().st_mode) == 0o600
    cert = paths.tls_cert.read_bytes()
    assert certificates.sans_of(cert)[-2:] == ("127.0.0.1", "localhost")
    assert (certificates.not_valid_after(cert) - certificates.not_valid_before(cert)).days == 90


def test_init_refuses_to_overwrite_and_force_replaces(out: Path) -> None:
    before = (out / store.CA_CERT).read_bytes()
    line = one_line_error(migfit("init", "--service", "s", "--namespace", "n", "--out", out))
    assert "already holds" in line and "--force" in line
    assert (out / store.CA_CERT).read_bytes() == before
    done = migfit("init", "--service", "s", "--namespace", "n", "--out", out, "--force")
    assert done.returncode == 0, done.stderr
    assert (out / store.CA_CERT).read_bytes() != before


def test_init_rsa(tmp_path: Path) -> None:
    target = tmp_path / "rsa"
    done = migfit(
        "init", "--service", "s", "--namespace", "n", "--key-type", "rsa", "--out", target
    )
    assert done.returncode == 0, done.stderr
    key = certificates.load_private_key((target / store.TLS_KEY).read_bytes())
    assert certificates.key_type_of(key) == ("rsa", 2048)


def test_init_rsa_bits_sizes_the_rsa_key(tmp_path: Path) -> None:
    target = tmp_path / "rsa"
    done = migfit("init", "--service", "s", "--namespace", "n", "--key-type", "rsa",
                  "--rsa-bits", "3072", "--out", target)
    assert done.returncode == 0, done.stderr
    key = certificates.load_private_key((target / store.TLS_KEY).read_bytes())
    assert certificates.key_type_of(key) == ("rsa", 3072)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--service", "Bad_Name", "--namespace", "n"), "not a valid Service name"),
        (("--service", "s", "--namespace", "n", "--extra-san", "a b"), "neither an IP"),
        (("--service", "s", "--namespace", "n", "--days", "0"), "positive number of days"),
        # It was ignored: an ECDSA P-256 key was made instead of the RSA key asked for.
        (("--service", "s", "--namespace", "n", "--rsa-bits", "2048"),
         "--rsa-bits needs --key-type rsa"),
        (("--service", "s", "--namespace", "n", "--key-type", "ecdsa", "--rsa-bits", "3072"),
         "--rsa-bits needs --key-type rsa"),
    ],
)
def test_init_bad_arguments_are_one_line_errors(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    line = one_line_error(migfit("init", *args, "--out", tmp_path / "x"))
    assert expected in line
    assert not (tmp_path / "x").exists()


def test_rotate_without_a_ca_is_a_usage_error(tmp_path: Path) -> None:
    line = one_line_error(migfit("rotate", "--out", tmp_path / "empty"))
    assert "no CA certificate" in line and "certs init" in line


def test_rotate_and_the_ca_roll(out: Path) -> None:
    paths = store.CertificateDir(out)
    serial = paths.tls_cert.read_bytes()
    done = migfit("rotate", "--out", out)
    assert done.returncode == 0, done.stderr
    assert paths.tls_cert.read_bytes() != serial
    assert certificates.sans_of(paths.tls_cert.read_bytes())[2] == "migfit-extender.gpu-system.svc"

    done = migfit("rotate", "--out", out, "--new-ca")
    assert done.returncode == 0, done.stderr
    assert "2 CAs" in done.stdout
    assert len(certificates.load_certificates(paths.ca_bundle.read_bytes())) == 2

    line = one_line_error(migfit("rotate", "--out", out, "--retire-old-ca", "--extra-san", "x"))
    assert "--retire-old-ca" in line
    done = migfit("rotate", "--out", out, "--retire-old-ca")
    assert done.returncode == 0, done.stderr
    assert "retired 1 old CA" in done.stdout
    assert "next: publish the new caBundle" in done.stdout
    assert paths.ca_bundle.read_bytes() == paths.ca_cert.read_bytes()
    # Again, with nothing left to retire: the caBundle did not change, nothing to publish.
    done = migfit("rotate", "--out", out, "--retire-old-ca")
    assert done.returncode == 0, done.stderr
    assert "nothing to retire" in done.stdout and "next:" not in done.stdout


def test_new_ca_and_retire_together_are_refused(out: Path) -> None:
    done = migfit("rotate", "--out", out, "--new-ca", "--retire-old-ca")
    assert done.returncode == 2
    assert "not allowed with" in done.stderr


def test_rotate_extra_san_adds_to_the_current_ones(out: Path) -> None:
    done = migfit("rotate", "--out", out, "--extra-san", "10.0.0.7")
    assert done.returncode == 0, done.stderr
    sans = certificates.sans_of((out / store.TLS_CERT).read_bytes())
    assert sans[0] == "migfit-extender" and sans[-1] == "10.0.0.7"


def test_manifests_prints_the_tls_secret_and_the_ca_bundle(out: Path) -> None:
    paths = store.CertificateDir(out)
    done = migfit("manifests", "--out", out)
    assert done.returncode == 0, done.stderr
    secret = yaml.safe_load(done.stdout)
    assert secret["kind"] == "Secret" and secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"]["name"] == "migfit-extender-tls"
    assert secret["metadata"]["namespace"] == "gpu-system"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {
        "tls.crt": paths.tls_cert.read_bytes(),
        "tls.key": paths.tls_key.read_bytes(),
        "ca.crt": paths.ca_cert.read_bytes(),
    }
    bundle_lines = [ln for ln in done.stdout.splitlines() if ln.startswith("# caBundle: ")]
    assert len(bundle_lines) == 1
    assert base64.b64decode(bundle_lines[0].split()[-1]) == paths.ca_bundle.read_bytes()


def test_manifests_options(out: Path) -> None:
    migfit("rotate", "--out", out, "--new-ca")
    done = migfit("manifests", "--out", out, "--only", "ca-bundle")
    assert done.returncode == 0, done.stderr
    bundle = base64.b64decode(done.stdout.strip(), validate=True)
    assert bundle == (out / store.CA_BUNDLE).read_bytes()
    assert len(certificates.load_certificates(bundle)) == 2

    done = migfit(
        "manifests", "--out", out, "--only", "secret", "--secret-name", "x", "--namespace", "y"
    )
    assert done.returncode == 0, done.stderr
    assert "caBundle" not in done.stdout
    secret = yaml.safe_load(done.stdout)
    assert secret["metadata"]["name"] == "x" and secret["metadata"]["namespace"] == "y"


def test_manifests_secret_ca_crt_is_the_bundle_during_a_ca_roll(out: Path) -> None:
    """Its ca.crt was ca.crt alone: a client verifying with it (a ServiceMonitor) refused the
    servers that still presented the old CA's certificate."""
    assert migfit("rotate", "--out", out, "--new-ca").returncode == 0
    done = migfit("manifests", "--out", out, "--only", "secret")
    assert done.returncode == 0, done.stderr
    ca_crt = base64.b64decode(yaml.safe_load(done.stdout)["data"]["ca.crt"])
    assert ca_crt == (out / store.CA_BUNDLE).read_bytes()
    assert len(certificates.load_certificates(ca_crt)) == 2


@pytest.mark.parametrize("swap, expected", [
    ((store.TLS_KEY,), "{out}/tls.key does not belong to {out}/tls.crt"),
    ((store.TLS_CERT, store.TLS_KEY),
     "{out}/tls.crt is signed neither by {out}/ca.crt nor by a CA in {out}/ca-bundle.crt"),
])
@pytest.mark.parametrize("only", [[], ["--only", "secret"], ["--only", "ca-bundle"]])
def test_manifests_refuses_a_pair_clients_would_reject(
    out: Path, tmp_path: Path, swap: tuple[str, ...], expected: str, only: list[str],
) -> None:
    """A tls.key of another certificate was printed into the Secret with exit 0: the new
    pods then could not load the pair."""
    other = tmp_path / "other"
    assert migfit("init", "--service", "s", "--namespace", "n", "--out", other).returncode == 0
    for name in swap:
        (out / name).write_bytes((other / name).read_bytes())
    done = migfit("manifests", "--out", out, *only)
    line = one_line_error(done)
    assert done.stdout == ""
    assert expected.format(out=out) in line, line
    assert f"`migfit certs rotate --out {out}`" in line, line
    assert migfit("rotate", "--out", out).returncode == 0  # what it suggests mends it
    assert migfit("manifests", "--out", out, *only).returncode == 0


def test_no_next_step_prints_the_private_key_to_the_terminal(out: Path) -> None:
    """`certs init` said `next: migfit certs manifests --out DIR`, which prints the Secret,
    tls.key included; every suggested manifests command is --only, a Secret piped to kubectl."""
    runs = [migfit("init", "--service", "s", "--namespace", "n", "--out", out, "--force"),
            migfit("rotate", "--out", out), migfit("rotate", "--out", out, "--new-ca"),
            migfit("rotate", "--out", out, "--retire-old-ca")]
    suggested = []
    for done in runs:
        assert done.returncode == 0, done.stderr
        suggested += re.findall(r"migfit certs manifests[^`;(\n]*", done.stdout)
    assert len(suggested) >= 4, suggested
    for command in suggested:
        assert "--only ca-bundle" in command or command.rstrip().endswith(
            "--only secret | kubectl apply -f -"), command
    assert runs[0].stdout.rstrip().splitlines()[-1].startswith(
        f"next: migfit certs manifests --out {out} --only secret | kubectl apply -f -")


def test_manifests_of_a_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    line = one_line_error(migfit("manifests", "--out", tmp_path / "none"))
    assert "certs init" in line


def test_help_lists_the_actions() -> None:
    done = migfit("--help")
    assert done.returncode == 0
    for action in ("init", "rotate", "manifests"):
        assert action in done.stdout


@pytest.mark.parametrize("service, publish, other", [
    ("migfit-webhook", "--only ca-bundle", ("migfit-extender-ca", "kube-scheduler")),
    ("migfit-extender", "create configmap migfit-extender-ca", ("caBundle", "ca-bundle`")),
    ("gpu-admission", "--only ca-bundle", ()),  # named neither way: both ways are printed
])
def test_a_ca_roll_prints_the_steps_of_its_service(
    tmp_path: Path, service: str, publish: str, other: tuple[str, ...],
) -> None:
    """The bundle first, then the Secret, then retire; the bundle published to whoever
    trusts this service: the webhook's caBundle (the API server) or the extender's CA file
    (kube-scheduler). Both folders used to get the same steps, which named the other's."""
    out = tmp_path / service
    done = migfit("init", "--service", service, "--namespace", "ml", "--out", out)
    assert done.returncode == 0, done.stderr
    done = migfit("rotate", "--out", out, "--new-ca")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    bundle, secret = text.find(publish), text.find("--only secret")
    retire = text.rfind("--retire-old-ca")
    assert 0 < bundle < secret < retire, text
    for word in other:
        assert word not in text, text
    if service == "migfit-extender":
        assert f"--from-file=ca.crt={out / store.CA_BUNDLE}" in text
        assert "kubectl -n ml rollout restart deploy/migfit-scheduler" in text
    if service == "gpu-admission":
        assert "migfit-extender-ca" in text


def test_a_serving_certificate_cut_at_its_cas_expiry_says_so(tmp_path: Path) -> None:
    """--days past the CA's own expiry was cut there silently (a certificate never outlives
    its issuer); the summary now says why the date is earlier than asked."""
    args = ("init", "--service", "s", "--namespace", "n", "--out")
    done = migfit(*args, tmp_path / "long", "--days", "4000")
    assert done.returncode == 0, done.stderr
    assert "(with its CA: a certificate never outlives its issuer" in done.stdout
    done = migfit(*args, tmp_path / "short", "--days", "90")
    assert done.returncode == 0, done.stderr
    assert "with its CA" not in done.stdout


def _suggested_init(line: str) -> str:
    found = re.search(r"`migfit certs (init [^`]*)`", line)
    assert found is not None, line
    return found.group(1)


@pytest.mark.parametrize("roll", [[], ["--new-ca"]])
def test_rotate_without_a_ca_suggests_an_init_that_works(tmp_path: Path,
                                                         roll: list[str]) -> None:
    """It suggested `migfit certs init --out DIR`, which certs init refuses: --service and
    --namespace are required."""
    target = tmp_path / "pki" / "nonexist"
    line = one_line_error(migfit("rotate", "--out", target, *roll))
    suggested = _suggested_init(line)
    assert suggested == f"init --out {target} --service NAME --namespace NS", line
    filled = suggested.replace("NAME", "migfit-webhook").replace("NS", "migfit-system")
    assert migfit(*shlex.split(filled)).returncode == 0
    assert migfit("rotate", "--out", target, *roll).returncode == 0


def test_rotate_with_some_files_missing_suggests_an_init_that_replaces_them(
        out: Path) -> None:
    (out / store.CA_KEY).unlink()
    line = one_line_error(migfit("rotate", "--out", out))
    suggested = _suggested_init(line)
    assert suggested == f"init --out {out} --service NAME --namespace NS --force", line
    filled = suggested.replace("NAME", "migfit-webhook").replace("NS", "migfit-system")
    assert migfit(*shlex.split(filled)).returncode == 0
    assert migfit("rotate", "--out", out).returncode == 0


@pytest.mark.parametrize("action", ["rotate", "manifests"])
def test_a_folder_of_migfit_serve_is_told_for_what_it_is(tmp_path: Path, action: str) -> None:
    """`migfit serve --cert-dir` writes a throwaway CA without its key: it was told "no CA
    key ...: run `migfit certs init --out DIR` first", which certs init refuses."""
    served = tmp_path / "served"
    served.mkdir()
    for name, pem in zip((store.TLS_CERT, store.TLS_KEY, store.CA_CERT),
                         certificates.self_signed_for_localhost(), strict=True):
        (served / name).write_bytes(pem)
    line = one_line_error(migfit(action, "--out", served))
    assert line.startswith(f"migfit: error: {served} holds the throwaway certificate of "
                           f"`migfit serve`"), line
    assert _suggested_init(line) == "init --out NEW-DIR --service NAME --namespace NS"


@pytest.mark.parametrize("flag, value, said", [
    ("--secret-name", "Bad Name", "--secret-name 'Bad Name': not a Secret name"),
    ("--namespace", "BAD_NS", "--namespace 'BAD_NS': not a namespace name"),
])
def test_manifests_refuses_names_the_api_server_would(tmp_path: Path, flag: str, value: str,
                                                      said: str) -> None:
    """They were printed into the Secret (exit 0), for kubectl apply to fail on (an outside
    check); `certs init` refused its own already."""
    out = tmp_path / "pki"
    assert migfit("init", "--service", "svc", "--namespace", "ns", "--out", out).returncode == 0
    done = migfit("manifests", "--out", out, flag, value)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"migfit: error: {said} (") and done.stderr.count("\n") == 1
