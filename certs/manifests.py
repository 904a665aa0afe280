"""The Kubernetes objects and fields that carry certificates: the TLS Secret and the caBundle.

The Secret is ``kubernetes.io/tls`` (keys ``tls.crt`` and ``tls.key``, plus ``ca.crt`` as
cert-manager writes it; migfit's holds the trust bundle, both CAs during a CA roll). The
caBundle is base64 of PEM, the form both
``MutatingWebhookConfiguration.webhooks[].clientConfig.caBundle`` (WIRE.md §2.2) and the
scheduler's ``extenders[].tlsConfig.caData`` (a ``[]byte``, so base64 in YAML, WIRE.md §1.2)
expect.
"""

from __future__ import annotations

import base64
import re
from typing import Any

from migfit.certs import certificates

DEFAULT_NAMESPACE = "migfit-system"
DEFAULT_SECRET_NAME = "migfit-tls"

_SERVICE_SAN = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)\.svc$")


def b64(data: bytes) -> str:
    """Standard base64 without line breaks, as Kubernetes ``[]byte`` fields are written."""
    return base64.b64encode(data).decode("ascii")


def ca_bundle(bundle_pem: bytes) -> str:
    """The caBundle / caData value for ``bundle_pem``."""
    return b64(bundle_pem)


def service_of(cert_pem: bytes) -> tuple[str, str] | None:
    """``(service, namespace)`` from the serving certificate's ``NAME.NS.svc`` SAN, if any."""
    for san in certificates.sans_of(cert_pem):
        match = _SERVICE_SAN.match(san)
        if match:
            return match.group(1), match.group(2)
    return None


def tls_secret(
    *, name: str, namespace: str, tls_crt: bytes, tls_key: bytes, ca_crt: bytes
) -> dict[str, Any]:
    """A ``kubernetes.io/tls`` Secret holding the serving pair and the CA(s) ``ca_crt``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "migfit", "app.kubernetes.io/component": "tls"},
        },
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64(tls_crt), "tls.key": b64(tls_key), "ca.crt": b64(ca_crt)},
    }
