"""OTLP/gRPC conformance of ``traceflow serve`` with grpcio clients on real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from collectors_support import Server, api_request_logs, count_requests, stub, wait_for
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(
        tmp_path_factory.mktemp("grpc-data"), "--max-body-bytes", "1MiB", "--roll-interval", "0.2"
    ) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: Server) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_target) as ch:
        yield ch


def status_details(err: grpc.RpcError) -> status_pb2.Status:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    raise AssertionError("no grpc-status-details-bin in the trailers")


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_logs_export_is_stored(server: Server, channel: grpc.Channel, compression: grpc.Compression) -> None:
    req, ids = api_request_logs(20)
    resp = stub("logs", channel).Export(req, timeout=10, compression=compression)
    assert resp == logs_service_pb2.ExportLogsServiceResponse()
    assert wait_for(lambda: count_requests(server.data, "list_contains(?, request_id)", [ids]) == 20, 5)


def test_metrics_and_traces_services_answer(channel: grpc.Channel) -> None:
    m = stub("metrics", channel).Export(metrics_service_pb2.ExportMetricsServiceRequest(), timeout=10)
    assert not m.HasField("partial_success")
    t = stub("traces", channel).Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10)
    assert not t.HasField("partial_success")


def test_undecodable_message_is_invalid_argument(channel: grpc.Channel) -> None:
    call = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert status_details(info.value).code == 3


def test_partial_success_over_grpc(channel: grpc.Channel) -> None:
    req = metrics_service_pb2.ExportMetricsServiceRequest()
    metric = req.resource_metrics.add().scope_metrics.add().metrics.add(name="claude_code.session.count")
    metric.gauge.data_points.add(time_unix_nano=1_795_974_729_000_000_000, as_int=1)
    metric.gauge.data_points.add(time_unix_nano=1_795_974_729_000_000_001)  # no value
    resp = stub("metrics", channel).Export(req, timeout=10)
    assert resp.partial_success.rejected_data_points == 1
    assert "no value" in resp.partial_success.error_message


def test_message_over_the_limit_is_refused(channel: grpc.Channel) -> None:
    req, _ = api_request_logs(4000)  # ~2.4 MB > 1 MiB
    with pytest.raises(grpc.RpcError) as info:
        stub("logs", channel).Export(req, timeout=10)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_gzip_bomb_over_grpc_is_refused(channel: grpc.Channel) -> None:
    call = channel.unary_unary("/opentelemetry.proto.collector.logs.v1.LogsService/Export")
    # a valid message of ~32 MiB (one huge string) that gzips to ~32 KiB
    req, _ = api_request_logs(1)
    req.resource_logs[0].scope_logs[0].log_records[0].body.string_value = "a" * (32 << 20)
    with pytest.raises(grpc.RpcError) as info:
        call(req.SerializeToString(), timeout=30, compression=grpc.Compression.Gzip)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # and the server keeps serving
    ok, _ = api_request_logs(1)
    stub("logs", channel).Export(ok, timeout=10)


def test_unknown_method_is_unimplemented(channel: grpc.Channel) -> None:
    call = channel.unary_unary("/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export")
    with pytest.raises(grpc.RpcError) as info:
        call(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_retry_info_round_trips() -> None:
    from traceflow.collectors import ingest

    status = status_pb2.Status.FromString(ingest.rpc_status(14, "busy", retry_after_s=3))
    info = error_details_pb2.RetryInfo()
    assert status.code == 14 and status.message == "busy"
    assert status.details[0].Unpack(info)
    assert info.retry_delay.seconds == 3
