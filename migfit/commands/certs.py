"""``migfit certs``: create, rotate and publish the certificates of the webhook and extender."""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import yaml

from migfit import errors, schedulerconfig
from migfit.certs import certificates, manifests, store

RSA_BITS_DEFAULT = 2048
"""The RSA key size of ``--key-type rsa`` without ``--rsa-bits``."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="certs_command", metavar="ACTION", required=True)

    init = sub.add_parser(
        "init",
        help="create a CA and a serving certificate for a Service",
        description=(
            "Create a CA and a serving certificate with the SANs NAME, NAME.NS, NAME.NS.svc "
            "and NAME.NS.svc.cluster.local (plus --extra-san), written to DIR as ca.crt, "
            "ca.key, tls.crt, tls.key and ca-bundle.crt (keys mode 0600)."
        ),
    )
    init.add_argument("--service", required=True, metavar="NAME", help="the Service name")
    init.add_argument("--namespace", required=True, metavar="NS", help="the Service namespace")
    _add_san_argument(init)
    _add_validity_arguments(init)
    init.add_argument(
        "--key-type",
        choices=certificates.KEY_TYPES,
        default="ecdsa",
        help="ecdsa (P-256, the default) or rsa",
    )
    init.add_argument(
        "--rsa-bits",
        type=int,
        choices=certificates.RSA_BITS,
        help=f"RSA key size with --key-type rsa (default {RSA_BITS_DEFAULT})",
    )
    _add_dir_argument(init, required=True)
    init.add_argument("--force", action="store_true", help="replace existing files in DIR")
    init.set_defaults(_certs_action=_init)

    rotate = sub.add_parser(
        "rotate",
        help="issue a new serving certificate; --new-ca rolls the CA with an overlap",
        description=(
            "Issue a new serving certificate from the CA in DIR, with the SANs and key type of "
            "the current one. --new-ca first creates a new CA and writes a ca-bundle.crt that "
            "trusts both the old and the new CA; publish it (the webhook's caBundle, the "
            "scheduler's extender CA file) and the Secret, "
            "and once every server presents the new certificate, run --retire-old-ca."
        ),
    )
    _add_dir_argument(rotate, required=True)
    _add_validity_arguments(rotate)
    roll = rotate.add_mutually_exclusive_group()
    roll.add_argument(
        "--new-ca", action="store_true", help="create a new CA (the bundle keeps the old one)"
    )
    roll.add_argument(
        "--retire-old-ca",
        action="store_true",
        help="end a CA roll: the bundle keeps only the current CA (no new certificate)",
    )
    rotate.add_argument("--service", metavar="NAME", help="new SANs for this Service name")
    rotate.add_argument("--namespace", metavar="NS", help="new SANs for this namespace")
    _add_san_argument(rotate, extra_help=" (added to the current SANs without --service)")
    rotate.set_defaults(_certs_action=_rotate)

    show = sub.add_parser(
        "manifests",
        help="print the kubernetes.io/tls Secret and the caBundle",
        description=(
            "Print a kubernetes.io/tls Secret (tls.crt, tls.key, and ca.crt: the CA bundle, "
            "ca-bundle.crt) for kubectl apply, "
            "followed by the caBundle (base64 of ca-bundle.crt) for the "
            "MutatingWebhookConfiguration's clientConfig.caBundle (the scheduler's extender "
            "trusts ca-bundle.crt as a file: tlsConfig.caFile in the shipped configs)."
        ),
    )
    _add_dir_argument(show, required=True)
    show.add_argument(
        "--secret-name",
        metavar="NAME",
        help="Secret name (default: SERVICE-tls from the certificate's SANs)",
    )
    show.add_argument(
        "--namespace",
        metavar="NS",
        help=f"Secret namespace (default: from the certificate's SANs, else "
        f"{manifests.DEFAULT_NAMESPACE})",
    )
    show.add_argument(
        "--only",
        choices=("secret", "ca-bundle"),
        help="print only the Secret YAML, or only the caBundle value (one line)",
    )
    show.set_defaults(_certs_action=_manifests)


def run(args: argparse.Namespace) -> int:
    action = args._certs_action
    result: int = action(args)
    return result


def _init(args: argparse.Namespace) -> int:
    if args.rsa_bits is not None and args.key_type != "rsa":
        # It was ignored: the key made was ECDSA P-256, not the RSA key asked for.
        raise errors.UsageError(f"--rsa-bits needs --key-type rsa: drop --rsa-bits for an "
                                f"{args.key_type} key (P-256), or add --key-type rsa")
    summary = store.init(
        args.out,
        service=args.service,
        namespace=args.namespace,
        extra_sans=args.extra_san,
        days=args.days,
        ca_days=args.ca_days,
        key_type=args.key_type,
        rsa_bits=RSA_BITS_DEFAULT if args.rsa_bits is None else args.rsa_bits,
        force=args.force,
    )
    print(f"wrote a new CA and serving certificate to {args.out}")
    _print_summary(summary)
    print(f"next: migfit certs manifests --out {args.out} --only secret | kubectl apply -f - "
          f"(once its namespace exists; README, \"Install on a cluster\")")
    return 0


def _rotate(args: argparse.Namespace) -> int:
    if args.retire_old_ca:
        if args.service or args.namespace or args.extra_san:
            raise errors.UsageError("--retire-old-ca issues no certificate: drop the SAN options")
        retired = store.retire_old_ca(args.out)
        if retired:
            print(f"retired {len(retired)} old CA(s) from {args.out / store.CA_BUNDLE}:")
            for fp in retired:
                print(f"  sha256 {fp}")
        else:
            print(f"no old CA in {args.out / store.CA_BUNDLE}: nothing to retire")
        _print_summary(store.summary(args.out))
        if retired:  # else the published caBundle is the same: nothing to do next
            print(f"next: publish the new caBundle: {_publish_bundle(args.out)}; then "
                  f"re-apply the Secret (its ca.crt is the bundle): {_apply_secret(args.out)}")
        return 0

    sans: tuple[str, ...] | None = None
    if args.service or args.namespace:
        if not (args.service and args.namespace):
            raise errors.UsageError("--service and --namespace go together: give both")
        sans = certificates.serving_sans(args.service, args.namespace, args.extra_san)
    elif args.extra_san:
        current = store.summary(args.out).sans
        sans = tuple(dict.fromkeys([*current, *map(certificates.normalize_san, args.extra_san)]))
    summary = store.rotate(
        args.out, days=args.days, sans=sans, new_ca=args.new_ca, ca_days=args.ca_days
    )
    if args.new_ca:
        print(f"created a new CA and a serving certificate signed by it in {args.out}")
        print(f"{store.CA_BUNDLE} trusts the old and the new CA until --retire-old-ca")
    else:
        print(f"issued a new serving certificate in {args.out}")
    _print_summary(summary)
    if args.new_ca:
        # A CA roll: clients must trust the new CA before any server presents a certificate
        # signed by it, or the API server (webhook) and kube-scheduler (extender) are cut off.
        for line in ca_roll_steps(args.out):
            print(line)
    else:
        print(f"next: {_apply_secret(args.out)}")
    return 0


def ca_roll_steps(out: Path) -> list[str]:
    """The safe order after ``rotate --new-ca``: the bundle, then the Secret, then retire."""
    return [
        "next, in this order (the old CA keeps working until step 3):",
        f"  1. publish the bundle first: {_publish_bundle(out)}",
        f"  2. then apply the new Secret: {_apply_secret(out)}",
        f"  3. when every server presents the new certificate: migfit certs rotate --out {out} "
        f"--retire-old-ca, publish the bundle again as in step 1 and apply the Secret again as "
        f"in step 2 (its ca.crt is the bundle)",
    ]


def _apply_secret(out: Path) -> str:
    # --only secret: the Secret holds the private key; it goes to kubectl, not the terminal
    return f"migfit certs manifests --out {out} --only secret | kubectl apply -f -"


def _publish_bundle(out: Path) -> str:
    """How to publish ``out``'s bundle to the clients that verify its server.

    Who must trust the bundle depends on the certificate's Service (its ``NAME.NS.svc``
    SAN): the API server for the webhook (the caBundle), kube-scheduler for the extender (a
    CA file); a Service named neither way gets both ways of publishing it.
    """
    found = manifests.service_of(store.CertificateDir(out).tls_cert.read_bytes())
    name, namespace = found if found else ("", manifests.DEFAULT_NAMESPACE)
    bundle = out / store.CA_BUNDLE
    webhook = (f"set the webhook's caBundle to `migfit certs manifests --out {out} --only "
               f"ca-bundle` and re-apply your overlay")
    extender = (f"give kube-scheduler {bundle} as the extender's tlsConfig.caFile: the second "
                f"scheduler: kubectl -n {namespace} create configmap migfit-extender-ca "
                f"--from-file=ca.crt={bundle} --dry-run=client -o yaml | kubectl apply -f - "
                f"and kubectl -n {namespace} rollout restart deploy/migfit-scheduler (it reads "
                f"its CA only at start-up); the default scheduler: copy it to the file its "
                f"config names on the control-plane nodes and restart it")
    if "extender" in name and "webhook" not in name:
        return extender
    if "webhook" in name and "extender" not in name:
        return webhook
    return f"for the webhook, {webhook}; for the extender, {extender}"


def _manifests(args: argparse.Namespace) -> int:
    # Names the API server would refuse, refused here (`certs init` does so for its own).
    if args.namespace is not None:
        schedulerconfig.check_namespace_flag(
            "--namespace", args.namespace,
            give="give the namespace of the server's Service, e.g. migfit-system")
    if args.secret_name is not None and not schedulerconfig.is_dns1123_subdomain(
            args.secret_name):
        raise errors.UsageError(
            f"--secret-name {args.secret_name!r}: not a Secret name (lower-case letters, "
            f"digits, '-' and '.', starting and ending with a letter or digit, at most 253 "
            f"characters), e.g. migfit-webhook-tls")
    paths = store.CertificateDir(args.out)
    store.summary(args.out)  # checks that the directory is complete and consistent
    store.check_serving(args.out)  # and that its pair is one that clients accept
    tls_crt = paths.tls_cert.read_bytes()
    bundle = manifests.ca_bundle(store.read_bundle(args.out))
    if args.only == "ca-bundle":
        print(bundle)
        return 0
    found = manifests.service_of(tls_crt)
    namespace = args.namespace or (found[1] if found else manifests.DEFAULT_NAMESPACE)
    name = args.secret_name or (f"{found[0]}-tls" if found else manifests.DEFAULT_SECRET_NAME)
    secret = manifests.tls_secret(
        name=name,
        namespace=namespace,
        tls_crt=tls_crt,
        tls_key=paths.tls_key.read_bytes(),
        # The bundle, not ca.crt alone: during a CA roll the servers still present the old
        # CA's certificate to clients that verify with this key (ServiceMonitors).
        ca_crt=store.read_bundle(args.out),
    )
    out = sys.stdout
    out.write(yaml.safe_dump(secret, sort_keys=False, width=1_000_000))
    if args.only == "secret":
        return 0
    out.write(
        "# Set MutatingWebhookConfiguration webhooks[].clientConfig.caBundle to this caBundle\n"
        "# (or print it alone with --only ca-bundle); kube-scheduler trusts the extender's\n"
        "# ca-bundle.crt as a file (extenders[].tlsConfig.caFile in the shipped configs):\n"
        f"# caBundle: {bundle}\n"
    )
    return 0


def _print_summary(summary: store.Summary) -> None:
    print(f"  serving certificate: {', '.join(summary.sans)}")
    capped = summary.serving_not_after >= summary.ca_not_after
    print(f"    expires {_when(summary.serving_not_after)}"
          + (" (with its CA: a certificate never outlives its issuer; a later date needs a "
             "new CA, rotate --new-ca)" if capped else ""))
    print(f"  CA sha256 {summary.ca_fingerprint}, expires {_when(summary.ca_not_after)}")
    if len(summary.bundle_fingerprints) > 1:
        print(f"  bundle: {len(summary.bundle_fingerprints)} CAs (a CA roll is in progress)")


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _add_dir_argument(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--out",
        type=Path,
        required=required,
        metavar="DIR",
        help="the certificate directory (ca.crt, ca.key, tls.crt, tls.key, ca-bundle.crt)",
    )


def _add_validity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--days",
        type=int,
        default=certificates.DEFAULT_SERVING_DAYS,
        metavar="N",
        help=f"serving certificate validity (default {certificates.DEFAULT_SERVING_DAYS})",
    )
    parser.add_argument(
        "--ca-days",
        type=int,
        default=certificates.DEFAULT_CA_DAYS,
        metavar="N",
        help=f"CA validity for a new CA (default {certificates.DEFAULT_CA_DAYS})",
    )


def _add_san_argument(parser: argparse.ArgumentParser, *, extra_help: str = "") -> None:
    parser.add_argument(
        "--extra-san",
        action="append",
        default=[],
        metavar="SAN",
        help="another DNS name or IP address (repeatable), e.g. localhost, 127.0.0.1" + extra_help,
    )
