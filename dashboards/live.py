"""The live dashboard behind ``traceflow dashboard``: the explorer (:mod:`traceflow.dashboards.explorer`)
served on a port, its figures read from the lake at each request and its report rebuilt when the
lake changes.

On loopback nobody signs in; any other address needs ``--tokens FILE`` (the tokens file of ``serve
--tokens``), and each viewer then signs in and reads only their team's rows, as ``serve`` refuses a
non-loopback bind without a token. starlette and uvicorn are imported only when a dashboard is built
or served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceflow.errors import UsageError

if TYPE_CHECKING:
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

DEFAULT_PORT = 8050
DEFAULT_REFRESH_S = 5.0
DEFAULT_HOST = "127.0.0.1"


def lake_fingerprint(lake: Lake) -> str:
    """Changes whenever a file is published to (or compacted out of) the lake: a local lake's files'
    count, newest time and size; an object store's file names."""
    if lake.url is not None:
        names = sorted(n for table in ("requests", "events") for n in lake.file_names(table))
        return f"{len(names)}-{hashlib.sha256(chr(10).join(names).encode()).hexdigest()[:16]}"
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
    tokens: Path | None = None,
    kv_said: str | None = None,
) -> Any:
    """The explorer's Starlette app over ``lake`` (:func:`traceflow.dashboards.explorer.app.explorer_app`);
    with ``tokens``, viewers sign in with a token of that file."""
    from traceflow.collectors.tokens import TokenFileError, Tokens
    from traceflow.dashboards.explorer.access import Access
    from traceflow.dashboards.explorer.app import explorer_app

    if selection is not None and selection.sessions:
        raise UsageError("dashboard takes no --session: open a session's timeline from its team's sessions")
    try:
        access = Access(Tokens(path=tokens) if tokens is not None else None)
    except TokenFileError as e:
        raise UsageError(f"--tokens: {e}") from None
    return explorer_app(
        lake,
        selection,
        access,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_said=kv_said,
        refresh_s=refresh_s,
        fingerprint=lambda: lake_fingerprint(lake),
    )


def check_bind(host: str, port: int, tokens: Path | None) -> None:
    """Refuse a port that is none, and a host reachable from other machines without sign-in (as
    ``serve`` refuses one without a token): a usage error naming the fix."""
    from traceflow.collectors.server import is_loopback

    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a port; give 1-65535, or 0 for a free one")
    if tokens is None and not is_loopback(host):
        raise UsageError(
            f"refusing to serve the dashboard on {host}, which is reachable from other machines, without "
            "sign-in: pass --tokens FILE (the 'TEAM TOKEN' file of serve --tokens), or keep the default "
            f"--host {DEFAULT_HOST}"
        )


def serve_dashboard(
    lake: Lake,
    selection: Selection | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tokens: Path | None = None,
    refresh_s: float = DEFAULT_REFRESH_S,
    kv_bytes_per_token: float | None = None,
    ready: Callable[[str], None] | None = None,
    kv_said: str | None = None,
) -> None:
    """Serve :func:`dashboard_app` on ``host:port`` (0 picks a free port) until interrupted; a host
    other than loopback needs ``tokens``. ``ready`` gets the URL once the port is bound."""
    import socket

    import uvicorn

    check_bind(host, port, tokens)
    app = dashboard_app(lake, selection, kv_bytes_per_token, refresh_s, tokens, kv_said)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({e.strerror}); pass --port 0 for a free port"
        ) from None
    if ready is not None:
        shown = f"[{host}]" if ":" in host else host
        ready(f"http://{shown}:{sock.getsockname()[1]}/")
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
