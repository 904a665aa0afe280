"""Synthetic clusters of realistic, full-size Node and Pod objects for benchmarks and the simulator.

The objects look like what ``kubectl get nodes,pods -A -o json`` returns on a GPU cluster run
by the NVIDIA GPU Operator: GPU Feature Discovery labels (reference/MIG.md 4) with the
per-profile ``nvidia.com/mig-<p>.*`` set, capacity and allocatable as the device plugin
advertises them, managedFields, status conditions, addresses, images; pods with several
containers, env, volumes, ownerReferences and container statuses. Everything is derived from
a seed, so a benchmark is repeatable.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from migfit import builders, keys, profiles, requests

# (model id, product label as GFD writes it, share of nodes) — an A100/H100-heavy fleet.
_FLEET: tuple[tuple[str, str, float], ...] = (
    ("A100-80GB", "NVIDIA-A100-SXM4-80GB", 0.35),
    ("H100-80GB", "NVIDIA-H100-80GB-HBM3", 0.30),
    ("A100-40GB", "NVIDIA-A100-SXM4-40GB", 0.12),
    ("A30-24GB", "NVIDIA-A30", 0.10),
    ("H200-141GB", "NVIDIA-H200", 0.13),
)

# Streaming multiprocessors of an instance, as ``nvidia-smi mig -lgip`` and GFD's
# ``.multiprocessors`` label give them (shared/reference/MIG.md §3.3). Ampere: 14 per compute
# slice (A100 7g: 98). Hopper's are not proportional: by (compute slices, memory slices)
# from the H100 80GB HBM3 lgip; the H200 (the same 132-SM die; one real point, 1g.18gb:
# 16) is taken to match.
_AMPERE_SMS_PER_SLICE = 14
_HOPPER_SMS = {(1, 1): 16, (1, 2): 26, (2, 2): 32, (3, 4): 60, (4, 4): 64, (7, 8): 132}
_HOPPER = frozenset({"H100-80GB", "H200-141GB"})
_IMAGES = (
    "nvcr.io/nvidia/pytorch:24.05-py3",
    "nvcr.io/nvidia/tritonserver:24.05-py3",
    "nvcr.io/nvidia/tensorflow:24.03-tf2-py3",
    "ghcr.io/huggingface/text-generation-inference:2.0.4",
    "vllm/vllm-openai:v0.4.2",
)
_SIDECAR_IMAGE = "fluent/fluent-bit:3.0.4"
_NAMESPACES = ("ml-research", "inference", "batch", "team-vision", "team-nlp", "notebooks")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeSpec:
    """What a synthetic node is made of."""

    name: str
    model: profiles.GpuModel
    product: str
    gpus: int
    strategy: str  # mixed | single
    per_gpu: tuple[str, ...]  # the MIG layout of every GPU (profile names)
    config: str
    config_state: str = "success"
    unschedulable: bool = False
    zone: str = "us-east-1a"


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _ts(rng: random.Random, *, day: int = 10) -> str:
    return (f"2024-06-{day:02d}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:"
            f"{rng.randrange(60):02d}Z")


def profile_labels(model: profiles.GpuModel, profile: str, count: int) -> dict[str, str]:
    """The ``nvidia.com/mig-<p>.*`` labels GFD writes for one profile under ``mixed``."""
    p = model.profile(profile)
    sms = _AMPERE_SMS_PER_SLICE * p.compute_slices
    if model.id in _HOPPER:
        sms = _HOPPER_SMS.get((p.compute_slices, p.memory_slices), sms)
    big = p.compute_slices >= 3
    pre = profiles.resource_name(p.name)
    return {
        f"{pre}.count": str(count),
        f"{pre}.engines.copy": str(p.compute_slices),
        f"{pre}.engines.decoder": str(0 if p.compute_slices == 1 and not p.media
                                      else max(1, p.memory_slices // 2)),
        f"{pre}.engines.encoder": "0",
        f"{pre}.engines.jpeg": "1" if p.compute_slices == model.compute_slices or p.media
        else "0",
        f"{pre}.engines.ofa": "1" if p.compute_slices == model.compute_slices or p.media
        else "0",
        pre + keys.MIG_MEMORY_LABEL_SUFFIX: str(p.memory_mib),
        f"{pre}.multiprocessors": str(sms),
        f"{pre}.product": f"{_product_base(model)}-MIG-{keys.device_name(p.name)}",
        f"{pre}.replicas": "1",
        f"{pre}.sharing-strategy": "none",
        f"{pre}.slices.ci": str(p.compute_slices),
        f"{pre}.slices.gi": str(p.compute_slices if big or p.memory_slices == 1
                                else p.memory_slices // 2 * p.compute_slices),
    }


def _product_base(model: profiles.GpuModel) -> str:
    return {"A100-80GB": "NVIDIA-A100-SXM4-80GB", "A100-40GB": "NVIDIA-A100-SXM4-40GB",
            "A30-24GB": "NVIDIA-A30", "H100-80GB": "NVIDIA-H100-80GB-HBM3",
            "H200-141GB": "NVIDIA-H200"}.get(model.id, model.id)


def instances(spec: NodeSpec) -> Counter[str]:
    """MIG instances the node advertises, per profile."""
    out: Counter[str] = Counter()
    for p in spec.per_gpu:
        out[p] += spec.gpus
    return out


def node_object(spec: NodeSpec, *, rng: random.Random, full: bool = True,
                leftover: Sequence[str] = ()) -> dict[str, Any]:
    """A Node as the API server returns it. ``leftover``: profiles kubelet still lists at 0."""
    inst = instances(spec)
    single = spec.strategy == "single"
    only = spec.per_gpu[0] if spec.per_gpu else None
    product = spec.product + (f"-MIG-{keys.device_name(only)}" if single and only else "")
    labels: dict[str, str] = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "kubernetes.io/arch": "amd64",
        keys.LABEL_HOSTNAME: spec.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4de.24xlarge" if "A100" in spec.model.id
        else "p5.48xlarge",
        "topology.kubernetes.io/region": spec.zone[:-1],
        "topology.kubernetes.io/zone": spec.zone,
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1718000000",
        "nvidia.com/gpu.compute.major": "9" if "H" in spec.model.id else "8",
        "nvidia.com/gpu.compute.minor": "0",
        keys.LABEL_GPU_COUNT: str(sum(inst.values()) if single else spec.gpus),
        "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": (
            "paused-for-mig-change" if spec.config_state == "pending" else "true"),
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": (
            "paused-for-mig-change" if spec.config_state == "pending" else "true"),
        "nvidia.com/gpu.deploy.mig-manager": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/gpu.family": "hopper" if "H" in spec.model.id else "ampere",
        "nvidia.com/gpu.machine": "DGX-H100" if "H" in spec.model.id else "DGX-A100",
        keys.LABEL_GPU_MEMORY: str(spec.model.profile(only).memory_mib if single and only
                                     else spec.model.memory_mib),
        "nvidia.com/gpu.present": "true",
        keys.LABEL_PRODUCT: product,
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        keys.LABEL_MIG_CAPABLE: "true",
        keys.LABEL_CONFIG: spec.config,
        keys.LABEL_CONFIG_STATE: spec.config_state,
        keys.LABEL_STRATEGY: spec.strategy,
    }
    if not single:
        for p, n in sorted(inst.items()):
            labels.update(profile_labels(spec.model, p, n))
    cpu, mem = ("96", "1056488748Ki") if spec.gpus >= 8 else ("64", "528244374Ki")
    capacity: dict[str, str] = {
        "cpu": cpu, "ephemeral-storage": "3750770964Ki", "hugepages-1Gi": "0",
        "hugepages-2Mi": "0", "memory": mem, "pods": "250",
    }
    allocatable = dict(capacity)
    allocatable.update({"cpu": str(int(cpu) - 1) + "900m", "memory": "1048000000Ki"
                        if spec.gpus >= 8 else "520000000Ki",
                        "ephemeral-storage": "3456711656165"})
    mig = builders.mig_resources(dict(sorted(inst.items())), strategy=spec.strategy)
    capacity.update(mig)
    allocatable.update(mig)
    if not single:
        for p in leftover:
            capacity.setdefault(profiles.resource_name(p), "0")
            allocatable.setdefault(profiles.resource_name(p), "0")
    created = _ts(rng, day=1)
    ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    heartbeat = _ts(rng, day=12)
    conditions = [
        {"type": t, "status": "False", "reason": r, "message": m,
         "lastHeartbeatTime": heartbeat, "lastTransitionTime": created}
        for t, r, m in (
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        )
    ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
          "message": "kubelet is posting ready status", "lastHeartbeatTime": heartbeat,
          "lastTransitionTime": created}]
    spec_obj: dict[str, Any] = {"providerID": f"aws:///{spec.zone}/i-{rng.getrandbits(68):017x}"}
    if spec.unschedulable:
        spec_obj["unschedulable"] = True
        spec_obj["taints"] = [{"key": "node.kubernetes.io/unschedulable",
                               "effect": "NoSchedule", "timeAdded": heartbeat}]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "uid": _uid(rng),
            "resourceVersion": str(rng.randrange(10_000, 90_000_000)),
            "creationTimestamp": created,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "nfd.node.kubernetes.io/feature-labels": "cpu-cpuid.AVX512F,pci-10de.present",
                "nfd.node.kubernetes.io/master.version": "v0.15.4",
            },
        },
        "spec": spec_obj,
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": spec.name}],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64", "bootID": _uid(rng),
                "containerRuntimeVersion": "containerd://1.7.16",
                "kernelVersion": "5.15.0-1063-aws", "kubeProxyVersion": "v1.29.4",
                "kubeletVersion": "v1.29.4", "machineID": f"{rng.getrandbits(128):032x}",
                "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS",
                "systemUUID": _uid(rng),
            },
        },
    }
    if full:
        obj["metadata"]["managedFields"] = [
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet",
             "operation": "Update", "time": created,
             "fieldsV1": {"f:metadata": {"f:annotations": {
                 ".": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                 "f:labels": {".": {}, "f:kubernetes.io/hostname": {}}}}},
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "gpu-feature-discovery",
             "operation": "Update", "time": heartbeat,
             "fieldsV1": {"f:metadata": {"f:labels": {
                 f"f:{k}": {} for k in labels if k.startswith("nvidia.com/")}}}},
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet",
             "operation": "Update", "subresource": "status", "time": heartbeat,
             "fieldsV1": {"f:status": {"f:allocatable": {f"f:{k}": {} for k in allocatable},
                                       "f:capacity": {f"f:{k}": {} for k in capacity},
                                       "f:conditions": {}, "f:nodeInfo": {}}}},
        ]
        obj["status"]["images"] = [
            {"names": [f"{img}@sha256:{rng.getrandbits(256):064x}", img],
             "sizeBytes": rng.randrange(2_000_000_000, 12_000_000_000)}
            for img in (*_IMAGES, _SIDECAR_IMAGE, "nvcr.io/nvidia/k8s-device-plugin:v0.15.0",
                        "nvcr.io/nvidia/gpu-feature-discovery:v0.15.0")
        ]
    return obj


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Container:
    name: str
    image: str
    gpu: Mapping[str, int] = dataclasses.field(default_factory=dict)  # resource -> count
    limits_only: bool = False
    restart_always: bool = False  # a sidecar, when listed as an init container


def pod_object(
    *,
    namespace: str,
    name: str,
    node: str | None,
    phase: str,
    containers: Sequence[Container],
    init_containers: Sequence[Container] = (),
    rng: random.Random,
    annotations: Mapping[str, str] | None = None,
    owner: tuple[str, str] | None = None,  # (kind, name)
    unschedulable_message: str | None = None,
    deleting: bool = False,
    full: bool = True,
    scheduler_name: str = "default-scheduler",
) -> dict[str, Any]:
    """A Pod as the API server returns it, in ``phase`` (bound to ``node`` when given)."""
    created = _ts(rng, day=11)
    started = _ts(rng, day=12)

    def container(c: Container, *, init: bool) -> dict[str, Any]:
        cpu, mem = ("4", "32Gi") if c.gpu else ("100m", "128Mi")
        wanted: dict[str, str] = {"cpu": cpu, "memory": mem}
        limits: dict[str, str] = {"memory": mem}
        for res, n in c.gpu.items():
            limits[res] = str(n)
            if not c.limits_only:
                wanted[res] = str(n)
        out: dict[str, Any] = {
            "name": c.name,
            "image": c.image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": limits, "requests": wanted},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "volumeMounts": [
                {"name": "kube-api-access", "readOnly": True,
                 "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
            ],
        }
        if c.restart_always:
            out["restartPolicy"] = "Always"
        if (full and not init) or c.gpu:
            out["env"] = [
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
                {"name": "HF_HOME", "value": "/cache/huggingface"},
                {"name": "OMP_NUM_THREADS", "value": "4"},
                {"name": "MODEL_NAME", "value": f"model-{rng.randrange(100)}"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
                {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
                    "name": "wandb", "key": "api-key"}}},
            ]
            out["volumeMounts"] += [{"name": "cache", "mountPath": "/cache"},
                                    {"name": "dshm", "mountPath": "/dev/shm"}]
            out["command"] = ["python", "-m", "serve", "--port", "8000"]
            out["ports"] = [{"containerPort": 8000, "name": "http", "protocol": "TCP"}]
        return out

    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": _uid(rng),
        "resourceVersion": str(rng.randrange(10_000, 90_000_000)),
        "creationTimestamp": created,
        "labels": {"app.kubernetes.io/name": name.rsplit("-", 2)[0],
                   "app.kubernetes.io/part-of": namespace},
    }
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1",
            "kind": owner[0], "name": owner[1], "uid": _uid(rng),
            "controller": True, "blockOwnerDeletion": True,
        }]
        meta["generateName"] = owner[1] + "-"
        if owner[0] == "ReplicaSet":
            meta["labels"]["pod-template-hash"] = owner[1].rsplit("-", 1)[-1]
    if annotations:
        meta["annotations"] = dict(annotations)
    if deleting:
        meta["deletionTimestamp"] = _ts(rng, day=13)
        meta["deletionGracePeriodSeconds"] = 30
    spec: dict[str, Any] = {
        "containers": [container(c, init=False) for c in containers],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Never" if owner and owner[0] == "Job" else "Always",
        "schedulerName": scheduler_name,
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
        ],
        "volumes": [
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "cache", "persistentVolumeClaim": {"claimName": "model-cache"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
        ],
    }
    if init_containers:
        spec["initContainers"] = [container(c, init=True) for c in init_containers]
    if node is not None:
        spec["nodeName"] = node
    conditions: list[dict[str, Any]]
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if node is None:
        conditions = []
        if unschedulable_message is not None:
            conditions.append({"type": "PodScheduled", "status": "False",
                               "reason": "Unschedulable", "message": unschedulable_message,
                               "lastProbeTime": None, "lastTransitionTime": started})
    else:
        running = phase == "Running"
        conditions = [
            {"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": started,
             **({"reason": "PodCompleted"} if phase in ("Succeeded", "Failed")
                and t != "PodScheduled" else {})}
            for t, s in (("PodReadyToStartContainers", "True"), ("Initialized", "True"),
                         ("Ready", "True" if running else "False"),
                         ("ContainersReady", "True" if running else "False"),
                         ("PodScheduled", "True"))
        ]
        status["hostIP"] = f"10.0.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        status["podIP"] = f"100.64.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        status["podIPs"] = [{"ip": status["podIP"]}]
        status["startTime"] = started

        def state() -> dict[str, Any]:
            if phase == "Running":
                return {"running": {"startedAt": started}}
            if phase in ("Succeeded", "Failed"):
                return {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                       "reason": "Completed" if phase == "Succeeded"
                                       else "Error", "startedAt": started,
                                       "finishedAt": _ts(rng, day=13),
                                       "containerID": f"containerd://{rng.getrandbits(256):064x}"}}
            return {"waiting": {"reason": "ContainerCreating"}}

        status["containerStatuses"] = [
            {"name": c.name, "image": c.image, "imageID": f"{c.image}@sha256:"
             f"{rng.getrandbits(256):064x}", "ready": running, "restartCount": 0,
             "started": running, "state": state(),
             **({"containerID": f"containerd://{rng.getrandbits(256):064x}"} if running
                else {})}
            for c in containers
        ]
    status["conditions"] = conditions
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                           "spec": spec, "status": status}
    if full:
        meta["managedFields"] = [
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager",
             "operation": "Update", "time": created,
             "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}},
                                         "f:ownerReferences": {}},
                          "f:spec": {"f:containers": {f'k:{{"name":"{c.name}"}}': {
                              ".": {}, "f:image": {}, "f:resources": {
                                  "f:limits": {}, "f:requests": {}}} for c in containers},
                              "f:volumes": {}}}},
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet",
             "operation": "Update", "subresource": "status", "time": started,
             "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                       "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
                                       "f:startTime": {}}}},
        ]
    return obj


# ---------------------------------------------------------------- whole clusters

# Named mig-parted configs (per-GPU layouts) a fleet typically uses, per model.
_CONFIGS: dict[str, tuple[tuple[str, tuple[str, ...], float], ...]] = {
    "A100-80GB": (("all-1g.10gb", ("1g.10gb",) * 7, 0.35),
                  ("all-balanced", ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"), 0.35),
                  ("all-3g.40gb", ("3g.40gb", "3g.40gb"), 0.2),
                  ("all-7g.80gb", ("7g.80gb",), 0.1)),
    "H100-80GB": (("all-1g.10gb", ("1g.10gb",) * 7, 0.35),
                  ("all-balanced", ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"), 0.35),
                  ("all-3g.40gb", ("3g.40gb", "3g.40gb"), 0.2),
                  ("all-7g.80gb", ("7g.80gb",), 0.1)),
    "A100-40GB": (("all-1g.5gb", ("1g.5gb",) * 7, 0.5),
                  ("all-balanced", ("1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"), 0.5)),
    "A30-24GB": (("all-1g.6gb", ("1g.6gb",) * 4, 0.5),
                 ("all-balanced", ("1g.6gb", "1g.6gb", "2g.12gb"), 0.5)),
    "H200-141GB": (("all-1g.18gb", ("1g.18gb",) * 7, 0.5),
                   ("all-3g.71gb", ("3g.71gb", "3g.71gb"), 0.5)),
}


def _pick(rng: random.Random, weighted: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    return rng.choices(list(weighted), weights=[w[-1] for w in weighted])[0]


def node_specs(nodes: int, *, rng: random.Random,
               catalog: profiles.Catalog | None = None) -> list[NodeSpec]:
    """``nodes`` GPU nodes (8 GPUs each, a few with 4) across the fleet's models and configs."""
    catalog = catalog or profiles.builtin()
    out: list[NodeSpec] = []
    for i in range(nodes):
        model_id, product, _ = _pick(rng, _FLEET)
        model = catalog.get(model_id)
        config, per_gpu, _ = _pick(rng, _CONFIGS[model_id])
        single = model_id == "A100-40GB" and config == "all-1g.5gb" and rng.random() < 0.5
        out.append(NodeSpec(
            name=f"gpu-{model_id.lower()}-{i:05d}",
            model=model,
            product=product,
            gpus=8 if rng.random() < 0.9 else 4,
            strategy="single" if single else "mixed",
            per_gpu=per_gpu,
            config=config,
            config_state="pending" if rng.random() < 0.01 else "success",
            unschedulable=rng.random() < 0.01,
            zone=f"us-east-1{'abc'[i % 3]}",
        ))
    return out


def iter_objects(nodes: int, pods: int, seed: int, *, full: bool = True,
                 gpu_share: float = 0.9) -> Iterator[dict[str, Any]]:
    """Nodes first, then pods, generated one at a time (a large cluster never sits in memory).

    ``gpu_share`` of the pods request a MIG instance (in a GPU cluster nearly all do; the
    rest are CPU pods such as loaders and exporters). GPU pods are bound where an instance is
    free; when none is left they stay Pending with PodScheduled=False/Unschedulable.
    """
    rng = random.Random(seed)
    specs = node_specs(nodes, rng=rng)
    free: dict[str, dict[str, int]] = {}  # resource -> node -> free count
    for spec in specs:
        yield node_object(spec, rng=rng, full=full)
        if spec.unschedulable or spec.config_state == "pending":
            continue
        for p, n in instances(spec).items():
            res = profiles.GPU_RESOURCE if spec.strategy == "single" else (
                profiles.resource_name(p))
            free.setdefault(res, {})[spec.name] = free.setdefault(res, {}).get(spec.name, 0) + n
    resources = sorted(free)
    # Demand follows supply: a resource is asked for in proportion to the instances of it.
    cum: list[int] = []
    for res in resources:
        cum.append((cum[-1] if cum else 0) + sum(free[res].values()))
    open_nodes = {res: list(by_node) for res, by_node in free.items()}
    for i in range(pods):
        namespace = _NAMESPACES[i % len(_NAMESPACES)]
        image = _IMAGES[rng.randrange(len(_IMAGES))]
        if rng.random() >= gpu_share or not resources:
            containers = [Container(name="worker", image="python:3.11-slim")]
            yield pod_object(namespace=namespace, name=f"cpu-{i:06d}", node=specs[
                rng.randrange(len(specs))].name if specs else None, phase="Running",
                containers=containers, rng=rng, owner=("ReplicaSet", f"cpu-{i // 10:05d}-5d8f"),
                full=full)
            continue
        res = rng.choices(resources, cum_weights=cum)[0]
        containers = [Container(name="main", image=image, gpu={res: 1}),
                      Container(name="log-shipper", image=_SIDECAR_IMAGE)]
        roll = rng.random()
        job = roll < 0.3
        owner = ("Job", f"train-{i // 4:06d}") if job else ("ReplicaSet",
                                                           f"serve-{i // 8:06d}-7c9b")
        name = f"{owner[1]}-{i:06d}"
        candidates = open_nodes[res]
        if roll < 0.04:
            phase = "Succeeded" if roll < 0.03 else "Failed"
            node: str | None = specs[rng.randrange(len(specs))].name
        elif candidates and rng.random() < 0.93:
            k = rng.randrange(len(candidates))
            node = candidates[k]
            free[res][node] -= 1
            if not free[res][node]:
                candidates[k] = candidates[-1]
                candidates.pop()
            phase = "Running"
        else:
            node, phase = None, "Pending"
        annotations = {requests.GPU_MEMORY: "9Gi"} if rng.random() < 0.3 else None
        yield pod_object(
            namespace=namespace, name=name, node=node, phase=phase, containers=containers,
            rng=rng, owner=owner, annotations=annotations, full=full,
            unschedulable_message=(f"0/{nodes} nodes are available: {nodes} Insufficient {res}."
                                   f" preemption: 0/{nodes} nodes are available: "
                                   f"{nodes} No preemption victims found for incoming pod."
                                   if node is None else None),
            deleting=phase == "Running" and rng.random() < 0.005,
        )


def generate(nodes: int, pods: int, seed: int) -> list[dict[str, Any]]:
    """A synthetic cluster: ``nodes`` Node objects then ``pods`` Pod objects, full-size."""
    return list(iter_objects(nodes, pods, seed))
