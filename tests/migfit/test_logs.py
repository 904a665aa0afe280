"""Server logging: text lines cannot be forged, JSON lines are one object each, UTC times."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from migfit import logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield out
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def test_a_newline_in_a_client_value_cannot_start_a_fake_line(stream: io.StringIO) -> None:
    logs.configure(style="text", stream=stream)
    logging.getLogger("migfit.webhook").warning("denied %s", "pod\n2026-12-03 CRITICAL forged")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("denied pod\\n2026-12-03 CRITICAL forged")
    assert " WARNING migfit.webhook: " in lines[0]


def test_lone_surrogates_and_escape_sequences_are_written_escaped(stream: io.StringIO) -> None:
    logs.configure(style="text", stream=stream)
    logging.getLogger("migfit.scoring").info("node \ud800 \x1b[2J \u2028 é")
    assert stream.getvalue() == "node \\ud800 \\x1b[2J \\u2028 é\n"
    stream.getvalue().encode("utf-8")  # writable as UTF-8


def test_json_style_is_one_object_per_line_with_a_utc_time(stream: io.StringIO) -> None:
    logs.configure(style="json", stream=stream)
    logging.getLogger("migfit.extender").info("synced %d nodes\nforged", 3)
    logging.getLogger("migfit.scoring").info('{"time":"t","event":"prioritize"}')
    logging.getLogger("migfit.extender").info("bad \ud800")
    first, scoring_line, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "synced 3 nodes\nforged"
    assert first["level"] == "INFO" and first["logger"] == "migfit.extender"
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert scoring_line == {"time": "t", "event": "prioritize"}
    assert third["message"] == "bad \ud800"


def test_levels_below_the_chosen_one_are_dropped(stream: io.StringIO) -> None:
    logs.configure(level="warning", style="text", stream=stream)
    logging.getLogger("migfit.x").info("quiet")
    logging.getLogger("migfit.x").warning("loud")
    assert "quiet" not in stream.getvalue() and "loud" in stream.getvalue()


def test_an_unknown_style_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        logs.configure(style="yaml")  # type: ignore[arg-type]


@pytest.mark.parametrize(("log_format", "style"), [("json", "json"), ("text", "text"),
                                                   ("both", "text")])
def test_a_servers_log_format_names_the_streams_style(log_format: str, style: str) -> None:
    assert logs.style_of(log_format) == style


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="json, text or both"):
        logs.style_of("yaml")


@pytest.mark.parametrize("access_log", [False, True])
def test_aiohttps_access_log_is_written_only_when_asked_for(stream: io.StringIO,
                                                           access_log: bool) -> None:
    # `migfit webhook --access-log` was silenced by the WARNING level set for it.
    logs.configure(style="text", stream=stream, access_log=access_log)
    logging.getLogger("aiohttp.access").info('127.0.0.1 "GET /readyz HTTP/1.1" 200')
    assert ("GET /readyz" in stream.getvalue()) is access_log
