"""The apply mode carries out a busy-node re-layout (--apply-busy-nodes) as docs/relayout.md
§5 says: the node tainted for the whole change; only the pods the advice found running may
stay bound, each on a profile no re-created GPU has; after the MIG Manager's success every
one of them is still there with no container restarted, or the run fails and the taint stays.
Against kmock's Kubernetes emulator with a simulated MIG Manager, then the pure checks."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
from advisor_scene import T0, build, node, pod
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client as k8s
from migmanager_sim import (
    NODES,
    PODS,
    MigManager,
    VersionedEmulator,
    events,
    read_node,
    snapshot,
    store,
    taints,
)

from migfit import advisor, keys, migparted, profiles, records
from migfit.extender import advice, figures, filtering, relayout, usage
from migfit.extender import relayout_machine as machine

NOW = T0 + 600
pytestmark = pytest.mark.kmock(cls=VersionedEmulator)
# GPU 0 laid out 2 × 3g.40gb and idle, GPU 1 7 × 1g.10gb all in use; seed-small keeps GPU 1
# exactly and gives GPU 0 seven 1g.10gb (the busy apply guard's config).
CONFIG = migparted.parse("""
version: v1
mig-configs:
  seed-layout:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  seed-small:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")
LAYOUTS = {"seed-small": {"1g.10gb": 14}, "seed-layout": {"3g.40gb": 2, "1g.10gb": 7}}
RUNNERS = [f"r{i}" for i in range(7)]
FAST = relayout.Settings(max_concurrent=1, timeout_s=3.0, wedge_s=1.0, poll_s=0.02,
                         interval_s=0.02, apply_busy_nodes=True)


@pytest.fixture()
def server(kmock: VersionedEmulator) -> VersionedEmulator:
    for res in ("v1/pods", "v1/nodes", "v1/events", "coordination.k8s.io/v1/leases"):
        kmock.resources[res] = {}  # type: ignore[assignment]
    return kmock


def runner(name: str, restarts: int = 0) -> dict[str, Any]:
    obj = pod(name, "1g.10gb", namespace="t", node="seed", phase="Running")
    obj["status"]["containerStatuses"] = [{"name": "main", "ready": True, "restartCount":
                                           restarts, "image": "x", "imageID": "",
                                           "state": {"running": {}}}]
    return obj


def seed(server: kmock.KubernetesEmulator) -> None:
    store(server, node("seed", gpus=2, alloc={"3g.40gb": 2, "1g.10gb": 7},
                       config="seed-layout"))
    for name in RUNNERS:
        store(server, runner(name))
    store(server, pod("wants-small", "1g.10gb", namespace="ml"))


async def relayouter(api: k8s.ApiClient, settings: relayout.Settings = FAST
                     ) -> relayout.Relayouter:
    cache = advice.AdviceCache(config=CONFIG, clock=lambda: NOW, settings=advisor.Settings(
        busy_nodes=True, allow_disruptive=False))
    return relayout.Relayouter(await snapshot(api), api, cache=cache, settings=settings,
                               elector=None)


async def apply_once(api: k8s.ApiClient) -> tuple[list[relayout.Outcome], MigManager]:
    mm = MigManager(api, "seed", layouts=LAYOUTS)
    mm.start()
    try:
        r = await relayouter(api)
        started = await r.step()
        return (await r.wait() if started else []), mm
    finally:
        await mm.stop()


def record(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(obj["metadata"]["annotations"][keys.ANNOTATION_RELAYOUT])
    return out


async def test_a_busy_node_is_re_laid_out_and_its_running_pods_are_checked_after(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    labelled: list[dict[str, Any]] = []

    def keep_record() -> None:  # the record as the label was set
        labelled.append(json.loads(server.objects[NODES, None, "seed"]["metadata"][
            "annotations"][keys.ANNOTATION_RELAYOUT]))

    server.after(NODES, "seed", lambda d: isinstance(d, dict) and keys.LABEL_CONFIG in (
        (d.get("metadata") or {}).get("labels") or {}), keep_record)
    (outcome,), mm = await apply_once(api)
    assert outcome.result == "success", outcome.reason
    assert outcome.reason == "7 pod(s) on the GPUs it kept run on, none restarted"
    assert mm.applied == ["seed-small"]
    (at_label,) = labelled
    assert at_label["state"] == "applying" and at_label["running"] == [f"t/{n}" for n in RUNNERS]
    assert [k["pod"] for k in at_label["kept"]] == [f"t/{n}" for n in RUNNERS]
    assert {k["uid"] for k in at_label["kept"]} == {f"uid-t-{n}" for n in RUNNERS}
    assert all(k.get("restarts", 0) == 0 and k["profiles"] == {"1g.10gb": 1}
               for k in at_label["kept"])
    obj = await read_node(api, "seed")
    assert taints(obj) == [] and obj["metadata"]["labels"][keys.LABEL_CONFIG] == "seed-small"
    done = [e for e in await events(api) if e["reason"] == relayout.REASON_DONE]
    assert "7 pod(s) on the GPUs it kept run on, none restarted" in done[0]["message"]
    # The pod that waited now passes the extender's filter on the node as the API has it.
    after = await snapshot(api)
    waiting = after.find_pod("ml", "wants-small")
    assert waiting is not None
    verdict = filtering.filter_nodes(figures.Index(after), filtering.request_of(waiting),
                                     ["seed"])
    assert verdict.passed == ["seed"]


async def test_a_kept_pod_that_restarts_during_the_change_fails_the_run(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    # The MIG Manager re-creates GPU 0; r3 crashes meanwhile (as if its instance had gone).
    server.after(NODES, "seed", lambda d: isinstance(d, dict) and keys.LABEL_CONFIG in (
        (d.get("metadata") or {}).get("labels") or {}),
        lambda: server.objects[PODS, "t", "r3"].patch({"status": {
            "containerStatuses": runner("r3", restarts=1)["status"]["containerStatuses"]}}))
    (outcome,), _ = await apply_once(api)
    assert outcome.result == "failed"
    assert "t/r3 restarted or lost a container 1 time(s)" in outcome.reason
    obj = await read_node(api, "seed")
    assert taints(obj) == [keys.TAINT_RELAYOUT]  # kept for an operator
    assert record(obj)["state"] == "failed"
    assert keys.ANNOTATION_RELAYOUT_FAILED in obj["metadata"]["annotations"]
    warning = [e for e in await events(api) if e["reason"] == relayout.REASON_FAILED]
    assert warning and warning[0]["type"] == "Warning" and "t/r3" in warning[0]["message"]


async def test_a_kept_pod_that_fails_during_the_change_fails_the_run(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    server.after(NODES, "seed", lambda d: isinstance(d, dict) and keys.LABEL_CONFIG in (
        (d.get("metadata") or {}).get("labels") or {}),
        lambda: server.objects[PODS, "t", "r0"].patch({"status": {"phase": "Failed"}}))
    (outcome,), _ = await apply_once(api)
    assert outcome.result == "failed" and "t/r0 failed" in outcome.reason


async def test_a_pod_bound_after_the_advice_aborts_before_the_label(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    # Bound between the advice (the view the relayouter plans from) and the taint.
    r = await relayouter(api)
    store(server, pod("late", "1g.10gb", namespace="t", node="seed", phase="Running"))
    mm = MigManager(api, "seed", layouts=LAYOUTS)
    mm.start()
    try:
        assert await r.step() == ["seed"]
        (outcome,) = await r.wait()
    finally:
        await mm.stop()
    assert outcome.result == "aborted"
    assert "bound to the node after the advice: t/late" in outcome.reason
    assert mm.applied == []
    obj = await read_node(api, "seed")
    assert taints(obj) == [] and keys.ANNOTATION_RELAYOUT not in obj["metadata"]["annotations"]


def test_busy_node_advice_is_started_only_with_the_flag() -> None:
    c = build(node("seed", gpus=2, alloc={"3g.40gb": 2, "1g.10gb": 7}, config="seed-layout"),
              *(runner(name) for name in RUNNERS), pod("wants-small", "1g.10gb"))
    settings = advisor.Settings(busy_nodes=True, allow_disruptive=False)
    (rec,) = advisor.advise(c, now=NOW, settings=settings, config=CONFIG).recommendations
    # A named config that keeps GPU 1 exactly is preferred: the apply mode could run it.
    assert rec.config == "seed-small" and rec.running and not rec.disruptive
    nodes = [s.node for s in c.nodes()]
    off = machine.plan(nodes, running=(), recommendations=[rec], settings=machine.Settings())
    assert off.start == ()
    on = machine.plan(nodes, running=(), recommendations=[rec],
                      settings=machine.Settings(apply_busy_nodes=True))
    assert [r.node for r in on.start] == ["seed"]


async def test_without_the_flag_the_busy_node_is_left_alone(
        server: VersionedEmulator, api: k8s.ApiClient) -> None:
    seed(server)
    r = await relayouter(api, relayout.Settings(max_concurrent=1, poll_s=0.02,
                                                interval_s=0.02))
    assert r.cache.get(r.state).recommendations
    assert await r.step() == []
    assert taints(await read_node(api, "seed")) == []


# ---------------------------------------------------------------- the pure checks

def _record(**changes: Any) -> keys.RelayoutRecord:
    base = keys.RelayoutRecord(
        target="seed-small", running=("t/a", "t/b"),
        gpus=(keys.GpuChange(index=0, before=("3g.40gb", "3g.40gb"), after=("1g.10gb",) * 7),
              keys.GpuChange(index=1, before=("1g.10gb",) * 7, after=("1g.10gb",) * 7)))
    return base.but(**changes)


def _pod(name: str, resource: str = "nvidia.com/mig-1g.10gb", *, phase: str = "Running",
         uid: str | None = None) -> records.PodRecord:
    return records.PodRecord(
        uid=uid or f"uid-{name}", namespace="t", name=name, resource_version="1", node="seed",
        phase=phase, scheduler_name="default-scheduler", requests={resource: 1},
        container_requests=(("main", resource, 1),), annotations={},
        unschedulable_since=None, deleting=False, created=None, cpu_milli=0, memory_bytes=0)


def test_touched_profiles_are_those_of_gpus_whose_counts_change() -> None:
    assert machine.touched_profiles(_record()) == {"3g.40gb"}
    # The same instances in another order is no change (mig-parted compares counts).
    same = _record(gpus=(keys.GpuChange(index=0, before=("4g.40gb", "3g.40gb"),
                                        after=("3g.40gb", "4g.40gb")),))
    assert machine.touched_profiles(same) == frozenset()


@pytest.mark.parametrize(("pods", "needle"), [
    ([_pod("a"), _pod("b")], None),
    ([_pod("a")], None),  # b ended: fine
    ([_pod("a"), _pod("c")], "after the advice: t/c"),
    ([_pod("a", "nvidia.com/gpu")], "not MIG instances"),
    ([_pod("a", "nvidia.com/mig-3g.40gb")], "t/a (3g.40gb)"),
    ([_pod("a", phase="Succeeded"), _pod("z", phase="Failed")], None),  # hold no instance
])
def test_busy_check(pods: list[records.PodRecord], needle: str | None) -> None:
    reason = machine.busy_check(_record(), pods, "seed")
    assert (reason is None) if needle is None else (reason is not None and needle in reason)


def test_an_idle_node_run_accepts_no_bound_gpu_pod() -> None:
    reason = machine.busy_check(_record(running=()), [_pod("a")], "seed")
    assert reason is not None and "before its layout changed: t/a" in reason


def _kept(name: str, restarts: int = 0) -> keys.KeptPod:
    return keys.KeptPod(pod=f"t/{name}", uid=f"uid-{name}", restarts=restarts,
                        profiles={"1g.10gb": 1})


def test_kept_check() -> None:
    rec = _record(kept=(_kept("a", restarts=2), _kept("b")))
    ok = machine.PodsSeen((_pod("a"), _pod("b")), restarts={"uid-a": 2, "uid-b": 0})
    assert machine.kept_check(rec, ok) == (None, ())
    # Deleted meanwhile (a Job's TTL, a user): nothing left to check; completed: fine.
    assert machine.kept_check(rec, machine.PodsSeen((_pod("a", phase="Succeeded"),))) == (
        None, ("t/b",))
    restarted = machine.PodsSeen((_pod("a"), _pod("b")), restarts={"uid-a": 3})
    harmed, _ = machine.kept_check(rec, restarted)
    assert harmed is not None and "t/a restarted or lost a container 1 time(s)" in harmed
    failed = machine.PodsSeen((_pod("a", phase="Failed"), _pod("b")), restarts={"uid-a": 2})
    harmed, _ = machine.kept_check(rec, failed)
    assert harmed is not None and "t/a failed" in harmed
    # The same name, another pod (re-created): the kept one may have died of the change and
    # been made again by its controller, so it is not taken as deleted (fails closed).
    other = machine.PodsSeen((_pod("a"), _pod("b", uid="uid-new")), restarts={"uid-a": 2})
    harmed, gone = machine.kept_check(rec, other)
    assert harmed is not None and "t/b was replaced by a new pod (uid uid-new)" in harmed
    assert gone == ()


def test_plan_does_not_start_what_the_check_would_refuse() -> None:
    rec = advisor.Recommendation(
        node="seed", model=profiles.ModelId("A100-80GB"), config="seed-small", mig_parted=None,
        gpus=(advisor.GpuChange(index=0, before=("3g.40gb", "3g.40gb"),
                                after=("1g.10gb",) * 7),),
        unblocks=("ml/x",), disrupts=(), before_config="seed-layout", before_source="config",
        note="", served={}, running=("t/a",))
    on = machine.Settings(apply_busy_nodes=True)
    assert [r.node for r in machine.plan([], running=(), recommendations=[rec], settings=on,
                                         bound=lambda n: [_pod("a")]).start] == ["seed"]
    assert machine.plan([], running=(), recommendations=[rec], settings=on,
                        bound=lambda n: [_pod("a", "nvidia.com/mig-3g.40gb")]).start == ()


# ---------------------------------------------------------------- with the DCGM exporter

UNIFORM = migparted.parse("""
version: v1
mig-configs:
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  keep0-whole1:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
  whole0-keep1:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
""")


def exporter_text(busy: dict[int, str]) -> str:
    """dcgm-exporter's text for two A100s of seven 1g.10gb; ``busy``: GPU -> the pod (in
    namespace t) holding its first instance."""
    lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"]
    for gpu in (0, 1):
        for k in range(7):
            labels = (f'gpu="{gpu}",UUID="GPU-{gpu}",device="nvidia{gpu}",'
                      f'modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="1g.10gb",'
                      f'GPU_I_ID="{7 + k}",Hostname="n"')
            held = busy.get(gpu) if k == 0 else None
            if held is not None:
                labels += f',container="main",namespace="t",pod="{held}"'
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {12000 if held else 13}")
    return "\n".join(lines) + "\n"


class Exporter:
    """A real HTTP server serving dcgm-exporter text; ``text`` is what it says now."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(text=self.text, content_type="text/plain")


@pytest.fixture()
async def exporter() -> AsyncIterator[tuple[Exporter, str]]:
    ex = Exporter(exporter_text({0: "r0"}))
    app = web.Application()
    app.router.add_get("/{node}", ex.handle)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield ex, f"http://127.0.0.1:{srv.port}/{{node}}"
    await srv.close()


async def dcgm_apply(api: k8s.ApiClient, url: str, rested: list[str] | None = None
                     ) -> tuple[list[relayout.Outcome], MigManager]:
    rested = [] if rested is None else rested
    store_state = await snapshot(api)
    scraper = usage.UsageScraper(store_state, settings=usage.Settings(
        url_template=url, interval_s=0.05, timeout_s=1.0))
    await scraper.scrape_once()  # the report the advice is made from
    cache = advice.AdviceCache(config=UNIFORM, clock=lambda: NOW, usage=scraper,
                               settings=advisor.Settings(busy_nodes=True,
                                                         allow_disruptive=False))
    r = relayout.Relayouter(store_state, api, cache=cache, elector=None,
                            settings=dataclasses.replace(FAST, gpu_usage=True,
                                                         exporter_collect_s=0.1,
                                                         usage_wait_s=2.0))
    mm = MigManager(api, "n", layouts={"keep0-whole1": {"1g.10gb": 7, "7g.80gb": 1},
                                       "whole0-keep1": {"1g.10gb": 7, "7g.80gb": 1}})
    mm.start()
    scraping = asyncio.create_task(scraper.run())
    try:
        started = await r.step()
        outcomes = await r.wait() if started else []
        if any(o.result == "aborted" for o in outcomes) and not await r.step():
            rested.extend(r._resting)
        return outcomes, mm
    finally:
        scraping.cancel()
        await asyncio.gather(scraping, return_exceptions=True)
        await mm.stop()


def dcgm_scene(server: kmock.KubernetesEmulator) -> None:
    store(server, node("n", gpus=2, alloc={"1g.10gb": 14}, config="all-1g"))
    obj = pod("r0", "1g.10gb", namespace="t", node="n", phase="Running")
    obj["status"]["containerStatuses"] = [{"name": "main", "restartCount": 0}]
    store(server, obj)
    store(server, pod("big", "7g.80gb", namespace="ml"))


async def test_with_dcgm_a_uniform_busy_node_re_lays_out_the_gpu_the_report_frees(
        server: VersionedEmulator, api: k8s.ApiClient, exporter: tuple[Exporter, str]) -> None:
    # Counts alone cannot tell which of the two 1g.10gb GPUs holds r0; the exporter says
    # GPU 0, so GPU 1 becomes a 7g.80gb. CHECK waits for a report newer than the taint
    # that still puts r0 on GPU 0, and after the change r0 is checked.
    dcgm_scene(server)
    (outcome,), mm = await dcgm_apply(api, exporter[1])
    assert outcome.result == "success", outcome.reason
    assert mm.applied == ["keep0-whole1"]
    assert outcome.reason == "1 pod(s) on the GPUs it kept run on, none restarted"


async def test_with_dcgm_a_pod_the_report_puts_on_the_gpu_to_re_create_aborts(
        server: VersionedEmulator, api: k8s.ApiClient, exporter: tuple[Exporter, str]) -> None:
    # The advice came from a report that put r0 on GPU 0; by the time the node is tainted the
    # exporter puts it on GPU 1, the one the change would re-create.
    dcgm_scene(server)
    ex, url = exporter
    server.after(NODES, "n", lambda d: isinstance(d, dict) and bool(
        (d.get("spec") or {}).get("taints")), lambda: setattr(
            ex, "text", exporter_text({1: "r0"})))
    rested: list[str] = []
    (outcome,), mm = await dcgm_apply(api, url, rested)
    assert outcome.result == "aborted"
    assert "puts pods on a GPU the change re-creates: t/r0" in outcome.reason
    assert mm.applied == []
    assert rested == ["n"]  # not tainted again at the next pass
    obj = await read_node(api, "n")
    assert taints(obj) == [] and keys.ANNOTATION_RELAYOUT not in obj["metadata"]["annotations"]


async def test_an_adopted_busy_node_run_is_aborted_without_apply_busy_nodes(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    """A busy-node run left `tainted` by a replica that had --apply-busy-nodes (the operator
    turned it off in a rollout): only new starts were guarded, and a replica without the
    flag adopted the run and set the label (an outside check). It is aborted now: taint and
    record removed, nothing changed."""
    seed(server)
    cache = advice.AdviceCache(config=CONFIG, clock=lambda: NOW, settings=advisor.Settings(
        busy_nodes=True, allow_disruptive=False))
    (rec,) = cache.get(await snapshot(api)).recommendations
    assert rec.running
    left = machine.planned(rec).but(state=keys.RelayoutState.TAINTED, from_config="seed-layout")
    server.objects[NODES, None, "seed"].patch({
        "spec": {"taints": [keys.relayout_taint()]},
        "metadata": {"annotations": {keys.ANNOTATION_RELAYOUT: keys.encode_relayout(left)}}})
    mm = MigManager(api, "seed", layouts=LAYOUTS)
    mm.start()
    try:
        r = await relayouter(api, dataclasses.replace(FAST, apply_busy_nodes=False))
        await r.step()
        (outcome,) = await r.wait()
    finally:
        await mm.stop()
    assert outcome.result == "aborted", outcome
    assert "--apply-busy-nodes is off" in outcome.reason
    assert mm.applied == []
    obj = await read_node(api, "seed")
    assert taints(obj) == [] and obj["metadata"]["labels"][keys.LABEL_CONFIG] == "seed-layout"


async def test_a_kept_pod_replaced_under_its_name_during_the_change_fails_the_run(
    server: VersionedEmulator, api: k8s.ApiClient,
) -> None:
    """A kept pod that fails during the change and is made again by its controller (a
    StatefulSet's: the same name, a new uid) was reported as "deleted meanwhile, not
    checked", and the run as a success (an outside check)."""
    seed(server)

    def replace() -> None:
        server.objects[PODS, "t", "r3"].delete()
        again = runner("r3")
        again["metadata"]["uid"] = "uid-t-r3-again"
        server.objects[PODS, "t", "r3"] = again

    server.after(NODES, "seed", lambda d: isinstance(d, dict) and keys.LABEL_CONFIG in (
        (d.get("metadata") or {}).get("labels") or {}), replace)
    (outcome,), _ = await apply_once(api)
    assert outcome.result == "failed", outcome
    assert "t/r3 was replaced by a new pod (uid uid-t-r3-again)" in outcome.reason
    assert taints(await read_node(api, "seed")) == [keys.TAINT_RELAYOUT]
