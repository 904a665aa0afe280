"""How the servers log: one line per record, text or JSON, UTC timestamps, nothing forgeable.

Both servers and ``migfit serve`` configure logging here (``--log-format`` and
``--log-level``), so operational lines and the extender's scoring log share one stream
(stderr, as Kubernetes components log) and one format. In ``json`` every line is one JSON
object (``time``, ``level``, ``logger``, ``message``); a scoring-log record that already is a
JSON object is written as it is, so ``jq`` reads the whole stream. In ``text`` the message's
control characters (newlines included) and lone surrogates are escaped, so a client-supplied
name can never start a fake line, and the rare traceback of a real bug stays attached below.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Literal, TextIO

LogStyle = Literal["text", "json"]
LOG_STYLES: tuple[LogStyle, ...] = ("text", "json")

# The logger of the extender's scoring log (extender/scoring_log.py writes bare lines to it).
SCORING_LOGGER = "migfit.scoring"


def style_of(log_format: str) -> LogStyle:
    """The stream's style for a server's ``--log-format``: ``json`` is JSON; ``text`` and
    ``both`` are text (``both`` adds the scoring log's JSON line, written bare, to its human
    line: the extender's choice, not the stream's)."""
    if log_format == "json":
        return "json"
    if log_format in ("text", "both"):
        return "text"
    raise ValueError(f"log format {log_format!r}: use json, text or both")


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(c: str) -> str:
    if c.isprintable():
        return c
    named = _NAMED.get(c)
    if named is not None:
        return named
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` on one line: control characters, line and paragraph separators (U+2028/9) and
    lone surrogates written as escapes; everything printable, non-ASCII included, kept."""
    if text.isprintable():
        return text
    return "".join(map(_escape_char, text))


def utc_time(created: float) -> str:
    """RFC 3339 in UTC with milliseconds: ``2026-12-03T06:09:51.123Z``."""
    when = datetime.datetime.fromtimestamp(created, datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: message``; scoring-log lines are written bare (they are the report)."""

    def format(self, record: logging.LogRecord) -> str:
        message = escape(record.getMessage())
        if record.name == SCORING_LOGGER:
            line = message
        else:
            line = f"{utc_time(record.created)} {record.levelname} {record.name}: {message}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; JSON encoding escapes every control character by itself."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name == SCORING_LOGGER and message.startswith("{"):
            return message  # already one JSON object with its own time and event
        entry: dict[str, object] = {
            "time": utc_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        # ensure_ascii: lone surrogates become \\ud800 escapes instead of failing to encode.
        return json.dumps(entry, ensure_ascii=True, separators=(",", ":"))


def configure(*, level: str = "info", style: LogStyle = "text",
              stream: TextIO | None = None, access_log: bool = False) -> logging.Handler:
    """Send every record at ``level`` or above to ``stream`` (stderr) in ``style``.

    aiohttp's access log (a line per request) is kept to warnings unless ``access_log``.
    """
    if style not in LOG_STYLES:
        raise ValueError(f"log style {style!r}: use one of {', '.join(LOG_STYLES)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if style == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The scoring log goes through the same handler (one stream), once.
    scoring = logging.getLogger(SCORING_LOGGER)
    for old in list(scoring.handlers):
        scoring.removeHandler(old)
    scoring.propagate = True
    # aiohttp's access log adds a line per request; the servers keep their own metrics.
    logging.getLogger("aiohttp.access").setLevel(logging.NOTSET if access_log
                                                 else logging.WARNING)
    return handler
