"""How Spark is pointed at an ``s3://`` lake: ``s3a://`` paths and ``spark.hadoop.fs.s3a.*`` settings
from the AWS variables (traceflow.config reads them). No Spark needed: the S3A connector itself
(hadoop-aws) is not installed here, so the conformance suite gives Spark a local copy."""

from __future__ import annotations

import pytest

from traceflow import config
from traceflow.engines.spark import HADOOP_AWS, local_defaults, s3a_conf, spark_path

S3A = "spark.hadoop.fs.s3a."


def test_paths() -> None:
    name = "s3://bucket/prefix/v1/requests/dt=2026-03-01/1-2-abc.parquet"
    assert spark_path(name) == "s3a://bucket/prefix/v1/requests/dt=2026-03-01/1-2-abc.parquet"
    assert (
        spark_path("/data/v1/requests/dt=2026-03-01/x.parquet") == "/data/v1/requests/dt=2026-03-01/x.parquet"
    )
    assert HADOOP_AWS.startswith("org.apache.hadoop:hadoop-aws:")


def test_aws_environment_keeps_the_set_aws_variables_only() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "", "HOME": "/root", "AWS_X": "1"}
    assert config.aws_environment(env) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}


def test_endpoint_keys_and_region() -> None:
    conf = s3a_conf(
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_ACCESS_KEY_ID": "minio",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_DEFAULT_REGION": "eu-west-1",
        }
    )
    assert conf == {
        S3A + "endpoint": "http://127.0.0.1:9000",
        S3A + "path.style.access": "true",
        S3A + "connection.ssl.enabled": "false",
        S3A + "endpoint.region": "eu-west-1",
        S3A + "access.key": "minio",
        S3A + "secret.key": "secret",
        S3A + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }


def test_s3_specific_endpoint_session_token_and_region_precedence() -> None:
    conf = s3a_conf(
        {
            "AWS_ENDPOINT_URL": "http://other:1",
            "AWS_ENDPOINT_URL_S3": "https://s3.example.com",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SESSION_TOKEN": "t",
            "AWS_REGION": "us-west-2",
            "AWS_DEFAULT_REGION": "eu-west-1",
        }
    )
    assert conf[S3A + "endpoint"] == "https://s3.example.com"
    assert conf[S3A + "connection.ssl.enabled"] == "true"
    assert conf[S3A + "endpoint.region"] == "us-west-2"
    assert conf[S3A + "session.token"] == "t"
    assert conf[S3A + "aws.credentials.provider"].endswith(".TemporaryAWSCredentialsProvider")


def test_profile_alone_and_nothing() -> None:
    conf = s3a_conf({"AWS_PROFILE": "analytics"})
    assert conf == {
        S3A + "aws.credentials.provider": "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider"
    }
    assert s3a_conf({}) == {}  # S3A's default chain: environment, instance role


class _FakeReader:
    """Records what Spark would be asked to read (``spark.read.option(...).parquet(*paths)``)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.columns: list[str] = []

    def option(self, key: str, value: str) -> _FakeReader:
        return self

    def parquet(self, *paths: str) -> _FakeReader:
        self.paths = list(paths)
        return self

    def selectExpr(self, *exprs: str) -> list[str]:
        return list(exprs)


def test_an_s3_lake_is_read_through_s3a(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceflow.engines.spark import read_table
    from traceflow.store.lake import Lake

    lake = Lake("s3://bucket/prefix")
    names = ["s3://bucket/prefix/v1/requests/dt=2026-03-01/1.parquet"]
    monkeypatch.setattr(lake, "file_names", lambda table: names)
    reader = _FakeReader()
    spark = type("FakeSpark", (), {"read": reader})()
    read_table(spark, lake, "requests")
    assert reader.paths == ["s3a://bucket/prefix/v1/requests/dt=2026-03-01/1.parquet"]


def test_local_driver_memory_comes_from_its_setting() -> None:
    assert local_defaults({})["spark.driver.memory"] == "2g"
    assert local_defaults({"TRACEFLOW_SPARK_DRIVER_MEMORY": "8g"})["spark.driver.memory"] == "8g"
