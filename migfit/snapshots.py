"""The file source: a snapshot file (``kubectl get nodes,pods -A -o yaml``) kept in the model.

Accepted shapes: a ``List`` (YAML or JSON, as kubectl prints it, also ``NodeList``/``PodList``),
a JSON array of objects, single objects, or multi-document YAML of any of these. Every item is
decoded and checked before anything is replaced, so a broken file (a half-written copy, a typo)
keeps the last good state; the error names the file and the object it failed on. Changes are
found by polling: Secret and ConfigMap mounts give no inotify, and an atomic symlink swap must
be seen too, so the file's stat is compared first and its sha256 digest decides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Protocol

import yaml

from migfit import cluster, decoding, errors, keys, profiles, quantity, records, strictfiles

log = logging.getLogger(__name__)

EXAMPLE_CLUSTER: Path = Path(__file__).with_name("data") / "example-cluster.yaml"
"""The bundled example cluster (a copy of examples/cluster.yaml shipped as package data)."""

DEFAULT_POLL_INTERVAL_S = 2.0
# What a cluster file must be, said after a problem with its shape.
CLUSTER_FILE = ("a cluster file is a Kubernetes List of Nodes and Pods, as `kubectl get "
                "nodes,pods -A -o yaml` prints it, or those objects themselves")
_KINDS = ("Node", "Pod")
PDB_KIND = "PodDisruptionBudget"
# libyaml's C loader parses a 100 MB snapshot several times faster than the pure-Python one.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class Sink(Protocol):
    """What the file source feeds (cluster.Cluster): whole contents as decoded records."""

    def load_records(self, nodes: Iterable[records.NodeRecord],
                     pods: Iterable[records.PodRecord],
                     others: Iterable[tuple[str, records.HostUse]] = ()) -> None: ...

    def mark_synced(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """A decoded, validated file: its compact records (the API objects are not kept)."""

    node_records: list[records.NodeRecord]
    pod_records: list[records.PodRecord]
    digest: str
    # (uid, its use) of the bound pods without GPU requests (``decoding.host_use``): their cpu
    # and memory take room on GPU nodes as the watch source counts it
    other_pods: tuple[tuple[str, records.HostUse], ...] = ()
    # PodDisruptionBudgets and the bound GPU pods' labels and owners (``decode(...,
    # disruption=True)``, for ``migfit advise --defrag``); None when not asked for
    disruption: records.Disruption | None = None


# ---------------------------------------------------------------- parsing


def _documents_whole(text: str, where: str) -> Iterator[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            yield json.loads(text)
            return
        except ValueError:
            pass  # YAML flow style also starts with { or [: let the YAML parser decide
    try:
        yield from yaml.load_all(text, Loader=_LOADER)  # a SafeLoader
    except yaml.YAMLError as exc:
        raise errors.ConfigError(
            f"{where}: not valid YAML or JSON {strictfiles.yaml_problem(exc)}; fix the file or "
            f"export it again with `kubectl get nodes,pods -A -o yaml`"
        ) from None


class _NotStreamable(Exception):
    """The file is not in the shape the streaming reader knows: parse it whole instead."""


_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_JSON = json.JSONDecoder()


def _json_value(text: str, at: int) -> tuple[Any, int]:
    try:
        return _JSON.raw_decode(text, at)
    except ValueError:
        raise _NotStreamable from None


def _json_array(text: str, at: int, *, wrap: bool) -> Generator[Any, None, int]:
    """The elements of the JSON array opening at ``text[at]``; returns the index after it.

    With ``wrap``, each element comes as ``{"__item__": element}`` (a List's item, taken as
    it is), else bare (an array element, which may itself be a List)."""
    at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    if text.startswith("]", at):
        return at + 1
    while True:
        value, at = _json_value(text, at)
        # An array's element is an item of the file (a List in it is opened): a number
        # there is "item 1", as read whole, not "document 1".
        yield {"__item__": value} if wrap or not _is_list(value) else value
        at = _JSON_SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text.startswith("]", at):
            return at + 1
        if not text.startswith(",", at):
            raise _NotStreamable
        at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]


def _json_streamed(text: str) -> Iterator[Any]:
    """A JSON List's items (or an array's elements) one at a time, never the whole tree.

    A 90 MB ``kubectl get -o json`` export parsed whole leaves hundreds of MiB of freed small
    objects that the allocator cannot give back; item by item, only one object is alive.
    """
    at = _JSON_SPACE.match(text).end()  # type: ignore[union-attr]
    if text.startswith("[", at):
        at = yield from _json_array(text, at, wrap=False)
        if text[at:].strip():
            raise _NotStreamable
        return
    if not text.startswith("{", at):
        raise _NotStreamable
    head: dict[str, Any] = {}
    at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    streamed = False
    while not text.startswith("}", at):
        key, at = _json_value(text, at)
        at = _JSON_SPACE.match(text, at).end()  # type: ignore[union-attr]
        if not isinstance(key, str) or not text.startswith(":", at):
            raise _NotStreamable
        at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        if key == "items" and text.startswith("[", at) and not streamed:
            streamed = True
            at = yield from _json_array(text, at, wrap=True)
        else:
            head[key], at = _json_value(text, at)
        at = _JSON_SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text.startswith(",", at):
            at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        elif not text.startswith("}", at):
            raise _NotStreamable
    if text[at + 1:].strip():
        raise _NotStreamable
    if not streamed:
        yield head  # a single object
    elif not _is_list({**head, "items": []}):
        raise _NotStreamable  # an "items" field of something that is not a List


# kubectl's YAML List: top-level keys at column 0, each item a "- " entry at column 0.
_YAML_ITEMS = re.compile(r"^items:[ \t]*\n", re.MULTILINE)
_YAML_TOP_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*:", re.MULTILINE)


def _yaml_streamed(text: str) -> Iterator[Any]:
    """kubectl's YAML List item by item (each item parsed alone); anything else is refused."""
    found = _YAML_ITEMS.search(text)
    if found is None or text.startswith("---") or "\n---" in text or "\n..." in text:
        raise _NotStreamable
    end = _YAML_TOP_KEY.search(text, found.end())
    stop = end.start() if end is not None else len(text)
    body = text[found.end():stop]
    head_text = text[:found.start()] + text[stop:]
    try:
        head = yaml.load(head_text, Loader=_LOADER)  # a SafeLoader
    except yaml.YAMLError:
        raise _NotStreamable from None
    if not isinstance(head, dict) or not _is_list({**head, "items": []}):
        raise _NotStreamable
    starts = [m.start() for m in re.finditer(r"^- ", body, re.MULTILINE)]
    if body.strip() and (not starts or body[:starts[0]].strip()):
        raise _NotStreamable
    for i, first in enumerate(starts):
        chunk = body[first:starts[i + 1] if i + 1 < len(starts) else len(body)]
        lines = chunk.split("\n")
        if any(line and not line.startswith(("  ", "#")) for line in lines[1:]):
            raise _NotStreamable
        dedented = "\n".join(
            line[2:] if line.startswith("  ") or k == 0 else line for k, line in enumerate(lines))
        try:
            yield {"__item__": yaml.load(dedented, Loader=_LOADER)}  # a SafeLoader
        except yaml.YAMLError:
            raise _NotStreamable from None


def _is_list(doc: Any) -> bool:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return isinstance(kind, str) and kind.endswith("List") and "items" in doc


def _items(doc: Any, where: str, number: int) -> Iterator[Any]:
    """The objects of one document: a List's items, an array's elements, or the object itself."""
    if doc is None:
        return
    if isinstance(doc, list):
        for element in doc:
            if _is_list(element):
                yield from _items(element, where, number)
            else:
                yield element
        return
    if not isinstance(doc, dict):
        raise errors.ConfigError(
            f"{where}: document {number} is {_a(doc)}, not a Kubernetes object or List; "
            f"{CLUSTER_FILE}")
    if _is_list(doc):
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise errors.ConfigError(f"{where}: document {number}: 'items' is not a list")
        yield from items
        return
    yield doc


def _a(value: Any) -> str:
    """What ``value`` is, in YAML's words, with its article: "a number", "a string"."""
    if value is None:
        return "null"
    return f"a {strictfiles.kind_of(value)}"


def _group(obj: Mapping[str, Any]) -> str:
    """The API group of an object's apiVersion ("" for the core group, and when absent)."""
    version = obj.get("apiVersion")
    return version.partition("/")[0] if isinstance(version, str) and "/" in version else ""


def _describe(obj: Any) -> str:
    if not isinstance(obj, dict):
        return strictfiles.kind_of(obj)
    kind = obj.get("kind") or "object"
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return str(kind)
    name = meta.get("name") or meta.get("generateName") or "?"
    ns = meta.get("namespace")
    return f"{kind} {ns}/{name}" if ns else f"{kind} {name}"


# What a node selector requirement's operator may be (Kubernetes' NodeSelectorOperator).
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


# The fields migfit reads, per part of an object: a key that is not one of them but reads
# almost like one the object lacks (``status.allocatible``, ``spec.nodeSelecter``) is a typo
# that made the model see no instances, or no selector. Other unknown keys are left alone: a
# newer Kubernetes adds fields.
_READ: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "Node": {"metadata": ("name", "labels", "annotations"),
             "spec": ("unschedulable", "taints"),
             "status": ("allocatable", "capacity", "conditions")},
    "Pod": {"metadata": ("name", "namespace", "labels", "annotations"),
            "spec": ("containers", "initContainers", "nodeName", "nodeSelector", "affinity",
                     "tolerations", "overhead", "schedulerName"),
            "status": ("phase", "conditions")},
}
_READ_IN_CONTAINERS: Final = {"": ("name", "resources"), "resources": ("requests", "limits")}


def _check_typos(where: str, part: Any, read: Sequence[str]) -> None:
    if not isinstance(part, dict):
        return
    for key in part:
        if not isinstance(key, str) or key in read:
            continue
        near = difflib.get_close_matches(key, read, n=1, cutoff=0.8)
        if near and near[0] not in part:
            raise errors.ConfigError(f"{where}{key}: no such field; did you mean {near[0]}?")


def _check_shapes(obj: Mapping[str, Any]) -> None:
    """Labels and annotations are string maps, and required node affinity names operators
    Kubernetes has: the model read a string as no labels, and an unknown operator as a term
    no node matches, without a word. Fields spelt almost like one migfit reads are refused
    (``_READ``)."""
    for section, read in _READ.get(str(obj.get("kind")), {}).items():
        _check_typos(f"{section}.", obj.get(section), read)
    spec = obj.get("spec")
    for group in ("containers", "initContainers"):
        containers = spec.get(group) if isinstance(spec, dict) else None
        for i, c in enumerate(containers if isinstance(containers, list) else []):
            _check_typos(f"spec.{group}[{i}].", c, _READ_IN_CONTAINERS[""])
            res = c.get("resources") if isinstance(c, dict) else None
            _check_typos(f"spec.{group}[{i}].resources.", res,
                         _READ_IN_CONTAINERS["resources"])
    meta = obj.get("metadata")
    for field in ("labels", "annotations"):
        values = meta.get(field) if isinstance(meta, dict) else None
        if values is not None and not isinstance(values, dict):
            raise errors.ConfigError(f"metadata.{field} is not a mapping")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if obj.get("kind") == "Node" and isinstance(labels, dict):
        _check_value(f"metadata.labels[{keys.LABEL_STRATEGY!r}]",
                     labels.get(keys.LABEL_STRATEGY), keys.STRATEGY_LABEL_VALUES)
    status = obj.get("status")
    if obj.get("kind") == "Pod" and isinstance(status, dict):
        _check_value("status.phase", status.get("phase"), records.POD_PHASES)
    spec = obj.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, dict) else None
    node_aff = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(node_aff, dict) else None)
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        for part in ("matchExpressions", "matchFields"):
            items = term.get(part) if isinstance(term, dict) else None
            for j, item in enumerate(items if isinstance(items, list) else []):
                op = item.get("operator") if isinstance(item, dict) else None
                if op not in _OPERATORS:
                    raise errors.ConfigError(
                        f"spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
                        f"Execution.nodeSelectorTerms[{i}].{part}[{j}].operator is {op!r}; "
                        f"use one of {', '.join(sorted(_OPERATORS))}")


def _check_value(where: str, value: Any, valid: Sequence[str]) -> None:
    """``value`` (when there is one) is one of ``valid``: a pod phase Kubernetes never gives,
    or a MIG strategy GPU Feature Discovery never writes, is a typo the model would read as
    another value (a pod ``Faild`` as holding its instances, a node ``mixd`` as mixed).
    Refused with the nearest valid value and all of them."""
    if value is None or value in valid:
        return
    near = difflib.get_close_matches(str(value), valid, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    raise errors.ConfigError(f"{where} is {value!r}; {hint}use "
                             f"{', '.join(valid[:-1])} or {valid[-1]}")


# cpu and memory are read for the room a re-layout needs: a typo ("63 cores") read as 0 made
# a full node look empty.
_HOST_RESOURCES = frozenset({"cpu", "memory"})


def _check_quantities(obj: Mapping[str, Any], kind: str) -> None:
    """GPU, cpu and memory quantities must parse: the model would read a typo as 0."""
    def check(where: str, values: Any) -> None:
        if not isinstance(values, dict):
            if values is not None:
                raise errors.ConfigError(f"{where} is not a mapping")
            return
        for res, value in values.items():
            gpu = decoding.is_gpu_resource(str(res))
            if not gpu and res not in _HOST_RESOURCES:
                continue
            try:
                amount = quantity.parse(value)
            except errors.QuantityError as exc:
                raise errors.ConfigError(f"{where}[{res!r}]: {exc}") from None
            if amount < 0:
                raise errors.ConfigError(f"{where}[{res!r}] is {value!r}; use 0 or more")
            if gpu and amount.denominator != 1:
                raise errors.ConfigError(
                    f"{where}[{res!r}] is {value!r}; extended resources are whole numbers >= 0")

    if kind == "Node":
        status = obj.get("status")
        if isinstance(status, dict):
            check("status.capacity", status.get("capacity"))
            check("status.allocatable", status.get("allocatable"))
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise errors.ConfigError(f"spec.{group} is not a list")
        for i, c in enumerate(containers):
            if not isinstance(c, dict):
                raise errors.ConfigError(f"spec.{group}[{i}] is not a mapping")
            res = c.get("resources")
            if isinstance(res, dict):
                check(f"spec.{group}[{i}].resources.requests", res.get("requests"))
                check(f"spec.{group}[{i}].resources.limits", res.get("limits"))


def _check_kind_typo(kind: str, *, disruption: bool) -> None:
    """A kind spelt almost like one migfit reads (``Nod``, ``Pods``) is refused: it was
    skipped as another kind is, and the object went unseen. Other kinds (a Service, a
    Deployment of a broader export) are skipped."""
    read = (*_KINDS, PDB_KIND) if disruption else _KINDS
    near = difflib.get_close_matches(kind.lower(), [k.lower() for k in read], n=1, cutoff=0.8)
    if near:
        spelt = next(k for k in read if k.lower() == near[0])
        kinds = ", ".join(f"kind: {k}" for k in read[:-1]) + f" and kind: {read[-1]}"
        raise errors.ConfigError(f"kind {kind!r} is no kind migfit reads; did you mean "
                                 f"kind: {spelt}? (it reads {kinds}, and skips other kinds)")


def decode(data: bytes | str, *, where: str,
           catalog: profiles.Catalog | None = None, disruption: bool = False) -> Snapshot:
    """Parse and validate a whole snapshot; raises ConfigError naming the failing object.

    Objects are numbered from 1 in file order ("item 12 (Pod gpu/train-3): ..."). Kinds other
    than Node and Pod are ignored, so a broader ``kubectl get`` export still loads; with
    ``disruption``, PodDisruptionBudgets (policy/v1) are decoded too, and the bound GPU pods'
    labels, controllers and constraints kept (``Snapshot.disruption``).
    """
    catalog = catalog or profiles.builtin()
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    digest = hashlib.sha256(raw).hexdigest()
    text = strictfiles.text(raw, where=where, fix="save it as UTF-8, or export it again with "
                                              "`kubectl get nodes,pods -A -o yaml`")
    if not text.strip():
        raise errors.ConfigError(
            f"{where}: the file is empty; migfit needs a cluster with at least one Node: "
            f"export it with `kubectl get nodes,pods -A -o yaml`")
    documents = _streamed(text)
    try:
        return _decode_objects(_objects(documents, where), where=where, catalog=catalog,
                               digest=digest, disruption=disruption)
    except _NotStreamable:
        pass
    except errors.ConfigError:
        # An item refused before the reader reached the end: in a file cut short (``[1,2``)
        # the error is the file's, not its first item's. Read on, an item at a time, to
        # see whether the rest parses.
        try:
            for _ in documents:
                pass
        except _NotStreamable:
            pass  # parsed whole below: the parse error, or the same item's
        else:
            raise
    return _decode_objects(_objects(_documents_whole(text, where), where), where=where,
                           catalog=catalog, digest=digest, disruption=disruption)


def _streamed(text: str) -> Iterator[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _json_streamed(text)
    return _yaml_streamed(text)


def _objects(documents: Iterator[Any], where: str) -> Iterator[Any]:
    """Every object of the documents, in file order (List items, array elements, objects)."""
    for doc_number, doc in enumerate(documents, start=1):
        if isinstance(doc, dict) and "__item__" in doc and len(doc) == 1:
            yield doc["__item__"]
        else:
            yield from _items(doc, where, doc_number)


def _decode_objects(objects: Iterator[Any], *, where: str, catalog: profiles.Catalog,
                    digest: str, disruption: bool = False) -> Snapshot:
    node_records: list[records.NodeRecord] = []
    pod_records: list[records.PodRecord] = []
    others: list[tuple[str, records.HostUse]] = []
    pdbs: list[records.PdbRecord] = []
    facts: dict[str, records.PodFacts] = {}
    seen: dict[tuple[str, str], int] = {}
    number = 0
    nodes = pods = 0
    for obj in objects:
        number += 1
        try:
            if not isinstance(obj, dict):
                raise errors.ConfigError(f"{_a(obj)}, not a Kubernetes object; {CLUSTER_FILE}")
            kind = obj.get("kind")
            if disruption and kind == PDB_KIND:
                if _group(obj) == "policy":
                    pdb = decoding.pdb_from_api(obj)
                    if not pdb.name:
                        raise errors.ConfigError("no metadata.name")
                    key = (PDB_KIND, pdb.key)
                    if key in seen:
                        raise errors.ConfigError(f"a second copy of item {seen[key]}")
                    seen[key] = number
                    pdbs.append(pdb)
                continue
            if kind not in _KINDS:
                if not isinstance(kind, str) or not kind:
                    raise errors.ConfigError(
                        "no 'kind'; every object needs kind: Node or kind: Pod")
                spelt = {k.lower(): k for k in _KINDS}.get(kind.lower())
                if spelt is not None:  # dropped silently before, and the pod went unseen
                    raise errors.ConfigError(f"kind {kind!r}: kinds are case-sensitive; "
                                             f"write kind: {spelt}")
                _check_kind_typo(kind, disruption=disruption)
                continue
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) \
                    or not meta["name"]:
                raise errors.ConfigError("no metadata.name")
            _check_quantities(obj, kind)
            _check_shapes(obj)
            if kind == "Node":
                key = ("Node", meta["name"])
                node_records.append(decoding.node_from_api(obj, catalog))
                nodes += 1
            else:
                ns = meta.get("namespace") or ""
                key = ("Pod", str(meta.get("uid") or f"{ns}/{meta['name']}"))
                record = decoding.pod_from_api(obj)
                if record is not None:
                    pod_records.append(record)
                    if disruption and record.holds_instances and record.requests:
                        facts[record.key] = decoding.pod_facts(obj)
                else:
                    use = decoding.host_use(obj)
                    if use is not None:
                        others.append((decoding.uid_of(obj), use))
                pods += 1
            if key in seen:
                raise errors.ConfigError(f"a second copy of item {seen[key]}")
            seen[key] = number
        except errors.MigfitError as exc:
            raise errors.ConfigError(
                f"{where}: item {number} ({_describe(obj)}): {exc.message}") from None
        except Exception as exc:  # a shape the decoder did not expect: still name the item
            raise errors.ConfigError(
                f"{where}: item {number} ({_describe(obj)}): cannot decode: "
                f"{type(exc).__name__}: {exc}") from None
    if not nodes:
        # An empty cluster view would make every verb answer "unknown node" and the advisor
        # silent: almost always a `kubectl get pods` export instead of `nodes,pods`.
        raise errors.ConfigError(
            f"{where}: no Node objects ({pods} pod{'' if pods == 1 else 's'}); migfit needs "
            f"the nodes: export "
            f"with `kubectl get nodes,pods -A -o yaml`")
    kept = (records.Disruption(pdbs=tuple(pdbs), pods=MappingProxyType(facts))
            if disruption else None)
    return Snapshot(node_records=node_records, pod_records=pod_records, digest=digest,
                    other_pods=tuple(others), disruption=kept)


def read(path: str | os.PathLike[str], *, catalog: profiles.Catalog | None = None,
         disruption: bool = False) -> Snapshot:
    """Read and validate a snapshot file; raises ConfigError. ``disruption``: as ``decode``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise errors.ConfigError(
            f"cannot read cluster file {p}: {exc.strerror or exc}; pass --cluster FILE with a "
            f"file made by `kubectl get nodes,pods -A -o yaml`") from None
    return decode(data, where=str(p), catalog=catalog, disruption=disruption)


def install(sink: Sink, snapshot: Snapshot) -> None:
    """Replace the sink's contents with the snapshot's records."""
    sink.load_records(snapshot.node_records, snapshot.pod_records, snapshot.other_pods)


def load(path: str | os.PathLike[str], *,
         catalog: profiles.Catalog | None = None) -> cluster.Cluster:
    """A synced Cluster with the contents of a snapshot file; raises ConfigError."""
    model = cluster.Cluster(catalog)
    install(model, read(path, catalog=model.catalog))
    model.mark_synced()
    return model


# ---------------------------------------------------------------- the source


class FileSource:
    """Keeps a sink equal to a snapshot file, re-reading it when its content changes.

    Shaped like the watch source (``run()``, ``synced``, ``last_error``) so servers treat
    both alike. ``synced`` is set after the first good load; a later broken file leaves the
    sink as it was and only sets ``last_error``.
    """

    def __init__(
        self,
        sink: Sink,
        path: str | os.PathLike[str],
        *,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        catalog: profiles.Catalog | None = None,
    ) -> None:
        if poll_interval_s <= 0:
            raise errors.UsageError(
                f"poll interval must be positive, not {poll_interval_s}")
        self.path = Path(path)
        self.poll_interval_s = poll_interval_s
        self.synced = asyncio.Event()
        self.last_error: str | None = None
        self.loads = 0  # successful loads
        self.digest: str | None = None  # of the content now in the sink
        self._sink = sink
        self._catalog = catalog or (sink.catalog if isinstance(sink, cluster.Cluster)
                                    else profiles.builtin())
        self._tried: str | None = None  # digest of the last content tried, good or bad
        self._stat: tuple[int, int, int, int] | None = None
        self._stat_at = 0.0

    def _changed_stat(self) -> bool:
        """False only when the file surely did not change since it was last read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return True  # let the read report it
        sig = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev)
        # A rewrite within the mtime's granularity keeps the same stat: trust an unchanged
        # stat only when the file was already old when it was read.
        settled = self._stat_at - st.st_mtime_ns / 1e9 > 1.0
        if sig == self._stat and settled:
            return False
        self._stat, self._stat_at = sig, time.time()
        return True

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError as exc:
            self._fail(f"cannot read cluster file {self.path}: {exc.strerror or exc}")
            self._tried = None
            return None

    def _fail(self, message: str) -> None:
        if message != self.last_error:
            log.error("%s (%s)", message, "keeping the last good state" if self.loads else
                      "nothing loaded yet: not ready until the file is fixed")
        self.last_error = message

    def _check(self, data: bytes) -> Snapshot | None:
        """Decode ``data`` unless it is what was last tried; None when nothing to install."""
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._tried:
            return None
        self._tried = digest
        if digest == self.digest:  # back to what the sink holds: nothing to install
            if self.last_error is not None:
                log.info("%s: back to the last good state after an error", self.path)
            self.last_error = None
            return None
        try:
            return decode(data, where=str(self.path), catalog=self._catalog)
        except errors.MigfitError as exc:
            self._fail(exc.message)
            return None

    def _install(self, snapshot: Snapshot) -> None:
        install(self._sink, snapshot)
        self.digest = snapshot.digest
        self.loads += 1
        if self.last_error is not None:
            log.info("%s: loaded again after an error", self.path)
        self.last_error = None
        log.info("%s: %d nodes, %d pods in the model", self.path, len(snapshot.node_records),
                 len(snapshot.pod_records))
        if not self.synced.is_set():
            self._sink.mark_synced()
            self.synced.set()

    def check_first(self) -> None:
        """Read and decode the file now, or raise ConfigError: at start-up a file that is not
        a cluster is the user's to fix before anything serves, as ``migfit status`` refuses
        it (a later broken version keeps the last good state instead). What it read is not
        kept: ``run`` loads the file as always, off the event loop, once serving starts."""
        read(self.path, catalog=self._catalog)

    def load_once(self) -> bool:
        """Read the file now; True when the sink got new contents."""
        if not self._changed_stat():
            return False
        data = self._read()
        snapshot = None if data is None else self._check(data)
        if snapshot is None:
            return False
        self._install(snapshot)
        return True

    async def run(self) -> None:
        """Poll the file until cancelled; reading and decoding run off the event loop."""
        while True:
            if self._changed_stat():
                data = await asyncio.to_thread(self._read)
                snapshot = None if data is None else await asyncio.to_thread(self._check, data)
                if snapshot is not None:
                    self._install(snapshot)  # on the loop: the sink is not thread-safe
            await asyncio.sleep(self.poll_interval_s)
