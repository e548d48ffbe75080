"""``check --webhook-format slack|alertmanager``: the POST a server on 127.0.0.1 receives has the shape
each receiver documents (docs/forensics.md#traceflow-check names the sources).

The receiver checks each body as the real service would and answers as it does: Slack's incoming
webhook ``200 ok`` or ``400 invalid_payload``; Alertmanager's ``POST /api/v2/alerts`` ``200`` or
``400``. The rules it checks are written here from the documents, not from traceflow's code.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.test_misses import WINDOW_ARGS, _health_lake
from traceflow.store.lake import Lake

Cli = Callable[..., tuple[int, str, str]]

# Slack Block Kit: the block types used here and their text limits
_SLACK_BLOCKS = {"header", "section", "context", "divider"}
# Alertmanager API v2 postableAlert: its keys, label names as Prometheus defines them
_ALERT_KEYS = {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def slack_problems(body: Any) -> list[str]:
    """What Slack's incoming webhook would refuse in ``body`` (empty: accepted)."""
    if not isinstance(body, dict):
        return ["not a JSON object"]
    out = []
    if not (isinstance(body.get("text"), str) and body["text"].strip()):
        out.append("no text (the notification's fallback)")
    blocks = body.get("blocks", [])
    if not isinstance(blocks, list) or len(blocks) > 50:
        return [*out, "blocks is not a list of at most 50"]
    for b in blocks:
        kind = b.get("type")
        if kind not in _SLACK_BLOCKS:
            out.append(f"block type {kind!r}")
        elif kind == "header":
            t = b.get("text", {})
            if t.get("type") != "plain_text" or not 0 < len(t.get("text", "")) <= 150:
                out.append("header text must be plain_text of 1-150 characters")
        elif kind == "section":
            t = b.get("text", {})
            if t.get("type") not in ("plain_text", "mrkdwn") or not 0 < len(t.get("text", "")) <= 3000:
                out.append("section text must be 1-3000 characters")
        elif kind == "context":
            els = b.get("elements", [])
            if not 0 < len(els) <= 10 or any(
                e.get("type") not in ("mrkdwn", "plain_text", "image") for e in els
            ):
                out.append("context needs 1-10 text or image elements")
    return out


def _rfc3339(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not re.match(
        r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", value
    ):
        return None
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def alertmanager_problems(body: Any) -> list[str]:
    """What Alertmanager's ``POST /api/v2/alerts`` would refuse in ``body`` (empty: accepted)."""
    if not isinstance(body, list):
        return ["not a JSON array of alerts"]
    out = []
    for a in body:
        if not isinstance(a, dict) or set(a) - _ALERT_KEYS:
            out.append(f"unknown keys {sorted(set(a) - _ALERT_KEYS)}")
            continue
        labels = a.get("labels")
        if not isinstance(labels, dict) or not labels.get("alertname"):
            out.append("labels.alertname is required")
            continue
        if any(not _LABEL.match(k) or not isinstance(v, str) for k, v in labels.items()):
            out.append("label names must match [a-zA-Z_][a-zA-Z0-9_]* and values be strings")
        if any(not isinstance(v, str) for v in a.get("annotations", {}).values()):
            out.append("annotation values must be strings")
        for key in ("startsAt", "endsAt"):
            if key in a and _rfc3339(a[key]) is None:
                out.append(f"{key} is not RFC 3339")
        if "generatorURL" in a and not str(a["generatorURL"]).startswith(("http://", "https://")):
            out.append("generatorURL is not a URL")
    return out


class _Receiver(http.server.BaseHTTPRequestHandler):
    posts: ClassVar[list[tuple[str, str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        type(self).posts.append((self.path, self.headers["Content-Type"], body))
        if self.path == "/slack":
            problems, ok = slack_problems(body), b"ok"
        else:
            problems, ok = alertmanager_problems(body), b""
        self.send_response(400 if problems else 200)
        self.end_headers()
        self.wfile.write(b"invalid_payload: " + "; ".join(problems).encode() if problems else ok)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    _Receiver.posts = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Receiver.posts
    finally:
        server.shutdown()
        server.server_close()


Receiver = tuple[str, list[tuple[str, str, Any]]]


def test_slack_gets_an_incoming_webhook_message(
    lake: Lake, tmp_path: Path, cli: Cli, receiver: Receiver
) -> None:
    _health_lake(tmp_path / "logs", lake, drop=True)
    url, posts = receiver
    args = ("check", *WINDOW_ARGS, "--webhook", f"{url}/slack", "--webhook-format", "slack")
    code, _, err = cli(*args, "--where", "model!=<!channel>")
    assert code == 4, err
    assert "not delivered" not in err  # the receiver accepted it (200 ok)
    assert len(posts) == 1
    _, content_type, body = posts[0]
    assert content_type == "application/json"
    assert slack_problems(body) == []
    # the notification line names both checks that fired, with the figures of the designed drop
    assert body["text"].startswith("traceflow cache health (model!=&lt;!channel&gt;): alert: ")
    assert "reuse ratio fell 100.0 %" in body["text"]
    assert "unexplained misses rose from 0.0 % to 66.7 %" in body["text"]
    section = next(b for b in body["blocks"] if b["type"] == "section")["text"]["text"]
    assert section.count("• ") == 2
    context = next(b for b in body["blocks"] if b["type"] == "context")["elements"][0]["text"]
    # markup in a filter is escaped: <!channel> would notify the whole channel
    assert "&lt;!channel&gt;" in context and "<!channel>" not in json.dumps(body)
    # --until 2026-03-11 (a date) includes that day
    assert "*window* 2026-03-10T00:00:00Z to 2026-03-12T00:00:00Z (3 requests)" in context


def test_alertmanager_gets_its_v2_list_of_alerts(
    lake: Lake, tmp_path: Path, cli: Cli, receiver: Receiver
) -> None:
    _health_lake(tmp_path / "logs", lake, drop=True)
    url, posts = receiver
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    code, _, err = cli(
        "check", *WINDOW_ARGS, "--webhook", f"{url}/api/v2/alerts", "--webhook-format", "alertmanager"
    )
    after = dt.datetime.now(dt.UTC)
    assert code == 4, err
    assert "not delivered" not in err
    assert len(posts) == 1
    path, content_type, body = posts[0]
    assert (path, content_type) == ("/api/v2/alerts", "application/json")
    assert alertmanager_problems(body) == []
    assert sorted(a["labels"]["alertname"] for a in body) == [
        "TraceflowReuseDrop",
        "TraceflowUnexplainedMisses",
    ]
    for alert in body:
        assert alert["labels"]["service"] == "traceflow"
        assert "where" not in alert["labels"]  # no filter given
        starts = _rfc3339(alert["startsAt"])
        assert starts is not None and before <= starts <= after  # when the check ran
        assert "endsAt" not in alert  # unknown: Alertmanager's resolve_timeout applies
        assert alert["annotations"]["window"].endswith("(3 requests)")
    drop = next(a for a in body if a["labels"]["check"] == "reuse_drop")
    assert drop["annotations"]["summary"].startswith("reuse ratio fell 100.0 %")


def test_the_receivers_refuse_what_their_documents_refuse() -> None:
    """The checks above can fail: the receivers' rules catch wrong shapes."""
    assert slack_problems({"blocks": []}) == ["no text (the notification's fallback)"]
    assert slack_problems(
        {"text": "x", "blocks": [{"type": "header", "text": {"type": "mrkdwn", "text": "x"}}]}
    )
    assert alertmanager_problems({"labels": {"alertname": "A"}}) == ["not a JSON array of alerts"]
    assert alertmanager_problems([{"labels": {"check": "x"}}]) == ["labels.alertname is required"]
    assert alertmanager_problems([{"labels": {"alertname": "A", "team.id": "x"}}])
    assert alertmanager_problems([{"labels": {"alertname": "A"}, "startsAt": "2026-03-10 00:00"}])
    assert alertmanager_problems([{"labels": {"alertname": "A"}, "status": "firing"}])


def test_a_healthy_check_posts_nothing_and_a_bad_format_is_refused(
    lake: Lake, tmp_path: Path, cli: Cli, receiver: Receiver
) -> None:
    _health_lake(tmp_path / "logs", lake, drop=False)
    url, posts = receiver
    code, _, err = cli("check", *WINDOW_ARGS, "--webhook", f"{url}/slack", "--webhook-format", "slack")
    assert code == 0, err
    assert posts == []
    code, _, err = cli("check", *WINDOW_ARGS, "--webhook", f"{url}/slack", "--webhook-format", "teams")
    assert code == 2
    assert "--webhook-format 'teams' is not one of: json, slack, alertmanager" in err
