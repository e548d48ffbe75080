"""The usage ledger: the requests of a lake's Claude Code transcripts, kept current from their new bytes.

``traceflow daily | weekly | monthly | session --json`` answer from it instead of importing into the
lake and querying it (``docs/freshness.md``), when it holds exactly what the lake's view of the same
transcripts would: the lake's ``requests`` hold nothing but what refreshes of these transcripts wrote
(:func:`covered`), the transcripts are Claude Code's only (no Codex or Gemini logs to refresh) and
every request line names its session. Otherwise :class:`Unsupported` sends the command to the lake.

What is kept: per transcript, where the last read stopped (size, mtime, offset, line number, a hash of
its first bytes: the importer's own bookkeeping, :mod:`traceflow.importers.run`), and per request the
copy the lake's views would keep, with the fields the period views read (recorded time, model,
session, the token kinds). A read takes the lines that carry usage only: a byte test
(``"usage"`` and ``"assistant"`` in the line) before the importer's decoder
(:data:`~traceflow.importers.claude_code_records.DECODER`), so prompts and tool results are never
decoded. The rules are the importer's: the request key (``requestId``, else ``message.id``, else
the file and line), the cache write (:func:`traceflow.rows.anthropic_cache_write`), the kept copy
(the most complete, :func:`traceflow.store.measures.completeness`; among equals the one read last:
the later refresh, then the later file and line), a last line without its newline read once it is
whole. ``tests/test_usage_ledger.py`` checks the views it gives against the lake's.

An unchanged transcript costs one ``stat``; a grown one is read from where the last read stopped.
The ledger lives in ``<state>/imports/`` (``usage-ledger.json``, ``usage-requests.msgpack``:
bookkeeping, which the result cache ignores). The answers computed from it are kept beside it
(:func:`stored_answer`), so that a run with nothing new prints the stored answer after one ``stat``
per folder and file.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import time

import orjson

TYPE_CHECKING = False  # typing is not imported at run time; msgspec and the decoder only when a file is read
if TYPE_CHECKING:
    from typing import Any

LEDGER = "usage-ledger.json"
REQUESTS = "usage-requests.msgpack"
COVERED = "usage-covered.json"
_VERSION = 1
#: The importer's head hash length (:mod:`traceflow.importers.run`).
_HEAD_BYTES = 4096
#: Fields of a request: the recorded time (µs since the epoch), model, session, cold input, output,
#: cache write, cache read, 1-hour write (the order :func:`traceflow.analysis.usage.periods_of_requests`
#: reads), then its completeness and the refresh, file (its index in the ledger's paths) and line of
#: the kept copy.
TS, MODEL, SESSION, COLD, OUTPUT, WRITE, READ, WRITE_1H, TOTAL, GEN, PATH, SEQ = range(12)


class Unsupported(Exception):
    """The ledger cannot give the lake's answer exactly (see the module docstring): read the lake."""


def _head(path: str, length: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.blake2b(fh.read(length), digest_size=12).hexdigest()


def _path(state_dir: str, name: str) -> str:
    return os.path.join(state_dir, "imports", name)


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------
# Which lakes the ledger speaks for
# ---------------------------------------------------------------------------------------------------


def requests_signature(data_dir: str) -> str:
    """The names of the lake's ``requests`` files (files are published by rename and never changed
    in place, so any write or compaction changes it); ``""`` for a lake without requests."""
    base = os.path.join(data_dir, "v1", "requests")
    names: list[str] = []
    try:
        parts = sorted(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return ""
    for part in parts:
        try:
            names += sorted(f"{part}/{e.name}" for e in os.scandir(os.path.join(base, part)))
        except OSError:
            names.append(f"{part}/?")
    if not names:
        return ""
    return hashlib.blake2b("\n".join(names).encode(), digest_size=16).hexdigest()


def covered(data_dir: str, state_dir: str) -> bool:
    """Whether the lake's ``requests`` hold only what refreshes of its Claude Code transcripts wrote
    (:func:`record_refresh`), so that the ledger's answer is the lake's."""
    sig = requests_signature(data_dir)
    if not sig:
        return True
    try:
        with open(_path(state_dir, COVERED), "rb") as fh:
            value = orjson.loads(fh.read())
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and sig in (value.get("signatures") or ())


def record_refresh(data_dir: str, state_dir: str, before: str, after: str) -> None:
    """After a refresh of Claude Code transcripts alone changed the lake's ``requests`` from
    signature ``before`` to ``after``: the lake stays covered if it was."""
    if before == after:
        return
    path = _path(state_dir, COVERED)
    try:
        with open(path, "rb") as fh:
            value = orjson.loads(fh.read())
        known = [s for s in value.get("signatures", []) if isinstance(s, str)]
    except (OSError, ValueError, AttributeError):
        known = []
    if before and before not in known:
        return  # the lake held other data before: the ledger does not speak for it
    _write(path, orjson.dumps({"version": _VERSION, "signatures": [*known[-7:], after]}))


# ---------------------------------------------------------------------------------------------------
# The ledger
# ---------------------------------------------------------------------------------------------------


class Ledger:
    """The ledger of one lake (see the module docstring): an index of the files read
    (``usage-ledger.json``, read by every run) and the requests (``usage-requests.msgpack``, read
    only when a file has grown). Both carry the ledger's identity and generation; where they
    disagree (a crash between their writes), everything is read again."""

    def __init__(self, state_dir: str, roots: list[str]) -> None:
        self.state_dir = state_dir
        self.roots = roots
        #: Which ledger this is (a new one gets a new identity) and how many times it read new bytes:
        #: together they say whether an answer computed from it is still its answer.
        self.ident = f"{time.time_ns()}-{os.getpid()}"
        self.gen = 0
        self.dirs: dict[str, int] = {}
        #: path -> [size, mtime_ns, offset, next line, head hash, head length, index in paths]
        self.files: dict[str, list[Any]] = {}
        self._requests: dict[str, list[Any]] | None = None
        self._paths: list[str] | None = None
        self.changed = False

    @property
    def stamp(self) -> str:
        """Changes whenever the requests do."""
        return f"{self.ident}:{self.gen}"

    @property
    def requests(self) -> dict[str, list[Any]]:
        """Request key -> its kept copy (:data:`TS` ... :data:`SEQ`)."""
        self._load_requests()
        assert self._requests is not None
        return self._requests

    @property
    def paths(self) -> list[str]:
        """The files of the kept copies (a request holds its file's index here)."""
        self._load_requests()
        assert self._paths is not None
        return self._paths

    @classmethod
    def load(cls, state_dir: str, roots: list[str]) -> Ledger:
        """The stored ledger of ``roots``, or an empty one (other roots, none stored, unreadable)."""
        ledger = cls(state_dir, roots)
        try:
            with open(_path(state_dir, LEDGER), "rb") as fh:
                value = orjson.loads(fh.read())
        except (OSError, ValueError):
            return ledger
        if not isinstance(value, dict) or value.get("version") != _VERSION or value.get("roots") != roots:
            return ledger
        ledger.ident = value["ident"]
        ledger.gen = value["gen"]
        ledger.dirs = value["dirs"]
        ledger.files = value["files"]
        return ledger

    def _load_requests(self) -> int:
        """Read the requests (once). When they are not this index's, the ledger starts again: every
        transcript is read (returns the bytes read then)."""
        if self._requests is not None:
            return 0
        import msgspec

        self._requests, self._paths = {}, []
        if not self.files:
            return 0
        try:
            with open(_path(self.state_dir, REQUESTS), "rb") as fh:
                value = msgspec.msgpack.decode(fh.read())
        except (OSError, msgspec.DecodeError):
            value = None
        if isinstance(value, dict) and value.get("ident") == self.ident and value.get("gen") == self.gen:
            self._requests, self._paths = value["requests"], value["paths"]
            return 0
        self.ident = f"{time.time_ns()}-{os.getpid()}"
        self.gen = 0
        self.files = {}
        self.dirs, paths = _walk(self.roots)
        return self._read_all(paths)

    def save(self) -> None:
        """Write what changed: the requests first, then the index that names them."""
        if not self.changed:
            return
        if self._requests is not None:
            import msgspec

            value = {"ident": self.ident, "gen": self.gen, "paths": self._paths, "requests": self._requests}
            _write(_path(self.state_dir, REQUESTS), msgspec.msgpack.encode(value))
        index = {
            "version": _VERSION,
            "roots": self.roots,
            "ident": self.ident,
            "gen": self.gen,
            "dirs": self.dirs,
            "files": self.files,
        }
        _write(_path(self.state_dir, LEDGER), orjson.dumps(index))
        self.changed = False

    # -- bringing it up to date ------------------------------------------------------------------
    def update(self) -> int:
        """Read what is new in the transcripts under the roots; returns the bytes read. One ``stat``
        per folder and per file known; a folder that changed is listed again."""
        moved = not self.dirs or any(_mtime(d) != m for d, m in self.dirs.items())
        if moved:
            self.dirs, paths = _walk(self.roots)
            self.changed = True
        else:
            paths = list(self.files)
        if not any(self._stale(p) is not None for p in paths):
            return 0
        rebuilt = self._load_requests()
        return rebuilt + self._read_all(paths)

    def _read_all(self, paths: list[str]) -> int:
        """Read what is new in ``paths`` (in their order, a new generation); the bytes read."""
        stale = [(p, st) for p in sorted(paths) if (st := self._stale(p)) is not None]
        if not stale:
            return 0
        self._load_requests()
        self.gen += 1
        self.changed = True
        return sum(self._read(path, st) for path, st in stale)

    def _stale(self, path: str) -> os.stat_result | None:
        """The file's ``stat`` when it changed since it was read (or was never read)."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None  # removed: its rows stay, as in the lake
        rec = self.files.get(path)
        if rec is not None and rec[0] == st.st_size and rec[1] == st.st_mtime_ns:
            return None
        return st

    def _read(self, path: str, st: os.stat_result) -> int:
        rec = self.files.get(path)
        head_len = min(st.st_size, _HEAD_BYTES)
        if rec is not None and st.st_size >= rec[2] and rec[4] == _head(path, rec[5]):
            start, line = rec[2], rec[3]
        else:
            start, line = 0, 1
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(st.st_size - start)
        if data and data[-1] != 10:
            cut = data.rfind(b"\n") + 1
            from traceflow.importers.base import whole_last_line

            if not whole_last_line(data[cut:], st.st_mtime_ns):
                data = data[:cut]
        if rec is None:
            index = len(self.paths)
            self.paths.append(path)
        else:
            index = rec[6]
        self._lines(data, path, index, line)
        self.files[path] = [
            st.st_size,
            st.st_mtime_ns,
            start + len(data),
            line + data.count(b"\n"),
            _head(path, head_len),
            head_len,
            index,
        ]
        return len(data)

    def _lines(self, data: bytes, path: str, index: int, first_line: int) -> None:
        """Keep the requests of the lines of ``data`` that carry usage (the first is ``first_line``).
        A sub-agent's requests count in the session that spawned it: its lines' ``sessionId``."""
        import msgspec

        from traceflow.importers.claude_code_records import DECODER, Assistant, micros
        from traceflow.rows import anthropic_cache_write
        from traceflow.store.measures import completeness

        find, rfind, count = data.find, data.rfind, data.count
        view = memoryview(data)
        decode = DECODER.decode
        ascii_only = data.isascii()
        requests, gen, paths = self.requests, self.gen, self.paths
        no = first_line - 1  # the number of the line before ``pos``
        pos, size = 0, len(data)
        while pos < size:
            at = find(b'"usage"', pos)
            if at < 0:
                break
            start = rfind(b"\n", 0, at) + 1
            end = find(b"\n", at)
            if end < 0:
                end = size
            no += count(b"\n", pos, start) + 1
            pos = end + 1
            if find(b'"assistant"', start, end) < 0:
                continue  # not an assistant record (a tool result that quotes a sub-agent's usage)
            line = view[start:end]
            try:
                rec = decode(line)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue  # the importer skips it too (and reports it)
            if not ascii_only:
                try:
                    codecs.utf_8_decode(line, "strict", True)
                except UnicodeDecodeError:
                    continue
            if not isinstance(rec, Assistant):
                continue
            msg = rec.message
            usage = msg.usage if msg is not None else None
            if msg is None or usage is None or rec.timestamp is None:
                continue
            if msg.model == "<synthetic>" or rec.isApiErrorMessage:
                continue
            if not rec.sessionId:
                raise Unsupported(f"{path}:{no}: a request line without its sessionId")
            if rec.requestId is not None:
                key = "r:" + rec.requestId
            elif msg.id is not None:
                key = "m:" + msg.id
            else:
                key = f"l:{path}:{no}"
            split = usage.cache_creation
            w5 = w1 = None
            if split is not None:
                w5, w1 = split.ephemeral_5m_input_tokens or 0, split.ephemeral_1h_input_tokens or 0
            cold, read, output = (
                usage.input_tokens or 0,
                usage.cache_read_input_tokens or 0,
                usage.output_tokens or 0,
            )
            write = anthropic_cache_write(usage.cache_creation_input_tokens or 0, w5, w1) or 0
            total = completeness(cold, read, write, output)
            old = requests.get(key)
            if old is not None and (total, gen, path, no) < (
                old[TOTAL],
                old[GEN],
                paths[old[PATH]],
                old[SEQ],
            ):
                continue
            requests[key] = [
                micros(rec.timestamp),
                msg.model,
                rec.sessionId,
                cold,
                output,
                write,
                read,
                w1 or 0,
                total,
                gen,
                index,
                no,
            ]


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _walk(roots: list[str]) -> tuple[dict[str, int], list[str]]:
    """The folders under ``roots`` (with their mtimes, taken before each is listed) and the
    transcripts in them; a compressed transcript or a link makes the ledger :class:`Unsupported`."""
    dirs: dict[str, int] = {}
    files: list[str] = []
    todo = list(roots)
    while todo:
        folder = todo.pop()
        try:
            dirs[folder] = os.stat(folder).st_mtime_ns
            with os.scandir(folder) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for entry in entries:
            name = entry.name
            if entry.is_symlink():
                raise Unsupported(f"{entry.path} is a link")
            if entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
            elif name.endswith(".jsonl"):
                files.append(entry.path)
            elif ".jsonl." in name:
                raise Unsupported(f"{entry.path} is compressed")
    return dirs, files


# ---------------------------------------------------------------------------------------------------
# Answers computed from the ledger
# ---------------------------------------------------------------------------------------------------

ANSWERS = "usage-answers"
#: Answers kept (the least recently written go first).
MAX_ANSWERS = 64


def stored_answer(state_dir: str, key: str, stamp: str) -> str | None:
    """The answer stored under ``key`` (a :func:`traceflow.store.result_cache.plan` key: the
    command line, the settings, the price table, the code) when it was computed from the ledger as
    it is now (its :attr:`Ledger.stamp`); None otherwise."""
    try:
        with open(os.path.join(state_dir, "imports", ANSWERS, key), "rb") as fh:
            blob = fh.read()
    except OSError:
        return None
    head, _, text = blob.partition(b"\n")
    if head.decode("ascii", "replace") != stamp:
        return None
    try:
        return text.decode()
    except UnicodeDecodeError:
        return None


def store_answer(state_dir: str, key: str, stamp: str, text: str) -> None:
    """Keep ``text`` as the answer of ``key`` for the ledger at ``stamp``."""
    folder = os.path.join(state_dir, "imports", ANSWERS)
    _write(os.path.join(folder, key), stamp.encode() + b"\n" + text.encode())
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.stat().st_mtime_ns)
    except OSError:
        return
    for old in entries[:-MAX_ANSWERS]:
        try:  # noqa: SIM105 (contextlib costs an import)
            os.unlink(old.path)
        except OSError:
            pass
