"""The policies the simulator compares, and the settings every policy shares.

A policy is a scorer (how kube-scheduler picks among feasible nodes, ``scheduler``), with or
without the advisor's re-layouts; ``bound`` and ``bound-static`` are no scheduler at all but
the LP relaxation of ``bound`` (the most any policy could allocate).

The advisor's settings are the server's defaults (``migfit.advisor.Settings()``): one
source of truth, so every policy with ``+advisor`` is advised as a default install would be.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from migfit import advisor
from migfit.webhook import choice

Scorer = Literal["default", "binpack", "binpack-gpu", "random", "fgd", "migfit", "upper-bound",
                 "bound", "bound-static"]
SCORERS: tuple[Scorer, ...] = ("default", "binpack", "binpack-gpu", "random", "fgd", "migfit",
                               "upper-bound", "bound", "bound-static")
ADVISABLE: tuple[Scorer, ...] = ("default", "binpack", "binpack-gpu", "random", "fgd", "migfit")
BOUNDS: tuple[Scorer, ...] = ("bound", "bound-static")
SERVER_ADVISOR = advisor.Settings()  # the server's defaults (grace 60 s, free grace 900 s)


@dataclasses.dataclass(frozen=True, slots=True)
class Policy:
    """One scheduling policy: a scorer, with or without the advisor's re-layouts."""

    scorer: Scorer
    advisor: bool = False

    @property
    def name(self) -> str:
        return self.scorer + ("+advisor" if self.advisor else "")

    @property
    def is_bound(self) -> bool:
        return self.scorer in BOUNDS

    @staticmethod
    def parse(text: str) -> Policy:
        base, plus, extra = text.partition("+")
        if base not in SCORERS or (plus and extra != "advisor"):
            valid = ", ".join(SCORERS)
            raise ValueError(f"unknown policy {text!r}; use one of {valid} (those that "
                             f"schedule optionally with +advisor)")
        if plus and base not in ADVISABLE:
            raise ValueError(f"{base} takes no advisor: it is "
                             + ("a bound" if base in BOUNDS else
                                "instances created on demand"))
        scorer: Scorer = next(s for s in SCORERS if s == base)
        return Policy(scorer=scorer, advisor=bool(plus))


ALL_POLICIES: tuple[Policy, ...] = (
    *(Policy(s, a) for s in ADVISABLE for a in (False, True)),
    Policy("bound-static"),
    Policy("bound"),
)


Mode = Literal["fill", "events"]
Allocation = Literal["distributed", "packed"]


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """How one replay runs; the same for every policy compared."""

    mode: Mode = "fill"
    target: float = 1.3  # fill: stop when requested GPUs reach this share of capacity
    order: Literal["sample", "trace"] = "sample"  # fill: sample with replacement, or trace order
    fill_interval: float = 1.0  # fill: seconds between arrivals
    relayout_seconds: float = 180.0
    # A custom config starts its first re-layout this long after it was first advised: the
    # apply mode's --apply-custom-configs writes it into the ConfigMap then, and starts the
    # re-layout once kubelet can have refreshed the MIG Manager's volume (--config-sync,
    # 120 s); the node is not tainted meanwhile. 0: custom configs are in the ConfigMap
    # already (an operator added them).
    config_sync_seconds: float = 0.0
    advise_interval: float = 30.0
    max_relayouts: int = 16  # re-layouts in flight at once
    advisor: Literal["advisor", "planner"] = "advisor"  # see engine.Simulation.advise
    advisor_grace: float = SERVER_ADVISOR.grace_s  # seconds unschedulable before it counts
    # ... and to count although free instances of its profile exist (CPU-blocked nodes).
    advisor_free_grace: float = SERVER_ADVISOR.free_grace_s
    extender_weight: int = 5
    # kube-scheduler's percentageOfNodesToScore: None (or 0) = adaptive, as the shipped
    # scheduler config leaves it; 100 = every feasible node.
    percentage_of_nodes_to_score: int | None = None
    allocation: Allocation = "distributed"  # the device plugin's choice inside a node
    # Also re-lay out the idle GPUs of nodes where pods run (the apply mode's
    # --apply-busy-nodes; their pods' GPUs are kept exactly, docs/relayout.md).
    busy_nodes: bool = False
    # The advisor re-lays out idle nodes ahead of demand once a model's instances are this
    # share allocated (advisor.Settings.ahead_from; None: only for waiting pods).
    ahead_from: float | None = SERVER_ADVISOR.ahead_from
    # ... and has idle nodes trade GPU layouts for their cpu and memory (with ahead_from).
    balance: bool = SERVER_ADVISOR.balance_gain is not None
    # The advisor reads which GPU holds each instance in use (the nodes' DCGM exporters),
    # so a busy node's GPU counts as busy only when it really holds one.
    gpu_usage: bool = False
    # The extender is registered for every pod (extender --score-all-pods): pods without GPU
    # requests are scored too, toward nodes where they strand no instance.
    score_all_pods: bool = False
    # events: arrival times (from the first) multiplied by this; below 1 loads the cluster
    arrival_scale: float = 1.0
    # The webhook's choice under contention (its --choice); None = the webhook's default.
    webhook_choice: choice.Contention | None = None
    gpu_weight: int = 3  # binpack-gpu: the MIG resource's weight against cpu 1, memory 1
    samples: int = 200  # points of each time series
    snapshot_at: float | None = None  # events: time of the GPU picture (default: last arrival)
