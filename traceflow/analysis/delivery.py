"""Sending a result to an HTTP receiver (``check --webhook``, ``check --pushgateway``): the URL
check and the one error a failed delivery gives."""

from __future__ import annotations

import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager

from traceflow.errors import TraceflowError, UsageError


def http_url(url: str, option: str, example: str = "") -> str:
    """``url`` when it is an http(s) URL, else a usage error naming ``option``."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{option} {url!r} is not an http:// or https:// URL{example}")
    return url


@contextmanager
def delivering(what: str, url: str, lost: str) -> Iterator[None]:
    """Turn a failure to talk to the ``what`` at ``url`` into one TraceflowError that says ``lost``."""
    try:
        yield
    except urllib.error.HTTPError as e:
        raise TraceflowError(f"the {what} {url} answered HTTP {e.code}; {lost}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TraceflowError(f"cannot reach the {what} {url} ({reason}); {lost}") from None
