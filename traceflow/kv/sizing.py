"""KV-cache tier sizing: footprint, how long a tier holds, SSD wear, cost. Pure functions, no I/O.

Formulas (docs/sizing-formulas.md; ``b`` = KV bytes per token, ``R`` = KV token rate):

* footprint(T)     = R × T × b                                  (+ per-session state × sessions)
* hold time(C)     = C / (R × b)                                how long a tier of C bytes keeps KV
* DWPD             = W × 86,400 × raid_factor × WAF / (drives × drive_bytes)
                     raid_factor: RAID0 1, RAID1/RAID10 2, RAID5 n/(n−1), RAID6 n/(n−2)
* rated TBW        = rated_DWPD × drive_bytes × 365 × warranty_years
* years to rated endurance = rated_DWPD × warranty_years / DWPD
* cost per month   = capacity × price / amortisation months (HBM: $/GPU-hour × 730 h × share of HBM;
                     object storage: $/GB-month); per million tokens = monthly cost / tokens per month
* TTFT             = Σ_tiers (hit_tokens × b / read_bw + latency) + missed_tokens / prefill_rate
* prefill FLOPs    = 2·N_active·N + 2·L·heads·(d_qk + d_v)·(N·P + N²/2)

Units (``traceflow.units``): GB/TB are 10^9/10^12 bytes (storage vendors, DWPD); GiB/TiB are 2^30/2^40.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from traceflow.errors import TraceflowError, UsageError
from traceflow.kv.geometry import KVSize
from traceflow.kv.serving import KV_LOAD_PCIE5_LMCACHE, PREFILL_FLOPS_PER_GPU
from traceflow.paths import read_text
from traceflow.units import parse_bandwidth, parse_duration, parse_size

SECONDS_PER_DAY = 86_400
HOURS_PER_MONTH = 730.0
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3_600

# ------------------------------------------------------------------------------------------- tiers

#: Tier kind by tier name (``--tier NAME=SIZE``); ``kind=`` in the spec overrides it.
KIND_BY_NAME: dict[str, str] = {
    "gpu": "hbm",
    "hbm": "hbm",
    "g1": "hbm",
    "device": "hbm",
    "dram": "dram",
    "cpu": "dram",
    "host": "dram",
    "mem": "dram",
    "ram": "dram",
    "g2": "dram",
    "ssd": "ssd",
    "flash": "ssd",
    "nvme": "ssd",
    "disk": "ssd",
    "g3": "ssd",
    "object": "object",
    "s3": "object",
    "remote": "object",
    "g4": "object",
    "hdd": "hdd",
}

#: Default read bandwidth per tier kind, bytes/s, for the serial TTFT model: published measurements, not
#: fits. DRAM: one PCIe 5.0 x16 link's host→GPU copy through LMCache (``traceflow.kv.serving``'s
#: KV_LOAD_PCIE5_LMCACHE, 44 GB/s: vLLM's ~50 GB/s one way on H100 × LMCache's 22.1/25.07 GB/s on an L20).
#: Flash: one Solidigm D7-PS1030 drive, the source article's fio ceiling of its 8-drive array (114 GB/s)
#: over 8. HBM hits need no transfer; object storage and HDD are ASSUMPTIONS.
DEFAULT_READ_BW: dict[str, float] = {
    "hbm": math.inf,
    "dram": KV_LOAD_PCIE5_LMCACHE,
    "ssd": 114e9 / 8,
    "object": 1.0e9,
    "hdd": 0.25e9,
}

#: Default prefill rate (tokens/s) for missed tokens: derived, not fitted, from the serving presets' one
#: calibrated rate: 4 GPUs × PREFILL_FLOPS_PER_GPU over MiniMax-M2's prefill FLOPs per token of a
#: 65,536-token prompt computed from scratch (the agentic-coding workload's context cap).
DEFAULT_PREFILL_RATE = round(
    4 * PREFILL_FLOPS_PER_GPU * 65_536 / (2 * 10e9 * 65_536 + 2 * 62 * 48 * 256 * 65_536**2 / 2)
)


@dataclass(frozen=True)
class Tier:
    """One cache tier: name, capacity, kind, read bandwidth and latency, and an optional TTL."""

    name: str
    capacity_bytes: float
    kind: str
    read_bytes_per_s: float
    latency_s: float = 0.0
    ttl_s: float | None = None

    def capacity_blocks(self, block_bytes: float) -> int:
        """Whole blocks that fit (a partial block still takes a page).

        >>> Tier("gpu", 80e9, "hbm", math.inf).capacity_blocks(512 * 126_976)
        1230
        """
        if math.isinf(self.capacity_bytes):
            return 2**62
        return int(self.capacity_bytes // block_bytes)


def parse_tier(spec: str) -> Tier:
    """``NAME=SIZE[:read=BW][:latency=DUR][:ttl=DUR][:kind=KIND]``.

    >>> t = parse_tier("dram=512GB")
    >>> t.name, t.capacity_bytes, t.kind, t.read_bytes_per_s, t.ttl_s
    ('dram', 512000000000.0, 'dram', 44076585560.43079, None)
    >>> parse_tier("ssd=100TB:read=7GB/s:ttl=1h").read_bytes_per_s
    7000000000.0
    """
    head, *opts = spec.split(":")
    if "=" not in head:
        raise UsageError(f"--tier {spec!r}: write it as NAME=SIZE, e.g. gpu=80GB, dram=512GB, ssd=100TB")
    name, size = (x.strip() for x in head.split("=", 1))
    options: dict[str, str] = {}
    for opt in opts:
        if "=" not in opt:
            raise UsageError(
                f"--tier {spec!r}: option {opt!r} should be key=value (read, latency, ttl, kind)"
            )
        k, v = (x.strip() for x in opt.split("=", 1))
        options[k.lower()] = v
    unknown = set(options) - {"read", "latency", "ttl", "kind"}
    if unknown:
        raise UsageError(
            f"--tier {spec!r}: unknown option(s) {sorted(unknown)}; use read, latency, ttl, kind"
        )
    kind = options.get("kind", KIND_BY_NAME.get(name.lower(), ""))
    if kind not in DEFAULT_READ_BW:
        raise UsageError(
            f"--tier {spec!r}: cannot tell what kind of tier {name!r} is; add :kind=hbm|dram|ssd|object|hdd"
        )
    where = f"--tier {spec!r}:"
    read = parse_bandwidth(options["read"], f"{where} read") if "read" in options else DEFAULT_READ_BW[kind]
    latency = options.get("latency")
    capacity = parse_size(size, f"--tier {name}", unlimited=True)
    if capacity <= 0:
        raise UsageError(
            f"--tier {spec!r}: a tier holds more than 0 bytes; give its size (e.g. {name}=80GB) "
            "or leave the tier out"
        )
    return Tier(
        name=name,
        capacity_bytes=capacity,
        kind=kind,
        read_bytes_per_s=read,
        latency_s=parse_duration(latency, f"{where} latency", zero=True) if latency is not None else 0.0,
        ttl_s=parse_duration(options["ttl"], f"{where} ttl") if "ttl" in options else None,
    )


# ---------------------------------------------------------------------------------------- formulas


def footprint_tokens(rate_tok_s: float, ttl_s: float) -> float:
    """Tokens of KV kept for ``ttl_s`` at ``rate_tok_s`` new KV tokens per second.

    >>> footprint_tokens(4_200, 3_600)
    15120000.0
    """
    return float(rate_tok_s) * ttl_s


def footprint_bytes(rate_tok_s: float, ttl_s: float, kv_bytes_per_token: float) -> float:
    """Bytes of KV kept for ``ttl_s`` (docs/sizing-formulas.md#footprint-hold-time-and-ssd-wear).

    >>> footprint_bytes(4_200, 3_600, 126_976)
    1919877120000.0
    """
    return footprint_tokens(rate_tok_s, ttl_s) * kv_bytes_per_token


def hold_seconds(capacity_bytes: float, rate_tok_s: float, kv_bytes_per_token: float) -> float:
    """How long a tier of ``capacity_bytes`` holds KV written at ``rate_tok_s`` (formula (3)).

    >>> round(hold_seconds(80e9, 4_200, 126_976), 1), round(hold_seconds(1e12, 4_200, 253_952), 1)
    (150.0, 937.6)
    """
    write = rate_tok_s * kv_bytes_per_token
    return math.inf if write <= 0 else capacity_bytes / write


RAID_LEVELS = ("raid0", "raid1", "raid10", "raid5", "raid6")


def _check_raid(raid: str, drives: int) -> str:
    level = raid.lower().replace("-", "").replace(" ", "")
    if level not in RAID_LEVELS:
        raise UsageError(f"--raid {raid!r}: use one of {', '.join(RAID_LEVELS)}")
    minimum = {"raid0": 1, "raid1": 2, "raid10": 2, "raid5": 3, "raid6": 4}[level]
    if drives < minimum:
        raise UsageError(f"{level} needs at least {minimum} drives, got {drives}")
    return level


def raid_factor(raid: str, drives: int) -> float:
    """Physical bytes written per logical byte (full-stripe writes for parity RAID).

    >>> raid_factor("raid10", 8), raid_factor("raid5", 8), raid_factor("raid0", 8)
    (2.0, 1.1428571428571428, 1.0)
    """
    level = _check_raid(raid, drives)
    if level in ("raid1", "raid10"):
        return 2.0
    if level == "raid5":
        return drives / (drives - 1)
    if level == "raid6":
        return drives / (drives - 2)
    return 1.0


def usable_bytes(raid: str, drives: int, drive_bytes: float) -> float:
    """Usable capacity of the array.

    >>> usable_bytes("raid10", 8, 12.8e12)
    51200000000000.0
    """
    return drives * drive_bytes / raid_factor(raid, drives)


def dwpd(
    write_bytes_per_s: float, drives: int, drive_bytes: float, raid: str = "raid10", waf: float = 1.0
) -> float:
    """Drive writes per day (formula (4)).

    >>> round(dwpd(1.9e9, 8, 12.8e12, "raid10"), 6), round(dwpd(1.9e9, 8, 12.8e12, "raid0"), 6)
    (3.20625, 1.603125)
    """
    per_day = write_bytes_per_s * SECONDS_PER_DAY * raid_factor(raid, drives) * waf
    return per_day / (drives * drive_bytes)


def rated_tbw_bytes(drive_bytes: float, rated_dwpd: float, warranty_years: float) -> float:
    """Rated bytes written over the warranty (formula (5)).

    >>> rated_tbw_bytes(12.8e12, 3, 5) / 1e12
    70080.0
    """
    return drive_bytes * rated_dwpd * 365 * warranty_years


def years_to_rated_endurance(actual_dwpd: float, rated_dwpd: float, warranty_years: float) -> float:
    """Years until the drives reach their rated endurance at ``actual_dwpd``.

    >>> years_to_rated_endurance(1.5, 3, 5)
    10.0
    """
    return math.inf if actual_dwpd <= 0 else rated_dwpd * warranty_years / actual_dwpd


def prefill_flops(
    n_active: float, layers: int, q_heads: int, d_qk: int, d_v: int, new_tokens: int, cached_tokens: int = 0
) -> float:
    """Prefill FLOPs of ``new_tokens`` after ``cached_tokens`` of cached prefix
    (docs/sizing-formulas.md#prefill-flops-and-time-to-first-token).

    >>> f"{prefill_flops(70.6e9, 80, 64, 128, 128, 8_192):.4e}"
    '1.2447e+15'
    """
    n, p = new_tokens, cached_tokens
    return 2 * n_active * n + 2 * layers * q_heads * (d_qk + d_v) * (n * p + n * n / 2)


def recompute_avoided_flops(
    n_active: float, layers: int, q_heads: int, d_qk: int, d_v: int, cached: int
) -> float:
    """FLOPs a cached prefix of ``cached`` tokens saves: ``2·N_active·P + L·heads·(d_qk+d_v)·P²``.

    >>> f"{recompute_avoided_flops(70.6e9, 80, 64, 128, 128, 120_000):.4e}"
    '3.5818e+16'
    """
    return 2 * n_active * cached + layers * q_heads * (d_qk + d_v) * cached * cached


def ttft_seconds(
    hit_tokens: Sequence[float],
    read_bytes_per_s: Sequence[float],
    missed_tokens: float,
    kv_bytes_per_token: float,
    prefill_rate: float = DEFAULT_PREFILL_RATE,
    latency_s: Sequence[float] | None = None,
    overlap: bool = False,
) -> float:
    """Time to first token: load hits from each tier, prefill the misses
    (docs/sizing-formulas.md#prefill-flops-and-time-to-first-token).

    A 128k-token MiniMax-M2 FP8 context: recomputed at 9,209 tok/s, loaded at 5.08 GB/s, at 20.3 GB/s
    (the rates that would give the seed's 13.9 s / 3.2 s / 0.8 s resumes; not the defaults).

    >>> b = 126_976
    >>> [round(ttft_seconds([t], [bw], m, b, prefill_rate=9_209), 1) for t, bw, m in
    ...  [(0, 1, 128_000), (128_000, 5.08e9, 0), (128_000, 20.3e9, 0)]]
    [13.9, 3.2, 0.8]
    """
    lat = latency_s or [0.0] * len(hit_tokens)
    load = sum(
        (t * kv_bytes_per_token / bw if math.isfinite(bw) else 0.0) + (lt if t else 0.0)
        for t, bw, lt in zip(hit_tokens, read_bytes_per_s, lat, strict=True)
    )
    compute = missed_tokens / prefill_rate
    return max(load, compute) if overlap else load + compute


# ------------------------------------------------------------------------------------------ prices


#: The shipped planning prices: the same JSON that ``--prices FILE`` reads, with every key given.
PRICES_FILE = Path(__file__).with_name("prices.json")


@dataclass(frozen=True)
class Prices:
    """Dated planning prices (docs/sizing-formulas.md#planning-prices; ASSUMPTIONS, override with
    ``--prices FILE``).

    The defaults are data, :data:`PRICES_FILE` (``traceflow/kv/prices.json``), read by :meth:`default`.
    A ``--prices`` file is JSON with any of these keys, replacing just those; copying the shipped file is
    the way to start one. Owned media (DRAM, SSD, HDD) is bought once and amortised over
    ``amortization_months``; HBM is priced as its share of GPU-hours; object storage is rented.

    >>> Prices.default().dram_usd_per_gb
    10.0
    """

    date: str
    """When the prices were gathered (``YYYY-MM``); reported with the costs (``prices`` in the output)."""
    source: str
    """Where the prices come from."""
    dram_usd_per_gb: float
    """Server DRAM, USD per GB (10^9 bytes), bought."""
    ssd_usd_per_tb: float
    """Enterprise NVMe flash, USD per TB (10^12 bytes), bought; also prices SSD wear."""
    hdd_usd_per_tb: float
    """Nearline HDD, USD per TB, bought."""
    object_usd_per_gb_month: float
    """Object storage, USD per GB-month, rented."""
    gpu_usd_per_hour: float
    """One GPU, USD per hour; an HBM tier costs its share of ``gpu_hbm_gb`` of it."""
    gpu_hbm_gb: float
    """HBM per GPU, GB."""
    amortization_months: float
    """Months over which bought media is paid off."""
    power_usd_per_month: float
    """Power and hosting, USD per month, added to the total."""

    @classmethod
    def default(cls) -> Prices:
        """The shipped planning prices, from :data:`PRICES_FILE` (read once)."""
        return _packaged_prices(PRICES_FILE)

    @classmethod
    def load(cls, path: str | Path | None) -> Prices:
        """Defaults, with any keys of a JSON file (``--prices``) replacing them."""
        if path is None:
            return cls.default()
        text = read_text(
            Path(path), "--prices", "a JSON price file (start from a copy of traceflow/kv/prices.json)"
        )
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UsageError(f"--prices {path}: cannot read it as JSON ({e})") from None
        if not isinstance(data, dict):
            raise UsageError(f"--prices {path} holds a {type(data).__name__}; write one object of prices")
        return cls.from_mapping(data, str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "prices") -> Prices:
        """Defaults, with the keys of ``data`` replacing them (``where`` names the source in errors)."""
        return replace(cls.default(), **_price_values(data, where))


def _price_values(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    known = {f.name for f in fields(Prices)}
    unknown = set(data) - known
    if unknown:
        raise UsageError(
            f"{where}: unknown price key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
        )
    return {k: (v if k in ("date", "source") else float(v)) for k, v in data.items()}


@functools.cache
def _packaged_prices(path: Path) -> Prices:
    """Every :class:`Prices` field from ``path``; a missing key is a broken install, not a default."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise TraceflowError(f"{path}: cannot read the shipped prices ({e}); reinstall traceflow") from None
    missing = [f.name for f in fields(Prices) if f.name not in data]
    if missing:
        raise TraceflowError(
            f"{path}: the shipped prices lack key(s) {missing}; every Prices field must be given there "
            "(reinstall traceflow, or restore the file from the repository)"
        )
    return Prices(**_price_values(data, str(path)))


def tier_cost_per_month(tier: Tier, prices: Prices, rent_hbm: bool = True) -> float:
    """USD per month for a tier's capacity (owned media amortised; HBM as a share of GPU-hours, or
    nothing without ``rent_hbm``: HBM on GPUs you own is there to serve the model anyway).

    >>> round(tier_cost_per_month(parse_tier("dram=1TB"), Prices.default()), 2)
    277.78
    """
    if math.isinf(tier.capacity_bytes):
        return math.inf
    gb = tier.capacity_bytes / 1e9
    months = prices.amortization_months
    if tier.kind == "hbm":
        if not rent_hbm:
            return 0.0
        return prices.gpu_usd_per_hour * HOURS_PER_MONTH * gb / prices.gpu_hbm_gb
    if tier.kind == "dram":
        return gb * prices.dram_usd_per_gb / months
    if tier.kind == "ssd":
        return gb / 1e3 * prices.ssd_usd_per_tb / months
    if tier.kind == "hdd":
        return gb / 1e3 * prices.hdd_usd_per_tb / months
    return gb * prices.object_usd_per_gb_month


def _cost_basis(tier: Tier, rent_hbm: bool) -> str:
    if tier.kind == "hbm":
        return "rented: share of GPU-hours" if rent_hbm else "owned: not billed (--rent-hbm prices it)"
    return "rented per GB-month" if tier.kind == "object" else "owned: price / amortisation months"


# --------------------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class SsdArray:
    """The flash array that takes KV writes. Its defaults are the one SSD assumption of traceflow:
    ``size`` starts from them and the report's drive-writes-per-day chart uses them (:data:`DEFAULT_SSD`).
    """

    drives: int = 8
    drive_bytes: float = 12.8e12
    raid: str = "raid10"
    rated_dwpd: float = 3.0
    warranty_years: float = 5.0
    waf: float = 1.0

    def __post_init__(self) -> None:
        for option, value in (
            ("--drive-size", self.drive_bytes),
            ("--rated-dwpd", self.rated_dwpd),
            ("--warranty-years", self.warranty_years),
            ("--waf", self.waf),
        ):
            if not (value > 0 and math.isfinite(value)):
                raise UsageError(f"{option} {value:g} must be a positive number")


#: The SSD array assumed where none is given: ``traceflow size`` option defaults and the report's SSD chart.
DEFAULT_SSD = SsdArray()


def size_report(
    kv: KVSize,
    rate_tok_s: float,
    ttls_s: Sequence[float],
    tiers: Sequence[Tier],
    array: SsdArray,
    prices: Prices,
    *,
    model: str = "",
    input_rate_tok_s: float | None = None,
    ssd_write_bytes_per_s: float | None = None,
    sessions: int = 0,
    rate_source: str = "given",
    rent_hbm: bool = False,
) -> dict[str, Any]:
    """Everything ``traceflow size`` prints, as a dict with stable keys. HBM tiers cost nothing unless
    ``rent_hbm`` (``--rent-hbm``: priced as their share of rented GPU-hours)."""
    b = kv.per_token_bytes
    input_rate = input_rate_tok_s if input_rate_tok_s is not None else rate_tok_s
    for option, value in (("--rate", rate_tok_s), ("--input-rate", input_rate), ("--sessions", sessions)):
        if not (value >= 0 and math.isfinite(value)):
            raise UsageError(f"{option} {value:g} must be 0 or more")
    if b <= 0:
        raise UsageError(
            f"{model or 'the model'} has no KV bytes per token; pick another --kv-model or --config"
        )
    footprints = [
        {
            "ttl_s": t,
            "tokens": footprint_tokens(rate_tok_s, t),
            "footprint_bytes": footprint_bytes(rate_tok_s, t, b) + kv.per_session_bytes * sessions,
            "footprint_upper_bytes": footprint_bytes(input_rate, t, b) + kv.per_session_bytes * sessions,
        }
        for t in ttls_s
    ]
    write_bps = ssd_write_bytes_per_s if ssd_write_bytes_per_s is not None else rate_tok_s * b
    level = _check_raid(array.raid, array.drives)
    d = dwpd(write_bps, array.drives, array.drive_bytes, level, array.waf)
    years = years_to_rated_endurance(d, array.rated_dwpd, array.warranty_years)
    tokens_per_month = input_rate * SECONDS_PER_MONTH
    tier_rows: list[dict[str, Any]] = []
    for tier in tiers:
        monthly = tier_cost_per_month(tier, prices, rent_hbm)
        tier_rows.append(
            {
                "name": tier.name,
                "kind": tier.kind,
                "capacity_bytes": tier.capacity_bytes,
                "hold_s": hold_seconds(tier.capacity_bytes, rate_tok_s, b),
                "tokens_held": tier.capacity_bytes / b,
                "cost_usd_per_month": monthly,
                "cost_usd_per_million_tokens": monthly / (tokens_per_month / 1e6)
                if tokens_per_month
                else None,
                "cost_basis": _cost_basis(tier, rent_hbm),
            }
        )
    ssd_cost = array.drives * array.drive_bytes / 1e12 * prices.ssd_usd_per_tb
    wear_per_year = ssd_cost * (d / array.rated_dwpd) / array.warranty_years
    total_month = sum(float(r["cost_usd_per_month"]) for r in tier_rows) + prices.power_usd_per_month
    first = footprints[0] if footprints else {"footprint_bytes": 0.0, "tokens": 0.0}
    return {
        "model": model,
        "dtype": kv.dtype,
        "kv_bytes_per_token": b,
        "per_session_bytes": kv.per_session_bytes,
        "rate_tok_s": rate_tok_s,
        "input_rate_tok_s": input_rate,
        "rate_source": rate_source,
        "ttl_s": ttls_s[0] if ttls_s else None,
        "footprint_tokens": first["tokens"],
        "footprint_bytes": first["footprint_bytes"],
        "footprints": footprints,
        "tiers": tier_rows,
        "ssd_write_bytes_per_s": write_bps,
        "ssd_drives": array.drives,
        "ssd_drive_bytes": array.drive_bytes,
        "raid": level,
        "ssd_usable_bytes": usable_bytes(level, array.drives, array.drive_bytes),
        "dwpd": d,
        "rated_dwpd": array.rated_dwpd,
        "rated_tbw_bytes_per_drive": rated_tbw_bytes(
            array.drive_bytes, array.rated_dwpd, array.warranty_years
        ),
        "years_to_rated_endurance": years,
        "ssd_wear_usd_per_year": wear_per_year,
        "cost_usd_per_month": total_month,
        "hbm_billed": rent_hbm,
        "cost_usd_per_million_tokens": total_month / (tokens_per_month / 1e6) if tokens_per_month else None,
        "prices": asdict(prices),
    }
