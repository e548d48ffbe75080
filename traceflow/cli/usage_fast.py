"""``traceflow daily | weekly | monthly | session --json`` without typer, DuckDB or polars.

On a lake that reads only local Claude Code transcripts, the usage ledger
(:mod:`traceflow.importers.claude_code_usage`) is brought up to date from the transcripts' new bytes
and answers; the document is the one :mod:`traceflow.cli.usage` prints from the lake
(:func:`traceflow.analysis.usage.document`), byte for byte (``tests/test_usage_ledger.py``). Any
other case returns False and the CLI runs as always: a table, ``--since``/``--until``, an option
this parser does not know, ``--no-refresh`` or ``TRACEFLOW_REFRESH=0``, an object-store lake, a lake
that also holds other data (an import of another source, ``serve``, a compaction), Codex or Gemini
logs to refresh, and every error (the CLI says what is wrong).
"""

from __future__ import annotations

import os
import sys

VIEWS = frozenset(("daily", "weekly", "monthly", "session"))
#: Options that take a value, by the name of the value.
_VALUES = {
    "--timezone": "tz",
    "-z": "tz",
    "--tz": "tz",
    "--order": "order",
    "-o": "order",
    "--prices": "prices",
    "--data": "data",
    "--format": "fmt",
    "-f": "fmt",
}
#: Flags: ``--json``; the others change nothing in the JSON document.
_FLAGS = {"--json": True, "-j": True, "--offline": False, "--no-offline": False, "-O": False}


def fast_path(argv: list[str]) -> bool:
    """Print the JSON document of ``argv`` (``daily --json`` ...) from the usage ledger; False when
    the CLI must answer (see the module docstring)."""
    if not argv or argv[0] not in VIEWS:
        return False
    values: dict[str, str] = {}
    json_out = False
    args = argv[1:]
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in _FLAGS and not eq:
            json_out = json_out or _FLAGS[name]
        elif name in _VALUES:
            if not eq:
                if i + 1 >= len(args):
                    return False
                i += 1
                value = args[i]
            values[_VALUES[name]] = value
        else:
            return False
        i += 1
    if not (json_out or values.get("fmt") == "json"):
        return False
    from traceflow.errors import TraceflowError
    from traceflow.importers.claude_code_usage import Unsupported

    try:
        text = answer(
            argv[0], values.get("data"), values.get("tz"), values.get("order"), values.get("prices"), argv
        )
    except (Unsupported, TraceflowError, OSError, ValueError):
        return False
    if text is None:
        return False
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return True


def answer(
    view: str,
    data: str | None,
    tz: str | None,
    order: str | None,
    prices: str | None,
    argv: list[str] | None = None,
) -> str | None:
    """The JSON document of ``view``; None, or :class:`Unsupported`, when the ledger cannot give it.
    With ``argv`` (the command line), the answer is kept beside the ledger and printed again while
    the ledger, the settings, the price table and the code are the same (the result cache's key,
    :func:`traceflow.store.result_cache.plan`)."""
    from traceflow import config
    from traceflow.importers.claude_code_usage import (
        Ledger,
        Unsupported,
        covered,
        store_answer,
        stored_answer,
    )
    from traceflow.store import local_logs, result_cache

    if not local_logs.setting_on():
        return None
    location = config.data_location(data)
    if config.is_url(location):
        return None
    data_dir = os.path.abspath(location)
    default = data is None and config.get("data") is None
    state_dir = os.path.join(data_dir, "v1", "_state")
    if not os.path.isdir(data_dir) and not default:
        return None  # the CLI says there is no lake there
    if os.path.isdir(os.path.join(state_dir, "collector")):
        return None  # fed by serve
    sources = local_logs.sources_of(local_logs.read_marker(state_dir))
    if default:
        from traceflow.importers import files  # config and pathlib only

        for name in local_logs.AGENTS:
            roots = [os.path.realpath(r) for r in files.default_paths(name)]
            if roots:
                known = sources.setdefault(name, [])
                known += [r for r in roots if r not in known]
    if set(sources) != {"claude-code"}:
        raise Unsupported("not only Claude Code transcripts to refresh")
    if not covered(data_dir, state_dir):
        raise Unsupported("the lake holds other data")
    ledger = Ledger.load(state_dir, sources["claude-code"])
    ledger.update()
    ledger.save()
    plan = result_cache.plan(["traceflow", *argv], commands=VIEWS) if argv else None
    if plan is not None:
        text = stored_answer(state_dir, plan.key, ledger.stamp)
        if text is not None:
            return text

    from traceflow.analysis import usage
    from traceflow.output import to_json
    from traceflow.prices import PriceModel
    from traceflow.store import zones

    zone = zones.personal_zone(tz)
    pm = PriceModel.load(prices)
    rows = usage.ordered(view, usage.periods_of_requests(ledger.requests.values(), view, zone, pm), order)
    text = to_json(usage.document(view, rows, zone, prices=pm))
    ledger.save()  # the requests were read again (see Ledger._load_requests)
    if plan is not None:
        store_answer(state_dir, plan.key, ledger.stamp, text)
    return text
