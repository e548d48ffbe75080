"""The live dashboard behind ``traceflow dashboard``: the HTML report served on a loopback port and
rebuilt when the lake changes.

The report itself is :func:`traceflow.dashboards.render.render_html`; starlette and uvicorn are
imported only when a dashboard is built or served.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError

if TYPE_CHECKING:
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

DEFAULT_PORT = 8050
DEFAULT_REFRESH_S = 5.0


def lake_fingerprint(lake: Lake) -> str:
    """Changes whenever a file is published to (or compacted out of) the lake."""
    count, newest, size = 0, 0, 0
    for table in ("requests", "events"):
        for path in lake.files(table):
            try:
                st = path.stat()
            except OSError:
                continue
            count += 1
            newest = max(newest, st.st_mtime_ns)
            size += st.st_size
    return f"{count}-{newest}-{size}"


def dashboard_app(
    lake: Lake,
    selection: Selection | None = None,
    kv_bytes_per_token: float | None = None,
    refresh_s: float = DEFAULT_REFRESH_S,
    kv_said: str | None = None,
) -> Any:
    """A Starlette app serving the report at ``/`` (rebuilt when the lake changed) and the lake's
    fingerprint at ``/version`` (the page polls it and reloads when it changes)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, PlainTextResponse
    from starlette.routing import Route

    from traceflow.dashboards.render import render_html
    from traceflow.dashboards.report_data import ReportOptions

    lock = threading.Lock()
    cache: dict[str, str] = {}

    def build() -> str:
        with lock:
            version = lake_fingerprint(lake)
            if cache.get("version") != version:
                page, _, _ = render_html(
                    lake.connect(),
                    selection,
                    ReportOptions(kv_bytes_per_token=kv_bytes_per_token, kv_said=kv_said),
                    refresh_s=refresh_s,
                    version=version,
                    title="traceflow dashboard",
                )
                cache.update(version=version, page=page)
            return cache["page"]

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(await run_in_threadpool(build), headers={"Cache-Control": "no-store"})

    async def version(request: Request) -> PlainTextResponse:
        return PlainTextResponse(lake_fingerprint(lake), headers={"Cache-Control": "no-store"})

    return Starlette(routes=[Route("/", index), Route("/version", version)])


def serve_dashboard(
    lake: Lake,
    selection: Selection | None = None,
    *,
    port: int = DEFAULT_PORT,
    refresh_s: float = DEFAULT_REFRESH_S,
    kv_bytes_per_token: float | None = None,
    ready: Callable[[str], None] | None = None,
    kv_said: str | None = None,
) -> None:
    """Serve :func:`dashboard_app` on ``127.0.0.1:port`` (0 picks a free port) until interrupted;
    ``ready`` gets the URL once the port is bound."""
    import socket

    import uvicorn

    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a port; give 1-65535, or 0 for a free one")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        sock.close()
        raise UsageError(
            f"cannot listen on 127.0.0.1:{port} ({e.strerror}); pass --port 0 for a free port"
        ) from None
    if ready is not None:
        ready(f"http://127.0.0.1:{sock.getsockname()[1]}/")
    config = uvicorn.Config(
        dashboard_app(lake, selection, kv_bytes_per_token, refresh_s, kv_said),
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run(sockets=[sock])
