"""The options many commands share, declared once: ``--data``, ``--format`` and the seven selection
options (:func:`with_selection`), plus the helpers that turn them into library objects.

Command modules import this module, never :mod:`traceflow.cli.app`. Nothing heavy is imported here:
``traceflow --help`` builds every command's options.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from traceflow.config import data_dir
from traceflow.errors import UsageError
from traceflow.output import FORMATS

if TYPE_CHECKING:
    import polars as pl

    from traceflow.output import Display, Rows
    from traceflow.store.lake import Lake
    from traceflow.store.selection import Selection

DataOpt = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Data directory or s3://bucket/prefix (default: $TRACEFLOW_DATA, else "
        "~/.local/share/traceflow).",
        show_default=False,
    ),
]
NoRefreshOpt = Annotated[
    bool,
    typer.Option(
        "--no-refresh",
        help="Answer from what the lake holds, without first importing what is new in the local "
        "agent logs it imports (default: refresh, unless TRACEFLOW_REFRESH=0; see docs/freshness.md).",
    ),
]
PricesOpt = Annotated[
    Path | None,
    typer.Option(
        "--prices", help="JSON/TOML price file overriding the built-in prices (see traceflow.prices)."
    ),
]


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else a usage error."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r} is not one of: {', '.join(FORMATS)}")
    return fmt


#: ``--format``, checked while the options are parsed (:func:`check_format`).
FormatOpt = Annotated[
    str, typer.Option("--format", "-f", help="table, json, csv or markdown.", callback=check_format)
]


#: Where a command's :class:`~traceflow.output.Display` is kept: its click context's ``meta``, which
#: lives as long as the one command line it runs (never in a module, where it would reach the next).
_DISPLAY = "traceflow.display"


def _context() -> Any:
    """The click context of the running command (None outside one): typer 0.2x brings its own click,
    older typer runs on click itself."""
    import importlib

    for name in ("typer._click.globals", "click.globals"):
        try:
            return importlib.import_module(name).get_current_context(silent=True)
        except ImportError:
            continue
    return None


def display() -> Display:
    """How the running command shows its results: ``--wide`` and the freshness of the lake it opened
    (:func:`open_lake`), from its click context; outside a command, :data:`traceflow.output.PLAIN`."""
    from traceflow.output import PLAIN

    ctx = _context()
    return ctx.meta.get(_DISPLAY, PLAIN) if ctx is not None else PLAIN


def _show(**changes: Any) -> None:
    """Change the running command's :func:`display` (nothing outside a command)."""
    ctx = _context()
    if ctx is not None:
        ctx.meta[_DISPLAY] = dataclasses.replace(display(), **changes)


def _set_wide(wide: bool) -> bool:
    """``--wide``: tables keep every column, whatever the terminal's width (see :func:`display`)."""
    _show(wide=wide)
    return wide


WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Tables: every column, however wide (by default they fit the terminal).",
        callback=_set_wide,
    ),
]

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="duckdb (embedded, the default) or spark: the same queries on Spark "
        "(pip install 'traceflow[spark]').",
    ),
]
SparkRemoteOpt = Annotated[
    str | None,
    typer.Option(
        "--spark-remote",
        help="With --engine spark: a master URL (spark://host:7077, yarn) or Spark Connect "
        "(sc://host:15002); "
        "default local[*]. The cluster must read the lake at the same path.",
    ),
]
ByOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--by",
        help="Group by agent, model, session, day, week (ISO, labelled by its Monday), month, user, "
        "source, version, project, host, subagent_type, "
        "attr:NAME (a resource attribute) or tool (the tool whose result a request followed); "
        "repeatable or comma-separated.",
    ),
]
SinceOpt = Annotated[
    str | None, typer.Option(help="Only requests at or after this time (2026-08-01, 2026-08-01T12:00Z, 7d).")
]
UntilOpt = Annotated[
    str | None,
    typer.Option(
        help="Only requests before this time; a date alone (2026-08-03, 20260803) includes that whole day."
    ),
]
AgentOpt = Annotated[list[str] | None, typer.Option("--agent", help="Only this agent (repeatable).")]
ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="Only this model (repeatable).")]
SessionOpt = Annotated[
    list[str] | None, typer.Option("--session", help="Only this session, sub-agents included (repeatable).")
]
UserOpt = Annotated[list[str] | None, typer.Option("--user", help="Only this user id (repeatable).")]
SourceOpt = Annotated[
    list[str] | None, typer.Option("--source", help="Only rows from this source, e.g. otlp (repeatable).")
]
WhereOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        help="Only requests whose KEY is VALUE: KEY=VALUE, KEY!=VALUE, KEY=A,B (one of a list); "
        "repeatable (ANDed). Keys: agent, model, user, source, version, project, host, attr:NAME "
        "(a request's own value, as --by reads it).",
    ),
]
TzOpt = Annotated[
    str | None,
    typer.Option(
        "--tz",
        "--timezone",
        "-z",
        help="Time zone of days, weeks, months and printed times, and of --since/--until without an "
        "offset: an IANA name (Asia/Tokyo) or local (default: $TRACEFLOW_TZ, else UTC).",
        show_default=False,
    ),
]

#: The selection options, in the order ``--help`` shows them.
SELECTION_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("since", SinceOpt),
    ("until", UntilOpt),
    ("agent", AgentOpt),
    ("model", ModelOpt),
    ("session", SessionOpt),
    ("user", UserOpt),
    ("source", SourceOpt),
    ("where", WhereOpt),
    ("tz", TzOpt),
)


#: The options of :class:`LakeQuery`, in the order ``--help`` shows them, with their defaults.
LAKE_QUERY_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("data", DataOpt, None),
    ("engine", EngineOpt, "duckdb"),
    ("spark_remote", SparkRemoteOpt, None),
    ("fmt", FormatOpt, "table"),
    ("wide", WideOpt, False),
    ("no_refresh", NoRefreshOpt, False),
)


def connect(
    data: Path | None,
    tables: list[str],
    engine: str = "duckdb",
    spark_remote: str | None = None,
    *,
    refresh: bool = True,
) -> Any:
    """The lake's DuckDB connection, or a Spark engine over the same lake (``--engine spark``)."""
    if engine == "duckdb":
        if spark_remote:
            raise UsageError("--spark-remote needs --engine spark")
        return open_lake(data, refresh=refresh).connect(tables)
    if engine == "spark":
        from traceflow.engines.spark import connect as spark_connect

        return spark_connect(open_lake(data, refresh=refresh), tables, spark_remote)
    raise UsageError(f"--engine {engine!r}: choose duckdb or spark")


def open_lake(data: Path | None, *, create: bool = False, refresh: bool = True) -> Lake:
    """The lake in ``--data``, else ``$TRACEFLOW_DATA``, else the XDG data dir.

    Only commands that write (``create=True``: import, synth into the lake) may name a directory
    that does not exist yet; a read command refuses it rather than report on an empty lake, unless
    it is the default lake and there are local agent logs to fill it with.

    Every read command opens its lake here, so here it is first brought up to date: what is new in
    the local agent logs it imports is imported (``refresh``: not with ``--no-refresh``, nor with
    ``TRACEFLOW_REFRESH=0``; see :mod:`traceflow.store.local_logs`), and a lake fed by ``serve``
    sets the freshness line of the tables and JSON the command prints (its :func:`display`).
    """
    from traceflow import config
    from traceflow.store.lake import Lake

    _show(freshness=None)
    location = config.data_location(data)
    default = data is None and config.get("data") is None
    if config.is_url(location):  # an object-store lake: a prefix exists once something is written
        lake = Lake(location)
        if not create:
            _refresh(lake, default, refresh)
        return lake
    root = data_dir(data)
    if not create and not root.exists() and _fills_default_lake(default, refresh):
        create = True  # the default lake, first used: the refresh below fills it
        root.mkdir(parents=True, exist_ok=True)
        lake = Lake(root)
        _refresh(lake, default, refresh)
        return lake
    if not create and not root.exists():
        where = "--data" if data is not None else "the data directory"
        raise UsageError(
            f"no lake at {root} ({where} does not exist): fill it first with `traceflow import SOURCE "
            f"--data {root}` or `traceflow serve --data {root}`, or pass --data DIR of an existing lake "
            "(default: $TRACEFLOW_DATA, else ~/.local/share/traceflow)"
        )
    if not create and not root.is_dir():
        raise UsageError(f"--data {root} is not a directory; pass the data directory of a lake")
    lake = Lake(root)
    if not create:
        _refresh(lake, default, refresh)
        _note_freshness(lake)
    return lake


def _fills_default_lake(default: bool, refresh: bool) -> bool:
    """Whether a read command may create the default lake: it refreshes and an agent's default log
    folder holds logs."""
    from traceflow.store import local_logs

    if not (default and refresh and local_logs.setting_on()):
        return False
    from traceflow import importers
    from traceflow.importers.refresh import default_sources

    return any(
        importers.get(name).discover(Path(root))
        for name, roots in default_sources().items()
        for root in roots
    )


def _refresh(lake: Lake, default: bool, refresh: bool) -> None:
    """Import what is new in the local agent logs ``lake`` imports (see :func:`open_lake`). A lake
    that imports none costs one ``stat``; one whose logs did not change, one per folder and file."""
    from traceflow.store import local_logs

    if not refresh or not local_logs.setting_on():
        return
    marked = os.path.exists(local_logs.marker_path(lake.state_dir))
    if not default and not marked:
        return  # a lake that imports no local agent logs
    if marked and local_logs.current(lake.state_dir):
        return  # nothing new (an agent's folder that appeared since is found at the next change)
    from traceflow.errors import TraceflowError
    from traceflow.importers.refresh import refresh as refresh_logs

    try:
        summaries = refresh_logs(lake, default_lake=default)
    except (TraceflowError, OSError) as e:
        typer.echo(
            f"traceflow: warning: could not bring the local agent logs up to date ({e}); answering "
            "from what the lake holds (--no-refresh skips this step)",
            err=True,
        )
        return
    for summary in summaries:
        if summary.skipped:
            typer.echo(
                f"traceflow: warning: refreshing {summary.source} skipped {summary.skipped:,} malformed "
                f"record(s); `traceflow import {summary.source}` lists them",
                err=True,
            )


def _note_freshness(lake: Lake) -> None:
    """On a lake fed by ``serve``, the freshness line every table and JSON document then carries."""
    from traceflow.store import freshness

    if not freshness.serve_fed(lake):
        return
    fresh = freshness.of(lake)
    if fresh is not None:
        _show(freshness=(fresh.line(), fresh.as_dict()))


@dataclass(frozen=True)
class LakeQuery:
    """What ``--data``, ``--engine``, ``--spark-remote`` and ``--format`` ask for (see with_lake_query)."""

    data: Path | None
    engine: str
    spark_remote: str | None
    fmt: str
    wide: bool = False
    no_refresh: bool = False

    def connect(self, tables: list[str]) -> Any:
        """The lake's DuckDB connection over ``tables``, or with ``--engine spark`` a Spark engine."""
        return connect(self.data, tables, self.engine, self.spark_remote, refresh=not self.no_refresh)

    def lake(self) -> Lake:
        """The lake itself (refreshed unless ``--no-refresh``; see :func:`open_lake`)."""
        return open_lake(self.data, refresh=not self.no_refresh)

    def source(self, tables: list[str]) -> Any:
        """The :class:`Lake` itself on DuckDB (a command that tunes its own connection opens it, as
        ``export`` does), else what :meth:`connect` gives: the Spark engine over ``tables``."""
        if self.engine == "duckdb" and not self.spark_remote:
            return self.lake()
        return self.connect(tables)


def echo(
    value: Any, fmt: str, *, single: bool = False, zone: str | None = None, essential: Sequence[str] = ()
) -> None:
    """Print ``value`` in ``fmt``: a table (``Rows`` or a frame) rendered, anything else as JSON with json;
    its times shown in ``zone`` (the selection's; None: :func:`traceflow.store.zones.default_zone`);
    ``essential``: the columns the view keeps when a table must leave some out to fit."""
    from traceflow.output import document, render, to_json
    from traceflow.store import zones

    value = zones.localise(value, zones.default_zone() if zone is None else zone)
    if fmt == "json" and not hasattr(value, "columns"):
        typer.echo(to_json(document(value, display())))
    else:
        typer.echo(render(value, fmt, single=single, essential=essential, display=display()))


def echo_note(note: str | None, fmt: str) -> None:
    """Print a ``note:`` line (an analysis's agents left out, store/recorded.py): under a table or
    markdown, else on stderr so CSV and JSON stay parseable (JSON also carries it as a field)."""
    if note:
        typer.echo(note, err=fmt not in ("table", "markdown"))


def echo_text(text: str) -> None:
    """Print ``text`` (sentences beside a table) wrapped to the width tables fit."""
    from traceflow.output import fit_text

    typer.echo(fit_text(text, wide=display().wide))


def echo_sections(
    sections: Sequence[tuple[str, Rows | pl.DataFrame]],
    fmt: str,
    notes: Sequence[str] = (),
    *,
    zone: str | None = None,
) -> None:
    """Several tables under titles (table and markdown formats), then one ``note:`` line per note;
    times shown in ``zone`` (as :func:`echo`)."""
    from traceflow.output import Rows, fit_text, footer, render_markdown, render_table
    from traceflow.store import zones

    shown = display()
    out: list[str] = []
    for title, frame in zones.localise(list(sections), zones.default_zone() if zone is None else zone):
        if fmt == "markdown":
            out += [f"## {title}", "", render_markdown(Rows.of(frame)), ""]
        else:
            out += [title, "-" * len(title), render_table(Rows.of(frame), wide=shown.wide), ""]
    out += [fit_text(f"note: {n}", wide=shown.wide) for n in notes]
    typer.echo(footer("\n".join(out).rstrip("\n"), shown))


def build_selection(*args: Any, **options: Any) -> Selection:
    """The selection the selection options describe:
    :func:`traceflow.store.selection_options.build_selection` (imported when a command runs, so that
    ``--help`` stays fast)."""
    from traceflow.store.selection_options import build_selection as build

    return build(*args, **options)


F = TypeVar("F", bound=Callable[..., Any])


def _resolve(p: inspect.Parameter, namespace: dict[str, Any]) -> Any:
    """``p``'s annotation evaluated; a name the module imports only for type checking (``Selection``,
    left for an outer decorator to replace) stays a string."""
    if not isinstance(p.annotation, str):
        return p.annotation
    try:
        return eval(p.annotation, namespace)
    except NameError:
        return p.annotation


def _expand(command: F, name: str, options: Sequence[tuple[str, Any, Any]], build: Callable[..., Any]) -> F:
    """``command`` with its parameter ``name`` replaced by ``options`` (name, annotation, default):
    typer sees the options there, and the command receives ``build(**their values)`` as ``name``."""
    sig = inspect.signature(command)
    if name not in sig.parameters:
        raise TypeError(f"{command.__name__} has no `{name}` parameter")
    namespace = command.__globals__
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name == name:
            params += [
                inspect.Parameter(
                    option, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
                )
                for option, annotation, default in options
            ]
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=_resolve(p, namespace)))
    names = [option for option, _, _ in options]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        built = build(**{option: kwargs.pop(option) for option in names})
        return command(**{name: built}, **kwargs)

    del wrapper.__wrapped__  # typer must see the signature below, not the command's
    wrapper.__signature__ = sig.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper  # type: ignore[return-value]


def with_options(
    name: str, options: Sequence[tuple[str, Any, Any]], build: Callable[..., Any]
) -> Callable[[F], F]:
    """A decorator giving a command ``options`` (name, annotation, default) in place of its ``name``
    parameter; the command receives ``build(**their values)`` (as :func:`with_selection` does)."""
    return lambda command: _expand(command, name, options, build)


def with_selection(command: F) -> F:
    """Give ``command`` the selection options in place of its ``selection`` parameter.

    ``command`` declares ``selection: Selection`` (keyword-only) where the options belong in
    ``--help``; typer sees ``--since``, ``--until``, ``--agent``, ``--model``, ``--session``,
    ``--user``, ``--source``, ``--where`` and ``--tz`` there instead, and the command receives one
    :class:`Selection`.
    """
    options = [(name, annotation, None) for name, annotation in SELECTION_OPTIONS]
    return _expand(command, "selection", options, build_selection)


def build_personal_selection(tz: str | None = None, **options: Any) -> Selection:
    """:func:`build_selection` for a personal view: without ``--tz``, the zone is
    :func:`traceflow.store.zones.personal_zone` (the setting, else this machine's), not UTC; an
    ``--agent`` may be ccusage's name (:func:`traceflow.analysis.usage.lake_agent`)."""
    from traceflow.analysis.usage import lake_agent
    from traceflow.store import zones

    if options.get("agent"):
        options["agent"] = [lake_agent(a) for a in options["agent"]]
    return build_selection(tz=zones.personal_zone() if tz is None else tz, **options)


def with_personal_selection(command: F) -> F:
    """:func:`with_selection` for a personal view (``blocks``): its zone defaults to this machine's."""
    options = [(name, annotation, None) for name, annotation in SELECTION_OPTIONS]
    return _expand(command, "selection", options, build_personal_selection)


def with_lake_query(command: F) -> F:
    """Give ``command`` ``--data``, ``--engine``, ``--spark-remote`` and ``--format`` in place of its
    ``query: LakeQuery`` parameter; the command receives one :class:`LakeQuery` (its format checked by
    :data:`FormatOpt`).
    """
    return _expand(command, "query", LAKE_QUERY_OPTIONS, LakeQuery)
