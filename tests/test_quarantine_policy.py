"""``traceflow quarantine reseal`` applies ``serve --drop-attr`` / ``--hash-attr`` as live ingest does
(traceflow.collectors.quarantine, docs/collector.md): the quarantine keeps payloads as received, so an
attribute the collector drops would otherwise reach the lake through a reseal. The expected hashes are
computed here with hmac, not by the code under test."""

from __future__ import annotations

import hashlib
import hmac
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.collectors_support import api_request_logs
from traceflow.collectors import spool
from traceflow.collectors.attribute_policy import AttributePolicy
from traceflow.collectors.quarantine import Quarantine
from traceflow.collectors.sealer import Sealer
from traceflow.store.lake import Lake

SALT = "a-test-key-of-sixteen-or-more"
PB = "application/x-protobuf"
USER = "leaver@example.com"


def _payload(n: int) -> tuple[spool.WalRecord, list[str]]:
    """``n`` Claude Code api_request log records of ``USER`` (they carry ``terminal.type`` too)."""
    req, ids = api_request_logs(n, tag="q")
    for rec in req.resource_logs[0].scope_logs[0].log_records:
        for kv in rec.attributes:
            if kv.key == "user.id":
                kv.value.string_value = USER
    return spool.WalRecord("logs", PB, req.SerializeToString()), ids


def _reseal(data: Path, *args: str, salt: str | None = SALT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRACEFLOW_HASH_SALT"}
    if salt is not None:
        env["TRACEFLOW_HASH_SALT"] = salt
    return subprocess.run(
        [sys.executable, "-m", "traceflow", "quarantine", "reseal", "--all", "--data", str(data), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _stored(data: Path) -> list[tuple[str | None, str]]:
    con = Lake(data).connect(["requests"])
    try:
        return [(u, a) for u, a in con.execute("SELECT user_id, attributes FROM requests").fetchall()]
    finally:
        con.close()


def test_a_dropped_attribute_does_not_come_back_through_a_reseal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("TRACEFLOW_HASH_SALT", SALT)
    # the sealer of `serve --drop-attr terminal.type --hash-attr user.id` quarantines a payload
    sealer = Sealer(data, policy=AttributePolicy.from_settings(["terminal.type"], ["user.id"]))
    record, ids = _payload(3)
    assert b"terminal.type" in record.body and USER.encode() in record.body  # kept as received
    entry = sealer.quarantine.put([record], "test: the lake refused it")
    assert Quarantine.of(data).policy_of(entry.id) == ({"terminal.type"}, {"user.id"})

    out = _reseal(data, "-f", "json")
    assert out.returncode == 0, out.stderr
    stored = _stored(data)
    assert len(stored) == len(ids) == 3
    digest = "hmac:" + hmac.new(SALT.encode(), USER.encode(), hashlib.sha256).hexdigest()[:32]
    for user_id, attributes in stored:
        attrs = orjson.loads(attributes)
        assert "terminal.type" not in attrs, attrs
        assert attrs["user.id"] == digest and user_id == digest
        assert USER not in attributes
        assert attrs["query_source"] == "sdk"  # the other attributes are kept
    assert not Quarantine.of(data).entries()


def test_a_hashed_attribute_needs_the_key_to_be_resealed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    quarantine = Quarantine.of(data)
    quarantine.policy = AttributePolicy(hash=frozenset({"user.id"}), salt=SALT.encode())
    record, _ = _payload(1)
    entry = quarantine.put([record], "test")
    out = _reseal(data, salt=None)
    assert out.returncode == 2 and "TRACEFLOW_HASH_SALT" in out.stderr and entry.id in out.stderr
    assert [e.id for e in Quarantine.of(data).entries()] == [entry.id]  # kept for a later reseal
    assert not Lake(data).file_names("requests")


def test_reseal_adds_the_policy_given_to_it(tmp_path: Path) -> None:
    """An entry quarantined without a policy (or before entries recorded it) gets the one named."""
    data = tmp_path / "data"
    record, _ = _payload(2)
    Quarantine.of(data).put([record], "test")
    out = _reseal(data, "--drop-attr", "terminal.type", "--drop-attr", "user.id")
    assert out.returncode == 0, out.stderr
    stored = _stored(data)
    assert len(stored) == 2
    for user_id, attributes in stored:
        assert user_id is None and "terminal.type" not in attributes and USER not in attributes
