"""The result cache: a repeated report over an unchanged lake is served from disk, not recomputed.

``traceflow._entry`` asks :func:`plan` whether a command line may be cached. If so it looks the result
up (:func:`lookup`) before anything heavy (typer, DuckDB, polars) is imported, and on a miss runs the
CLI, records what it printed and hands it to :func:`store`. Only the standard library is imported at
module level, and only cheap modules of it.

What makes a hit correct:

* the **key** (:func:`cache_key`) covers everything besides the lake that a read-only command's
  output depends on: the command line, the working directory, the resolved data directory, the
  environment variables that change output (every ``TRACEFLOW_*`` but ``TRACEFLOW_CACHE``, ``TZ``,
  ``COLUMNS``, ``NO_COLOR``, locale, ...), whether stdout/stderr are terminals, the contents of input
  files (``sql --file``, ``--prices``), the Python version and a fingerprint of the code (traceflow's
  modules and packaged queries: size and mtime of each file; the site-packages directories' paths
  and mtimes, which change when a dependency is installed or upgraded). The program name is not in
  it: the ``traceflow`` script and ``python -m traceflow`` share entries;
* the **lake signature** (:func:`lake_signature`) hashes (path, mtime_ns, inode, size) of every
  directory the views list files from: ``v1/``'s table directories and their ``dt=`` partitions, the
  marker folders and files in ``v1/_state/`` (the deduplicated base a compaction recorded, derived
  data) and ``v1/_derived/``'s generations. Files are published by rename, removed by compaction and
  never modified in place, so any change of what the views read changes the mtime (or inode) of a
  partition, table or marker. An entry stores the signature taken *before* the command ran and is
  stored only if the signature is the same after it; a lookup is a hit only if the current signature
  equals the stored one. The CLI must also have resolved the very data directory the fast path
  validated (``traceflow.config.resolved``);
* **racy timestamps**: a directory changed within :data:`RACY_NS` before the signature was taken
  could change again within the same timestamp tick without its mtime moving (coarse kernel clocks,
  1-2 s on some file systems), so such a result is not stored; the next run after the lake has
  settled is.

What is cached: exit status 0 of the read-only commands in :data:`COMMANDS`, with stdout not a
terminal (a person at a terminal gains little, and terminals get progress bars), no option that
writes files (``report --html/--png/--svg``), no time relative to now (``--since 7d``: only absolute
ISO times are accepted), no SQL that reads the clock, random numbers or files outside the lake.
Anything unreadable or corrupt is a miss, never an error; a read-only or missing data directory
means no caching. ``TRACEFLOW_CACHE=0`` turns it off.

Entries live in ``<data>/v1/_cache/results/<key>.bin`` (written to a temporary file and renamed),
at most :data:`MAX_ENTRIES` of them and :data:`MAX_BYTES` in all (least recently used go first).
"""

from __future__ import annotations

import functools
import os
import sys
import time

try:  # _blake2 is builtin; hashlib would load OpenSSL first (~5 ms)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover
    from hashlib import blake2b

from traceflow import __version__, config

TYPE_CHECKING = False  # typing is not imported at run time (the fast path)
if TYPE_CHECKING:
    import re

CACHE_ENV = "TRACEFLOW_CACHE"
#: Read-only commands whose successful output is cached.
COMMANDS = frozenset({"mix", "sql", "query", "gaps", "ttl", "sessions", "load", "working-set", "report"})
#: Options that make a command write files (never cached).
WRITES_FILES = frozenset({"--html", "--png", "--svg", "-o", "--output"})
#: Options naming a file whose contents the output depends on (hashed into the key).
INPUT_FILES = frozenset({"--file", "--prices"})
TIME_OPTIONS = frozenset({"--since", "--until"})
#: Environment variables (besides ``TRACEFLOW_*``) that may change what a command prints.
ENV_VARS = (
    "TZ",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "TERM",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
)
MAX_ENTRIES = 256
MAX_BYTES = 64 << 20
#: Larger outputs are not stored (and the recording of them stops).
MAX_ENTRY_BYTES = 16 << 20
MAX_INPUT_BYTES = 4 << 20
#: A lake directory modified less than this before its signature was taken makes the result unstorable.
RACY_NS = 2_000_000_000
_MAGIC = b"TFRC1"


def enabled(environ: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """False when ``TRACEFLOW_CACHE`` is ``0``/``false``/``no``/``off``."""
    return (config.get("cache", environ) or "").strip().lower() not in ("0", "false", "no", "off")


# ------------------------------------------------------------------------------------------------
# The lake signature
# ------------------------------------------------------------------------------------------------


#: Folders of ``<data>/v1`` that never change what a command reads: scratch and this cache.
SCRATCH = frozenset({"_staging", "_tmp", "_cache"})
#: Folders of ``<data>/v1/_state`` that are bookkeeping of writers (imports, the collector's WAL).
BOOKKEEPING = frozenset({"imports", "collector"})


def _scan(data_dir: str) -> tuple[str, int]:
    """(signature, newest mtime_ns among what it covers)."""
    base = os.path.join(data_dir, "v1")
    parts: list[str] = []
    newest = 0

    def walk(path: str, rel: str, depth: int, skip: frozenset[str]) -> None:
        """Stat ``path``'s entries and, ``depth`` - 1 levels down, theirs."""
        nonlocal newest
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except FileNotFoundError:
            parts.append(f"{rel}\0absent")
            return
        except NotADirectoryError:
            return
        for e in entries:
            if e.name in skip or e.name.startswith("."):
                continue
            name = f"{rel}/{e.name}"
            try:
                st = e.stat()
            except FileNotFoundError:  # removed while we looked: the lake is changing
                parts.append(f"{name}\0gone")
                continue
            parts.append(f"{name}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_size}")
            newest = max(newest, st.st_mtime_ns)
            if depth > 1 and e.is_dir():
                walk(e.path, name, depth - 1, frozenset())

    try:
        top = sorted(os.scandir(base), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        top = []
        parts.append("no lake")
    for e in top:
        if e.name in SCRATCH or e.name.startswith("."):
            continue
        try:
            st = e.stat()
        except FileNotFoundError:
            parts.append(f"{e.name}\0gone")
            continue
        parts.append(f"{e.name}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_size}")
        newest = max(newest, st.st_mtime_ns)
        if e.is_dir():
            # tables: their dt= partitions, not the files (immutable: the partition's mtime says when
            # one came or went); _state: marker folders and files; _derived: views and generations
            deep = e.name.startswith("_")
            walk(e.path, e.name, 2 if deep else 1, BOOKKEEPING if e.name == "_state" else frozenset())
    return blake2b("\n".join(parts).encode("utf-8", "surrogateescape"), digest_size=16).hexdigest(), newest


def lake_signature(data_dir: str | os.PathLike[str]) -> str:
    """A hash of the listing of every directory (and marker file) the lake's views read.

    It covers ``v1/``'s entries, two levels down: each table and its ``dt=`` partitions, ``_state``'s
    marker folders and files (the deduplicated base a compaction recorded, derived data), and
    ``_derived``'s generations. It changes whenever a file is published into or removed from a
    partition, a partition or table appears or goes, or a marker is replaced. Scratch (``_staging``,
    ``_tmp``), writers' bookkeeping (``_state/imports``, ``_state/collector``) and this cache are
    left out.
    """
    return _scan(os.fspath(data_dir))[0]


# ------------------------------------------------------------------------------------------------
# Which command lines are cached, and their keys
# ------------------------------------------------------------------------------------------------


def _absolute_time(value: str) -> bool:
    """An ISO date or time (``2026-08-01``, ``2026-08-01T12:00Z``); relative ages (``7d``) are not."""
    v = value.strip()
    return len(v) >= 10 and v[:4].isdigit() and v[4] == "-" and v[5:7].isdigit() and v[7] == "-"


@functools.cache
def _sql_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The SQL that :func:`volatile_sql` passes over (string literals, quoted identifiers, comments)
    and the words that make SQL volatile, compiled at the first use (not at import: the fast path)."""
    import re

    return (
        re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?(?:\*/|$)", re.S),
        re.compile(
            r"\b(?:now|today|rand|random\w*|\w*current_\w+|(?:transaction|statement)_timestamp|localtime\w*"
            r"|\w*uuid\w*|setseed|\w*setting\w*|duckdb_\w+|pragma\w*|analy[sz]e|\w*secret\w*)\b"
            r"|\b(?:read_\w+|\w+_scan|scan_\w+|glob|getenv|query|query_table|sniff_\w+|parquet_\w+)\s*\(",
            re.IGNORECASE,
        ),
    )


def volatile_sql(text: str) -> bool:
    """True when SQL may depend on more than the lake: the clock, random numbers, files, settings.

    Deliberately coarse (comments aside, any mention counts): a false alarm only costs a cache miss.
    """
    tokens, volatile = _sql_patterns()
    outside: list[str] = []
    last = 0
    for m in tokens.finditer(text):
        outside.append(text[last : m.start()])
        last = m.end()
        token = m.group(0)
        if token[0] in "'\"":
            body = token[1:-1]
            if "/" in body or "\\" in body or ("." in body and body.rpartition(".")[2][:1].isalpha()):
                return True  # a file name or URL: DuckDB reads it (replacement scans)
            outside.append(" ident " if token[0] == '"' else " 'lit' ")
        else:
            outside.append(" ")
    outside.append(text[last:])
    return volatile.search("".join(outside)) is not None


def _package_files() -> list[str]:
    """traceflow's own package directories (its modules and packaged queries, followed through the
    ``collectors``/``dashboards``/``queries`` links): what the output of a command depends on."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = []
    for root, subdirs, _files in os.walk(pkg, followlinks=True):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith((".", "__pycache__")))
        dirs.append(root)
    return dirs


def _code_fingerprint(h: blake2b) -> None:
    for d in _package_files():
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            h.update(f"{d}\0unreadable\n".encode())
            continue
        for e in entries:
            if e.name.endswith((".py", ".sql")):
                st = e.stat()
                h.update(f"{e.path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode("utf-8", "surrogateescape"))
    for p in sys.path:  # a dependency installed, upgraded or removed changes these directories
        if p.endswith("-packages"):
            try:  # noqa: SIM105 (contextlib costs an import)
                h.update(f"{p}\0{os.stat(p).st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
            except OSError:
                pass


class Plan:
    """A cacheable command line: where its lake and its cache entry are."""

    __slots__ = ("cache_dir", "command", "data_dir", "key", "path")

    def __init__(self, command: str, data_dir: str, key: str) -> None:
        self.command = command
        self.data_dir = data_dir
        self.key = key
        self.cache_dir = os.path.join(data_dir, "v1", "_cache", "results")
        self.path = os.path.join(self.cache_dir, key + ".bin")


def plan(
    argv: list[str],
    environ: dict[str, str] | os._Environ[str] | None = None,
    commands: frozenset[str] = COMMANDS,
) -> Plan | None:
    """The cache plan for ``argv`` (``sys.argv``: program name first), or None when not cacheable.
    ``commands``: the commands that may be (the usage ledger keys its answers the same way)."""
    env = os.environ if environ is None else environ
    args = argv[1:]
    if not args or args[0] not in commands or not enabled(env):
        return None
    try:
        if os.isatty(1):  # a person at a terminal: not worth the risk (progress bars, widths)
            return None
    except OSError:
        return None
    command = args[0]
    # Every token is looked at, whatever option it may be the value of: an option this scanner does
    # not know (one added later) cannot hide a relative --since, an input file or SQL from it.
    data: str | None = None
    inputs: list[str] = []
    words: list[str] = []  # everything that is not an option name: SQL, query names, --param values
    for j in range(1, len(args)):
        a = args[j]
        following = args[j + 1] if j + 1 < len(args) else None
        if a.startswith("--"):
            name, eq, inline = a.partition("=")
            value = inline if eq else following
            if eq:
                words.append(inline)
        elif a.startswith("-") and len(a) > 1:  # -f json, -fjson, -p k=v
            name, value = a[:2], (a[2:] or following)
            if a[2:]:
                words.append(a[2:])
        else:
            if args[j - 1] != "--data":
                words.append(a)
            continue
        if name == "--help" or name in WRITES_FILES:
            return None
        if name in TIME_OPTIONS and (value is None or not _absolute_time(value)):
            return None
        if name in INPUT_FILES:
            if value is None:
                return None
            inputs.append(value)
        elif name == "--data" and value is not None:
            data = value
    texts: list[str] = []  # SQL whose volatility decides
    if command == "sql":
        texts += words
    elif command == "query":
        qdirs = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "queries")]
        names = [w for w in words if w.replace("_", "").replace("-", "").isalnum()]
        for w in names:
            try:
                with open(os.path.join(qdirs[0], w + ".sql"), "rb") as fh:
                    texts.append(fh.read(MAX_INPUT_BYTES).decode("utf-8", "replace"))
            except (OSError, IndexError):
                continue
        if not texts:
            return None  # no packaged query named: the CLI reports it
        texts += words
    data_dir = config.resolve_data_dir(data)
    if config.is_url(data_dir):
        return None  # an object-store lake: listing it costs requests, so nothing is cached
    data_dir = os.path.abspath(data_dir)
    h = blake2b(digest_size=16)
    h.update(f"{__version__}\0{sys.version}\0{os.getcwd()}\0{data_dir}\n".encode())
    h.update("\0".join(args).encode("utf-8", "surrogateescape") + b"\n")
    for k in sorted(env):
        if (k.startswith("TRACEFLOW_") and k != CACHE_ENV) or k in ENV_VARS:
            h.update(f"{k}={env[k]}\0".encode("utf-8", "surrogateescape"))
    h.update(f"\ntty:{os.isatty(1)}{os.isatty(2)}\n".encode())
    for path in inputs:
        try:
            with open(os.path.expanduser(path), "rb") as fh:
                content = fh.read(MAX_INPUT_BYTES + 1)
        except OSError:
            return None
        if len(content) > MAX_INPUT_BYTES:
            return None
        h.update(len(content).to_bytes(8, "little") + content)
        if path.endswith(".sql") or command == "sql":
            texts.append(content.decode("utf-8", "replace"))
    try:  # the user's price table (`traceflow prices update`) prices every report
        with open(config.prices_file(env), "rb") as fh:
            table = fh.read(MAX_INPUT_BYTES + 1)
    except OSError:
        table = b""
    if len(table) > MAX_INPUT_BYTES:
        return None
    h.update(b"prices:" + len(table).to_bytes(8, "little") + table)
    h.update(f"\nlocaltime:{os.path.realpath('/etc/localtime')}\n".encode())  # --tz local
    if any(volatile_sql(t) for t in texts):
        return None
    _code_fingerprint(h)
    return Plan(command, data_dir, h.hexdigest())


def cache_key(argv: list[str], environ: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """The key of a cacheable command line (None when it is not cacheable)."""
    p = plan(argv, environ)
    return p.key if p else None


# ------------------------------------------------------------------------------------------------
# Entries
# ------------------------------------------------------------------------------------------------


def _encode(signature: str, out: bytes, err: bytes) -> bytes:
    digest = blake2b(out + b"\0" + err, digest_size=16).hexdigest()
    header = f"{signature} 0 {len(out)} {len(err)} {digest}\n".encode()
    return _MAGIC + b" " + header + out + err


def _decode(blob: bytes) -> tuple[str, bytes, bytes] | None:
    """(signature, stdout, stderr) of an entry, or None when it is damaged in any way."""
    try:
        nl = blob.index(b"\n", 0, 256)
        magic, signature, code, n_out, n_err, digest = blob[:nl].decode("ascii").split(" ")
        if magic != _MAGIC.decode() or code != "0":
            return None
        a, b = int(n_out), int(n_err)
        body = blob[nl + 1 :]
        if a < 0 or b < 0 or len(body) != a + b:
            return None
        out, err = body[:a], body[a:]
        if blake2b(out + b"\0" + err, digest_size=16).hexdigest() != digest:
            return None
        return signature, out, err
    except (ValueError, UnicodeDecodeError):
        return None


def lookup(p: Plan) -> tuple[bytes, bytes] | None:
    """The stored (stdout, stderr) when the entry exists, is intact and the lake has not changed."""
    try:
        with open(p.path, "rb") as fh:
            blob = fh.read(MAX_ENTRY_BYTES + 4096)
    except OSError:
        return None
    entry = _decode(blob)
    if entry is None:
        return None
    signature, out, err = entry
    try:
        if lake_signature(p.data_dir) != signature:
            return None
    except OSError:
        return None
    try:  # noqa: SIM105 (contextlib costs an import)
        os.utime(p.path)  # least recently used goes first when the cache is full
    except OSError:
        pass
    return out, err


class Snapshot:
    """The lake's signature taken before a command runs, and when."""

    __slots__ = ("newest_ns", "signature", "taken_ns")

    def __init__(self, data_dir: str) -> None:
        self.taken_ns = time.time_ns()
        self.signature, self.newest_ns = _scan(data_dir)


def store(p: Plan, before: Snapshot, out: bytes, err: bytes) -> bool:
    """Store a successful run's output if the lake was settled and did not change while it ran."""
    if len(out) + len(err) > MAX_ENTRY_BYTES:
        return False
    if before.newest_ns > before.taken_ns - RACY_NS:
        return False  # changed too recently to trust its timestamps
    if not os.path.isdir(os.path.join(p.data_dir, "v1")):
        return False  # never create a data directory just to cache
    try:
        if _scan(p.data_dir)[0] != before.signature:
            return False
        os.makedirs(p.cache_dir, exist_ok=True)
        tmp = f"{p.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(_encode(before.signature, out, err))
            os.replace(tmp, p.path)
        except BaseException:
            try:  # noqa: SIM105 (contextlib costs an import)
                os.unlink(tmp)
            except OSError:
                pass
            raise
        prune(p.cache_dir)
    except OSError:
        return False
    return True


def prune(cache_dir: str, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> int:
    """Remove the least recently used entries beyond the bounds (and stale temporary files)."""
    entries = []
    now = time.time()
    for e in os.scandir(cache_dir):
        try:
            st = e.stat()
        except OSError:
            continue
        if e.name.endswith(".tmp"):
            if now - st.st_mtime > 3600:  # left by a killed process
                try:  # noqa: SIM105 (contextlib costs an import)
                    os.unlink(e.path)
                except OSError:
                    pass
            continue
        entries.append((st.st_mtime_ns, st.st_size, e.path))
    entries.sort(reverse=True)
    removed = 0
    total = 0
    for i, (_, size, path) in enumerate(entries):
        total += size
        if i >= max_entries or total > max_bytes:
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
    return removed
