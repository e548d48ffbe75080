"""The price model the TTL what-if and the report use: per-model base prices times relative multipliers.

Defaults follow Anthropic's published scheme (list prices dated :data:`DEFAULT_AS_OF`): a cache read costs
0.1x the model's base input price, a cache write 1.25x for the 5-minute TTL and 2x for the 1-hour TTL,
uncached ("cold") input 1x, output the model's output price. Prices are USD per million tokens.

A TTL between or beyond the priced ones gets a write multiplier interpolated linearly in log(TTL)
between the listed points (extrapolated with the last segment's slope above the longest, clamped to
the first point below the shortest): with the defaults 30 min costs 1.79x and 24 h 2.96x. This is a
what-if, not a provider's offer; list your own points in a price file to change it.

A price file (JSON, or TOML when it ends in ``.toml``) overrides any part of the defaults::

    {"as_of": "2026-08-01",
     "read_multiplier": 0.1,
     "write_multipliers": {"300": 1.25, "3600": 2.0},
     "default": {"input": 3.0, "output": 15.0},
     "models": {"claude-opus-4-5": {"input": 5.0, "output": 25.0}, "my-model": {"input": 0.5}}}

A model may also list its own cache prices, ``cache_read``, ``cache_write`` (5-minute) and
``cache_write_1h`` (USD per million tokens, as LiteLLM's table has them); where it does they replace
the multipliers for that model in :meth:`PriceModel.cost`. ``traceflow prices update FILE`` writes the
user's price table (:func:`traceflow.config.prices_file`) from LiteLLM's
``model_prices_and_context_window.json`` (:mod:`traceflow.importers.litellm_prices`); :meth:`PriceModel.load`
reads it over the defaults, and a ``--prices`` file over both. :meth:`PriceModel.describe` names the
table and its date for reports.

Model prices match the longest key that is a prefix of the model name (``claude-sonnet-4-5-20250929``
matches ``claude-sonnet-4-5``); a named model no key matches gets ``default``. A request without a
model name (the public serving traces: Mooncake, Azure, BurstGPT, Bailian) is not priced at all
(:meth:`PriceModel.priced`): the costs that count tokens (``mix``'s savings) leave it out and say how
many tokens that was, rather than bill an unknown model at a Sonnet-class default.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traceflow import config
from traceflow.errors import UsageError
from traceflow.paths import read_text

#: Date of the built-in list prices (anthropic.com/pricing).
DEFAULT_AS_OF = "2025-11-24"


@dataclass(frozen=True)
class ModelPrice:
    """Base prices of one model in USD per million tokens; a model's own cache prices where its price
    table lists them (LiteLLM's do), else the :class:`PriceModel`'s multipliers of ``input`` apply."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None  # the 5-minute write
    cache_write_1h: float | None = None


#: Built-in base prices, USD per million tokens, keyed by model-name prefix (longest match wins).
DEFAULT_MODELS: dict[str, ModelPrice] = {
    "claude-opus-4-5": ModelPrice(5.0, 25.0),
    "claude-opus-4-1": ModelPrice(15.0, 75.0),
    "claude-opus-4-0": ModelPrice(15.0, 75.0),
    "claude-opus-4-2025": ModelPrice(15.0, 75.0),  # claude-opus-4-20250514
    "claude-opus": ModelPrice(5.0, 25.0),  # newer Opus versions
    "claude-sonnet": ModelPrice(3.0, 15.0),
    "claude-haiku-4": ModelPrice(1.0, 5.0),
    "claude-haiku": ModelPrice(1.0, 5.0),
    "claude-3-opus": ModelPrice(15.0, 75.0),
    "claude-3-7-sonnet": ModelPrice(3.0, 15.0),
    "claude-3-5-sonnet": ModelPrice(3.0, 15.0),
    "claude-3-5-haiku": ModelPrice(0.8, 4.0),
    "claude-3-haiku": ModelPrice(0.25, 1.25),
}

#: Price of a model no key matches: a Sonnet-class model.
DEFAULT_PRICE = ModelPrice(3.0, 15.0)

#: The name of the built-in price table in reports.
BUILT_IN = "built-in list prices"


@dataclass(frozen=True)
class PriceModel:
    """Base prices per model and the relative multipliers of cache reads and writes."""

    as_of: str = DEFAULT_AS_OF
    read_multiplier: float = 0.1
    cold_multiplier: float = 1.0
    #: (TTL seconds, write multiplier) points, sorted by TTL.
    write_multipliers: tuple[tuple[float, float], ...] = ((300.0, 1.25), (3600.0, 2.0))
    models: Mapping[str, ModelPrice] = field(default_factory=lambda: dict(DEFAULT_MODELS))
    default: ModelPrice = DEFAULT_PRICE
    #: Which price table: the built-in list, the user's table (``traceflow prices update``), a file.
    source: str = BUILT_IN

    def describe(self) -> str:
        """Which price table and date, for a report: ``built-in list prices as of 2025-11-24``."""
        return f"{self.source} as of {self.as_of}"

    def price(self, model: str | None) -> ModelPrice:
        """The base prices of ``model``: the longest matching prefix, else :attr:`default`."""
        if model:
            best = max((k for k in self.models if model.startswith(k)), key=len, default=None)
            if best is not None:
                return self.models[best]
        return self.default

    def priced(self, model: str | None) -> ModelPrice | None:
        """The base prices of a request's ``model`` (:meth:`price`), or None for a request without a
        model name: nothing says what it cost.

        >>> PriceModel().priced(None) is None, PriceModel().priced("claude-sonnet-4-5").input
        (True, 3.0)
        """
        return self.price(model) if model else None

    def write_multiplier(self, ttl_s: float) -> float:
        """The cache-write multiplier of a TTL (log-linear between the listed points).

        >>> m = PriceModel()
        >>> [round(m.write_multiplier(t), 3) for t in (60, 300, 1800, 3600, 86400)]
        [1.25, 1.25, 1.791, 2.0, 2.959]
        """
        points = self.write_multipliers
        if len(points) == 1 or ttl_s <= points[0][0]:
            return points[0][1]
        for (t0, m0), (t1, m1) in itertools.pairwise(points):
            if ttl_s <= t1:
                return m0 + (m1 - m0) * math.log(ttl_s / t0) / math.log(t1 / t0)
        (t0, m0), (t1, m1) = points[-2], points[-1]
        return m1 + (m1 - m0) * math.log(ttl_s / t1) / math.log(t1 / t0)

    def cost(
        self, model: str | None, cold: int, read: int, write: int, output: int, write_1h: int = 0
    ) -> float:
        """USD of these tokens of ``model`` as billed: cold input at the input price, cache reads at the
        read multiplier, 1-hour writes at the 1-hour write multiplier and every other write at the
        5-minute one, output at the output price (:func:`token_cost`'s billed cost).

        >>> round(PriceModel().cost("claude-sonnet-4-5", 1000, 10_000, 2000, 500, 1000), 6)
        0.02325
        """
        p = self.price(model)
        read_rate, write_rate, write_1h_rate = self.cache_rates(p)
        return (
            cold * p.input / 1e6 * self.cold_multiplier
            + read * read_rate
            + write_1h * write_1h_rate
            + (write - write_1h) * write_rate
            + output * p.output / 1e6
        )

    def cache_rates(self, p: ModelPrice) -> tuple[float, float, float]:
        """USD per token of a cache read, a 5-minute write and a 1-hour write of a model priced ``p``:
        its own cache prices where its table lists them, else the multipliers of its input price."""
        per_in = p.input / 1e6
        read = p.cache_read / 1e6 if p.cache_read is not None else per_in * self.read_multiplier
        write = p.cache_write / 1e6 if p.cache_write is not None else per_in * self.write_multiplier(300.0)
        write_1h = (
            p.cache_write_1h / 1e6 if p.cache_write_1h is not None else per_in * self.write_multiplier(3600.0)
        )
        return read, write, write_1h

    def as_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "currency": "USD",
            "unit": "per million tokens",
            "read_multiplier": self.read_multiplier,
            "cold_multiplier": self.cold_multiplier,
            "write_multipliers": {f"{t:g}": m for t, m in self.write_multipliers},
            "default": {"input": self.default.input, "output": self.default.output},
            "models": {k: _model_dict(v) for k, v in self.models.items()},
            "source": self.source,
        }

    @classmethod
    def load(cls, path: str | Path | None) -> PriceModel:
        """The defaults, overridden by the user's price table where there is one
        (:func:`traceflow.config.prices_file`, written by ``traceflow prices update``), overridden by
        a JSON or TOML price file (``None``: none)."""
        base = cls()
        user = config.prices_file()
        if user.is_file():
            base = base._merge_file(user, "the price table (TRACEFLOW_PRICES)")
        if path is None:
            return base
        return base._merge_file(Path(path).expanduser(), "--prices")

    def _merge_file(self, p: Path, option: str) -> PriceModel:
        base = self
        text = read_text(p, option, "a JSON or TOML price file (see traceflow.prices)")
        try:
            data = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as e:
            raise UsageError(
                f"the price file {p} is not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}"
            ) from None
        except RecursionError:
            raise UsageError(
                f"the price file {p} nests deeper than the parser goes; write one object of prices"
            ) from None
        if not isinstance(data, dict):
            raise UsageError(f"the price file {p} holds a {type(data).__name__}; write one object of prices")
        merged = base.merged(data, str(p))
        if "source" not in data:
            return replace(merged, source=str(p))
        return merged

    def merged(self, data: Mapping[str, Any], where: str = "prices") -> PriceModel:
        """A copy with the keys of ``data`` (the price-file layout) replacing the defaults."""
        known = {
            "as_of",
            "currency",
            "unit",
            "read_multiplier",
            "cold_multiplier",
            "write_multipliers",
            "default",
            "models",
            "source",
        }
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
        try:
            changes: dict[str, Any] = {}
            if "as_of" in data:
                changes["as_of"] = str(data["as_of"])
            if "source" in data:
                changes["source"] = str(data["source"])
            for key in ("read_multiplier", "cold_multiplier"):
                if key in data:
                    changes[key] = float(data[key])
            if "write_multipliers" in data:
                points = sorted((float(t), float(m)) for t, m in dict(data["write_multipliers"]).items())
                if not points or any(t <= 0 for t, _ in points):
                    raise ValueError("write_multipliers needs positive TTL keys")
                changes["write_multipliers"] = tuple(points)
            if "default" in data:
                changes["default"] = _model_price(data["default"], self.default)
            if "models" in data:
                models = dict(self.models)
                for name, spec in dict(data["models"]).items():
                    if len(str(name).strip()) < 3:  # it would be the prefix of (so price) every model
                        raise ValueError(f"the model name {name!r} is under 3 characters")
                    models[str(name)] = _model_price(spec, self.price(str(name)))
                changes["models"] = models
        except (TypeError, ValueError, AttributeError) as e:
            raise UsageError(f"{where}: {e}") from None
        return replace(self, **changes)


#: The cache prices a model's entry may list (USD per million tokens), besides input and output.
CACHE_KEYS = ("cache_read", "cache_write", "cache_write_1h")


def token_cost(prices: PriceModel, model: str | None, sums: Sequence[int]) -> tuple[float, float] | None:
    """(cost with no cache, cost as billed) in USD of ``(cold, read, write, output, write_1h)`` tokens
    of one model: with no cache every input token is cold; as billed a read costs the read price, a
    1-hour write the 1-hour write price and every other write the 5-minute one
    (:meth:`~traceflow.prices.PriceModel.cost`). None for requests
    without a model name (not priced)."""
    cold, read, write, output, write_1h = sums
    p = prices.priced(model)
    if p is None:
        return None
    per_in, per_out = p.input / 1e6, p.output / 1e6
    no_cache = (cold + read + write) * per_in * prices.cold_multiplier + output * per_out
    # a model's own cache prices (a LiteLLM table) where listed, else the multipliers
    billed = prices.cost(model, cold, read, write, output, write_1h)
    return no_cache, billed


def _model_price(spec: Any, fallback: ModelPrice) -> ModelPrice:
    if not isinstance(spec, Mapping):
        raise ValueError(f"a model price is an object with input and output, got {spec!r}")
    extra = set(spec) - {"input", "output", *CACHE_KEYS}
    if extra:
        raise ValueError(
            f"unknown model price key(s) {sorted(extra)}; use input, output, {', '.join(CACHE_KEYS)}"
        )
    cache = {k: _amount(spec[k], k) for k in CACHE_KEYS if spec.get(k) is not None}
    return ModelPrice(
        _amount(spec.get("input", fallback.input), "input"),
        _amount(spec.get("output", fallback.output), "output"),
        **cache,
    )


def _amount(value: Any, key: str) -> float:
    """A price: a finite number of 0 or more (an infinite one would print ``inf`` and blank costs)."""
    price = float(value)
    if not (math.isfinite(price) and price >= 0):
        raise ValueError(f"the {key} price {value!r} is not a finite number of 0 or more")
    return price


def _model_dict(p: ModelPrice) -> dict[str, float]:
    out = {"input": p.input, "output": p.output}
    out.update({k: v for k in CACHE_KEYS if (v := getattr(p, k)) is not None})
    return out
