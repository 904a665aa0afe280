"""The simulator runs the servers' own code, never a stand-in: every step names a real
function of the servers' packages (imported directly, so a missing one fails at import)."""

from __future__ import annotations

import importlib

from migfit.simulate import adapters


def test_every_step_names_a_function_of_the_servers() -> None:
    for step, source in adapters.sources().items():
        dotted = source.split(" ", 1)[0]
        module, _, name = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), step
    assert adapters.sources()["filter"] == "migfit.extender.filtering.filter_nodes"
    assert adapters.sources()["score"] == "migfit.extender.scoring.score_nodes"
    assert adapters.sources()["decision"] == "migfit.webhook.decision.decide_pod"
