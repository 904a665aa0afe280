"""Defragmentation advice (``migfit advise --defrag``): which busy nodes to drain, exactly which
pods move where, within their PodDisruptionBudgets and the share bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import scene

from migfit import advisor, builders, cli, cluster, decoding, defrag, migparted, records, snapshots


def _defrag(objects: list[dict[str, object]], share: float = 1.0) -> defrag.Defrag:
    state = cluster.Cluster()
    cluster.load_objects(state, objects)
    pods = [o for o in objects if o["kind"] == "Pod"]
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    settings = advisor.Settings(allow_disruptive=False, busy_nodes=True)
    advice = advisor.advise(state, now=scene.NOW, settings=settings)
    assert advice.unserved == ("ml/big",)
    return defrag.advise_defrag(state, advice, decoding.disruption(pods, pdbs),
                                max_move_share=share)


def test_a_drain_lists_exactly_the_pods_that_move_and_where() -> None:
    result = _defrag(scene.objects())
    (drain,) = result.drains
    assert drain.node == "gpu-a"
    assert [(m.pod, dict(m.profiles), m.to, m.pdb) for m in drain.moves] == [
        ("ml/train-a", {"3g.40gb": 1}, "gpu-b", "ml/train"),
        ("ml/train-b", {"3g.40gb": 1}, "gpu-b", "ml/train")]
    assert drain.pdbs == (defrag.PdbUse(pdb="ml/train", allowed=2, used=2),)
    rec = drain.recommendation
    assert rec.unblocks == ("ml/big",)
    assert rec.disrupts == ("ml/train-a", "ml/train-b") and rec.running == ()
    assert [g.after for g in rec.gpus] == [("7g.80gb",), ("3g.40gb", "3g.40gb")]
    assert result.moved == 2 and result.bound_pods == 3 and result.unserved == ()


def test_a_pdb_allowing_no_disruption_blocks_the_drain() -> None:
    result = _defrag(scene.objects(train_allowed=0))
    assert result.drains == ()
    assert ("gpu-a", "PodDisruptionBudget ml/train allows 0 disruption(s) "
            "(status.disruptionsAllowed); 0 already advised") in \
        [(b.node, b.reason) for b in result.blocked]
    assert result.unserved == ("ml/big",)


def test_a_pdb_allowing_one_of_two_moves_blocks_the_drain() -> None:
    result = _defrag(scene.objects(train_allowed=1))
    assert result.drains == ()
    assert any(b.node == "gpu-a" and "allows 1 disruption" in b.reason for b in result.blocked)


def test_a_bare_pod_never_moves() -> None:
    result = _defrag(scene.objects(train_owner=None))
    assert result.drains == ()
    reasons = {b.node: b.reason for b in result.blocked}
    assert reasons["gpu-a"] == "pod ml/train-a has no controller: a bare pod never moves"
    assert "PodDisruptionBudget ml/db allows 0" in reasons["gpu-b"]


def test_a_daemonset_pod_never_moves() -> None:
    result = _defrag(scene.objects(train_owner=("DaemonSet", "agent")))
    assert result.drains == ()
    assert {b.node: b.reason for b in result.blocked}["gpu-a"] == (
        "pod ml/train-a: its DaemonSet re-creates it on the same node")


@pytest.mark.parametrize(("share", "drained"), [(1.0, 1), (0.7, 1), (0.5, 0), (0.1, 0)])
def test_the_share_bound_is_honoured(share: float, drained: int) -> None:
    # 3 bound MIG pods: floor(share × 3) moves at most; gpu-a's drain moves 2.
    result = _defrag(scene.objects(), share)
    assert len(result.drains) == drained
    assert result.max_moves == int(share * 3)
    assert result.moved <= result.max_moves
    if not drained:
        assert {b.node: b.reason for b in result.blocked}["gpu-a"].startswith(
            f"moving its 2 pod(s) would pass the bound of {result.max_moves} move(s)")


def test_no_free_instance_elsewhere_blocks_the_drain() -> None:
    objects = scene.objects()
    objects += [scene.pod(f"fill-{i}", "3g.40gb", node="gpu-b") for i in range(3)]
    state_result = _defrag(objects)
    assert state_result.drains == ()
    assert {b.node: b.reason for b in state_result.blocked}["gpu-a"] == (
        "pod ml/train-a (1 × 3g.40gb): no free instance on another node that can take it")


def test_a_snapshot_keeps_pdbs_and_pod_facts(tmp_path: Path) -> None:
    path = scene.write(tmp_path / "c.yaml", scene.objects())
    plain = snapshots.read(path)
    assert plain.disruption is None
    snap = snapshots.read(path, disruption=True)
    assert snap.disruption is not None
    assert [p.key for p in snap.disruption.pdbs] == ["ml/train", "ml/db"]
    train = snap.disruption.pdbs[0]
    assert train.selector == records.LabelSelector(match_labels=(("app", "train"),))
    assert (train.min_available, train.disruptions_allowed) == ("1", 2)
    assert sorted(snap.disruption.pods) == ["ml/db-0", "ml/train-a", "ml/train-b"]
    facts = snap.disruption.pods["ml/train-a"]
    assert facts.controller == ("ReplicaSet", "train-5d8f")
    assert dict(facts.labels) == {"app": "train"}


def test_a_malformed_pdb_names_the_item(tmp_path: Path) -> None:
    bad = scene.pdb("x", allowed=1, labels={"a": "b"})
    bad["spec"]["minAvailable"] = "lots"
    path = scene.write(tmp_path / "c.yaml", [*scene.objects(), bad])
    snapshots.read(path)  # ignored without --defrag
    with pytest.raises(Exception, match=r"item 9 \(PodDisruptionBudget ml/x\): "
                                        r"spec.minAvailable is 'lots'"):
        snapshots.read(path, disruption=True)


EXPECTED = """\
1 pod(s) wait for a MIG instance no node can give them; 0 re-layout(s) (0 safe, 0 disruptive) \
would unblock 0 of them.
1 waiting pod(s) no re-layout can serve now: ml/big
Defragmentation (advice only: migfit evicts nothing): 1 node(s) to drain, moving 2 of 3 bound \
MIG pod(s) (at most 2: --max-move-share 0.7).
drain node gpu-a (A100-80GB): move 2 pod(s), then -> migfit-f6b1519759 (custom config)
  move ml/train-a (3g.40gb) -> free instance on gpu-b (PDB ml/train)
  move ml/train-b (3g.40gb) -> free instance on gpu-b (PDB ml/train)
  PDB ml/train: allows 2 disruption(s), the advice uses 2
  unblocks: ml/big
  steps: add config migfit-f6b1519759 (printed by migfit advise --defrag --details) to the \
ConfigMap the ClusterPolicy's migManager.config.name names; kubectl cordon gpu-a; evict the pods \
above (the eviction API honours their PDBs); once no MIG pod runs there: kubectl label node \
gpu-a nvidia.com/mig.config=migfit-f6b1519759 \
--overwrite; after nvidia.com/mig.config.state=success: kubectl uncordon gpu-a
"""


def test_the_cli_on_a_snapshot_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = scene.write(tmp_path / "c.yaml", scene.objects())
    base = ["advise", "--cluster", str(path), "--now", str(scene.NOW)]
    assert cli.main([*base, "--defrag", "--max-move-share", "0.7"]) == 0
    assert capsys.readouterr().out == EXPECTED
    assert cli.main([*base, "--defrag", "--max-move-share", "0.7", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (drain,) = doc["defrag"]["drains"]
    assert drain["moves"] == [
        {"pod": "ml/train-a", "profiles": {"3g.40gb": 1}, "to": "gpu-b", "pdb": "ml/train"},
        {"pod": "ml/train-b", "profiles": {"3g.40gb": 1}, "to": "gpu-b", "pdb": "ml/train"}]
    assert drain["pdbs"] == [{"pdb": "ml/train", "disruptions_allowed": 2, "used": 2}]
    assert drain["recommendation"]["disrupts"] == ["ml/train-a", "ml/train-b"]
    assert drain["recommendation"]["target"] == "migfit-f6b1519759"
    assert doc["defrag"]["max_moves"] == 2 and doc["defrag"]["unserved"] == []
    # Off by default: the document is what it was.
    assert cli.main([*base, "-o", "json"]) == 0
    assert "defrag" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("share", ["0", "-0.5", "1.5"])
def test_a_bad_share_is_a_clear_error(tmp_path: Path, share: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = scene.write(tmp_path / "c.yaml", scene.objects())
    assert cli.main(["advise", "--cluster", str(path), "--defrag",
                     "--max-move-share", share]) == 2
    assert capsys.readouterr().err == (
        f"migfit: error: --max-move-share must be more than 0 and at most 1, got "
        f"{float(share):g}\n")


def test_a_drain_keeps_a_gpu_with_mig_disabled_as_it_is() -> None:
    """gpu-a has a third GPU running with MIG disabled (its config says so): the drain's
    plan gave it the 7g.80gb, and rendering the config then failed (`MIG is disabled
    there`) and took `migfit advise --defrag` down (a review). It stays as it is."""
    config = migparted.parse("version: v1\nmig-configs:\n  half:\n"
                             "  - devices: [0, 1]\n    mig-enabled: true\n"
                             "    mig-devices: {3g.40gb: 2}\n"
                             "  - devices: [2]\n    mig-enabled: false\n")
    objects = scene.objects()
    objects[0] = builders.node("gpu-a", labels=builders.mig_labels(
        product="NVIDIA-A100-SXM4-80GB", instances={"3g.40gb": 4}, gpus=3, config="half",
        config_state="success", count_labels=False),
        resources=builders.mig_resources({"3g.40gb": 4}, whole_gpus=1))
    state = cluster.Cluster()
    cluster.load_objects(state, objects)
    settings = advisor.Settings(allow_disruptive=False, busy_nodes=True)
    advice = advisor.advise(state, now=scene.NOW, settings=settings, config=config)
    pods = [o for o in objects if o["kind"] == "Pod"]
    pdbs = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    result = defrag.advise_defrag(state, advice, decoding.disruption(pods, pdbs),
                                  max_move_share=1.0, config=config)
    (drain,) = [d for d in result.drains if d.node == "gpu-a"]
    rec = drain.recommendation
    assert rec.gpus[2].before == rec.gpus[2].after == ()
    assert ("7g.80gb",) in [g.after for g in rec.gpus[:2]]
    assert rec.mig_parted is not None
    (entries,) = rec.mig_parted["mig-configs"].values()
    assert {"devices": [2], "mig-enabled": False} in entries
