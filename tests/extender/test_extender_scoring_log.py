"""The scoring log: one JSON line and one human line per prioritize call."""

from __future__ import annotations

import datetime
import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from extender_builders import build, mig_pod, node, pod

from migfit import errors, snapshots
from migfit.commands import extender as cli
from migfit.extender import answers, figures, filtering, scoring, scoring_log, server


def _scored() -> tuple[filtering.PodRequest, list[scoring.NodeScore]]:
    model = build([node("a", {"1g.10gb": 7}), node("b", {"1g.10gb": 7}),
                   pod("x", node_name="b"), node("c", {"3g.40gb": 2})])
    request = filtering.decode_pod(pod("want"))
    return request, scoring.score_nodes(figures.Index(model), request, ["a", "b", "c"])


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


REQUESTS = Path(__file__).parents[2] / "examples" / "requests"


async def _logged(aiohttp_client: Any, caplog: pytest.LogCaptureFixture,
                  settings: server.ExtenderSettings, body: dict[str, Any]
                  ) -> tuple[dict[str, int], list[str]]:
    """One prioritize call to the example cluster's extender: the scores it answered, and
    the scoring log's lines."""
    app = server.make_app(settings=settings, cluster=snapshots.load(snapshots.EXAMPLE_CLUSTER))
    client = await aiohttp_client(app)
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        resp = await client.post("/prioritize", json=body)
        assert resp.status == 200
        answered = {h["Host"]: h["Score"] for h in await resp.json()}
    return answered, [r.getMessage() for r in caplog.records]


async def test_json_line_of_a_real_prioritize_call_recomputes_every_raw_score(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    # It carried pack, fresh, scarce, tight, slack (weighted 0 but scarce) and no host or
    # strand, which carry 0.90 of the weight: nobody could tell why a node won.
    answered, (text_line, json_line) = await _logged(
        aiohttp_client, caplog, server.ExtenderSettings(log_format="both", log_nodes=0),
        json.loads((REQUESTS / "prioritize-3g40gb.json").read_bytes()))
    record = json.loads(json_line)
    weights = record["weights"]
    assert weights == {t: w for t, w in scoring.WEIGHTS.items() if w}
    assert {"no_strand", "host_free"} <= set(weights)  # the 0.90 that was missing
    # the terms that reward sum to 1; spoils_plan weighs against
    assert sum(w for w in weights.values() if w > 0) == pytest.approx(1.0)
    assert weights["spoils_plan"] == -scoring.W_PLAN < 0
    fitting = [s for s in record["scores"] if s["fits"]]
    assert len(fitting) >= 2
    for s in fitting:
        assert set(s["terms"]) == set(weights)
        recomputed = sum(w * s["terms"][t] for t, w in weights.items())
        assert recomputed == pytest.approx(s["raw"], abs=1e-3), s["node"]
        assert s["score"] == answered[s["node"]]
    # The human line names the weighted terms with their weights, never a zero-weighted one.
    best = max(fitting, key=lambda s: (s["score"], s["raw"]))
    assert f"{best['node']}={best['score']} (raw {best['raw']:.3f} = " in text_line
    assert f"{weights['no_strand']:.2f}×no_strand" in text_line
    assert f"{weights['host_free']:.2f}×host_free" in text_line
    assert "pack" not in text_line and "slack" not in text_line


def test_raw_is_the_weighted_sum_of_the_terms_for_every_node() -> None:
    # One source of truth: the sum score_nodes computes is the one WEIGHTS and terms() state.
    model = snapshots.load(snapshots.EXAMPLE_CLUSTER)
    for want in ([{"1g.10gb": 1}], [{"3g.40gb": 1}], [{"1g.10gb": 2}]):
        request = filtering.decode_pod(pod("want", want))
        for s in scoring.score_nodes(figures.Index(model), request, list(model.node_names())):
            if s.fits:
                values = scoring.terms(s)
                assert sum(w * values[t] for t, w in scoring.WEIGHTS.items()) == \
                    pytest.approx(s.raw, abs=1e-9)


@pytest.mark.parametrize(("fmt", "lines"), [("json", 1), ("text", 1), ("both", 2)])
def test_format_flag_chooses_the_lines(fmt: scoring_log.LogFormat, lines: int,
                                       caplog: pytest.LogCaptureFixture) -> None:
    request, scores = _scored()
    with caplog.at_level(logging.INFO, logger="migfit.scoring"):
        scoring_log.ScoringLog(log_format=fmt).record(request, scores, 0.001)
    assert len(caplog.records) == lines
    if fmt == "json":
        json.loads(caplog.records[0].getMessage())
    if fmt == "both":  # the human line, then its JSON line (README, "Log format")
        assert not caplog.records[0].getMessage().startswith("{")
        assert json.loads(caplog.records[1].getMessage())["event"] == "prioritize"


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
    args = parser.parse_args(["--cluster", "examples/cluster.yaml", "--port", "1", *flags])
    with pytest.raises(errors.UsageError, match=flags[0]):
        cli.run(args)  # raised before serving: the test would otherwise hang


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _steady(line: str) -> str:
    """A line without what differs between two writes of the same call (time, duration)."""
    if line.startswith("{"):
        record = json.loads(line)
        del record["time"], record["duration_ms"]
        return json.dumps(record)
    return line.rsplit(",", 1)[0]


@pytest.mark.parametrize("fmt", ["json", "text", "both"])
@pytest.mark.parametrize("max_nodes", [0, 1, 4, 50])
def test_lines_from_the_answer_tables_are_the_lines_of_a_fresh_computation(
        fmt: scoring_log.LogFormat, max_nodes: int) -> None:
    # The tables rank per score, select the best with the request's names and keep each
    # node's rendered parts; the lines must be those written from freshly computed scores,
    # for the first call (entries rendered) and the second (entries kept), with names the
    # tables do not know and nodes that do not fit among them.
    layouts = [{"1g.10gb": 7}, {"1g.10gb": 3, "2g.20gb": 1}, {"3g.40gb": 2}, {"7g.80gb": 1}]
    objects: list[dict[str, Any]] = [node(f"n{i:02d}", layouts[i % 4]) for i in range(24)]
    objects += [pod(f"busy{i}", node_name=f"n{i:02d}") for i in range(0, 24, 3)]
    model = build(objects)
    index = figures.Index(model)
    tables = answers.Tables(index)
    request = filtering.decode_pod(pod("want"))
    handler = _Lines()
    target = logging.getLogger("migfit.test.scoring")
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    target.propagate = False
    log = scoring_log.ScoringLog(log_format=fmt, max_nodes=max_nodes, target=target)
    try:
        for names in (sorted(model.node_names())[::2], ["ghost", "n01", "n03", "n05"],
                      sorted(model.node_names(), reverse=True)):
            for _twice in range(2):
                handler.lines.clear()
                log.submit(tables.prioritize(request, names))  # no loop: written at once
                from_tables = [_steady(line) for line in handler.lines]
                handler.lines.clear()
                log.record(request, scoring.score_nodes(index, request, names), 0.0)
                assert from_tables == [_steady(line) for line in handler.lines], names
                assert len(from_tables) == (2 if fmt == "both" else 1)
    finally:
        target.removeHandler(handler)


@pytest.mark.parametrize("max_nodes", [0, 2])
def test_json_line_is_what_json_dumps_writes_for_its_record(max_nodes: int) -> None:
    # The line is put together from parts; it must be the compact json.dumps of the record,
    # key order and number spelling included, with names that need escaping.
    model = build([node("a\u2028\"b", {"1g.10gb": 7}), node("c", {"1g.10gb": 7}),
                   pod("x", node_name="c"), node("d", {"3g.40gb": 2})])
    request = filtering.decode_pod(pod("w\u00e9nt\n"))
    scores = scoring.score_nodes(figures.Index(model), request, ["a\u2028\"b", "c", "d"])
    log = scoring_log.ScoringLog(log_format="json", max_nodes=max_nodes)
    for duration in (0.0, 1e-08, 0.0012345, 12.5, 3600.0):
        line = log.json_line(request, scores, duration)
        assert line == json.dumps(json.loads(line), separators=(",", ":"))
        assert list(json.loads(line)) == [
            "time", "level", "logger", "event", "pod", "uid", "profile", "nodes", "fit",
            "duration_ms", "weights", "scores", "omitted", "histogram"]


# ------------------------------------------------ an outside check: the tie, unscored calls


def _recomputed(raw: float, tie: float) -> int:
    """The score of scoring.py's formula from a logged line's figures."""
    return max(0, min(10, math.floor(10 * raw + 0.5 + 0.1 * (tie - 0.5))))


async def test_lines_carry_the_tie_so_that_every_score_recomputes(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    # The JSON line said "raw":0.7507,"score":7 with nothing to tell why: the hidden
    # 0.1·(tie − 0.5) of the formula had pulled it to 7.
    body = json.loads((REQUESTS / "prioritize-3g40gb.json").read_bytes())
    body["NodeNames"] = ["gpu-a100-0", "gpu-a100-1", "gpu-h100-0", "gpu-h100-1", "gpu-h200-0",
                         "gpu-a100-40-0", "gpu-a30-0"]
    answered, (text_line, json_line) = await _logged(
        aiohttp_client, caplog, server.ExtenderSettings(log_format="both", log_nodes=0), body)
    fitting = [s for s in json.loads(json_line)["scores"] if s["fits"]]
    assert len(fitting) >= 2
    for s in fitting:
        assert s["tie"] == pytest.approx(figures.tie_of(s["node"]), abs=1e-4)
        assert _recomputed(s["raw"], s["tie"]) == s["score"] == answered[s["node"]], s
    best = max(fitting, key=lambda s: (s["score"], s["raw"]))
    assert f"; tie {best['tie']:.2f})" in text_line, text_line


def test_the_tie_is_what_moves_a_score_at_a_rounding_boundary() -> None:
    # Among equal nodes, those whose 10·raw + 0.5 sits just under a step are split by the tie:
    # the logged raw alone would give the same score to all of them.
    names = [f"n{i}" for i in range(16)]
    model = build([o for n in names for o in (
        node(n, {"1g.10gb": 7}), *[pod(f"{n}-{j}", node_name=n) for j in range(4)])])
    request = filtering.decode_pod(mig_pod("want", cpu="8"))  # raw 0.7501 on every node
    scores = scoring.score_nodes(figures.Index(model), request, names)
    log = scoring_log.ScoringLog(log_format="json", max_nodes=0)
    record = json.loads(log.json_line(request, scores, 0.001))
    assert len({s["raw"] for s in record["scores"]}) == 1
    assert {s["score"] for s in record["scores"]} == {7, 8}  # the tie split them
    for s in record["scores"]:
        assert _recomputed(s["raw"], s["tie"]) == s["score"]


async def test_a_pod_without_mig_requests_gets_a_line_saying_why_every_node_scores_0(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    # README: "For every prioritize call the extender writes one JSON line"; a pod asking for
    # nvidia.com/gpu without a decision record got all 0 and no line at all.
    whole = {"Pod": {"metadata": {"name": "whole-gpu", "namespace": "default", "uid": "u"},
                     "spec": {"containers": [{"name": "c", "resources": {
                         "limits": {"nvidia.com/gpu": "1"}}}]}},
             "Nodes": None, "NodeNames": ["gpu-a100-0", "gpu-a100-40-0", "cpu-0"]}
    answered, (text_line, json_line) = await _logged(
        aiohttp_client, caplog, server.ExtenderSettings(log_format="both", log_nodes=1), whole)
    assert set(answered.values()) == {0}
    record = json.loads(json_line)
    assert (record["pod"], record["profile"], record["nodes"]) == ("default/whole-gpu", "-", 3)
    assert (record["scores"], record["omitted"], record["histogram"]) == ([], 3, {"0": 3})
    assert record["weights"] == {}
    assert record["unscored"] == scoring_log.UNSCORED
    assert "--score-all-pods" in record["unscored"]
    assert text_line.startswith("prioritize default/whole-gpu -: the pod requests no MIG "
                                "instance (")
    assert "so every node scores 0" in text_line and "— 3 nodes, " in text_line


async def test_with_score_all_pods_a_pod_without_mig_requests_is_logged_with_figures(
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    settings = server.ExtenderSettings(log_format="json", log_nodes=2, score_all_pods=True)
    plain = {"Pod": {"metadata": {"name": "cpu", "namespace": "default", "uid": "u2"},
                     "spec": {"containers": [{"name": "c", "resources": {
                         "requests": {"cpu": "2"}}}]}},
             "Nodes": None, "NodeNames": ["gpu-a100-0", "gpu-h100-0", "cpu-0"]}
    _answered, (line,) = await _logged(aiohttp_client, caplog, settings, plain)
    record = json.loads(line)
    assert "unscored" not in record
    assert len(record["scores"]) == 2 and record["omitted"] == 1
