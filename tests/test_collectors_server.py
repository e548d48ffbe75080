"""``traceflow serve`` as a process: security, overload, TLS, start-up and shutdown."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from collectors_support import Server, api_request_logs, count_requests, query, stub, wait_for
from google.rpc import error_details_pb2, status_pb2

from traceflow.collectors import server as server_mod
from traceflow.collectors.settings import serve_argv

PB = {"Content-Type": "application/x-protobuf"}


def _serve(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "traceflow", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


# -- security ---------------------------------------------------------------------------------------
def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    r = _serve("--data", str(tmp_path), "--host", "0.0.0.0", "--http-port", "0", "--grpc-port", "0")
    assert r.returncode == 2
    assert "--token" in r.stderr and "0.0.0.0" in r.stderr
    assert not (tmp_path / "v1").exists()  # refused before touching anything


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("   ", "whitespace"),
        ("\t\n", "whitespace"),
        ("s3cret", "at least 16"),
        ("correct horse battery staple", "whitespace"),
        ("x" * 15, "at least 16"),
    ],
)
def test_a_weak_token_is_refused(tmp_path: Path, token: str, why: str) -> None:
    for args, env in (
        (["--token", token], {}),
        ([], {"TRACEFLOW_TOKEN": token}),
    ):
        r = subprocess.run(
            [*serve_argv(tmp_path, "--host", "0.0.0.0"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert r.returncode == 2, r.stderr
        assert why in r.stderr and "token_urlsafe" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "v1").exists()


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert server_mod.is_loopback(host) is loopback


def test_token_is_required_on_both_transports(tmp_path: Path) -> None:
    with Server(tmp_path, "--host", "0.0.0.0", "--token", "s3cret-s3cret-s3cret") as srv:
        port = srv.http_url.rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}/v1/logs"
        req, ids = api_request_logs(2)
        body = req.SerializeToString()
        status_url = f"http://127.0.0.1:{port}/status"
        assert httpx.get(status_url).status_code == 401  # the status needs the token too
        status = httpx.get(status_url, headers={"Authorization": "Bearer s3cret-s3cret-s3cret"}).json()
        assert status["lake"] == {"error": None, "since": None, "segments_waiting": 0}
        r = httpx.post(url, content=body, headers=PB)
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert status_pb2.Status.FromString(r.content).code == 16
        assert (
            httpx.post(url, content=body, headers={**PB, "Authorization": "Bearer nope"}).status_code == 401
        )
        assert (
            httpx.post(url, content=body, headers={**PB, "Authorization": "s3cret-s3cret-s3cret"}).status_code
            == 401
        )
        assert (
            httpx.post(
                url, content=body, headers={**PB, "Authorization": "Bearer s3cret-s3cret-s3cret"}
            ).status_code
            == 200
        )
        assert (
            httpx.post(
                url, content=body, headers={**PB, "Authorization": "bearer s3cret-s3cret-s3cret"}
            ).status_code
            == 200
        )

        target = "127.0.0.1:" + srv.grpc_target.rsplit(":", 1)[1]
        with grpc.insecure_channel(target) as ch:
            logs = stub("logs", ch)
            with pytest.raises(grpc.RpcError) as info:
                logs.Export(req, timeout=10)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError):
                logs.Export(req, timeout=10, metadata=[("authorization", "Bearer wrong")])
            logs.Export(req, timeout=10, metadata=[("authorization", "Bearer s3cret-s3cret-s3cret")])
        assert wait_for(lambda: count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 2)


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_on_both_transports(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    data = tmp_path / "data"
    with Server(data, "--tls-cert", str(cert), "--tls-key", str(key)) as srv:
        assert srv.http_url.startswith("https://")
        req, ids = api_request_logs(2)
        r = httpx.post(
            srv.http_url + "/v1/logs",
            content=req.SerializeToString(),
            headers=PB,
            verify=ssl.create_default_context(cafile=str(cert)),
        )
        assert r.status_code == 200
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(srv.grpc_target, creds) as ch:
            stub("logs", ch).Export(api_request_logs(1)[0], timeout=10)
        with pytest.raises(httpx.HTTPError):  # plain HTTP to a TLS port fails
            httpx.post(srv.http_url.replace("https", "http") + "/v1/logs", content=b"", headers=PB)
        assert wait_for(lambda: count_requests(data, "list_contains(?, request_id)", [ids]) == 2)


def test_tls_needs_both_files(tmp_path: Path) -> None:
    r = _serve("--data", str(tmp_path), "--tls-cert", str(tmp_path / "c.pem"))
    assert r.returncode == 2 and "--tls-key" in r.stderr


def test_unusable_tls_files_are_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    (tmp_path / "k.pem").write_text("not a key")
    r = _serve(
        "--data",
        str(tmp_path / "d"),
        "--tls-cert",
        str(tmp_path / "c.pem"),
        "--tls-key",
        str(tmp_path / "k.pem"),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
    )
    assert r.returncode == 1
    assert "cannot use --tls-cert" in r.stderr and "Traceback" not in r.stderr


# -- overload ----------------------------------------------------------------------------------------
def test_backlog_over_the_bound_is_503_and_unavailable_with_retry_info(tmp_path: Path) -> None:
    with Server(tmp_path, "--max-backlog-bytes", "1", "--roll-interval", "3") as srv:
        req, _ = api_request_logs(3)
        body = req.SerializeToString()
        assert httpx.post(srv.http_url + "/v1/logs", content=body, headers=PB).status_code == 200
        time.sleep(0.6)  # the WAL now holds unsealed bytes (> 1) until the segment rolls in 3 s
        r = httpx.post(srv.http_url + "/v1/logs", content=body, headers=PB)
        assert r.status_code == 503
        assert int(r.headers["retry-after"]) > 0
        info = error_details_pb2.RetryInfo()
        assert status_pb2.Status.FromString(r.content).details[0].Unpack(info)
        with grpc.insecure_channel(srv.grpc_target) as ch:
            with pytest.raises(grpc.RpcError) as err:
                stub("logs", ch).Export(req, timeout=10)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            trailers = dict(err.value.trailing_metadata())
            status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
            assert status.details[0].Unpack(info) and info.retry_delay.seconds > 0
        # once sealed, the backlog drains and requests are accepted again
        assert wait_for(
            lambda: httpx.post(srv.http_url + "/v1/logs", content=body, headers=PB).status_code == 200,
            15,
            0.5,
        )


def test_inflight_bytes_over_the_bound_are_503(tmp_path: Path) -> None:
    with Server(tmp_path, "--max-inflight-bytes", "1000") as srv:
        host, port = srv.http_url.removeprefix("http://").rsplit(":", 1)
        req, ids = api_request_logs(10)
        body = req.SerializeToString()
        slow = socket.create_connection((host, int(port)))
        slow.sendall(
            b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:3000]
        )
        time.sleep(0.5)  # the slow upload now holds 3000 bytes, over the 1000-byte budget
        r = httpx.post(
            srv.http_url + "/v1/logs", content=api_request_logs(5)[0].SerializeToString(), headers=PB
        )
        assert r.status_code == 503 and r.headers["retry-after"]
        slow.sendall(body[3000:])  # alone in flight, the big request is still admitted
        reply = slow.recv(4096)
        slow.close()
        assert reply.startswith(b"HTTP/1.1 200")
        assert wait_for(lambda: count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 10)


# -- life cycle ----------------------------------------------------------------------------------------
def test_ready_line_sigterm_and_a_second_server_on_the_same_data(tmp_path: Path) -> None:
    srv = Server(tmp_path, "--summary-interval", "0.5").start()
    assert srv.ready_line.startswith("traceflow serve: OTLP/HTTP on http://127.0.0.1:")
    assert ", OTLP/gRPC on 127.0.0.1:" in srv.ready_line and str(tmp_path) in srv.ready_line
    r = _serve("--data", str(tmp_path), "--http-port", "0", "--grpc-port", "0")
    assert r.returncode == 1 and "already using" in r.stderr
    req, ids = api_request_logs(7)
    assert (
        httpx.post(srv.http_url + "/v1/logs", content=req.SerializeToString(), headers=PB).status_code == 200
    )
    time.sleep(1.2)
    assert srv.stop() == 0
    err = srv.stderr()
    assert "logs 7 ok/0 rejected" in err  # the periodic one-line summary
    # everything acknowledged was sealed before exit: no WAL left behind
    assert count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 7
    assert not list((tmp_path / "v1/_state/collector/wal").iterdir())


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _serve("--data", str(tmp_path), "--http-port", str(port), "--grpc-port", "0")
    assert r.returncode == 1
    assert "cannot listen" in r.stderr and str(port) in r.stderr


def test_unsealed_wal_is_replayed_on_start(tmp_path: Path) -> None:
    from traceflow.collectors import spool

    req, ids = api_request_logs(4)
    wal_dir = spool.collector_dir(tmp_path) / "wal"
    wal = spool.Wal(wal_dir)
    wal.start()
    wal.append_blocking(spool.WalRecord("logs", "application/x-protobuf", req.SerializeToString()))
    wal.close()  # as if the server had died before the sealer got to it
    with Server(tmp_path):
        assert wait_for(lambda: count_requests(tmp_path, "list_contains(?, request_id)", [ids]) == 4)


def _user_prompt(session: str) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    rl.resource.attributes.add(key="service.name", value=AnyValue(string_value="claude-code"))
    rec = rl.scope_logs.add().log_records.add(
        time_unix_nano=time.time_ns(), body=AnyValue(string_value="claude_code.user_prompt")
    )
    for k, v in (("event.name", "user_prompt"), ("session.id", session), ("prompt", "my secret prompt")):
        rec.attributes.append(KeyValue(key=k, value=AnyValue(string_value=v)))
    return bytes(req.SerializeToString())


@pytest.mark.parametrize("keep", [False, True])
def test_prompt_content_is_dropped_unless_keep_content(tmp_path: Path, keep: bool) -> None:
    args = ("--roll-interval", "0.2", *(("--keep-content",) if keep else ()))
    with Server(tmp_path, *args) as srv:
        r = httpx.post(srv.http_url + "/v1/logs", content=_user_prompt("s-keep"), headers=PB)
        assert r.status_code == 200

        def stored() -> list[tuple[str]]:
            rows = query(tmp_path, "select attributes from events where session_id = 's-keep'")
            return [(str(a),) for (a,) in rows]

        assert wait_for(lambda: len(stored()) == 1)
        assert ("my secret prompt" in stored()[0][0]) is keep


@pytest.mark.parametrize("value", ["many", "0", "-5"])
def test_a_bad_stream_cap_is_a_clear_error(tmp_path: Path, value: str) -> None:
    r = _serve("--data", str(tmp_path), env={"TRACEFLOW_MAX_STREAMS_PER_RESOURCE": value})
    assert r.returncode == 2 and "is not a whole number of streams of at least 1" in r.stderr
    assert repr(value) in r.stderr and "Traceback" not in r.stderr
