"""A strict model of ``KubeSchedulerConfiguration`` (kubescheduler.config.k8s.io/v1) and the
scheduler's own extender validation, so a generated configuration is refused before
kube-scheduler refuses it at start-up.

Field names are those of KS ``config/v1/types.go``; kube-scheduler decodes its configuration
strictly (unknown and duplicate fields are errors), so the model forbids unknown fields. The
rules of ``validate_extenders`` are KK ``pkg/scheduler/apis/config/validation``
``validateExtenders`` (reference/WIRE.md §1.2): a positive weight with a prioritize verb,
managedResources names that are qualified names and valid extended-resource names and unique
across extenders, at most one binder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Final, Literal, TypeVar

import pydantic

from migfit import errors

API_VERSION: Final = "kubescheduler.config.k8s.io/v1"
KIND: Final = "KubeSchedulerConfiguration"

# metav1.Duration is Go's time.ParseDuration text: "5s", "1m30s", "250ms", "0".
_DURATION = re.compile(r"^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+)$")
# k8s.io/apimachinery/pkg/util/validation: IsQualifiedName and IsDNS1123Subdomain.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_QUALIFIED_NAME_MAX = 63
_DNS1123_SUBDOMAIN_MAX = 253
_DNS1123_LABEL_MAX = 63
_REQUESTS_PREFIX = "requests."  # v1.DefaultResourceRequestsPrefix
_INT32_MAX = 2**31 - 1


def _check_duration(value: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{value!r} is not a Go duration such as 5s, 1m30s or 250ms")
    return value


Duration = Annotated[str, pydantic.AfterValidator(_check_duration)]
Int32 = Annotated[int, pydantic.Field(ge=-(2**31), le=_INT32_MAX, strict=True)]
Int64 = Annotated[int, pydantic.Field(ge=-(2**63), le=2**63 - 1, strict=True)]
Bytes = Annotated[str, pydantic.Field(pattern=r"^[A-Za-z0-9+/]*={0,2}$")]
"""A Go ``[]byte``: base64 text in YAML and JSON."""


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True, frozen=True)


_M = TypeVar("_M", bound=_Strict)


class LeaderElection(_Strict):
    """componentbaseconfig ``LeaderElectionConfiguration``."""

    leaderElect: bool | None = None
    leaseDuration: Duration | None = None
    renewDeadline: Duration | None = None
    retryPeriod: Duration | None = None
    resourceLock: str | None = None
    resourceName: str | None = None
    resourceNamespace: str | None = None


class ClientConnection(_Strict):
    """componentbaseconfig ``ClientConnectionConfiguration``."""

    kubeconfig: str | None = None
    acceptContentTypes: str | None = None
    contentType: str | None = None
    qps: float | None = pydantic.Field(default=None, strict=False)
    burst: Int32 | None = None


class Plugin(_Strict):
    name: str
    weight: Int32 | None = None


class PluginSet(_Strict):
    enabled: list[Plugin] | None = None
    disabled: list[Plugin] | None = None


class Plugins(_Strict):
    preEnqueue: PluginSet | None = None
    queueSort: PluginSet | None = None
    preFilter: PluginSet | None = None
    filter: PluginSet | None = None
    postFilter: PluginSet | None = None
    preScore: PluginSet | None = None
    score: PluginSet | None = None
    reserve: PluginSet | None = None
    permit: PluginSet | None = None
    preBind: PluginSet | None = None
    bind: PluginSet | None = None
    postBind: PluginSet | None = None
    multiPoint: PluginSet | None = None


class PluginConfig(_Strict):
    name: str
    args: dict[str, Any] | None = None
    """A runtime.RawExtension: each plugin's own args type, not modelled here."""


class Profile(_Strict):
    """``KubeSchedulerProfile``."""

    schedulerName: str | None = None
    percentageOfNodesToScore: Int32 | None = None
    plugins: Plugins | None = None
    pluginConfig: list[PluginConfig] | None = None


class ExtenderTLSConfig(_Strict):
    insecure: bool | None = None
    serverName: str | None = None
    certFile: str | None = None
    keyFile: str | None = None
    caFile: str | None = None
    certData: Bytes | None = None
    keyData: Bytes | None = None
    caData: Bytes | None = None


class ExtenderManagedResource(_Strict):
    name: str
    ignoredByScheduler: bool | None = None


class Extender(_Strict):
    """One entry of the top-level ``extenders`` list."""

    urlPrefix: str
    filterVerb: str | None = None
    preemptVerb: str | None = None
    prioritizeVerb: str | None = None
    weight: Int64 | None = None
    bindVerb: str | None = None
    enableHTTPS: bool | None = None
    tlsConfig: ExtenderTLSConfig | None = None
    httpTimeout: Duration | None = None
    nodeCacheCapable: bool | None = None
    managedResources: list[ExtenderManagedResource] | None = None
    ignorable: bool | None = None


class KubeSchedulerConfiguration(_Strict):
    apiVersion: Literal["kubescheduler.config.k8s.io/v1"]
    kind: Literal["KubeSchedulerConfiguration"]
    parallelism: Int32 | None = None
    leaderElection: LeaderElection | None = None
    clientConnection: ClientConnection | None = None
    enableProfiling: bool | None = None
    enableContentionProfiling: bool | None = None
    percentageOfNodesToScore: Int32 | None = None
    podInitialBackoffSeconds: Int64 | None = None
    podMaxBackoffSeconds: Int64 | None = None
    profiles: list[Profile] | None = None
    extenders: list[Extender] | None = None
    delayCacheUntilActive: bool | None = None


class ExtendersSnippet(_Strict):
    """The part of a KubeSchedulerConfiguration an operator merges into an existing one."""

    extenders: list[Extender]


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``IsQualifiedName``: ``[prefix/]name``, prefix a DNS-1123 subdomain."""
    problems: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [f"{value!r}: a qualified name has at most one '/'"]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append(f"{value!r}: prefix part must be non-empty")
        elif not is_dns1123_subdomain(prefix):
            problems.append(f"{value!r}: prefix part must be a lowercase DNS-1123 subdomain")
    if not name:
        problems.append(f"{value!r}: name part must be non-empty")
    elif len(name) > _QUALIFIED_NAME_MAX:
        problems.append(f"{value!r}: name part must be no more than 63 characters")
    elif not _QUALIFIED_NAME.match(name):
        problems.append(
            f"{value!r}: name part must consist of alphanumerics, '-', '_' or '.', and start "
            "and end with an alphanumeric"
        )
    return problems


def is_dns1123_subdomain(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 subdomain, as Kubernetes checks a Pod's
    ``spec.schedulerName`` (ValidatePodSpec) and most object names."""
    return len(value) <= _DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def is_dns1123_label(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 label, as Kubernetes checks a namespace's name
    (ValidateNamespaceName): lower-case alphanumerics and '-', starting and ending with an
    alphanumeric, at most 63 characters."""
    return len(value) <= _DNS1123_LABEL_MAX and bool(re.fullmatch(_DNS1123_LABEL, value))


def check_namespace_flag(flag: str, value: str, *, give: str) -> None:
    """A UsageError unless ``value``, given as ``flag``, is a namespace name
    (``is_dns1123_label``); ``give`` says which namespace to give instead."""
    if not is_dns1123_label(value):
        raise errors.UsageError(
            f"{flag} {value!r}: not a namespace name (lower-case letters, digits and '-', "
            f"starting and ending with a letter or digit, at most 63 characters); {give}")


def is_extended_resource_name(value: str) -> bool:
    """``v1helper.IsExtendedResourceName``: not native, not ``requests.*``, and still a
    qualified name once prefixed with ``requests.`` (the quota name)."""
    native = "/" not in value or "kubernetes.io/" in value
    if native or value.startswith(_REQUESTS_PREFIX):
        return False
    return not qualified_name_errors(_REQUESTS_PREFIX + value)


def validate_extenders(extenders: Sequence[Extender]) -> list[str]:
    """kube-scheduler's ``validateExtenders``; one message per problem, empty when valid."""
    problems: list[str] = []
    seen: set[str] = set()
    binders = 0
    for i, extender in enumerate(extenders):
        where = f"extenders[{i}]"
        if extender.prioritizeVerb and (extender.weight or 0) <= 0:
            problems.append(f"{where}.weight: must have a positive weight applied to it")
        if extender.bindVerb:
            binders += 1
        for j, resource in enumerate(extender.managedResources or ()):
            at = f"{where}.managedResources[{j}].name"
            problems.extend(f"{at}: {msg}" for msg in qualified_name_errors(resource.name))
            if not is_extended_resource_name(resource.name):
                problems.append(f"{at}: {resource.name!r} is an invalid extended resource name")
            if resource.name in seen:
                problems.append(
                    f"{at}: {resource.name!r} duplicate extender managed resource name"
                )
            seen.add(resource.name)
    if binders > 1:
        problems.append(
            f"extenders: found {binders} extenders implementing bind; only one extender can "
            "implement bind"
        )
    return problems


def _parse(model: type[_M], doc: Any, *, source: str) -> _M:
    try:
        return model.model_validate(doc)
    except pydantic.ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}"
            for err in exc.errors()
        )
        raise errors.ConfigError(f"{source}: not a valid {model.__name__}: {details}") from None


def _require_valid(extenders: Sequence[Extender], *, source: str) -> None:
    problems = validate_extenders(extenders)
    if problems:
        raise errors.ConfigError(f"{source}: kube-scheduler would refuse it: {'; '.join(problems)}")


def parse_configuration(
    doc: Any, *, source: str = "KubeSchedulerConfiguration"
) -> KubeSchedulerConfiguration:
    """A checked configuration, or ConfigError naming every field kube-scheduler refuses."""
    config = _parse(KubeSchedulerConfiguration, doc, source=source)
    _require_valid(config.extenders or (), source=source)
    names = [p.schedulerName or "default-scheduler" for p in config.profiles or ()]
    if len(set(names)) != len(names):
        raise errors.ConfigError(f"{source}: profiles repeat a schedulerName: {names}")
    return config


def parse_snippet(doc: Any, *, source: str = "extenders snippet") -> ExtendersSnippet:
    """A checked ``extenders`` snippet, or ConfigError."""
    snippet = _parse(ExtendersSnippet, doc, source=source)
    _require_valid(snippet.extenders, source=source)
    return snippet

