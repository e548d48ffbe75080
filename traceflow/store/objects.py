"""The lake's files on an object store (``s3://bucket/prefix``), through s3fs.

Credentials, region and endpoint come from the usual AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL`` for MinIO, Ceph and other S3-compatible stores, ``AWS_PROFILE``), read by botocore.

Every file is published with one PUT under a name no other writer uses, sent with
``If-None-Match: *`` so that a store that supports conditional writes (AWS S3 since 2024, MinIO,
moto) refuses to replace an object; a store that answers *not implemented* gets a plain PUT (the
names are unique anyway). An object is visible only once its PUT completed, so readers never see a
partial file and writers need no staging area on the store.

The maintenance lease (:mod:`traceflow.store.lease`) also replaces its one object in place, with
``If-Match: <ETag>`` (AWS S3 since November 2024, MinIO, moto 5.1.5 and later): :meth:`ObjectStore.swap`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from traceflow import config
from traceflow.errors import LakeError

#: s3fs instances per process: one connection pool per endpoint and credentials.
_FILESYSTEMS: dict[str, Any] = {}


def filesystem() -> Any:
    """The s3fs filesystem (fsspec protocol ``s3``), configured from the AWS environment variables."""
    try:
        import s3fs
    except ImportError:
        raise LakeError(
            "an s3:// data location needs s3fs: pip install 'traceflow[s3]' (or pip install s3fs)"
        ) from None
    aws = config.aws_environment()
    key = "\0".join(aws.get(k, "") for k in config.AWS_VARIABLES)
    fs = _FILESYSTEMS.get(key)
    if fs is None or _FILESYSTEMS.get("pid") != os.getpid():
        _FILESYSTEMS.clear()
        _FILESYSTEMS["pid"] = os.getpid()  # a forked worker opens its own connections
        fs = _FILESYSTEMS[key] = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False)
    return fs


class ObjectStore:
    """Listing, conditional PUTs, reads and deletes of ``s3://`` objects under one lake URL."""

    def __init__(self, url: str) -> None:
        if not url.startswith("s3://") or len(url) <= len("s3://"):
            raise LakeError(f"{url!r} is not an s3://bucket/prefix URL")
        self.url = url.rstrip("/")
        self.fs = filesystem()
        self._conditional = True

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (FileExistsError, FileNotFoundError):
            raise
        except PermissionError as e:
            raise LakeError(
                f"{what}: access denied ({e}); check AWS_ACCESS_KEY_ID and the bucket's policy"
            ) from None
        except OSError as e:
            raise LakeError(f"{what}: {e}; check AWS_ENDPOINT_URL and the credentials") from None

    def list(self, prefix: str) -> list[str]:
        """Every object under ``prefix`` (an ``s3://`` URL), as sorted ``s3://`` URLs."""
        with contextlib.suppress(FileNotFoundError):
            keys = self._call(f"cannot list {prefix}", self.fs.find, prefix, refresh=True)
            return sorted(f"s3://{k}" for k in keys)
        return []

    def put(self, url: str, data: bytes) -> None:
        """Create the object ``url`` with one PUT; FileExistsError when it exists already."""
        if self._conditional:
            try:
                self._call(f"cannot write {url}", self.fs.pipe_file, url, data, mode="create")
                return
            except LakeError as e:
                if "NotImplemented" not in str(e) and "not implemented" not in str(e).lower():
                    raise
                self._conditional = False  # a store without conditional writes: names are unique
        self._call(f"cannot write {url}", self.fs.pipe_file, url, data)

    def put_file(self, local: Path, url: str) -> None:
        self.put(url, local.read_bytes())

    def read(self, url: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        try:
            return bytes(self._call(f"cannot read {url}", self.fs.cat_file, url))
        except FileNotFoundError:
            return None

    def exists(self, url: str) -> bool:
        return bool(self._call(f"cannot read {url}", self.fs.exists, url))

    def delete(self, urls: Iterable[str]) -> None:
        """Delete objects (missing ones are fine)."""
        todo = list(urls)
        if todo:
            with contextlib.suppress(FileNotFoundError):
                self._call("cannot delete objects", self.fs.rm, todo)

    def _conditional_put(self, url: str, data: bytes, condition: dict[str, str]) -> str | None:
        """PUT ``data`` as ``url`` under ``condition``: the new ETag, or None when the condition did not
        hold (another writer got there first). :class:`NoConditionalWrites` where the store has none."""
        bucket, key, _ = self.fs.split_path(url)
        try:
            reply = self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
        except (FileExistsError, FileNotFoundError):  # If-None-Match: it exists; If-Match: it is gone
            return None
        except OSError as e:
            code = _error_code(e)
            if code in ("PreconditionFailed", "ConditionalRequestConflict"):  # 412, or 409 while racing
                return None
            if code == "NotImplemented" or "not implemented" in str(e).lower():
                raise NoConditionalWrites(
                    f"{self.url}: the object store does not support conditional writes "
                    f"({', '.join(condition)}): {e}"
                ) from None
            self._call(f"cannot write {url}", _raise, e)
        return str(reply["ETag"])

    def create(self, url: str, data: bytes) -> str | None:
        """Create ``url`` unless it exists (``If-None-Match: *``): its ETag, or None when it existed."""
        return self._conditional_put(url, data, {"IfNoneMatch": "*"})

    def swap(self, url: str, data: bytes, etag: str) -> str | None:
        """Replace ``url`` only if it is still the version ``etag`` (``If-Match``): the new ETag, or
        None when another writer replaced (or removed) it meanwhile."""
        return self._conditional_put(url, data, {"IfMatch": etag})

    def version(self, url: str) -> tuple[str, bytes] | None:
        """``url``'s ETag and bytes, or None when there is no such object."""
        bucket, key, _ = self.fs.split_path(url)
        try:
            head = self._call(f"cannot read {url}", self.fs.call_s3, "head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        data = self.read(url)  # a swap between the two: the ETag is older than the bytes, and a
        # swap with it fails, which is safe
        return None if data is None else (str(head["ETag"]), data)


class NoConditionalWrites(LakeError):
    """The object store refuses ``If-None-Match``/``If-Match`` on PUT (``NotImplemented``)."""


def _raise(e: BaseException) -> None:
    raise e


def _error_code(e: BaseException) -> str:
    """The S3 error code behind an s3fs error (s3fs keeps botocore's ClientError as the cause)."""
    cause = e.__cause__
    response = getattr(cause, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
