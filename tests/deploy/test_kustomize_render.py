"""Every kustomize target renders, and every object it renders is valid Kubernetes for every
version from 1.30 (matchConditions GA) to the newest kubernetes-validate knows, strictly."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import kubernetes_validate
import kubernetes_validate.utils
import pydantic
import pytest
from deploy_manifests import TARGETS, Obj, label, needs_kubectl, render
from packaging.version import Version

pytestmark = needs_kubectl

MIN_VERSION = Version("1.30")
VERSIONS = sorted(
    {f"{v.major}.{v.minor}" for v in map(Version, kubernetes_validate.utils.all_versions())
     if v >= MIN_VERSION},
    key=Version,
)
CERT_MANAGER = "cert-manager.io/v1"
MONITORING = "monitoring.coreos.com/v1"


def test_the_validator_knows_versions_from_1_30() -> None:
    assert VERSIONS[0] == "1.30", VERSIONS
    assert VERSIONS[-1] == kubernetes_validate.utils.major_minor(
        kubernetes_validate.latest_version())


@pytest.mark.parametrize("target", TARGETS)
def test_target_renders_objects(target: str) -> None:
    objects = render(target)
    assert objects
    assert all(o.get("apiVersion") and o.get("kind") and o["metadata"].get("name")
               for o in objects)
    names = [label(o) for o in objects]
    assert len(names) == len(set(names)), f"duplicate objects in {target}"
    # every object is migfit's by its label (what `kubectl get -l` and pruning select on);
    # the overlays' own objects lacked it
    unlabelled = [label(o) for o in objects
                  if (o["metadata"].get("labels") or {}).get("app.kubernetes.io/part-of")
                  != "migfit"]
    assert unlabelled == [], f"{target}: objects without app.kubernetes.io/part-of: migfit"


def _unique_core_objects() -> dict[str, Obj]:
    """Every object of every target that has an OpenAPI schema, once (targets share most)."""
    unique: dict[str, Obj] = {}
    for target in TARGETS:
        for obj in render(target):
            if obj["apiVersion"] not in (CERT_MANAGER, MONITORING):
                unique.setdefault(json.dumps(obj, sort_keys=True), obj)
    return unique


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_strictly(version: str) -> None:
    failures = []
    for obj in _unique_core_objects().values():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            failures.append(f"{label(obj)}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{label(obj)}: {exc.message}")
    assert not failures, f"Kubernetes {version}:\n" + "\n".join(failures)


def test_a_strict_schema_rejects_an_unknown_field() -> None:
    """The check above has teeth: one misspelt field fails it."""
    obj = next(o for o in render("base") if o["kind"] == "Deployment")
    obj["spec"]["template"]["spec"]["securityContext"]["runAsNonroot"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, VERSIONS[0], strict=True)


# cert-manager.io kinds are CRDs (no bundled schema): a strict model of the fields used,
# after cert-manager's v1 API (Issuer, Certificate).
class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class _Meta(_Strict):
    name: str
    namespace: str
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _CA(_Strict):
    secretName: str


class _IssuerSpec(_Strict):
    selfSigned: dict[str, str] | None = None
    ca: _CA | None = None

    @pydantic.model_validator(mode="after")
    def _one_kind(self) -> _IssuerSpec:
        assert (self.selfSigned is None) != (self.ca is None), "exactly one issuer type"
        return self


class _Issuer(_Strict):
    apiVersion: Literal["cert-manager.io/v1"]
    kind: Literal["Issuer"]
    metadata: _Meta
    spec: _IssuerSpec


class _PrivateKey(_Strict):
    algorithm: Literal["RSA", "ECDSA", "Ed25519"]
    size: int | None = None
    rotationPolicy: Literal["Never", "Always"] | None = None


class _IssuerRef(_Strict):
    name: str
    kind: Literal["Issuer", "ClusterIssuer"]
    group: str | None = None


_Usage = Literal["signing", "digital signature", "content commitment", "key encipherment",
                 "key agreement", "data encipherment", "cert sign", "crl sign",
                 "encipher only", "decipher only", "any", "server auth", "client auth",
                 "code signing", "email protection", "s/mime", "ipsec end system",
                 "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
                 "microsoft sgc", "netscape sgc"]
_GoDuration = Annotated[str, pydantic.Field(pattern=r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")]


class _CertificateSpec(_Strict):
    secretName: str
    issuerRef: _IssuerRef
    isCA: bool | None = None
    commonName: str | None = None
    dnsNames: list[str] | None = None
    duration: _GoDuration | None = None
    renewBefore: _GoDuration | None = None
    privateKey: _PrivateKey | None = None
    usages: list[_Usage] | None = None


class _Certificate(_Strict):
    apiVersion: Literal["cert-manager.io/v1"]
    kind: Literal["Certificate"]
    metadata: _Meta
    spec: _CertificateSpec


def test_cert_manager_objects_match_their_api() -> None:
    objects = [o for o in render("overlays/cert-manager") if o["apiVersion"] == CERT_MANAGER]
    models: dict[str, type[pydantic.BaseModel]] = {"Issuer": _Issuer,
                                                   "Certificate": _Certificate}
    assert {o["kind"] for o in objects} == set(models)
    for obj in objects:
        models[obj["kind"]].model_validate(obj)
    issuers = {o["metadata"]["name"] for o in objects if o["kind"] == "Issuer"}
    for cert in (o for o in objects if o["kind"] == "Certificate"):
        assert cert["spec"]["issuerRef"]["name"] in issuers, label(cert)


def test_cert_manager_serves_the_service_names_and_injects_the_ca() -> None:
    objects = render("overlays/cert-manager")
    certs = {o["spec"]["secretName"]: o for o in objects if o["kind"] == "Certificate"}
    for service in ("migfit-webhook", "migfit-extender"):
        names = certs[f"{service}-tls"]["spec"]["dnsNames"]
        assert f"{service}.migfit-system.svc" in names
    webhook = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "migfit-system/migfit-webhook")


# The Prometheus Operator's ServiceMonitor is a CRD too: a strict model of the fields used,
# after its monitoring.coreos.com/v1 API (spec.selector, namespaceSelector, endpoints[].tlsConfig).
class _SecretKey(_Strict):
    name: str
    key: str


class _SecretRef(_Strict):
    secret: _SecretKey


class _MonitorTls(_Strict):
    serverName: str
    ca: _SecretRef


class _Endpoint(_Strict):
    port: str
    scheme: Literal["https"]
    path: Literal["/metrics"]
    interval: str
    tlsConfig: _MonitorTls


class _Selector(_Strict):
    matchLabels: dict[str, str]


class _NamespaceSelector(_Strict):
    matchNames: list[str]


class _MonitorSpec(_Strict):
    selector: _Selector
    namespaceSelector: _NamespaceSelector
    endpoints: list[_Endpoint]


class _ServiceMonitor(_Strict):
    apiVersion: Literal["monitoring.coreos.com/v1"]
    kind: Literal["ServiceMonitor"]
    metadata: _Meta
    spec: _MonitorSpec


def test_service_monitors_scrape_every_server_over_verified_tls() -> None:
    objects = render("overlays/prometheus-operator")
    monitors = [o for o in objects if o["apiVersion"] == MONITORING]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    secrets = {v["secret"]["secretName"] for o in objects if o["kind"] == "Deployment"
               for v in o["spec"]["template"]["spec"].get("volumes", []) if "secret" in v}
    scraped = set()
    for raw in monitors:
        monitor = _ServiceMonitor.model_validate(raw)
        wanted = monitor.spec.selector.matchLabels.items()
        (service,) = [s for s in services.values() if s["metadata"]["labels"].items() >= wanted]
        assert monitor.spec.namespaceSelector.matchNames == [service["metadata"]["namespace"]]
        ports = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in monitor.spec.endpoints:
            assert endpoint.port in ports
            name, ns = service["metadata"]["name"], service["metadata"]["namespace"]
            assert endpoint.tlsConfig.serverName == f"{name}.{ns}.svc"
            assert endpoint.tlsConfig.ca.secret.name in secrets
            assert endpoint.tlsConfig.ca.secret.key == "ca.crt"
        scraped.add(service["metadata"]["name"])
    assert scraped == {"migfit-webhook", "migfit-extender"}
