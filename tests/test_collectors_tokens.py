"""``traceflow serve --tokens FILE`` (docs/collector.md, "A token per team"): each record gets its
token's team whatever it claims, the file is re-read while the collector runs, a removed token is
refused within 5 s and every record acknowledged before is stored. Real OTLP over 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
from collectors_support import Server, api_request_logs, kv, query, stub, wait_for

from traceflow.collectors.settings import serve_argv
from traceflow.collectors.tokens import RELOAD_INTERVAL_S, Caller, TokenFileError, Tokens, parse

PB = {"Content-Type": "application/x-protobuf"}
TOKENS = {
    "payments": "payments-token-0123456789abcdef",
    "search": "search-token-0123456789abcdef",
    "ads": "ads-token-0123456789abcdef-xyz",
    "*": "admin-token-0123456789abcdef-xyz",
}


def _sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _write(path: Path, teams: dict[str, str]) -> None:
    """The tokens file, written whole and renamed into place (as an editor or a Secret update does);
    search's token is written as its SHA-256."""
    lines = ["# team token"]
    for team, token in teams.items():
        lines.append(f"{team} {_sha(token) if team == 'search' else token}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)


def _logs(n: int, claim: str | None, tag: str = "") -> bytes:
    req, _ = api_request_logs(n, tag=tag)
    if claim is not None:
        req.resource_logs[0].resource.attributes.append(kv("team.id", claim))
    return bytes(req.SerializeToString())


def _post(srv: Server, token: str, body: bytes) -> int:
    r = httpx.post(
        f"{srv.http_url}/v1/logs", content=body, headers={**PB, "Authorization": f"Bearer {token}"}
    )
    return r.status_code


def _teams(data: Path) -> dict[tuple[str | None, str | None], int]:
    rows = query(
        data,
        "select json_extract_string(attributes, '$.resource.\"team.id\"'), "
        "json_extract_string(attributes, '$.resource.\"team.id.claimed\"'), count(*) "
        "from requests group by 1, 2",
    )
    return {(team, claim): int(n) for team, claim, n in rows}


# -- the file ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("payments\n", "line 1: expected 'TEAM TOKEN'"),
        ("# c\npayments short\n", "line 2: the token has 5 characters"),
        ("payments sha256:abc\n", "64 hexadecimal digits"),
        ("bad;team " + "x" * 20 + "\n", "is not a name"),
        (f"a {'x' * 20}\nb {_sha('x' * 20)}\n", "already the token of team 'a'"),
        ("# nothing\n\n", "holds no 'TEAM TOKEN' line"),
    ],
)
def test_a_bad_tokens_file_is_refused_with_its_line(text: str, why: str) -> None:
    with pytest.raises(TokenFileError, match=why.replace("(", r"\(")):
        parse(text, "tokens.txt")


def test_a_token_and_its_sha256_name_the_same_team(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    _write(path, TOKENS)
    tokens = Tokens(None, path)
    assert tokens.caller(f"Bearer {TOKENS['search']}") == Caller("search")  # written as sha256:
    assert tokens.caller(f"bearer  {TOKENS['payments']} ") == Caller("payments")
    assert tokens.caller(f"Bearer {_sha(TOKENS['search'])}") is None  # the hash is not a token
    assert tokens.caller(None) is None and tokens.caller(TOKENS["payments"]) is None
    admin = tokens.caller(f"Bearer {TOKENS['*']}")
    assert admin is not None and admin.admin and admin.forced_team is None
    shared = Tokens("shared-token-0123456789", path)
    assert shared.caller("Bearer shared-token-0123456789") == Caller(None)


def test_serve_refuses_a_bad_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("payments\n")
    r = subprocess.run(
        [*serve_argv(tmp_path / "lake", "--tokens", str(path))], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2, r.stderr
    assert f"{path} line 1" in r.stderr
    missing = subprocess.run(
        [*serve_argv(tmp_path / "lake", "--tokens", str(tmp_path / "nope"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "cannot read the tokens file" in missing.stderr


# -- end to end ----------------------------------------------------------------------------------------
def test_each_record_gets_its_tokens_team(tmp_path: Path) -> None:
    path, data = tmp_path / "tokens", tmp_path / "lake"
    _write(path, TOKENS)
    with Server(data, "--tokens", str(path)) as srv:
        assert _post(srv, TOKENS["payments"], _logs(3, claim="search")) == 200  # claims another team
        assert _post(srv, TOKENS["search"], _logs(2, claim=None)) == 200
        assert _post(srv, TOKENS["*"], _logs(4, claim="ops")) == 200  # an administrator writes for ops
        assert _post(srv, "not-a-token-0123456789abcdef", _logs(1, claim=None)) == 401
        with grpc.insecure_channel(srv.grpc_target) as ch:
            req, _ = api_request_logs(5)
            req.resource_logs[0].resource.attributes.append(kv("team.id", "payments"))
            meta = (("authorization", f"Bearer {TOKENS['ads']}"),)
            stub("logs", ch).Export(req, metadata=meta, timeout=10)
            with pytest.raises(grpc.RpcError) as e:
                stub("logs", ch).Export(req, metadata=(("authorization", "Bearer nope"),), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        auth = {"Authorization": f"Bearer {TOKENS['payments']}"}
        assert httpx.get(f"{srv.http_url}/metrics", headers=auth).status_code == 401  # a team reads not
        admin = {"Authorization": f"Bearer {TOKENS['*']}"}
        assert httpx.get(f"{srv.http_url}/metrics", headers=admin).status_code == 200
        assert wait_for(lambda: sum(_teams(data).values()) == 14, timeout_s=30)
    assert _teams(data) == {
        ("payments", "search"): 3,
        ("search", None): 2,
        ("ops", None): 4,
        ("ads", "payments"): 5,
    }
    # traceflow's own attribution reads the same teams
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "traceflow",
            "mix",
            "--data",
            str(data),
            "--by",
            "attr:team.id",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACEFLOW_REFRESH": "0", "TRACEFLOW_CACHE": "0"},
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    got = {r["attr:team.id"]: r["requests"] for r in rows if "attr:team.id" in r}
    assert got == {"payments": 3, "search": 2, "ops": 4, "ads": 5}


def test_a_removed_token_is_refused_within_5_s_and_nothing_acknowledged_is_lost(tmp_path: Path) -> None:
    path, data = tmp_path / "tokens", tmp_path / "lake"
    _write(path, TOKENS)
    acknowledged = 0
    refused = threading.Event()

    def keep_sending(srv: Server) -> None:
        nonlocal acknowledged
        with httpx.Client() as client:
            while not refused.is_set():
                r = client.post(
                    f"{srv.http_url}/v1/logs",
                    content=_logs(1, claim=None, tag="ads"),
                    headers={**PB, "Authorization": f"Bearer {TOKENS['ads']}"},
                )
                if r.status_code == 200:
                    acknowledged += 1
                elif r.status_code == 401:
                    refused.set()

    with Server(data, "--tokens", str(path)) as srv:
        sender = threading.Thread(target=keep_sending, args=(srv,), daemon=True)
        sender.start()
        assert wait_for(lambda: acknowledged >= 20, timeout_s=30)
        _write(path, {k: v for k, v in TOKENS.items() if k != "ads"})
        assert refused.wait(5.0), "the removed token was still accepted 5 s after the file changed"
        sender.join(10)
        assert _post(srv, TOKENS["payments"], _logs(1, claim=None)) == 200  # the others still work
        path.write_text("payments\n")  # a broken file: the pairs read before are kept
        time.sleep(3 * RELOAD_INTERVAL_S)  # (it has been looked at since)
        assert _post(srv, TOKENS["payments"], _logs(1, claim=None)) == 200
    log = srv.stderr()
    assert "line 1: expected 'TEAM TOKEN'" in log and "keeping the 3 tokens read before" in log
    assert _teams(data)[("ads", None)] == acknowledged
    assert _teams(data)[("payments", None)] == 2
