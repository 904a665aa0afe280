"""The apply mode starts busy-node re-layouts only with --apply-busy-nodes."""

from __future__ import annotations

from advisor_scene import T0, build, node, pod

from migfit import advisor, migparted
from migfit.extender import relayout_machine as machine

NOW = T0 + 600
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


def test_busy_node_advice_is_started_only_with_the_flag() -> None:
    runners = [pod(f"r{i}", "1g.10gb", namespace="t", node="seed", phase="Running")
               for i in range(7)]
    c = build(node("seed", gpus=2, alloc={"3g.40gb": 2, "1g.10gb": 7}, config="seed-layout"),
              *runners, pod("wants-small", "1g.10gb"))
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
