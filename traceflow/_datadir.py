"""Where the data directory is: the one rule the CLI (``config.data_dir``) and the result cache's
stdlib-only fast path (``traceflow._entry``) both use, so that the two cannot drift apart.

Only ``os`` is imported: this runs before anything heavy on every ``traceflow`` start.
"""

from __future__ import annotations

import os

#: Every directory resolved in this process, in order. The fast path stores a result only when the
#: command resolved exactly the directory whose lake it validated the result against.
resolved: list[str] = []


def resolve_data_dir(flag: str | os.PathLike[str] | None = None) -> str:
    """``--data`` flag, else ``$TRACEFLOW_DATA``, else ``$XDG_DATA_HOME/traceflow`` (``~/.local/share``)."""
    if flag:
        path = os.path.expanduser(os.fspath(flag))
    else:
        env = os.environ.get("TRACEFLOW_DATA")
        if env:
            path = os.path.expanduser(env)
        else:
            xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
            path = os.path.join(xdg, "traceflow")
    resolved.append(path)
    return path
