"""``traceflow size``'s one sizing headline (docs/sizing.md#one-headline-three-footprints).

Three footprints answer "how much KV must a tier hold for a TTL T", each for another question, and
read alone one under-buys by several times:

``rate_x_ttl``
    new KV tokens per second × T × bytes per token: what is *written* within T (shared prefixes
    once). A lower bound: a session idle for less than T still holds the whole context it built
    before the window.
``input_rate_x_ttl``
    input tokens per second × T × bytes: every prompt counted again each turn (no prefix shared).
    An upper bound.
``working_set_peak``
    the peak, over the selection, of the contexts of the sessions active within T (each once;
    :mod:`traceflow.analysis.working_set`): what a cache that keeps KV for T holds. **The headline.**

and a cross-check from the replay: ``lru_capacity`` is the smallest LRU cache of the selection's
prefix blocks that keeps :data:`LRU_SHARE` of the prefix hits an unbounded cache gets
(:func:`traceflow.kv.simulate.capacity_for_share`), the size for an LRU policy instead of a TTL.
"""

from __future__ import annotations

from typing import Any

from traceflow.units import format_duration, format_size

#: The share of an unbounded cache's prefix hits the LRU cross-check asks for.
LRU_SHARE = 0.95


def _gb(value: float) -> str:
    return format_size(value)


def sizing_headline(
    ttl_s: float,
    rate_x_ttl_bytes: float,
    input_rate_x_ttl_bytes: float,
    working_set_peak_bytes: float | None = None,
    lru_capacity_bytes: float | None = None,
    lru_unbounded_hit_ratio: float | None = None,
    unmeasured: str | None = None,
) -> dict[str, Any]:
    """The headline sentence and the figures it reconciles (bytes; None where not measured).

    >>> h = sizing_headline(300, 35e9, 561e9, 265e9, 300e9, 0.9)
    >>> h["capacity_bytes"], h["basis"]
    (265000000000.0, 'working_set_peak')
    >>> sizing_headline(300, 35e9, 561e9)["basis"]
    'rate_x_ttl'
    """
    ttl = format_duration(ttl_s)
    out: dict[str, Any] = {
        "ttl_s": ttl_s,
        "rate_x_ttl_bytes": rate_x_ttl_bytes,
        "input_rate_x_ttl_bytes": input_rate_x_ttl_bytes,
        "working_set_peak_bytes": working_set_peak_bytes,
        "lru_capacity_bytes": lru_capacity_bytes,
        "lru_share": LRU_SHARE if lru_capacity_bytes is not None else None,
    }
    bounds = (
        f"rate × TTL {_gb(rate_x_ttl_bytes)} counts only what is written within {ttl} (a lower bound); "
        f"input rate × TTL {_gb(input_rate_x_ttl_bytes)} counts re-read prefixes again (an upper bound)"
    )
    if working_set_peak_bytes is None:
        out.update(
            capacity_bytes=rate_x_ttl_bytes,
            basis="rate_x_ttl",
            headline=f"at least {_gb(rate_x_ttl_bytes)} of KV for a {ttl} TTL ({bounds}); "
            + (
                f"the working-set peak, the figure to buy, could not be measured: {unmeasured}"
                if unmeasured
                else "measure the lake's selection (no --rate) for the working-set peak, the figure to buy"
            ),
        )
        return out
    text = (
        f"{_gb(working_set_peak_bytes)} of KV for a {ttl} TTL: the working-set peak, every session "
        f"active within {ttl} holding its whole context ({bounds})"
    )
    if lru_capacity_bytes is not None:
        text += (
            f"; an LRU cache of {_gb(lru_capacity_bytes)} keeps {LRU_SHARE:.0%} of the prefix hits an "
            f"unbounded cache gets ({lru_unbounded_hit_ratio or 0:.1%} of blocks)"
        )
    out.update(capacity_bytes=working_set_peak_bytes, basis="working_set_peak", headline=text)
    return out
