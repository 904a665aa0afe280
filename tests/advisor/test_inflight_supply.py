"""A node being re-laid out counts as supply: a waiting pod its target layout will serve is
not advised a second node (defect D3), and is reported as awaiting that node, not unserved."""

from __future__ import annotations

from typing import Any

from advisor_scene import T0, build, node, pod
from migmanager_sim import CONFIG

from migfit import advisor, keys
from migfit.commands import advise as advise_cli

NOW = T0 + 600
EARLIER = "2023-11-14T22:10:00Z"  # before advisor_scene.STAMP: a heavier (older) pod


def _moving(config: str | None = "all-1g.10gb", **kw: Any) -> dict[str, Any]:
    """Node ``a``, laid out 2 × 3g.40gb, while the MIG Manager applies ``config``."""
    return node("a", alloc={"3g.40gb": 2}, config=config, state="pending", **kw)


def _idle(**kw: Any) -> dict[str, Any]:
    return node("b", alloc={"3g.40gb": 2}, config="all-3g.40gb", **kw)


def _advise(*objects: dict[str, Any]) -> advisor.Advice:
    return advisor.advise(build(*objects), now=NOW, config=CONFIG)


def test_a_pod_the_node_being_relaid_out_serves_is_advised_no_other_node() -> None:
    c = build(_moving(), _idle(), pod("p", "1g.10gb"))
    advice = advisor.advise(c, now=NOW, config=CONFIG)
    assert advice.recommendations == ()
    assert advice.awaiting == {"default/p": "a"}
    assert advice.unserved == ()
    assert [w.key for w in advice.waiting] == ["default/p"]
    doc = advice.to_json()
    assert doc["awaiting"] == {"default/p": "a"} and doc["unserved"] == []
    assert set(doc) == {"recommendations", "waiting", "unserved", "awaiting", "cooling"}
    text = advisor.explain(c, "default", "p", now=NOW, config=CONFIG)
    assert text.endswith(
        "Node a is being re-laid out (nvidia.com/mig.config=all-1g.10gb) to a layout that "
        "will serve it: it can run there once the change is done (migfit status names the "
        "node's state). No other node needs re-laying out for it."), text
    summary = advise_cli.render_text(advice, details=False)
    assert ("1 waiting pod(s) can run on a node being re-laid out now once its change is done, "
            "so no other node is re-laid out for them: default/p (a)") in summary
    # Not also counted among the pods no node can give an instance (a review).
    assert summary.startswith("0 pod(s) wait for a MIG instance no node can give them"), summary


def test_a_target_without_the_profile_serves_nothing() -> None:
    advice = _advise(_moving("all-3g.40gb"), _idle(), pod("p", "1g.10gb"))
    assert [r.node for r in advice.recommendations] == ["b"]
    assert advice.awaiting == {}


def test_a_node_the_pod_cannot_use_once_done_serves_nothing() -> None:
    taint = {"key": "team", "value": "x", "effect": "NoSchedule"}
    cases = [
        # its nodeSelector names b's pool, not a's
        (_moving(labels={"pool": "x"}), _idle(labels={"pool": "y"}),
         pod("p", "1g.10gb", spec={"nodeSelector": {"pool": "y"}})),
        # a taint it does not tolerate (not migfit's own re-layout taint)
        (_moving(taints=[taint]), _idle(), pod("p", "1g.10gb")),
        # no cpu room for it on a
        (_moving(cpu="1"), _idle(), pod("p", "1g.10gb", cpu="2")),
        # cordoned: it takes no pod once done either
        (_moving(unschedulable=True), _idle(), pod("p", "1g.10gb")),
    ]
    for objects in cases:
        advice = _advise(*objects)
        assert [r.node for r in advice.recommendations] == ["b"], objects[0]
        assert advice.awaiting == {} and advice.unserved == (), objects[0]


def test_an_unknown_target_counts_as_nothing() -> None:
    for moving, config in ((_moving("no-such-config"), CONFIG), (_moving(None), CONFIG),
                           (_moving(), None)):
        advice = advisor.advise(build(moving, _idle(), pod("p", "1g.10gb")), now=NOW,
                                config=config)
        assert [r.node for r in advice.recommendations] == ["b"]
        assert advice.awaiting == {}


def test_two_waiting_pods_and_the_target_serves_one() -> None:
    # Room on a for one pod's cpu: the heavier (older) one awaits a, b is advised for the
    # other.
    advice = _advise(_moving(cpu="4"), _idle(), pod("old", "1g.10gb", cpu="3", since=EARLIER),
                     pod("new", "1g.10gb", cpu="3"))
    assert advice.awaiting == {"default/old": "a"}
    assert [(r.node, r.unblocks) for r in advice.recommendations] == [("b", ("default/new",))]
    assert advice.unserved == ()
    # A target of one profile serves the pod of that profile only.
    advice = _advise(_moving(), _idle(), pod("small", "1g.10gb"), pod("big", "7g.80gb"))
    assert advice.awaiting == {"default/small": "a"}
    assert [(r.node, r.unblocks) for r in advice.recommendations] == [("b", ("default/big",))]


def test_instances_its_bound_pods_hold_are_not_offered() -> None:
    # a is laid out 7 × 1g.10gb and re-applies that config; a pod holds 6, then 7, of them.
    for held, awaits in ((6, {"default/p": "a"}), (7, {})):
        moving = node("a", alloc={"1g.10gb": 7}, config="all-1g.10gb", state="pending")
        running = pod("r", "1g.10gb", node="a", count=held, phase="Running")
        advice = _advise(moving, running, _idle(), pod("p", "1g.10gb"))
        assert advice.awaiting == awaits, held
        assert [r.node for r in advice.recommendations] == ([] if awaits else ["b"]), held


def test_the_extenders_record_names_the_target_before_the_label_does() -> None:
    # The apply mode taints the node and records the target before it sets the label: the
    # label still names the old config, the record the new one. Its own taint goes once the
    # change is done, so a pod need not tolerate it.
    record = keys.RelayoutRecord(state=keys.RelayoutState.TAINTED, target="migfit-abc",
                                 expected={"1g.10gb": 7})
    tainted = node("a", alloc={"3g.40gb": 2}, config="all-3g.40gb",
                   taints=[keys.relayout_taint()],
                   annotations={keys.ANNOTATION_RELAYOUT: keys.encode_relayout(record)})
    c = build(tainted, _idle(), pod("p", "1g.10gb"))
    advice = advisor.advise(c, now=NOW, config=CONFIG)
    assert advice.awaiting == {"default/p": "a"} and advice.recommendations == ()
    assert "Node a is being re-laid out (nvidia.com/mig.config=migfit-abc)" in \
        advisor.explain(c, "default", "p", now=NOW, config=CONFIG)
    # A failed re-layout serves nothing.
    failed = node("a", alloc={"3g.40gb": 2}, config="all-3g.40gb",
                  taints=[keys.relayout_taint()],
                  annotations={keys.ANNOTATION_RELAYOUT: keys.encode_relayout(
                      record.but(state=keys.RelayoutState.FAILED))})
    advice = _advise(failed, _idle(), pod("p", "1g.10gb"))
    assert advice.awaiting == {} and [r.node for r in advice.recommendations] == ["b"]
