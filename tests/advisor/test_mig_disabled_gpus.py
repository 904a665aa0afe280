"""GPUs with MIG disabled keep it disabled in the configs the advisor writes (an outside check).

Before, an idle node with two MIG GPUs and two GPUs running MIG disabled (``nvidia.com/gpu:
2`` under the mixed strategy) got a custom config whose entry for the latter said
``mig-enabled: true, mig-devices: {}`` while the advice showed them unchanged: applied, it
took both out of ``nvidia.com/gpu`` and made no instance of them.
"""

from __future__ import annotations

from typing import Any

import pytest
from advisor_scene import T0, build, pod

from migfit import advisor, builders, errors, migparted, profiles

NOW = T0 + 600
A100 = profiles.builtin().get("A100-80GB")

# Two MIG GPUs of 3g.40gb ×2, GPUs 2 and 3 with MIG disabled: a config in the ConfigMap.
CONFIG = """\
version: v1
mig-configs:
  half-3g:
  - devices: [0, 1]
    mig-enabled: true
    mig-devices: {3g.40gb: 2}
  - devices: [2, 3]
    mig-enabled: false
"""


def _node(config: str | None = None) -> dict[str, Any]:
    labels = builders.mig_labels(product="NVIDIA-A100-SXM4-80GB", instances={"3g.40gb": 4},
                                 gpus=4, config=config, config_state="success",
                                 count_labels=False)
    return builders.node("mixed", labels=labels,
                         resources=builders.mig_resources({"3g.40gb": 4}, whole_gpus=2))


def _entries(rec: advisor.Recommendation) -> list[dict[str, Any]]:
    assert rec.mig_parted is not None
    (entries,) = rec.mig_parted["mig-configs"].values()
    return list(entries)


def test_an_idle_nodes_mig_disabled_gpus_keep_mig_disabled() -> None:
    c = build(_node("half-3g"), pod("wants-small", "1g.10gb", namespace="ml"))
    (rec,) = advisor.advise(c, now=NOW, config=migparted.parse(CONFIG)).recommendations
    assert rec.node == "mixed" and not rec.disruptive and rec.unblocks == ("ml/wants-small",)
    assert [g.changed for g in rec.gpus[2:]] == [False, False]
    assert [e for e in _entries(rec) if not e["mig-enabled"]] == [
        {"devices": [2, 3], "mig-enabled": False}]
    # What the MIG Manager would apply: MIG stays disabled on GPUs 2 and 3, and GPU 0 or 1
    # now has the 1g.10gb the pod waits for.
    back = migparted.resolve(migparted.parse_data(rec.mig_parted), rec.target, model=A100,
                             gpu_count=4)
    assert back.disabled == {2, 3} and back.gpus[2:] == ((), ())
    assert any("1g.10gb" in g for g in back.gpus[:2])


def test_a_named_configs_mig_disabled_gpus_are_read_as_such() -> None:
    layout = migparted.resolve(migparted.parse(CONFIG), "half-3g", model=A100, gpu_count=4)
    assert layout.disabled == {2, 3}
    assert layout.gpus == (("3g.40gb", "3g.40gb"),) * 2 + ((), ())


def test_a_mig_disabled_gpu_is_named_apart_from_an_empty_one_and_holds_no_instance() -> None:
    after = [("3g.40gb", "3g.40gb"), ()]
    assert migparted.custom_name(after) != migparted.custom_name(after, disabled={1})
    assert migparted.custom_name([()]) != migparted.custom_name([()], disabled={0})
    with pytest.raises(errors.ConfigError, match="GPU 1: MIG is disabled there"):
        migparted.render("x", [(), ("1g.10gb",)], model=A100, disabled={1})


def test_a_node_whose_mig_disabled_gpus_are_not_known_is_left_alone() -> None:
    """Without the node's config the allocatable says how many GPUs run with MIG disabled,
    not which: a config naming GPUs 2 and 3 could enable MIG on 0 and 1 and disable it on 2
    and 3 instead, a mode change that resets every GPU (a review of the first fix)."""
    c = build(_node(), pod("wants-small", "1g.10gb", namespace="ml"))
    assert advisor.advise(c, now=NOW).recommendations == ()
