"""The ``traceflow`` console script and ``python -m traceflow``: the result cache's fast path, then the CLI.

Only the standard library (and orjson, for the import bookkeeping that says whether the local agent
logs changed: :mod:`traceflow.store.local_logs`) is imported before the cache is consulted: a repeated
report over an unchanged lake (see :mod:`traceflow.store.result_cache`) is written from the cache
without importing typer, DuckDB, polars or pyarrow. Otherwise :func:`traceflow.cli.app.main` runs as
always; when the command is cacheable its stdout and stderr are recorded on the way out (``print``,
``typer.echo``, ``sys.stdout.write`` and ``sys.stdout.buffer.write`` all go through the recorder) and
stored if it exits 0. Anything going wrong with the cache is a miss: the command itself never fails
because of it.
"""

from __future__ import annotations

import io
import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time: it costs milliseconds
if TYPE_CHECKING:
    from typing import Any


def _write_all(stream: Any, data: bytes) -> None:
    """Write all of ``data``: a raw stream (``python -u``, ``PYTHONUNBUFFERED``) may take part of it."""
    view = memoryview(data)
    while view:
        n = stream.write(view)
        if n is None:  # a non-blocking stream that is full: give the rest to a blocking write
            stream.flush()
            continue
        view = view[n:]


class _Recorder(io.BufferedIOBase):
    """A binary stream that passes writes through to ``target`` and keeps a copy (up to ``limit``)."""

    def __init__(self, target: Any, limit: int) -> None:
        super().__init__()
        self.target = target
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False

    def write(self, b: Any) -> int:
        data = bytes(b)
        _write_all(self.target, data)
        if not self.overflow:
            self.size += len(data)
            if self.size > self.limit:
                self.overflow = True
                self.chunks = []
            else:
                self.chunks.append(data)
        return len(data)

    def flush(self) -> None:
        self.target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(self.target.isatty())

    def fileno(self) -> int:
        return int(self.target.fileno())

    def close(self) -> None:  # the real stream stays open; the interpreter closes it at exit
        if not self.closed:
            try:
                self.flush()
            finally:
                io.BufferedIOBase.close(self)

    def value(self) -> bytes:
        return b"".join(self.chunks)


def _wrap(stream: Any, limit: int) -> tuple[Any, _Recorder]:
    recorder = _Recorder(stream.buffer, limit)
    text = io.TextIOWrapper(
        recorder,  # type: ignore[type-var]
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=stream.line_buffering,
        write_through=True,
    )
    return text, recorder


def _replay(out: bytes, err: bytes) -> None:
    try:
        if out:
            _write_all(sys.stdout.buffer, out)
            sys.stdout.flush()
        if err:
            _write_all(sys.stderr.buffer, err)
            sys.stderr.flush()
    except BrokenPipeError:  # e.g. `| head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _logs_current(data_dir: str) -> bool:
    """False when the command will first import what is new in the lake's local agent logs (see
    :mod:`traceflow.store.local_logs`): the stored answer may be out of date, so it is not served.
    One ``stat`` per folder and per file of those logs."""
    from traceflow.store import local_logs

    if not local_logs.enabled(sys.argv[2:]):
        return True
    return local_logs.current(os.path.join(data_dir, "v1", "_state"))


def main() -> None:
    """Serve a cached result when the command and the lake allow it, else run the CLI (and record it)."""
    if sys.argv[1:2] == ["statusline"]:  # Claude Code runs it after every message: no typer, no cache
        from traceflow.cli.status import fast_path

        if fast_path(sys.argv[1:]):
            return
    if sys.argv[1:2] in (["daily"], ["weekly"], ["monthly"], ["session"]):  # the usage ledger, no typer
        from traceflow.cli.usage_fast import fast_path as usage_fast_path

        if usage_fast_path(sys.argv[1:]):
            return
    plan = None
    snapshot = None
    hit = None
    try:
        from traceflow import config
        from traceflow.store import result_cache

        plan = result_cache.plan(sys.argv)
        if plan is not None and _logs_current(plan.data_dir):
            hit = result_cache.lookup(plan)
            if hit is None:
                snapshot = result_cache.Snapshot(plan.data_dir)
                resolved_before = len(config.resolved)
    except Exception:  # the cache never breaks a command
        plan = hit = None
    if hit is not None:
        _replay(*hit)
        return

    from traceflow.cli.app import main as cli_main

    if plan is None or snapshot is None:
        cli_main()
        return

    real_out, real_err = sys.stdout, sys.stderr
    try:
        out_text, out_rec = _wrap(real_out, result_cache.MAX_ENTRY_BYTES)
        err_text, err_rec = _wrap(real_err, result_cache.MAX_ENTRY_BYTES)
    except Exception:  # streams without a binary buffer: run without recording
        cli_main()
        return
    sys.stdout, sys.stderr = out_text, err_text
    code: Any = 0
    try:
        cli_main()
    except SystemExit as e:
        code = e.code
    finally:
        for s in (out_text, err_text):
            try:  # noqa: SIM105 (contextlib costs an import)
                s.flush()
            except Exception:
                pass
        sys.stdout, sys.stderr = real_out, real_err
        for s in (out_text, err_text):
            try:  # noqa: SIM105
                s.detach()  # leaves the real streams open
            except Exception:
                pass
    if _exit_code(code) == 0 and not (out_rec.overflow or err_rec.overflow):
        used = {os.path.abspath(d) for d in config.resolved[resolved_before:]}
        if used == {plan.data_dir}:  # the CLI read the lake the fast path validated, and only it
            try:  # noqa: SIM105 (contextlib costs an import)
                result_cache.store(plan, snapshot, out_rec.value(), err_rec.value())
            except Exception:
                pass
    if code is not None and code != 0:
        sys.exit(code)
