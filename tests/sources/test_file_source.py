"""The file source: List, JSON and multi-document snapshots; reload on change; broken files."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pathlib
from typing import Any

import pytest
import yaml

from migfit import cluster, errors, snapshots, sources


def node(name: str, free: int = 2) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/mig.strategy": "mixed"}},
            "status": {"allocatable": {"nvidia.com/mig-3g.40gb": str(free)},
                       "capacity": {"nvidia.com/mig-3g.40gb": str(free)}}}


def pod(name: str, node_name: str | None = "n1", *, namespace: str = "gpu",
        amount: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {
        "limits": {"nvidia.com/mig-3g.40gb": amount}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


def as_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": list(items)}


def free(model: cluster.Cluster, name: str = "n1") -> dict[str, int]:
    state = model.node(name)
    assert state is not None
    return dict(state.free)


@pytest.fixture()
def path(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "cluster.yaml"


def test_the_bundled_example_loads_as_a_kubectl_list() -> None:
    model = cluster.Cluster()
    source = snapshots.FileSource(model, snapshots.EXAMPLE_CLUSTER)
    assert source.load_once()
    assert source.synced.is_set()
    assert model.synced
    assert source.last_error is None
    seed = model.node("gpu-a100-0")
    assert seed is not None
    assert seed.node.advertised == {"3g.40gb": 2}
    assert seed.idle
    waiting = model.find_pod("ml-research", "finetune-small-0")
    assert waiting is not None
    assert waiting.unschedulable
    assert waiting.mig_requests == {"1g.10gb": 1}
    assert model.free_nodes("1g.10gb") == {}


def test_the_package_data_copy_is_the_example(tmp_path: pathlib.Path) -> None:
    example = pathlib.Path(__file__).parents[2] / "examples" / "cluster.yaml"
    assert snapshots.EXAMPLE_CLUSTER.read_bytes() == example.read_bytes()


def test_a_json_list_loads(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(as_list(node("n1"), pod("a"))))
    model = snapshots.load(path)
    assert free(model) == {"3g.40gb": 1}


def test_a_json_array_and_typed_lists_load(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps([
        {"apiVersion": "v1", "kind": "NodeList", "items": [node("n1")]},
        {"apiVersion": "v1", "kind": "PodList", "items": [pod("a"), pod("b")]},
    ]))
    assert free(snapshots.load(path)) == {"3g.40gb": 0}


def test_multi_document_yaml_loads(path: pathlib.Path) -> None:
    path.write_text(yaml.safe_dump_all([node("n1"), None, as_list(pod("a")), pod("b", None)]))
    model = snapshots.load(path)
    assert free(model) == {"3g.40gb": 1}
    assert [p.name for p in model.pending_pods()] == ["b"]


def test_other_kinds_are_ignored(path: pathlib.Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    path.write_text(yaml.safe_dump(as_list(node("n1"), cm)))
    assert snapshots.load(path).node_names() == ["n1"]


def test_reload_on_change(path: pathlib.Path) -> None:
    path.write_text(yaml.safe_dump(as_list(node("n1"), pod("a"))))
    model = cluster.Cluster()
    source = snapshots.FileSource(model, path)
    assert source.load_once()
    assert not source.load_once()  # nothing changed
    path.write_text(yaml.safe_dump(as_list(node("n1"), node("n2"), pod("b", "n2"))))
    assert source.load_once()
    assert free(model) == {"3g.40gb": 2}  # pod a is gone from the file
    assert free(model, "n2") == {"3g.40gb": 1}
    assert source.loads == 2


def test_a_rewrite_with_the_same_content_is_not_a_change(path: pathlib.Path) -> None:
    text = yaml.safe_dump(as_list(node("n1")))
    path.write_text(text)
    model = cluster.Cluster()
    source = snapshots.FileSource(model, path)
    assert source.load_once()
    generation = model.generation
    path.write_text(text)
    assert not source.load_once()
    assert model.generation == generation


def _with_field(obj: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    obj["spec"][key] = value
    return obj


def _with_label(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    obj["metadata"]["labels"][key] = value
    return obj


def _with_affinity(obj: dict[str, Any], operator: str) -> dict[str, Any]:
    obj["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": operator, "values": ["a"]}]}]}}}
    return obj


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (as_list(node("n1"), pod("train-2"), pod("train-3", amount="lots")),
         "item 3 (Pod gpu/train-3): spec.containers[0].resources.limits"),
        (as_list(node("n1"), {"kind": "Node", "metadata": {}}),
         "item 2 (Node ?): no metadata.name"),
        (as_list(node("n1"), {"metadata": {"name": "x"}}), "item 2 (object x): no 'kind'"),
        (as_list(node("n1"), node("n1")), "item 2 (Node n1): a second copy of item 1"),
        (as_list(node("n1"), "just text"),
         "item 2 (string): a string, not a Kubernetes object"),
        # These were read silently: the pod dropped, no labels, a term no node matches.
        (as_list(node("n1"), {**pod("p"), "kind": "pod"}),
         "item 2 (pod gpu/p): kind 'pod': kinds are case-sensitive; write kind: Pod"),
        (as_list({**node("n2"), "metadata": {"name": "n2", "labels": "oops"}}),
         "item 1 (Node n2): metadata.labels is not a mapping"),
        (as_list({**node("n2"), "status": {"allocatible": {"nvidia.com/mig-3g.40gb": "2"}}}),
         "item 1 (Node n2): status.allocatible: no such field; did you mean allocatable?"),
        (as_list(node("n1"), _with_field(pod("p"), "nodeSelecter", {"pool": "a"})),
         "item 2 (Pod gpu/p): spec.nodeSelecter: no such field; did you mean nodeSelector?"),
        # Kinds, phases and strategies no cluster has were read as another: the object
        # skipped, the pod as holding its instances, the node as mixed.
        (as_list(node("n1"), {**pod("p"), "kind": "Pods"}),
         "item 2 (Pods gpu/p): kind 'Pods' is no kind migfit reads; did you mean kind: Pod? "
         "(it reads kind: Node and kind: Pod, and skips other kinds)"),
        (as_list(node("n1"), {**node("n2"), "kind": "Nod"}),
         "item 2 (Nod n2): kind 'Nod' is no kind migfit reads; did you mean kind: Node?"),
        (as_list(node("n1"), {**pod("p"), "status": {"phase": "Pendng"}}),
         "item 2 (Pod gpu/p): status.phase is 'Pendng'; did you mean Pending? use Pending, "
         "Running, Succeeded, Failed or Unknown"),
        (as_list(_with_label(node("n2"), "nvidia.com/mig.strategy", "mixd")),
         "item 1 (Node n2): metadata.labels['nvidia.com/mig.strategy'] is 'mixd'; did you "
         "mean mixed? use none, single or mixed"),
        (as_list(node("n1"), _with_affinity(pod("p"), "Inn")),
         "nodeSelectorTerms[0].matchExpressions[0].operator is 'Inn'; use one of "
         "DoesNotExist, Exists, Gt, In, Lt, NotIn"),
    ],
)
def test_a_broken_file_keeps_the_last_good_state_and_names_the_object(
        path: pathlib.Path, broken: dict[str, Any], expected: str) -> None:
    path.write_text(yaml.safe_dump(as_list(node("n1"), pod("a"))))
    model = cluster.Cluster()
    source = snapshots.FileSource(model, path)
    assert source.load_once()

    path.write_text(yaml.safe_dump(broken))
    assert not source.load_once()
    assert source.last_error is not None
    assert source.last_error.startswith(f"{path}: ")
    assert expected in source.last_error
    assert free(model) == {"3g.40gb": 1}
    assert model.find_pod("gpu", "a") is not None

    path.write_text(yaml.safe_dump(as_list(node("n1"))))
    assert source.load_once()
    assert source.last_error is None
    assert free(model) == {"3g.40gb": 2}


def test_other_kinds_of_a_broader_export_are_still_skipped(path: pathlib.Path) -> None:
    path.write_text(yaml.safe_dump(as_list(
        node("n1"), {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}},
        {"apiVersion": "v1", "kind": "Role", "metadata": {"name": "r"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}})))
    assert snapshots.load(path).node_names() == ["n1"]


SHAPE = ("a cluster file is a Kubernetes List of Nodes and Pods, as `kubectl get nodes,pods -A "
         "-o yaml` prints it, or those objects themselves")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("items: [\n  - {kind: Node\n", "not valid YAML or JSON at line"),
        ("", "the file is empty"),
        ("- 1\n- 2\n", "item 1 (number): a number, not a Kubernetes object; " + SHAPE),
        # As the YAML above: it said "document 1 is an int", of a list, and not what a
        # cluster file is.
        ("[1, 2, 3]", "item 1 (number): a number, not a Kubernetes object; " + SHAPE),
        ("[null]", "item 1 (null): null, not a Kubernetes object; " + SHAPE),
        ("42\n", "document 1 is a number, not a Kubernetes object or List; " + SHAPE),
        # cut short: a parse error, not its first element's ("document 1 is a int")
        ("[1,2", "not valid YAML or JSON at line 2, column 1: did not find expected ','"),
        ('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}, 7',
         "not valid YAML or JSON at line 2"),
        ("kind: List\nitems:\n- 7\n- {kind: Node\n", "not valid YAML or JSON at line"),
    ],
)
def test_unparseable_files_keep_the_last_good_state(
        path: pathlib.Path, text: str, expected: str) -> None:
    path.write_text(yaml.safe_dump(as_list(node("n1"))))
    model = cluster.Cluster()
    source = snapshots.FileSource(model, path)
    assert source.load_once()
    path.write_text(text)
    assert not source.load_once()
    assert source.last_error is not None
    assert expected in source.last_error
    assert model.node_names() == ["n1"]


def test_a_whole_file_with_a_bad_item_names_the_item(tmp_path: pathlib.Path) -> None:
    """The reader looks past a bad item to the end of a file that parses: the item is the
    error, not the file."""
    for text in ("[1, 2]", '{"kind": "List", "items": [7, {"kind": "Node"}]}'):
        with pytest.raises(errors.ConfigError, match="a number, not a Kubernetes object"):
            snapshots.decode(text, where="f")


@pytest.mark.parametrize(("pods", "said"), [(1, "(1 pod)"), (2, "(2 pods)")])
def test_a_file_without_nodes_counts_its_pods_in_words(pods: int, said: str) -> None:
    text = json.dumps(as_list(*(pod(f"p{i}") for i in range(pods))))
    with pytest.raises(errors.ConfigError, match=rf"no Node objects \({said[1:-1]}\);"):
        snapshots.decode(text, where="f")


def test_a_missing_file_is_reported_and_never_synced(tmp_path: pathlib.Path) -> None:
    source = snapshots.FileSource(cluster.Cluster(), tmp_path / "nope.yaml")
    assert not source.load_once()
    assert not source.synced.is_set()
    assert source.last_error is not None
    assert "cannot read cluster file" in source.last_error
    with pytest.raises(errors.ConfigError, match="cannot read cluster file"):
        sources.load_snapshot(tmp_path / "nope.yaml")


async def test_run_polls_and_follows_changes(path: pathlib.Path) -> None:
    path.write_text(yaml.safe_dump(as_list(node("n1"))))
    model = cluster.Cluster()
    source = sources.open_source(model, cluster_file=path, kubeconfig=None, in_cluster=False,
                                 poll_interval_s=0.01)
    task = asyncio.create_task(source.run())
    try:
        async with asyncio.timeout(10):  # guards a hang only
            await source.synced.wait()
            assert free(model) == {"3g.40gb": 2}
            path.write_text("items: [")
            while source.last_error is None:
                await asyncio.sleep(0.01)
            assert free(model) == {"3g.40gb": 2}
            path.write_text(json.dumps(as_list(node("n1"), pod("a"), pod("b"))))
            while model.node("n1") is None or free(model) != {"3g.40gb": 0}:
                await asyncio.sleep(0.01)
            assert source.last_error is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_open_source_needs_exactly_one_origin(path: pathlib.Path) -> None:
    model = cluster.Cluster()
    with pytest.raises(errors.UsageError, match="--cluster FILE"):
        sources.open_source(model, cluster_file=None, kubeconfig=None, in_cluster=False)
    with pytest.raises(errors.UsageError, match="not both"):
        sources.open_source(model, cluster_file=path, kubeconfig=path, in_cluster=False)
    with pytest.raises(errors.UsageError, match="No such file or directory"):
        sources.open_source(model, cluster_file=path.with_name("typo.yaml"), kubeconfig=None,
                            in_cluster=False)
    with pytest.raises(errors.UsageError, match="Is a directory"):  # was "no such file"
        sources.open_source(model, cluster_file=path.parent, kubeconfig=None, in_cluster=False)
    path.write_text(yaml.safe_dump(as_list(node("n1"))))
    assert isinstance(sources.open_source(model, cluster_file=path, kubeconfig=None,
                                          in_cluster=False), snapshots.FileSource)
    # A file that is no cluster is refused at once too, as status refuses it (the server
    # had run, never ready).
    path.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    with pytest.raises(errors.ConfigError, match="no Node objects"):
        sources.open_source(model, cluster_file=path, kubeconfig=None, in_cluster=False)


def test_a_snapshot_without_nodes_is_refused_with_the_export_command() -> None:
    text = json.dumps(as_list(pod("p1"), pod("p2")))
    with pytest.raises(errors.ConfigError, match=r"no Node objects \(2 pods\).*nodes,pods"):
        snapshots.decode(text, where="pods.json")


def test_the_bundled_example_names_each_object_once() -> None:
    doc = yaml.safe_load(snapshots.EXAMPLE_CLUSTER.read_text(encoding="utf-8"))
    keys = [(i["kind"], i["metadata"].get("namespace"), i["metadata"]["name"])
            for i in doc["items"]]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


# Big files are read item by item (the whole parse tree never exists); every shape gives the
# same records as a whole parse, and shapes the streaming reader does not know fall back to it.

_NODE_YAML = """- apiVersion: v1
  kind: Node
  metadata:
    name: n{i}
    labels:
      nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
      nvidia.com/mig.strategy: mixed
# a comment at column 0 inside the items
  status:
    allocatable:
      nvidia.com/mig-3g.40gb: "2"
    capacity: {{nvidia.com/mig-3g.40gb: "2"}}
"""


def _records(snap: snapshots.Snapshot) -> tuple[list[Any], list[Any]]:
    return list(snap.node_records), list(snap.pod_records)


def _whole(text: str) -> snapshots.Snapshot:
    return snapshots._decode_objects(
        snapshots._objects(snapshots._documents_whole(text, "w"), "w"), where="w",
        catalog=cluster.Cluster().catalog, digest="d")


@pytest.mark.parametrize("text", [
    json.dumps(as_list(node("n1"), pod("p1"), node("n2", 1), pod("p2", "n2"))),
    json.dumps({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": [node("n1")]}),
    json.dumps([as_list(node("n1")), pod("p1"), {"kind": "NodeList", "items": [node("n2")]}]),
    json.dumps(node("n1"), indent="\t"),
    "apiVersion: v1\nitems:\n" + "".join(_NODE_YAML.format(i=i) for i in range(3))
    + "- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, namespace: g, uid: u}\n"
    + "  spec:\n    nodeName: n1\n    containers:\n    - name: c\n      resources:\n"
    + "        limits: {nvidia.com/mig-3g.40gb: '1'}\n  status: {phase: Running}\n"
    + "kind: List\nmetadata:\n  resourceVersion: ''\n",
    "items:\n" + _NODE_YAML.format(i=0) + "kind: NodeList\n",
    yaml.safe_dump(node("n1")) + "---\n" + yaml.safe_dump(as_list(node("n2"))),
    "{kind: List, items: [" + json.dumps(node("n1")) + "]}",  # YAML flow style
    "apiVersion: v1\nitems:\n  - " + json.dumps(node("n1")) + "\nkind: List\n",
])
def test_streamed_and_whole_reads_agree(text: str) -> None:
    assert _records(snapshots.decode(text, where="s")) == _records(_whole(text))


def test_a_broken_item_is_named_the_same_way_streamed(tmp_path: pathlib.Path) -> None:
    bad = node("n2")
    bad["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] = "two"
    for text in (json.dumps(as_list(node("n1"), bad)),
                 yaml.safe_dump(as_list(node("n1"), bad), sort_keys=False)):
        with pytest.raises(errors.ConfigError, match=r"item 2 \(Node n2\)"):
            snapshots.decode(text, where="c")


def test_truncated_json_is_an_error_not_a_partial_model() -> None:
    text = json.dumps(as_list(node("n1"), node("n2")))
    with pytest.raises(errors.ConfigError, match="not valid YAML or JSON"):
        snapshots.decode(text[: len(text) // 2], where="half.json")


def test_kubectl_exports_are_read_item_by_item() -> None:
    listing = as_list(node("n1"), pod("p1"), node("n2"))
    for text in (json.dumps(listing), json.dumps(listing, indent=4),
                 yaml.safe_dump(listing, sort_keys=False)):
        items = list(snapshots._streamed(text))
        assert [i["__item__"]["metadata"]["name"] for i in items] == ["n1", "p1", "n2"]


def test_a_file_fixed_back_to_the_last_good_state_says_so(
        path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    """Fixed back to exactly what was loaded, the file was taken silently after the error
    line said "keeping the last good state" (an outside check): nothing said it was fixed."""
    good = yaml.safe_dump(as_list(node("n1")))
    path.write_text(good)
    model = cluster.Cluster()
    source = snapshots.FileSource(model, path)
    assert source.load_once()
    path.write_text(good.replace("kind: Node", "kind: Nod"))
    with caplog.at_level(logging.INFO, logger="migfit"):
        assert not source.load_once()
        assert source.last_error is not None
        path.write_text(good)
        os.utime(path, ns=(0, 0))  # a new stat even within the file system's time step
        assert not source.load_once()  # the same contents: nothing to install again
    assert source.last_error is None
    assert [r.getMessage() for r in caplog.records][-1] == (
        f"{path}: back to the last good state after an error")
    assert model.node_names() == ["n1"]
