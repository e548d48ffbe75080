"""Fixtures for every test: the test data (``tests/data``, and the packaged agent examples), a fresh
lake, and the CLI in-process."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from traceflow.dashboards.demo import examples_dir
from traceflow.store.lake import Lake

REPO = Path(__file__).resolve().parents[1]


def corpus_generator() -> Any:
    """``benchmarks/gen_claude_corpus.py`` loaded as a module (the benchmarks are not a package)."""
    spec = importlib.util.spec_from_file_location(
        "gen_claude_corpus", REPO / "benchmarks" / "gen_claude_corpus.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_claude_corpus", mod)
    spec.loader.exec_module(mod)
    return mod


#: The test data as stored in the repository (origin, licence and checksums: ``tests/data/SOURCES.md``).
STORED = REPO / "tests" / "data"


def unpack_test_data(stored: Path = STORED) -> Path:
    """A copy of ``stored`` in which every ``NAME.gz`` is unpacked to ``NAME``: the folder the tests read.

    The large public traces are kept gzip-compressed in the repository. The copy is made once per
    content (a cache folder in the temporary directory, named by a digest of every stored file) and
    reused until a stored file changes; its files are read-only, so that no test changes them.
    """
    files = sorted(p for p in stored.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(stored).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    cache = Path(tempfile.gettempdir()) / f"traceflow-test-data-{os.getuid()}"
    root = cache / digest.hexdigest()[:20]
    if root.is_dir():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{root.name}.", dir=cache))
    for path in files:
        dest = work / path.relative_to(stored)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".gz":
            dest.with_suffix("").write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copyfile(path, dest)
    for path in work.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    try:
        work.rename(root)
    except OSError:  # another test process made the same copy first
        shutil.rmtree(work)
    return root


#: The folder the tests read their data from (``tests/data``, unpacked).
TESTDATA = unpack_test_data()


#: Whether the expensive cases run at full size: on CI (``.ci/run`` sets ``CI=1``) the cross-engine
#: suites compare more generated lakes and every query over the S3 lake; a local run a smaller share that
#: still checks every property (docs/testing.md, "Keeping the suite fast").
FULL = bool(os.environ.get("CI"))

#: The modules a local run leaves to CI: the full cross-engine suites (every packaged query, analysis
#: and export on Spark over several lakes: about three quarters of the suite's critical path). A local
#: run checks Spark with tests/test_spark_smoke.py instead; ``CI=1 python3 -m pytest`` runs these, and
#: so does naming one on the command line (``python3 -m pytest tests/test_differential.py``).
LEFT_TO_CI = ("tests/test_conformance.py", "tests/test_differential.py")

#: What the header and the summary of a local run say, so that a green local run is not taken for CI's.
LOCAL_RUN = (
    "local run: the full Spark modules ({}) left to CI (CI=1 runs them); "
    "tests/test_spark_smoke.py checks Spark here".format(", ".join(LEFT_TO_CI))
)


def packaged_examples() -> Path:
    """The example agent logs packaged with traceflow (``traceflow/examples``), found as ``traceflow
    demo`` finds them. The tests read them there, not a copy in ``tests/data``; their expected rows are
    in ``tests/data/agent-examples/README.md``."""
    path = examples_dir()
    if path is None:
        raise RuntimeError(
            "traceflow/examples is missing: install traceflow from the repository (pip install -e .)"
        )
    return path


#: The packaged example agent logs (``traceflow/examples``: claude-transcript.jsonl, codex-rollout.jsonl,
#: gemini-chat.jsonl and the three ``*-otlp-logs.json``). The tests only read them.
EXAMPLES = packaged_examples()


def _uses_spark(item: pytest.Item) -> bool:
    """Whether ``item`` runs on the Spark session: marked ``spark``, or asks for the ``spark`` fixture
    (and not merely a parameter of that name, as in tests/test_rewrite.py)."""
    if item.get_closest_marker("spark"):
        return True
    callspec = getattr(item, "callspec", None)
    return "spark" in getattr(item, "fixturenames", ()) and "spark" not in (
        callspec.params if callspec else {}
    )


def _spark_group(item: pytest.Item) -> str:
    """The xdist group of a Spark test: ``spark:<module>``, or ``spark:<module>:<part>`` where the
    module splits its Spark tests in parts (a module-level ``spark_part(item) -> str``, as
    tests/test_conformance.py does), each part on one worker, so that two workers share its work."""
    module = item.getparent(pytest.Module)
    if module is None:
        return "spark:"
    part = getattr(module.obj, "spark_part", None)
    return f"spark:{module.nodeid}:{part(item)}" if callable(part) else f"spark:{module.nodeid}"


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a module- or session-scoped fixture written in its own module (a server,
    an imported lake): set up once per worker process that runs one of the module's tests."""
    module = item.getparent(pytest.Module)
    info = getattr(item, "_fixtureinfo", None)
    if module is None or info is None:
        return False
    return any(
        d.scope in ("module", "session") and d.baseid == module.nodeid
        for defs in info.name2fixturedefs.values()
        for d in defs
    )


def _named(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether ``item``'s module was named on the command line (a file or a test in it, not a folder)."""
    for arg in config.args:
        path = Path(arg.split("::")[0])
        for base in (config.invocation_params.dir, config.rootpath):
            if (base / path).resolve() == item.path:
                return True
    return False


def _left_to_ci(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether a local run leaves ``item`` to CI: a test of :data:`LEFT_TO_CI` whose module was not
    named on the command line."""
    module = item.getparent(pytest.Module)
    in_module = module is not None and module.nodeid.split("::")[0] in LEFT_TO_CI
    return in_module and not FULL and not _named(config, item)


def pytest_report_header(config: pytest.Config) -> str | None:
    return None if FULL else LOCAL_RUN


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not FULL:
        terminalreporter.write_sep("-", LOCAL_RUN, yellow=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A local run leaves :data:`LEFT_TO_CI` to CI (deselected). Groups for pytest-xdist's ``--dist
    loadgroup`` (pyproject's addopts run the suite with ``-n logical``): on CI a module's Spark tests
    (or each part of them, :func:`_spark_group`) on one worker, so that a worker starts at most one JVM
    (the session-scoped ``spark`` fixture) and two Spark groups can run at once on two; in a local run
    every Spark test on one worker (one JVM for the run); the tests of a module that share a
    module-scoped fixture on one worker, so that it is set up once; every other test goes to whichever
    worker is free. docs/testing.md explains."""
    left = {item.nodeid for item in items if _left_to_ci(config, item)}
    if left:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in left])
        items[:] = [item for item in items if item.nodeid not in left]
    for item in items:
        if _uses_spark(item):  # one JVM per worker: on CI a module's Spark tests, locally all of them
            item.add_marker(pytest.mark.xdist_group(_spark_group(item) if FULL else "spark"))
        elif _shares_a_module_fixture(item):
            module = item.getparent(pytest.Module)
            assert module is not None
            item.add_marker(pytest.mark.xdist_group(module.nodeid))


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables are as wide as their columns, as when written to a file (traceflow.output.terminal_width):
    pytest-xdist's workers run with ``COLUMNS=80``; a test that wants a width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def testdata() -> Path:
    return TESTDATA


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    """An empty lake (its directory exists: read commands refuse a --data that does not)."""
    lake = Lake(tmp_path / "data")
    lake.ensure()
    return lake


@pytest.fixture
def cli(lake: Lake) -> Callable[..., tuple[int, str, str]]:
    """Run ``traceflow ARGS --data <the test's lake>`` in-process: (exit code, stdout, stderr)."""
    from traceflow.cli.app import app, register_all

    register_all()
    runner = CliRunner()

    def run(*args: str, data: bool = True) -> tuple[int, str, str]:
        argv = [*args, "--data", str(lake.root)] if data else list(args)
        result = runner.invoke(app, argv)
        if result.exception and not isinstance(result.exception, SystemExit):
            from traceflow.errors import TraceflowError, UsageError

            if isinstance(result.exception, TraceflowError):
                code = 2 if isinstance(result.exception, UsageError) else 1
                return code, result.stdout, str(result.exception)
            raise result.exception
        return result.exit_code, result.stdout, result.stderr

    return run


def require_pyspark() -> None:
    """Skip (fail on CI, which installs both) unless pyspark and Java are here."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pyspark is not installed: .ci/run installs traceflow[spark]")
        pytest.skip("pyspark is not installed (pip install 'traceflow[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI"):
            pytest.fail("no java: .ci/run installs openjdk-17-jre-headless")
        pytest.skip("Spark needs Java 17")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One Spark local-mode session (``local[2]``) for the whole test run: the JVM starts once (on one
    pytest-xdist worker: every test that takes this fixture is grouped there, see
    :func:`pytest_collection_modifyitems`). The JVM compiles with C1 only (``TieredStopAtLevel=1``):
    a test run is short, and the C2 compiler's work does not pay back in it (the 18 packaged queries
    on the synthetic lake: 39 s of JVM CPU instead of 77 s; docs/testing.md)."""
    require_pyspark()
    from traceflow.engines.spark import session

    s = session(
        "local[2]",
        app_name="traceflow-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        },
    )
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@contextlib.contextmanager
def s3_test_server(state: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1 (a free port), with the AWS variables naming it, the machine-local
    state under ``state`` and the result cache off while the block runs; yields those variables.
    moto and s3fs are test dependencies (``.[test]``): a missing one fails, it does not skip."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "XDG_STATE_HOME": str(state),
        "TRACEFLOW_CACHE": "0",
    }
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            mp.delenv("AWS_PROFILE", raising=False)
            yield env
    finally:
        server.stop()


@pytest.fixture(params=["jit", "numpy"])
def lru_engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the numba kernels (traceflow.kv.lru_jit) and with the numpy/Python path
    (``TRACEFLOW_NATIVE=0``); where numba is required (CI) a missing one fails."""
    from traceflow import native

    if request.param == "numpy":
        monkeypatch.setenv("TRACEFLOW_NATIVE", "0")
    else:
        monkeypatch.delenv("TRACEFLOW_NATIVE", raising=False)
        if not native.jit_available():
            if os.environ.get("TRACEFLOW_REQUIRE_NATIVE") == "1":
                raise RuntimeError("numba is not installed; pip install -e '.[test]' installs it")
            pytest.skip("numba is not installed")
    assert native.jit_enabled() == (request.param == "jit")
    return str(request.param)
