"""The scoring log: one JSON line and one human line per prioritize call."""

from __future__ import annotations

import datetime
import json
import logging

import pytest
from extender_builders import build, node, pod

from migfit import errors
from migfit.commands import extender as cli
from migfit.extender import filtering, scoring, scoring_log


def _scored() -> tuple[filtering.PodRequest, list[scoring.NodeScore]]:
    model = build([node("a", {"1g.10gb": 7}), node("b", {"1g.10gb": 7}),
                   pod("x", node_name="b"), node("c", {"3g.40gb": 2})])
    request = filtering.decode_pod(pod("want"))
    return request, scoring.score_nodes(model, request, ["a", "b", "c"])


def test_json_line_has_pod_profile_scores_figures_and_duration() -> None:
    request, scores = _scored()
    log = scoring_log.ScoringLog(log_format="json", max_nodes=2)
    now = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    record = json.loads(log.json_line(request, scores, 0.0012, now=now))
    assert record["time"] == "2026-01-02T03:04:05.000Z"
    assert (record["pod"], record["uid"], record["profile"]) == (
        "default/want", "uid-default-want", "1g.10gb")
    assert record["duration_ms"] == 1.2
    assert [s["node"] for s in record["scores"]] == ["b", "a"]
    assert set(record["scores"][0]) >= {"score", "pack", "fresh", "scarce", "tight", "slack"}
    assert record["omitted"] == 1
    assert sum(record["histogram"].values()) == 3


def test_text_line_is_short_and_names_the_best_node() -> None:
    request, scores = _scored()
    line = scoring_log.ScoringLog().text_line(request, scores, 0.002)
    assert line.startswith("prioritize default/want 1g.10gb: b=")
    assert "3 nodes, 2 fit, 2.00 ms" in line
    assert "\n" not in line


@pytest.mark.parametrize(("fmt", "lines"), [("json", 1), ("text", 1), ("both", 2)])
def test_format_flag_chooses_the_lines(fmt: scoring_log.LogFormat, lines: int,
                                       caplog: pytest.LogCaptureFixture) -> None:
    request, scores = _scored()
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        scoring_log.ScoringLog(log_format=fmt).record(request, scores, 0.001)
    assert len(caplog.records) == lines
    if fmt == "json":
        json.loads(caplog.records[0].getMessage())


def test_cli_rejects_half_a_tls_pair(tmp_path: object) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--cluster", "examples/cluster.yaml", "--client-ca", __file__])
    with pytest.raises(errors.UsageError):
        cli.settings_from(args)
    args = parser.parse_args(["--cluster", "x.yaml", "--tls-cert", __file__])
    with pytest.raises(errors.UsageError):
        cli.settings_from(args)
    ok = cli.settings_from(parser.parse_args(["--cluster", "x.yaml", "--port", "9000",
                                              "--log-format", "json"]))
    assert (ok.port, ok.log_format, ok.tls_cert) == (9000, "json", None)


@pytest.mark.parametrize("flags", [["--configmap", "no-namespace"], ["--configmap", "/name"],
                                   ["--grace", "-1"], ["--relayout-timeout", "0"]])
def test_cli_rejects_bad_advisor_flags_before_starting(flags: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--cluster", "examples/cluster.yaml", "--port", "0", *flags])
    with pytest.raises(errors.UsageError, match=flags[0]):
        cli.run(args)  # raised before serving: the test would otherwise hang
