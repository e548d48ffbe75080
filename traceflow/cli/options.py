"""The options many commands share, declared once: ``--data``, ``--format`` and the seven selection
options (:func:`with_selection`), plus the helpers that turn them into library objects.

Command modules import this module, never :mod:`traceflow.cli.app`. Nothing heavy is imported here:
``traceflow --help`` builds every command's options.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
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

    from traceflow.output import Rows
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


def _set_wide(wide: bool) -> bool:
    """``--wide``: tables keep every column, whatever the terminal's width (see ``traceflow.output``)."""
    from traceflow import output

    output.WIDE = wide
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
UntilOpt = Annotated[str | None, typer.Option(help="Only requests before this time.")]
AgentOpt = Annotated[list[str] | None, typer.Option("--agent", help="Only this agent (repeatable).")]
ModelOpt = Annotated[list[str] | None, typer.Option("--model", help="Only this model (repeatable).")]
SessionOpt = Annotated[
    list[str] | None, typer.Option("--session", help="Only this session, sub-agents included (repeatable).")
]
UserOpt = Annotated[list[str] | None, typer.Option("--user", help="Only this user id (repeatable).")]
SourceOpt = Annotated[
    list[str] | None, typer.Option("--source", help="Only rows from this source, e.g. otlp (repeatable).")
]
TzOpt = Annotated[
    str | None,
    typer.Option(
        "--tz",
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
    ("tz", TzOpt),
)


#: The options of :class:`LakeQuery`, in the order ``--help`` shows them, with their defaults.
LAKE_QUERY_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("data", DataOpt, None),
    ("engine", EngineOpt, "duckdb"),
    ("spark_remote", SparkRemoteOpt, None),
    ("fmt", FormatOpt, "table"),
    ("wide", WideOpt, False),
)


def connect(
    data: Path | None, tables: list[str], engine: str = "duckdb", spark_remote: str | None = None
) -> Any:
    """The lake's DuckDB connection, or a Spark engine over the same lake (``--engine spark``)."""
    if engine == "duckdb":
        if spark_remote:
            raise UsageError("--spark-remote needs --engine spark")
        return open_lake(data).connect(tables)
    if engine == "spark":
        from traceflow.engines.spark import connect as spark_connect

        return spark_connect(open_lake(data), tables, spark_remote)
    raise UsageError(f"--engine {engine!r}: choose duckdb or spark")


def open_lake(data: Path | None, *, create: bool = False) -> Lake:
    """The lake in ``--data``, else ``$TRACEFLOW_DATA``, else the XDG data dir.

    Only commands that write (``create=True``: import, synth into the lake) may name a directory
    that does not exist yet; a read command refuses it rather than report on an empty lake.
    """
    from traceflow import config
    from traceflow.store.lake import Lake

    location = config.data_location(data)
    if config.is_url(location):  # an object-store lake: a prefix exists once something is written
        return Lake(location)
    root = data_dir(data)
    if not create and not root.exists():
        where = "--data" if data is not None else "the data directory"
        raise UsageError(
            f"no lake at {root} ({where} does not exist): fill it first with `traceflow import SOURCE "
            f"--data {root}` or `traceflow serve --data {root}`, or pass --data DIR of an existing lake "
            "(default: $TRACEFLOW_DATA, else ~/.local/share/traceflow)"
        )
    if not create and not root.is_dir():
        raise UsageError(f"--data {root} is not a directory; pass the data directory of a lake")
    return Lake(root)


@dataclass(frozen=True)
class LakeQuery:
    """What ``--data``, ``--engine``, ``--spark-remote`` and ``--format`` ask for (see with_lake_query)."""

    data: Path | None
    engine: str
    spark_remote: str | None
    fmt: str
    wide: bool = False

    def connect(self, tables: list[str]) -> Any:
        """The lake's DuckDB connection over ``tables``, or with ``--engine spark`` a Spark engine."""
        return connect(self.data, tables, self.engine, self.spark_remote)

    def source(self, tables: list[str]) -> Any:
        """The :class:`Lake` itself on DuckDB (a command that tunes its own connection opens it, as
        ``export`` does), else what :meth:`connect` gives: the Spark engine over ``tables``."""
        if self.engine == "duckdb" and not self.spark_remote:
            return open_lake(self.data)
        return self.connect(tables)


def echo(value: Any, fmt: str, *, single: bool = False, essential: Sequence[str] = ()) -> None:
    """Print ``value`` in ``fmt``: a table (``Rows`` or a frame) rendered, anything else as JSON with json;
    ``essential``: the columns the view keeps when a table must leave some out to fit."""
    from traceflow.output import render, to_json
    from traceflow.store import zones

    value = zones.localise(value)
    if fmt == "json" and not hasattr(value, "columns"):
        typer.echo(to_json(value))
    else:
        typer.echo(render(value, fmt, single=single, essential=essential))


def echo_text(text: str) -> None:
    """Print ``text`` (sentences beside a table) wrapped to the width tables fit."""
    from traceflow.output import fit_text

    typer.echo(fit_text(text))


def echo_sections(
    sections: Sequence[tuple[str, Rows | pl.DataFrame]], fmt: str, notes: Sequence[str] = ()
) -> None:
    """Several tables under titles (table and markdown formats), then one ``note:`` line per note."""
    from traceflow.output import fit_text, render
    from traceflow.store import zones

    out: list[str] = []
    for title, frame in zones.localise(list(sections)):
        if fmt == "markdown":
            out += [f"## {title}", "", render(frame, "markdown"), ""]
        else:
            out += [title, "-" * len(title), render(frame, "table"), ""]
    out += [fit_text(f"note: {n}") for n in notes]
    typer.echo("\n".join(out).rstrip("\n"))


def build_selection(
    since: str | None = None,
    until: str | None = None,
    agent: list[str] | None = None,
    model: list[str] | None = None,
    session: list[str] | None = None,
    user: list[str] | None = None,
    source: list[str] | None = None,
    tz: str | None = None,
) -> Selection:
    """The :class:`Selection` the selection options describe; ``tz`` (``--tz``, else the
    ``tz`` setting) becomes the zone in force (:mod:`traceflow.store.zones`), in which a ``--since`` or
    ``--until`` without an offset is read."""
    from traceflow.store import zones
    from traceflow.store.selection import Selection

    zones.use(tz)
    start = parse_zoned(since, "--since") if since else None
    end = parse_zoned(until, "--until") if until else None
    if start is not None and end is not None and start >= end:
        raise UsageError(
            f"--since {since} is not before --until {until}, so nothing is selected; swap them or "
            "widen the window"
        )
    return Selection(
        since=start,
        until=end,
        agents=tuple(agent or ()),
        models=tuple(model or ()),
        sessions=tuple(session or ()),
        users=tuple(user or ()),
        sources=tuple(source or ()),
    )


def parse_zoned(value: str, option: str) -> dt.datetime:
    """:func:`traceflow.store.selection.parse_time`, a date or time without an offset read in the zone
    in force (``2026-08-01`` with ``--tz Asia/Tokyo``: Tokyo's midnight)."""
    from traceflow.store import zones
    from traceflow.store.selection import parse_time

    parsed = parse_time(value, option)
    text = value.strip().replace("Z", "+00:00")
    try:
        naive = dt.datetime.fromisoformat(text).tzinfo is None
    except ValueError:  # an age (7d): relative to now, no zone
        return parsed
    return parsed.replace(tzinfo=zones.tzinfo()) if naive else parsed


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
    ``--user`` and ``--source`` there instead, and the command receives one :class:`Selection`.
    """
    options = [(name, annotation, None) for name, annotation in SELECTION_OPTIONS]
    return _expand(command, "selection", options, build_selection)


def with_lake_query(command: F) -> F:
    """Give ``command`` ``--data``, ``--engine``, ``--spark-remote`` and ``--format`` in place of its
    ``query: LakeQuery`` parameter; the command receives one :class:`LakeQuery` (its format checked by
    :data:`FormatOpt`).
    """
    return _expand(command, "query", LAKE_QUERY_OPTIONS, LakeQuery)
