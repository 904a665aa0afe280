"""The decision as a pure function: profile choice, patch shape, affinity, warnings, denials."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import pytest
import webhook_scenery as s

from migfit import profiles, requests
from migfit.webhook import decision, view

SUPPLY = s.supply_of(s.make_cluster())


def decide(pod: dict[str, Any], supply: view.Supply = SUPPLY,
           policy: decision.Policy = s.POLICY) -> decision.Verdict:
    return decision.decide_pod(pod, supply=supply, policy=policy)


def applied(pod: dict[str, Any], verdict: decision.Verdict) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(pod, list(verdict.patch))
    return result


def assert_extended_requests_equal_limits(pod: dict[str, Any]) -> None:
    """Kubernetes' rule for non-overcommittable resources (WIRE.md §2.4)."""
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        limits, reqs = res.get("limits") or {}, res.get("requests") or {}
        for name in set(limits) | set(reqs):
            if "/" in name:
                assert limits.get(name) == reqs.get(name), (c["name"], name)


@pytest.mark.parametrize(("memory", "profile"), [
    ("8Gi", "1g.10gb"),
    ("9728Mi", "1g.10gb"),
    ("10Gi", "2g.20gb"),  # 9728 MiB < 10 GiB: the name is nominal
    ("12Gi", "2g.20gb"),
    ("12G", "2g.20gb"),
    ("19968Mi", "2g.20gb"),
    ("30Gi", "3g.40gb"),
    ("1Mi", "1g.10gb"),
])
def test_smallest_advertised_profile_that_fits(memory: str, profile: str) -> None:
    verdict = decide(s.pod({requests.GPU_MEMORY: memory}))
    assert verdict.allowed and verdict.outcome == "patched"
    assert verdict.profiles == (profile,)
    pod = applied(s.pod({requests.GPU_MEMORY: memory}), verdict)
    res = pod["spec"]["containers"][0]["resources"]
    assert res == {"limits": {f"nvidia.com/mig-{profile}": "1"},
                   "requests": {f"nvidia.com/mig-{profile}": "1"}}
    assert pod["metadata"]["annotations"][requests.PROFILE] == profile
    record = requests.decode_decision(pod["metadata"]["annotations"][requests.DECISION])
    assert record["strategy"] == "mixed"
    assert record["containers"][0]["profile"] == profile
    assert record["containers"][0]["models"] == []
    # Only 1Mi in a 9.5Gi instance warns, and only about the rounding.
    rounding = [w for w in verdict.warnings if f"rounded up to {profile}" in w]
    assert len(verdict.warnings) == len(rounding) == (1 if memory == "1Mi" else 0)


def test_more_than_the_largest_profile_is_denied_naming_it() -> None:
    verdict = decide(s.pod({requests.GPU_MEMORY: "100Gi"}))
    assert not verdict.allowed and verdict.code == 403
    assert "7g.80gb" in verdict.message and "A100-80GB" in verdict.message
    assert "100Gi" in verdict.message and "at most 79Gi" in verdict.message
    # More than a whole A100-80GB too: no whole GPU is offered, and 1e100 bytes are not
    # spelled out in 84 digits.
    assert "split the work over several GPUs" in verdict.message
    assert "use a whole GPU" not in verdict.message
    huge = decide(s.pod({requests.GPU_MEMORY: "1e100"}))
    assert not huge.allowed and "gpu-memory=1e100 is more than" in huge.message
    assert len(huge.message) < 400, huge.message
    fits_whole = decide(s.pod({requests.GPU_MEMORY: "79.5Gi"}))  # 7g.80gb holds 79Gi
    assert not fits_whole.allowed and "use a whole GPU (nvidia.com/gpu)" in fits_whole.message


def test_a_profile_nobody_advertises_is_patched_with_a_warning() -> None:
    verdict = decide(s.pod({requests.GPU_MEMORY: "50Gi"}))
    assert verdict.allowed and verdict.profiles == ("7g.80gb",)
    assert any("no node advertises 7g.80gb" in w for w in verdict.warnings)


def test_every_instance_in_use_warns() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"2g.20gb": 1}))
    busy = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "busy", "namespace": "ml", "uid": "u1"},
            "spec": {"nodeName": "gpu-a", "containers": [{"name": "c", "resources": {
                "limits": {"nvidia.com/mig-2g.20gb": "1"}}}]},
            "status": {"phase": "Running"}}
    c.apply("Pod", "ADDED", busy)
    verdict = decide(s.pod({requests.GPU_MEMORY: "12Gi"}), supply=s.supply_of(c))
    assert verdict.profiles == ("2g.20gb",)
    assert any("every 2g.20gb instance is in use" in w for w in verdict.warnings)


def test_rounding_up_a_lot_warns() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"3g.40gb": 2}))
    verdict = decide(s.pod({requests.GPU_MEMORY: "4Gi"}), supply=s.supply_of(c))
    assert verdict.profiles == ("3g.40gb",)
    assert any("rounded up to 3g.40gb" in w and "89% of its memory unused" in w
               for w in verdict.warnings)


def test_node_label_memory_wins_over_the_catalog_unless_told_otherwise() -> None:
    # A node reporting 10240 MiB for 1g.10gb (hypothetically) lets a 10Gi request fit it.
    c = s.make_cluster(s.mig_node("gpu-a", memory={"1g.10gb": 10240, "2g.20gb": 19968}))
    pod = s.pod({requests.GPU_MEMORY: "10Gi"})
    assert decide(pod, supply=s.supply_of(c)).profiles == ("1g.10gb",)
    catalog = decision.Policy(memory_match="catalog")
    assert decide(pod, supply=s.supply_of(c), policy=catalog).profiles == ("2g.20gb",)
    nominal = decision.Policy(memory_match="nominal")
    assert decide(pod, policy=nominal).profiles == ("1g.10gb",)


def test_compute_and_media_constraints() -> None:
    assert decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "2"})
                  ).profiles == ("2g.20gb",)
    assert decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "3"})
                  ).profiles == ("3g.40gb",)
    media = decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_MEDIA: "true"}))
    assert media.profiles == ("1g.10gb+me",)
    too_many = decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "8"}))
    assert not too_many.allowed and "at least 8 compute slices" in too_many.message
    # the fix names only what the pod asked for: no media annotation, no "remove" of it
    assert too_many.message.endswith(f"(the most is 7g); lower {requests.GPU_COMPUTE}")
    both = decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "8",
                         requests.GPU_MEDIA: "true"}))
    assert both.message.endswith(f"lower {requests.GPU_COMPUTE} or remove "
                                 f"{requests.GPU_MEDIA}")


def test_smallest_means_fewer_compute_slices_on_equal_memory() -> None:
    # 1g.20gb and 2g.20gb have the same memory; neither advertised -> the 1g is smaller.
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"1g.10gb": 7}))
    verdict = decide(s.pod({requests.GPU_MEMORY: "12Gi"}), supply=s.supply_of(c))
    assert verdict.profiles == ("1g.20gb",)


@pytest.mark.parametrize(("value", "hint"), [
    ("12GB", 'did you mean "G"'),
    ("0", "more than zero"),
    ("-1Gi", "more than zero"),
    ("lots", "not a Kubernetes quantity"),
    ("", "not a Kubernetes quantity"),
])
def test_bad_amounts_are_denied_with_what_to_change(value: str, hint: str) -> None:
    verdict = decide(s.pod({requests.GPU_MEMORY: value}))
    assert not verdict.allowed and hint in verdict.message
    assert requests.GPU_MEMORY in verdict.message


def test_per_container_keys_and_default_container() -> None:
    containers = [{"name": "sidecar", "image": "envoy"}, {"name": "main", "image": "x"},
                  {"name": "eval", "image": "y"}]
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.DEFAULT_CONTAINER: "main",
                 requests.GPU_MEMORY_PREFIX + "eval": "30Gi"}, containers=containers)
    verdict = decide(pod)
    assert verdict.profiles == ("1g.10gb", "3g.40gb")
    out = applied(pod, verdict)
    assert "resources" not in out["spec"]["containers"][0]
    assert out["spec"]["containers"][1]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert out["spec"]["containers"][2]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert out["metadata"]["annotations"][requests.PROFILE] == "1g.10gb,3g.40gb"
    # The per-container key overrides the pod-wide one for its container.
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_MEMORY_PREFIX + "sidecar": "12Gi"},
                containers=containers)
    assert decide(pod).profiles == ("2g.20gb",)


def test_a_key_naming_no_container_is_denied() -> None:
    verdict = decide(s.pod({requests.GPU_MEMORY_PREFIX + "mian": "8Gi"}))
    assert not verdict.allowed
    assert "names no container" in verdict.message and "main" in verdict.message


def test_a_container_with_other_gpu_resources_is_denied() -> None:
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}, containers=containers))
    assert not verdict.allowed and "already requests nvidia.com/gpu" in verdict.message
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "2"}}}]
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}, containers=containers))
    assert not verdict.allowed and "already requests nvidia.com/mig-1g.10gb" in verdict.message
    # a value that is not a quantity string is shown as the pod's JSON has it, not Python's
    containers = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": {"a": 1}}}}]
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}, containers=containers))
    assert 'already requests nvidia.com/gpu: {"a": 1};' in verdict.message


def test_existing_resources_are_kept_and_missing_parents_created() -> None:
    containers = [
        {"name": "main", "resources": {"limits": {"cpu": "2", "memory": "8Gi"}}},
        {"name": "other", "resources": {}},
        {"name": "third"},
    ]
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_MEMORY_PREFIX + "other": "8Gi",
                 requests.GPU_MEMORY_PREFIX + "third": "8Gi"}, containers=containers)
    out = applied(pod, decide(pod))
    main = out["spec"]["containers"][0]["resources"]
    assert main == {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/mig-1g.10gb": "1"},
                    "requests": {"nvidia.com/mig-1g.10gb": "1"}}
    assert_extended_requests_equal_limits(out)


def test_idempotent_under_reinvocation() -> None:
    pod = s.pod({requests.GPU_MEMORY: "12Gi"})
    once = applied(pod, decide(pod))
    again = decide(once)
    assert again.allowed and again.outcome == "unchanged" and again.patch == ()
    # Even when the cluster changed in between: the recorded decision stands.
    other = s.supply_of(s.make_cluster(s.mig_node("gpu-z", allocatable={"3g.40gb": 2})))
    assert decide(once, supply=other).patch == ()


@pytest.mark.parametrize("moved", ["prepended", "default-container"])
def test_a_reinvocation_keeps_the_container_after_another_webhook_moved_the_main_one(
        moved: str) -> None:
    """A webhook called after migfit prepends a container (or names another one with
    kubectl's default-container annotation); kube-apiserver calls migfit again. The pod-wide
    request stays with the container that has its instance: the pod asked for two."""
    pod = s.pod({requests.GPU_MEMORY: "12Gi"}, containers=[{"name": "app", "image": "x"}])
    once = applied(pod, decide(pod))
    if moved == "prepended":
        once["spec"]["containers"].insert(0, {"name": "proxy", "image": "proxy"})
    else:
        once["spec"]["containers"].append({"name": "proxy", "image": "proxy"})
        once["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] = "proxy"
    again = decide(once)
    assert again.allowed and again.patch == (), again.patch
    out = applied(once, again)
    held = {c["name"]: c.get("resources") for c in out["spec"]["containers"]}
    assert held["proxy"] is None and "nvidia.com/mig-2g.20gb" in held["app"]["limits"], held


def test_a_stale_decision_of_ours_is_replaced() -> None:
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    once = applied(pod, decide(pod))
    once["metadata"]["annotations"][requests.GPU_MEMORY] = "30Gi"
    out = applied(once, decide(once))
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-3g.40gb": "1"}, "requests": {"nvidia.com/mig-3g.40gb": "1"}}


def test_pods_without_the_annotation_are_untouched() -> None:
    verdict = decide(s.pod({"team": "ml"}))
    assert verdict.allowed and verdict.outcome == "skipped" and verdict.patch == ()
    verdict = decide(s.pod({requests.GPU_COMPUTE: "2"}))
    assert verdict.patch == () and "no effect" in verdict.warnings[0]


@pytest.mark.parametrize("spec", [None, {}, {"containers": "nope"}, {"containers": [{}]}])
def test_pods_without_the_annotation_are_allowed_whatever_their_spec(spec: Any) -> None:
    pod = s.pod({"team": "ml"})
    pod["spec"] = spec
    verdict = decide(pod)
    assert verdict.allowed and verdict.outcome == "skipped" and verdict.patch == ()


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_other_operations_are_ignored(operation: str) -> None:
    review = s.review(s.pod({requests.GPU_MEMORY: "8Gi"}), operation=operation)
    verdict = decision.decide_review(review["request"], supply=SUPPLY, policy=s.POLICY)
    assert verdict.allowed and verdict.outcome == "ignored" and verdict.patch == ()


def single_cluster() -> view.Supply:
    return s.supply_of(s.make_cluster(
        s.mig_node("gpu-s1", strategy="single", allocatable={"2g.20gb": 3}),
        s.mig_node("gpu-s2", strategy="single", allocatable={"1g.10gb": 7}),
    ))


def test_single_strategy_requests_a_gpu_with_product_affinity() -> None:
    pod = s.pod({requests.GPU_MEMORY: "12Gi"})
    verdict = decide(pod, supply=single_cluster())
    out = applied(pod, verdict)
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{
        "key": "nvidia.com/gpu.product", "operator": "In",
        "values": ["NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"]}]}]
    record = json.loads(out["metadata"]["annotations"][requests.DECISION])
    assert record["strategy"] == "single"
    assert record["containers"][0]["resource"] == "nvidia.com/gpu"
    assert decide(out, supply=single_cluster()).patch == ()


def test_single_strategy_affinity_is_added_to_every_existing_term() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
        ]}}, "podAntiAffinity": {}}
    pod = s.pod({requests.GPU_MEMORY: "12Gi"}, affinity=affinity)
    out = applied(pod, decide(pod, supply=single_cluster()))
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    want = {"key": "nvidia.com/gpu.product", "operator": "In",
            "values": ["NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"]}
    assert terms[0]["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["a"]}, want]
    assert terms[1]["matchExpressions"] == [want]
    assert terms[1]["matchFields"][0]["key"] == "metadata.name"
    assert out["spec"]["affinity"]["podAntiAffinity"] == {}
    assert decide(out, supply=single_cluster()).patch == ()


def test_empty_terms_keep_matching_nothing() -> None:
    """A null or empty nodeSelectorTerm matches no node; adding the product expression to it
    would widen the pod's placement, and RFC 6902 ``add`` at an array index inserts, which
    would shift every later term's path."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            None,
            {},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        ]}}}
    pod = s.pod({requests.GPU_MEMORY: "12Gi"}, affinity=affinity)
    out = applied(pod, decide(pod, supply=single_cluster()))
    terms = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[:2] == [None, {}]
    assert terms[2]["matchExpressions"] == [
        {"key": "zone", "operator": "In", "values": ["a"]},
        {"key": "nvidia.com/gpu.product", "operator": "In",
         "values": ["NVIDIA-A100-SXM4-80GB-MIG-2g.20gb"]}]
    assert decide(out, supply=single_cluster()).patch == ()


def test_model_affinity_when_the_profile_fits_on_some_models_only() -> None:
    # 1g.10gb is 9728 MiB on an A100-80GB and 9984 MiB on an H100-80GB: 9800Mi fits only H100.
    c = s.make_cluster(
        s.mig_node("gpu-a", allocatable={"1g.10gb": 7}),
        s.mig_node("gpu-h", product=s.H100_PRODUCT, allocatable={"1g.10gb": 7},
                   memory={"1g.10gb": 9984}),
    )
    pod = s.pod({requests.GPU_MEMORY: "9800Mi"})
    verdict = decide(pod, supply=s.supply_of(c))
    assert verdict.profiles == ("1g.10gb",)
    out = applied(pod, verdict)
    expr = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"]
    assert expr == [{"key": "nvidia.com/gpu.product", "operator": "In",
                     "values": [s.H100_PRODUCT]}]
    record = json.loads(out["metadata"]["annotations"][requests.DECISION])
    assert record["containers"][0]["models"] == ["H100-80GB"]
    # 8Gi fits 1g.10gb on both: no affinity, any model.
    plain = decide(s.pod({requests.GPU_MEMORY: "8Gi"}), supply=s.supply_of(c))
    assert not any("affinity" in op["path"] for op in plain.patch)
    assert plain.record is not None and plain.record["containers"][0]["models"] == []


def test_without_a_cluster_view_decide_from_the_configured_models() -> None:
    supply = view.Supply.from_catalog((profiles.builtin().get("A100-80GB"),))
    verdict = decide(s.pod({requests.GPU_MEMORY: "12Gi"}), supply=supply)
    assert verdict.allowed and verdict.profiles == ("1g.20gb",)
    assert any("no cluster view" in w for w in verdict.warnings)
    none = decide(s.pod({requests.GPU_MEMORY: "12Gi"}), supply=view.Supply.from_catalog(()),
                  policy=decision.Policy())
    assert not none.allowed and "--gpu-models" in none.message


def test_unschedulable_nodes_do_not_count_as_advertising() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", unschedulable=True),
                       s.mig_node("gpu-b", allocatable={"3g.40gb": 2}))
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi"}), supply=s.supply_of(c))
    assert verdict.profiles == ("3g.40gb",)


def test_supply_tracker_follows_node_changes() -> None:
    c = s.make_cluster(s.mig_node("gpu-a", allocatable={"3g.40gb": 2}))
    tracker = view.SupplyTracker(c)
    assert set(tracker.supply().offers) == {("A100-80GB", "3g.40gb")}
    c.apply("Node", "MODIFIED", s.mig_node("gpu-a", allocatable={"1g.10gb": 7}))
    assert set(tracker.supply().offers) == {("A100-80GB", "1g.10gb")}
    c.apply("Node", "ADDED", s.mig_node("gpu-h", product=s.H100_PRODUCT))
    assert tracker.supply().products[profiles.ModelId("H100-80GB")] == (s.H100_PRODUCT,)
    c.apply("Node", "DELETED", s.mig_node("gpu-h"))
    assert "H100-80GB" not in tracker.supply().products


def test_escape() -> None:
    assert decision.escape("nvidia.com/mig-1g.10gb") == "nvidia.com~1mig-1g.10gb"
    assert decision.escape("a~/b") == "a~0~1b"


def test_single_strategy_reinvocation_is_stable_across_models() -> None:
    supply = s.supply_of(s.make_cluster(
        s.mig_node("gpu-a", strategy="single", allocatable={"3g.40gb": 2}),
        s.mig_node("gpu-h", product=s.H100_PRODUCT, strategy="single",
                   allocatable={"3g.40gb": 2}, memory={"3g.40gb": 40448}),
    ))
    pod = s.pod({requests.GPU_MEMORY: "40300Mi"})  # fits 3g.40gb on the H100 only
    out = applied(pod, decide(pod, supply=supply))
    expr = out["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"]
    assert expr == [{"key": "nvidia.com/gpu.product", "operator": "In",
                     "values": [f"{s.H100_PRODUCT}-MIG-3g.40gb"]}]
    assert decide(out, supply=supply).patch == ()


def test_scheduler_name_is_set_for_pods_on_the_default_scheduler() -> None:
    import dataclasses

    policy = dataclasses.replace(s.POLICY, scheduler_name="migfit-scheduler")
    pod = s.pod({requests.GPU_MEMORY: "8Gi"})
    out = applied(pod, decide(pod, policy=policy))
    assert out["spec"]["schedulerName"] == "migfit-scheduler"
    assert decide(out, policy=policy).patch == ()  # idempotent
    mine = s.pod({requests.GPU_MEMORY: "8Gi"})
    mine["spec"]["schedulerName"] = "volcano"
    assert applied(mine, decide(mine, policy=policy))["spec"]["schedulerName"] == "volcano"


def test_media_profiles_use_the_device_plugin_resource_spelling() -> None:
    pod = s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_MEDIA: "true"})
    verdict = decide(pod)
    assert verdict.allowed and verdict.profiles == ("1g.10gb+me",)
    limits = applied(pod, verdict)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb.me": "1"}


def test_a_guessed_gpu_key_is_ignored_with_a_warning() -> None:
    """migfit.io/gpu-count and gpu-model are not migfit's keys: they were dropped without a
    word, and the user got one instance of any model."""
    verdict = decide(s.pod({requests.GPU_MEMORY: "8Gi", "migfit.io/gpu-count": "2",
                            "migfit.io/gpu-model": "A100-80GB"}))
    assert verdict.allowed
    assert any(w.startswith("migfit.io/gpu-count, migfit.io/gpu-model: not read by migfit")
               for w in verdict.warnings), verdict.warnings
    alone = decide(s.pod({"migfit.io/gpu-count": "2"}))
    assert any("migfit.io/gpu-count: not read by migfit" in w for w in alone.warnings), \
        alone.warnings
    known = decide(s.pod({requests.GPU_MEMORY: "8Gi", requests.GPU_COMPUTE: "1"}))
    assert not any("not read by migfit" in w for w in known.warnings)


def test_a_request_beyond_every_gpu_names_the_largest_gpu_and_a_capped_amount() -> None:
    """The whole-GPU figure is the GPU's memory in all (it read "the most is …" beside a
    different "at most …" for the profile), and an amount beyond what a quantity holds is
    said to be (it was shown as 8Ei)."""
    for value, shown in (("200Gi", "migfit.io/gpu-memory=200Gi is more"),
                         ("99999999999999999999999Ti",
                          "migfit.io/gpu-memory=99999999999999999999999Ti (more than 8Ei) is "
                          "more")):
        verdict = decide(s.pod({requests.GPU_MEMORY: value}))
        assert not verdict.allowed
        assert verdict.message.startswith(shown), verdict.message
        assert verdict.message.endswith(
            "; ask for at most 79Gi, or split the work over several GPUs: no GPU model in "
            "this cluster has that much memory (the largest GPU has 80Gi in all)"), \
            verdict.message


def test_warnings_name_each_container_whole() -> None:
    # Container names may be 63 characters (a DNS label); names that differ only at the end
    # must read differently in each container's warning, or the user cannot tell them apart.
    names = [f"container-with-a-rather-long-name-number-{i:02}-abcdefghij" for i in range(3)]
    annotations = {requests.GPU_MEMORY_PREFIX + name: "1Mi" for name in names}
    containers = [{"name": name, "image": "registry.example/train:1"} for name in names]
    verdict = decide(s.pod(annotations, containers=containers))
    assert verdict.allowed
    # One warning for the three (they differ only in the name), naming each whole.
    (rounding,) = [w for w in verdict.warnings if "was rounded up to" in w]
    assert rounding.split(": ", 1)[0].split(", ") == names
    assert rounding.endswith(": 1Mi was rounded up to 1g.10gb (9.5Gi): 99% of its memory "
                             "unused")
    assert all(len(w) <= 256 for w in verdict.warnings)
