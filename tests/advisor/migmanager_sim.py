"""A simulated NVIDIA MIG Manager and API helpers for the apply-mode tests (kmock emulator)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal

import advisor_scene as scene
import attrs
import kmock
from kubernetes_asyncio import client as k8s

from migfit import cluster, keys, kube, migparted
from migfit.extender import advice, leader, relayout

# "lost": success, but the device plugin never comes back (its pod never starts).
Mode = Literal["success", "fail", "wedge", "ignore", "lost"]
NODES = kmock.resource("v1", "nodes")
PODS = kmock.resource("v1", "pods")
CONFIGMAPS = kmock.resource("v1", "configmaps")


Match = Callable[[Any], bool]


class HandClock:
    """A monotonic clock the test moves by hand, shared by every replica's elector."""

    def __init__(self) -> None:
        self.t = 5000.0

    def __call__(self) -> float:
        return self.t


@attrs.define
class Fault:
    res: Any
    name: str
    match: Match
    status: int
    times: int
    after_write: bool


@attrs.define
class Hook:
    res: Any
    name: str
    match: Match
    then: Callable[[], None]


def sets_label(key: str) -> Match:
    """A write that sets the node label ``key``."""
    return lambda data: isinstance(data, dict) and bool(
        ((data.get("metadata") or {}).get("labels") or {}).get(key))


def sets_annotation(key: str) -> Match:
    """A write that sets the annotation ``key``."""
    return lambda data: isinstance(data, dict) and bool(
        ((data.get("metadata") or {}).get("annotations") or {}).get(key))


def adds_taint(key: str) -> Match:
    """A write whose taint list holds ``key``."""
    return lambda data: isinstance(data, dict) and any(
        isinstance(t, dict) and t.get("key") == key
        for t in (data.get("spec") or {}).get("taints") or [])


@attrs.define(kw_only=True)
class VersionedEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus what the API server does with ``resourceVersion``: every write of
    an object bumps it, and a merge patch that carries another one is answered 409 Conflict
    with nothing changed. ``race(res, ns, name, patch)`` makes someone else write ``patch`` to
    the object just before the next write of it arrives (a write in between a read and ours).
    """

    _races: dict[Any, list[dict[str, Any]]] = attrs.field(factory=dict, init=False)
    _version: int = attrs.field(default=100, init=False)
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    _hooks: list[Hook] = attrs.field(factory=list, init=False)

    def race(self, res: Any, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        self._races.setdefault((res, namespace, name), []).append(patch)

    def fail(self, res: Any, name: str, match: Match, *, status: int, times: int = 1,
             after_write: bool = False) -> None:
        """Answer the next ``times`` writes of the object whose body ``match`` accepts with
        ``status``: before changing anything, or (``after_write``) once the write is done,
        as when the answer is lost on the way back."""
        self._faults.append(Fault(res, name, match, status, times, after_write))

    def after(self, res: Any, name: str, match: Match, then: Callable[[], None]) -> None:
        """Call ``then`` once, right after the first write of the object that ``match``
        accepts (someone else acting between two of migfit's calls)."""
        self._hooks.append(Hook(res, name, match, then))

    def _fault(self, request: Any, *, after_write: bool) -> None:
        for fault in self._faults:
            if (fault.times > 0 and fault.after_write == after_write
                    and (fault.res, fault.name) == (request.resource, request.name)
                    and fault.match(request.data)):
                fault.times -= 1
                raise kmock.KubernetesError(status=fault.status, reason="Injected",
                                            message=f"injected {fault.status}")

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    async def _handle(self, request: Any) -> Any:
        writing = request.action == kmock.action.UPDATE and request.name is not None
        if writing:
            self._fault(request, after_write=False)
        answer = await self._versioned(request)
        if writing:
            for hook in list(self._hooks):
                if (hook.res, hook.name) == (request.resource, request.name) and \
                        hook.match(request.data):
                    self._hooks.remove(hook)
                    hook.then()
            self._fault(request, after_write=True)
        return answer

    async def _versioned(self, request: Any) -> Any:
        if request.action == kmock.action.UPDATE and request.name is not None:
            key = (request.resource, request.namespace, request.name)
            for patch in self._races.pop(key, []):
                self.objects[key].patch(patch)
                self.objects[key].patch({"metadata": {"resourceVersion": self._bump()}})
            if key in self.objects and not self.objects[key].deleted:
                stored = self.objects[key].get("metadata", {}).get("resourceVersion")
                data = request.data
                if isinstance(data, dict):
                    wanted = (data.get("metadata") or {}).get("resourceVersion")
                    if wanted is not None and wanted != stored:
                        raise kmock.KubernetesError(status=409, reason="Conflict", message=(
                            f"the object has been modified (resourceVersion {stored}, "
                            f"not {wanted})"))
                    data.setdefault("metadata", {})["resourceVersion"] = self._bump()
                elif isinstance(data, list):
                    data.append({"op": "add", "path": "/metadata/resourceVersion",
                                 "value": self._bump()})
        return await super()._handle(request)


def api_for(server: kmock.KubernetesEmulator) -> k8s.ApiClient:
    cfg = k8s.Configuration(host=str(server.url).rstrip("/"))
    return k8s.ApiClient(cfg)


def store(server: kmock.KubernetesEmulator, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    res = NODES if obj["kind"] == "Node" else PODS
    server.objects[res, meta.get("namespace"), meta["name"]] = obj


async def read_node(api: k8s.ApiClient, name: str) -> dict[str, Any]:
    core: Any = k8s.CoreV1Api(api)
    raw = await core.read_node(name, _preload_content=False)
    obj: dict[str, Any] = json.loads(await raw.read())
    return obj


async def snapshot(api: k8s.ApiClient) -> cluster.Cluster:
    """A Cluster listed from the API now (what a synced watch would hold)."""
    core: Any = k8s.CoreV1Api(api)
    nodes = json.loads(await (await core.list_node(_preload_content=False)).read())
    pods = json.loads(await (await core.list_pod_for_all_namespaces(
        _preload_content=False)).read())
    state = cluster.Cluster()
    state.replace("Node", nodes.get("items", []))
    state.replace("Pod", pods.get("items", []))
    state.mark_synced()
    return state


async def events(api: k8s.ApiClient) -> list[dict[str, Any]]:
    core: Any = k8s.CoreV1Api(api)
    raw = await core.list_event_for_all_namespaces(_preload_content=False)
    items: list[dict[str, Any]] = json.loads(await raw.read()).get("items", [])
    return items


class MigManager:
    """Reacts to ``nvidia.com/mig.config`` like the MIG Manager: pending, then (after a delay)
    success with the new allocatable, or failed, or stuck at pending (wedged), or nothing.

    With ``configmap`` (namespace, name) it reads the config the label names from that
    ConfigMap's ``config.yaml`` as its volume shows it: as it was ``mount_lag_s`` ago (kubelet
    refreshes ConfigMap volumes late). A name not in it fails, as mig-parted does; otherwise
    the node's ``gpus`` GPUs get what the entries that select them say (the last one wins).
    """

    def __init__(self, api: k8s.ApiClient, node: str, *,
                 layouts: dict[str, dict[str, int]] | None = None, mode: Mode = "success",
                 delay_s: float = 0.05, configmap: tuple[str, str] | None = None,
                 mount_lag_s: float = 0.0, gpus: int = 1) -> None:
        self.api = api
        self.node = node
        self.layouts = layouts or {}
        self.mode = mode
        self.delay_s = delay_s
        self.configmap = configmap
        self.mount_lag_s = mount_lag_s
        self.gpus = gpus
        self.applied: list[str] = []  # every config value it was asked to apply
        self.failures: list[str] = []  # why a config failed (as the MIG Manager logs it)
        self._seen: list[tuple[float, str]] = []  # (when, config.yaml) as the API had it
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._run()))
        if self.configmap is not None:
            self._tasks.append(asyncio.create_task(self._watch_configmap()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _watch_configmap(self) -> None:
        assert self.configmap is not None
        core: Any = k8s.CoreV1Api(self.api)
        loop = asyncio.get_running_loop()
        while True:
            raw = await core.read_namespaced_config_map(self.configmap[1], self.configmap[0],
                                                        _preload_content=False)
            text = json.loads(await raw.read()).get("data", {}).get("config.yaml", "")
            if not self._seen:  # there before the MIG Manager started: mounted already
                self._seen.append((float("-inf"), text))
            elif self._seen[-1][1] != text:
                self._seen.append((loop.time(), text))
            await asyncio.sleep(0.01)

    def _mounted(self) -> str:
        """config.yaml as the MIG Manager's volume shows it now."""
        at = asyncio.get_running_loop().time() - self.mount_lag_s
        shown = [text for when, text in self._seen if when <= at]
        return shown[-1] if shown else ""

    def _layout(self, want: str) -> dict[str, int] | None:
        if self.configmap is None:
            return self.layouts[want]
        entries = migparted.parse(self._mounted()).configs.get(want)
        if entries is None:
            self.failures.append(f"config {want} not in the config file")
            return None
        counts: dict[str, int] = {}
        for index in range(self.gpus):
            chosen = [e for e in entries if e.devices is None or index in e.devices]
            for profile, n in chosen[-1].mig_devices if chosen else ():
                counts[str(profile)] = counts.get(str(profile), 0) + n
        return counts

    async def _patch(self, body: dict[str, Any]) -> None:
        core: Any = k8s.CoreV1Api(self.api)
        await core.patch_node(self.node, body, _content_type="application/merge-patch+json")

    async def _run(self) -> None:
        while self.configmap is not None and not self._seen:  # its volume is mounted first
            await asyncio.sleep(0.005)
        obj = await read_node(self.api, self.node)
        seen = obj["metadata"].get("labels", {}).get(keys.LABEL_CONFIG)
        while True:
            await asyncio.sleep(0.01)
            obj = await read_node(self.api, self.node)
            want = obj["metadata"].get("labels", {}).get(keys.LABEL_CONFIG)
            if want == seen:
                continue
            seen = want
            self.applied.append(str(want))
            if self.mode == "ignore":
                continue
            await self._patch({"metadata": {"labels": {keys.LABEL_CONFIG_STATE: "pending"}}})
            await asyncio.sleep(self.delay_s)
            if self.mode == "wedge":
                continue
            layout = self._layout(str(want))
            if self.mode == "fail" or layout is None:
                await self._patch({"metadata": {"labels": {
                    keys.LABEL_CONFIG_STATE: "failed"}}})
                continue
            # The operands were paused (the device plugin gone: no MIG instance advertised);
            # their deploy labels restored, the state is success. The device plugin's pod
            # comes back only where its DaemonSet tolerates the node's taints.
            alloc = dict(obj.get("status", {}).get("allocatable", {}))
            gone = {k: ("0" if k.startswith("nvidia.com/mig-") else v) for k, v in alloc.items()}
            await self._patch({"status": {"allocatable": gone, "capacity": gone}})
            await self._patch({"metadata": {"labels": {
                keys.LABEL_CONFIG_STATE: "success"}}})
            new = {**gone, **{f"nvidia.com/mig-{p}": str(n) for p, n in layout.items()}}
            if self.mode == "lost":
                continue
            while not operands_may_run(await read_node(self.api, self.node)):
                await asyncio.sleep(0.01)
            await self._patch({"status": {"allocatable": new, "capacity": new}})


# The GPU Operator's default ClusterPolicy spec.daemonsets.tolerations, which it gives every
# operand DaemonSet (the device plugin's among them).
OPERAND_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)


def operands_may_run(node: dict[str, Any]) -> bool:
    """Whether the DaemonSet controller creates an operand pod on ``node``: it does not where
    a NoSchedule or NoExecute taint is not tolerated (NodeShouldRunDaemonPod; its automatic
    tolerations cover only the node-condition taints)."""
    def tolerated(taint: dict[str, Any]) -> bool:
        return any(t["key"] == taint.get("key") and t["effect"] == taint.get("effect")
                   for t in OPERAND_TOLERATIONS)
    return all(tolerated(t) for t in node.get("spec", {}).get("taints") or ()
               if t.get("effect") in ("NoSchedule", "NoExecute"))


# ---------------------------------------------------------------- the apply-mode scene
# What the apply-mode tests share: the ConfigMap's two configs, the layouts the simulated MIG
# Manager applies for them, one idle node laid out for 3g.40gb next to a pending 1g.10gb pod.

CONFIG = migparted.parse("""
version: v1
mig-configs:
  all-3g.40gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")
LAYOUTS = {"all-1g.10gb": {"1g.10gb": 7}, "all-3g.40gb": {"3g.40gb": 2}}
NOW = 2_000_000_000.0


def seed(server: kmock.KubernetesEmulator, *extra: dict[str, Any]) -> None:
    """The idle ``3g.40gb`` node, the pending ``1g.10gb`` pod, and ``extra`` objects."""
    store(server, scene.node("idle", alloc={"3g.40gb": 2}, config="all-3g.40gb"))
    store(server, scene.pod("small", "1g.10gb", namespace="ml"))
    for obj in extra:
        store(server, obj)


def advice_cache() -> advice.AdviceCache:
    return advice.AdviceCache(config=CONFIG, clock=lambda: NOW)


async def relayouter(api: k8s.ApiClient, *, settings: relayout.Settings,
                     elector: leader.LeaseElector | None = None,
                     client: kube.KubeClient | None = None) -> relayout.Relayouter:
    """A Relayouter over a fresh snapshot of the emulator (``client``: its API client)."""
    return relayout.Relayouter(await snapshot(api), client or api, elector=elector,
                               cache=advice_cache(), settings=settings)


def taints(obj: dict[str, Any]) -> list[str]:
    return [t["key"] for t in obj.get("spec", {}).get("taints") or []]
