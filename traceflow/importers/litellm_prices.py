"""LiteLLM's ``model_prices_and_context_window.json`` into the user's price table (``prices update``).

LiteLLM's file (MIT; the one ccusage reads) is one JSON object: model name -> an object of USD
*per token*: ``input_cost_per_token``, ``output_cost_per_token``, and where the provider has them
``cache_read_input_token_cost``, ``cache_creation_input_token_cost`` (the 5-minute write) and
``cache_creation_input_token_cost_above_1hr`` (the 1-hour write); plus fields traceflow does not read
(context window, capabilities, tiered ``*_above_200k_tokens`` prices). Its ``sample_spec`` entry
documents the fields and is skipped.

What is kept: every entry whose name has no ``provider/`` prefix (the names the providers' own APIs,
and so the agents, report: ``claude-sonnet-4-5-20250929``, ``gpt-5``) and that has both an input and
an output price, converted to USD per million tokens (``3e-06`` per token -> ``3.0``, exactly, through
decimal). Prefixed rows (``bedrock/...``, ``openrouter/...``) resell the same models, sometimes at other
prices, and are counted and left out; so are rows without both prices (embeddings, images), rows
with a price that is negative or not finite (``1e308`` per token overflows to infinity per million),
and rows named with fewer than :data:`MIN_NAME` characters (a row named ``c`` would be the longest
matching prefix, so the price, of every model the table does not list).

The table written (:func:`traceflow.config.prices_file`) is a price file in the layout of
:mod:`traceflow.prices` with ``as_of`` (the day of the update: LiteLLM's file carries no date) and
``source`` (the file and its SHA-256), so that reports can say which table and date they used.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError

#: LiteLLM's per-token fields -> the price table's per-million keys.
FIELDS = {
    "input_cost_per_token": "input",
    "output_cost_per_token": "output",
    "cache_read_input_token_cost": "cache_read",
    "cache_creation_input_token_cost": "cache_write",
    "cache_creation_input_token_cost_above_1hr": "cache_write_1h",
}


#: The shortest model name kept: a price is found by the longest name that starts a model's name, so
#: a row named ``""`` or ``c`` would price every model the table does not list.
MIN_NAME = 3


class BadPrice(ValueError):
    """A price that is negative or not finite (``1e308`` per token is infinite per million)."""


def _per_million(value: Any) -> float | None:
    """The price per million tokens, None when there is none, :class:`BadPrice` when it is no price."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        return None
    per_million = float(d * 1_000_000) if d.is_finite() else math.inf
    if not math.isfinite(per_million) or d < 0:
        raise BadPrice(value)
    return per_million


def convert(data: Any, where: str) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """(the models' prices per million tokens, counts of what was skipped and why)."""
    if not isinstance(data, dict):
        raise UsageError(
            f"{where} holds a JSON {type(data).__name__}, not LiteLLM's object of models; pass "
            "model_prices_and_context_window.json"
        )
    models: dict[str, dict[str, float]] = {}
    skipped = {
        "provider_prefixed": 0,
        "without_prices": 0,
        "not_models": 0,
        "bad_prices": 0,
        "short_names": 0,
    }
    for name, spec in data.items():
        if name == "sample_spec" or not isinstance(spec, dict):
            skipped["not_models"] += 1
            continue
        if "/" in name:
            skipped["provider_prefixed"] += 1
            continue
        if len(name.strip()) < MIN_NAME:
            skipped["short_names"] += 1
            continue
        try:
            entry = {key: p for src, key in FIELDS.items() if (p := _per_million(spec.get(src))) is not None}
        except BadPrice:
            skipped["bad_prices"] += 1
            continue
        if "input" not in entry or "output" not in entry:
            skipped["without_prices"] += 1
            continue
        models[name] = entry
    if not models:
        raise UsageError(
            f"{where} has no model with input_cost_per_token and output_cost_per_token; is it LiteLLM's "
            "model_prices_and_context_window.json?"
        )
    return models, skipped


def update(source: Path, target: Path, today: dt.date | None = None) -> dict[str, Any]:
    """Write ``target`` (the user's price table) from LiteLLM's file ``source``; returns a summary."""
    from traceflow.paths import read_text

    text = read_text(source, "prices update", "LiteLLM's model_prices_and_context_window.json")
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{source} is not valid JSON ({e}); pass LiteLLM's price file") from None
    except RecursionError:
        raise UsageError(
            f"{source} nests its JSON deeper than the parser goes; pass LiteLLM's price file"
        ) from None
    models, skipped = convert(data, str(source))
    digest = hashlib.sha256(text.encode()).hexdigest()
    as_of = (today or dt.datetime.now(dt.UTC).date()).isoformat()
    table = {
        "as_of": as_of,
        "source": f"LiteLLM prices from {source.name} (sha256 {digest[:12]})",
        "models": dict(sorted(models.items())),
    }
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1) + "\n")
        os.replace(tmp, target)
    except OSError as e:
        raise UsageError(
            f"cannot write the price table {target} ({e.strerror or e}); set TRACEFLOW_PRICES to a "
            "writable path"
        ) from None
    with_cache = sum(1 for m in models.values() if "cache_read" in m)
    with_1h = sum(1 for m in models.values() if "cache_write_1h" in m)
    return {
        "table": str(target),
        "as_of": as_of,
        "source": table["source"],
        "models": len(models),
        "with_cache_prices": with_cache,
        "with_1h_write_prices": with_1h,
        "skipped_provider_prefixed": skipped["provider_prefixed"],
        "skipped_without_prices": skipped["without_prices"],
        "skipped_bad_prices": skipped["bad_prices"],
        "skipped_short_names": skipped["short_names"],
    }
