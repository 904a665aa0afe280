"""The simulator runs the servers' own code, never a stand-in: every step names a real
function, and a server module that cannot be imported stops the simulation with an error."""

from __future__ import annotations

import importlib

import pytest

from migfit import errors
from migfit.simulate import adapters


def test_every_step_names_a_function_of_the_servers() -> None:
    for step, source in adapters.sources().items():
        dotted = source.split(" ", 1)[0]
        module, _, name = dotted.rpartition(".")
        assert callable(getattr(importlib.import_module(module), name)), step
    assert adapters.sources()["filter"] == "extender.filtering.filter_nodes"
    assert adapters.sources()["score"] == "extender.scoring.score_nodes"
    assert adapters.sources()["decision"] == "webhook.decision.decide_pod"


def test_a_missing_server_module_is_an_error_not_a_stand_in() -> None:
    with pytest.raises(errors.ConfigError, match="not installed"):
        adapters._module("extender.no_such_module")
