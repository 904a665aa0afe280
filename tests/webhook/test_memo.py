"""The decision memo (issue 17 item 4): a repeated request against the same supply is
answered from ready bytes (only the uid changes), never after the supply changed, never for a
request that differs in anything the decision reads, and never beyond its capacity."""

from __future__ import annotations

import copy
import json
from typing import Any

import webhook_scenery as s
from hypothesis import HealthCheck, given, settings
from test_properties import reviews

from migfit import cluster, requests
from migfit.webhook import memo, reading, server, view


def state(c: cluster.Cluster | None = None, capacity: int = memo.DEFAULT_CAPACITY
          ) -> server.State:
    c = s.make_cluster() if c is None else c
    app = server.make_app(server.Settings(policy=s.POLICY), c, tracker=view.SupplyTracker(c),
                          decisions=memo.DecisionMemo(capacity))
    return app[server.STATE]


def ask(st: server.State, review: dict[str, Any]) -> dict[str, Any]:
    status, body = server.answer_bytes(json.dumps(review).encode(), state=st)
    assert status == 200
    out: dict[str, Any] = json.loads(body)
    return out


def pod(**annotations: str) -> dict[str, Any]:
    return s.pod({requests.GPU_MEMORY: "12Gi", **annotations})


def test_a_hit_answers_the_same_with_the_new_uid() -> None:
    st = state()
    first = ask(st, s.review(pod()))
    again = s.review(pod())
    second = ask(st, again)
    # The same bytes but the uid: answered from the exact table, without being parsed.
    assert (st.exact.stats.hits, st.memo.stats.misses) == (1, 1)
    assert second["response"]["uid"] == again["request"]["uid"] != first["response"]["uid"]
    first["response"]["uid"] = second["response"]["uid"]
    assert first == second
    # Equal to the review encoded from scratch.
    assert second == server.review_response(again["request"]["uid"], st.memo.get(
        reading.memo_key(again["request"]["object"]), st.supply()).verdict)  # type: ignore[union-attr]


def test_after_a_supply_change_the_memo_is_not_reused() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 1}))
    st = state(c)
    before = ask(st, s.review(s.pod({requests.GPU_MEMORY: "8Gi"})))
    assert not any("in use" in w for w in before["response"].get("warnings", []))
    # The only 1g.10gb is taken: the next identical request must see it.
    c.apply("Pod", "ADDED", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "busy", "namespace": "ml", "uid": "uid-busy"},
        "spec": {"nodeName": "gpu-a", "containers": [{"name": "c", "resources": {
            "limits": {"nvidia.com/mig-1g.10gb": "1"}}}]},
        "status": {"phase": "Running"}})
    after = ask(st, s.review(s.pod({requests.GPU_MEMORY: "8Gi"})))
    assert st.memo.stats.hits == 0 and st.memo.stats.resets == 1
    assert st.exact.stats.hits == 0 and st.exact.stats.resets == 1
    assert any("every 1g.10gb instance is in use" in w for w in after["response"]["warnings"])


def test_a_cluster_change_the_decision_does_not_read_keeps_the_memo() -> None:
    c = s.make_cluster()
    st = state(c)
    ask(st, s.review(pod()))
    c.apply("Pod", "ADDED", {  # a pending pod without GPU: the supply's content is unchanged
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "ml", "uid": "uid-web"},
        "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}})
    ask(st, s.review(pod()))
    assert st.exact.stats.hits == 1


def test_requests_that_differ_in_what_the_decision_reads_are_told_apart() -> None:
    st = state()
    plain = pod()
    has_gpu = copy.deepcopy(plain)
    has_gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    # (A required node affinity limits the pod's nodes: never memoised, test_pod_placement.)
    has_affinity = s.pod({requests.GPU_MEMORY: "12Gi"}, affinity={"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}})
    renamed = s.pod({requests.GPU_MEMORY: "12Gi"}, containers=[{"name": "other"}])
    other_value = pod(**{requests.GPU_COMPUTE: "2"})
    numbered = copy.deepcopy(has_gpu)
    numbered["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    answers = [ask(st, s.review(p))["response"] for p in
               (plain, has_gpu, has_affinity, renamed, other_value, numbered)]
    assert st.memo.stats.hits == 0 and len(st.memo) == 6
    assert answers[0]["allowed"] and not answers[1]["allowed"]
    assert answers[3]["patch"] != answers[0]["patch"]  # the record names the container
    # Fields the decision does not read share one entry: CPU, images, env, labels.
    other = copy.deepcopy(plain)
    other["spec"]["containers"][0].update(image="x:2", env=[{"name": "A", "value": "b"}])
    other["metadata"]["labels"] = {"app": "x"}
    other["metadata"]["annotations"]["example.com/note"] = "hello"
    assert ask(st, s.review(other))["response"]["patch"] == answers[0]["patch"]
    assert st.memo.stats.hits == 1
    small, large = copy.deepcopy(plain), copy.deepcopy(plain)
    small["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    large["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "8", "memory": "9Gi"}}
    first = ask(st, s.review(small))["response"]
    assert ask(st, s.review(large))["response"]["patch"] == first["patch"]
    assert st.memo.stats.hits == 2
    # An init container's own GPU resource is warned about: told apart from one without.
    warm, warm_gpu = copy.deepcopy(plain), copy.deepcopy(plain)
    warm["spec"]["initContainers"] = [{"name": "warm", "image": "x"}]
    warm_gpu["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": {
        "limits": {"nvidia.com/gpu": "1"}}}]
    assert "warnings" not in ask(st, s.review(warm))["response"]
    assert "init container 'warm'" in ask(st, s.review(warm_gpu))["response"]["warnings"][0]
    assert "warnings" not in ask(st, s.review(warm))["response"]


def test_the_memo_is_bounded_and_forgets_the_least_recent() -> None:
    st = state(capacity=2)
    for amount in ("8Gi", "12Gi", "30Gi"):
        ask(st, s.review(s.pod({requests.GPU_MEMORY: amount})))
    assert len(st.memo) == 2 and st.memo.stats.evictions == 1
    ask(st, s.review(s.pod({requests.GPU_MEMORY: "8Gi"})))  # forgotten: decided again
    assert st.memo.stats.hits == 0
    assert len(st.exact) == 2 and st.exact.stats.hits == 0
    none = state(capacity=0)
    ask(none, s.review(pod()))
    ask(none, s.review(pod()))
    assert len(none.memo) == 0 and none.memo.stats.hits == 0
    assert len(none.exact) == 0 and none.exact.stats.hits == 0


FRESH = state(capacity=0)
MEMO = state()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reviews())
def test_memoised_answers_equal_fresh_ones(review: Any) -> None:
    body = json.dumps(review).encode()
    for _ in range(2):  # a miss, then (when the request can be keyed) a hit
        got = server.answer_bytes(body, state=MEMO)
        fresh = server.answer_bytes(body, state=FRESH)
        assert got == fresh


def test_the_exact_table_takes_only_the_same_bytes_but_the_uid() -> None:
    st = state()
    review = s.review(pod())
    first = ask(st, review)
    # Another field than the uid differs (who asks): not the same bytes, so the exact table
    # misses; the decision memo, which keys on what the decision reads, answers the same.
    other = copy.deepcopy(review)
    other["request"]["userInfo"] = {"username": "system:serviceaccount:kube-system:job"}
    ask(st, other)
    assert (st.exact.stats.hits, st.memo.stats.hits) == (0, 1)
    # The same bytes spelled otherwise (escaped, pretty): read the usual way, same answer.
    escaped = json.dumps(review).replace('"AdmissionReview"', '"Admission\\u0052eview"', 1)
    for body in (escaped.encode(), json.dumps(review, indent=2).encode()):
        status, out = server.answer_bytes(body, state=st)
        assert status == 200
        assert json.loads(out)["response"] == first["response"]
    assert st.exact.stats.hits == 0
    # dryRun is part of the key and of the metrics' labels.
    dry = copy.deepcopy(review)
    dry["request"]["dryRun"] = True
    for _ in range(2):
        ask(st, dry)
    assert st.exact.stats.hits == 1
    samples = {(x.labels["dry_run"], x.labels["outcome"]): x.value
               for x in st.metrics.admissions.collect()[0].samples if x.name.endswith("_total")}
    assert samples[("true", "patched")] == 2 and samples[("false", "patched")] == 4


def test_the_exact_table_keeps_no_long_request() -> None:
    st = state()
    big = pod()
    big["metadata"]["labels"] = {f"label-{i}": "x" * 60 for i in range(400)}  # > 16 KiB
    for _ in range(2):
        ask(st, s.review(big))
    assert len(st.exact) == 0 and st.memo.stats.hits == 1


def test_a_review_that_is_no_review_is_refused_as_before_whatever_the_table_holds() -> None:
    st = state()
    review = s.review(pod())
    ask(st, review)
    for broken, status in ((dict(review, apiVersion="admission.k8s.io/v1beta1"), 400),
                           ({**review, "request": {**review["request"], "uid": ""}}, 400),
                           ({**review, "request": {**review["request"], "uid": 7}}, 400)):
        got, out = server.answer_bytes(json.dumps(broken).encode(), state=st)
        assert got == status, broken
        assert "error" in json.loads(out)


def test_an_answer_from_the_exact_table_is_logged_like_any(
        caplog: Any) -> None:
    import logging

    st = state()
    review = s.review(pod())
    with caplog.at_level(logging.INFO, logger="migfit.webhook.server"):
        ask(st, review)
        ask(st, review)
    assert st.exact.stats.hits == 1
    lines = [r.getMessage() for r in caplog.records]
    namespace = review["request"]["namespace"]
    name = review["request"].get("name") or "(generated)"
    assert len(lines) == 2 and lines[0] == lines[1]
    assert lines[0].startswith(f"patched {namespace}/{name}: ")
