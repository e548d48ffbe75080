"""``traceflow quarantine``: list, show and re-seal the payloads the collector could not store.

The sealer of ``traceflow serve`` quarantines a payload (or one record of it) whose rows the lake
could not take, with the reason, instead of losing the rest of its WAL segment with it
(``collectors/quarantine.py``). After a fix, ``reseal`` maps those payloads again and writes what
now fits; what still fails is quarantined anew.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from traceflow.cli.options import DataOpt, FormatOpt
from traceflow.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

ACTIONS = ("list", "show", "reseal")


def quarantine(
    action: Annotated[str, typer.Argument(help="list, show ID or reseal ID... (or --all).")] = "list",
    ids: Annotated[
        list[str] | None, typer.Argument(help="Entry ids (from `list`).", show_default=False)
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="reseal: every entry.")] = False,
    drop_attr: Annotated[
        list[str] | None,
        typer.Option(
            "--drop-attr",
            help="reseal: also drop this attribute (each entry already gets the --drop-attr/--hash-attr "
            "of the serve that quarantined it).",
        ),
    ] = None,
    hash_attr: Annotated[
        list[str] | None,
        typer.Option(
            "--hash-attr", help="reseal: also store this attribute as a keyed hash (TRACEFLOW_HASH_SALT)."
        ),
    ] = None,
    data: DataOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """List, show or re-seal the payloads the collector quarantined (content stripped unless kept)."""
    import polars as pl

    from traceflow import config
    from traceflow.collectors.quarantine import Quarantine
    from traceflow.output import render

    if action not in ACTIONS:
        raise UsageError(f"unknown action {action!r}; use one of: {', '.join(ACTIONS)}")
    store = Quarantine.of(config.data_dir(data))
    entries = store.entries()
    if action == "list":
        typer.echo(render(pl.DataFrame([e.to_dict() for e in entries]) if entries else pl.DataFrame(), fmt))
        return
    known = {e.id: e for e in entries}
    wanted = [e.id for e in entries] if all_ and action == "reseal" else list(ids or [])
    if not wanted:
        raise UsageError(
            f"name an entry id (see `traceflow quarantine list`){' or pass --all' * (action == 'reseal')}"
        )
    missing = [i for i in wanted if i not in known]
    if missing:
        raise UsageError(f"no quarantined entry {', '.join(missing)}; see `traceflow quarantine list`")
    if action == "show":
        typer.echo(render(pl.DataFrame([_show(store, known[i]) for i in wanted]), fmt))
        return
    extra = (frozenset(drop_attr or ()), frozenset(hash_attr or ()))
    policies = {i: _policy(store, i, extra) for i in wanted}  # a missing key is refused before any reseal
    typer.echo(render(pl.DataFrame([_reseal(store, i, policies[i]) for i in wanted]), fmt))


def _policy(store: Any, ident: str, extra: tuple[frozenset[str], frozenset[str]]) -> Any:
    """The attribute policy of ``ident``'s reseal: the one recorded when it was quarantined (live
    ingest's), with the ``--drop-attr`` / ``--hash-attr`` given here added."""
    from traceflow.collectors.attribute_policy import AttributePolicy, PolicyError

    drop, hashed = store.policy_of(ident)
    try:
        return AttributePolicy.from_settings(drop | extra[0], hashed | extra[1])
    except PolicyError as e:
        raise UsageError(f"reseal {ident}: {e}") from None


def _show(store: Any, entry: Any) -> Any:
    import orjson
    from google.protobuf import json_format

    from traceflow.otlp import decode as otlp

    out = entry.to_dict()
    bodies = []
    for rec in store.records(entry.id):
        try:
            msg = otlp.parse_body(rec.signal, rec.body, rec.content_type)
            bodies.append(json_format.MessageToDict(msg))
        except Exception as e:  # show what can be shown
            bodies.append({"undecodable": f"{type(e).__name__}: {e}", "bytes": len(rec.body)})
    out["payload"] = orjson.dumps(bodies).decode()
    return out


def _reseal(store: Any, ident: str, policy: Any) -> dict[str, Any]:
    from traceflow.collectors import spool
    from traceflow.collectors.sealer import Sealer

    data_dir = store.dir.parent
    lock = spool.lock_file(data_dir / "sealer.lock", blocking=False)
    if lock is None:
        raise UsageError(
            "a collector's sealer is running on this data directory; stop `traceflow serve` first, "
            "then run `traceflow quarantine reseal` again"
        )
    try:
        sealer = Sealer(data_dir.parent.parent.parent, policy=policy)
        stats = sealer.seal_records(store.records(ident))
        store.remove(ident)
    finally:
        lock.close()
    return {
        "id": ident,
        "payloads": stats.records,
        "rows": sum(stats.rows.values()),
        "rejected": sum(stats.rejected.values()),
        "quarantined_again": stats.quarantined,
    }


COMMANDS: dict[str, Callable[..., Any]] = {"quarantine": quarantine}
