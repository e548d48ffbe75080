"""The shipped model catalogue (docs/sizing-formulas.md#the-model-catalogue) and the lookup behind
``--model`` / ``--config``.

The catalogue is data: ``catalogue.toml`` beside this module, one ``[[model]]`` per entry holding the
``config.json`` keys the formulas in :mod:`traceflow.kv.geometry` read, so a catalogue model and
``--config`` go through the same code, and adding a model means copying keys from its config.json.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceflow.errors import UsageError
from traceflow.kv.geometry import KVSize, kv_size, load_config


@dataclass(frozen=True)
class ModelSpec:
    """A catalogue entry: the config keys the formulas read, where they come from, and other names."""

    name: str
    config: Mapping[str, Any]
    aliases: tuple[str, ...] = ()
    source: str = ""
    note: str = ""
    default_dtype: str = "bf16"
    #: ``total``, ``active`` parameters, ``experts``, ``experts_per_token`` (model card), where known.
    params: Mapping[str, float] | None = None

    def kv(self, dtype: str | None = None, **kw: Any) -> KVSize:
        return kv_size(self.config, dtype or self.default_dtype, **kw)


_CATALOGUE_FILE = Path(__file__).with_name("catalogue.toml")


def _load_catalogue(path: Path) -> tuple[ModelSpec, ...]:
    """The ``[[model]]`` entries of ``catalogue.toml`` (the file says what each key means)."""
    with path.open("rb") as f:
        entries = tomllib.load(f)["model"]
    return tuple(
        ModelSpec(
            e["name"],
            e["config"],
            tuple(e.get("aliases", ())),
            e["source"],
            e.get("note", ""),
            e.get("default_dtype", "bf16"),
            e.get("params"),
        )
        for e in entries
    )


#: The shipped catalogue (docs/sizing-formulas.md#the-model-catalogue), from ``traceflow/kv/catalogue.toml``.
CATALOGUE: tuple[ModelSpec, ...] = _load_catalogue(_CATALOGUE_FILE)


def _norm(name: str) -> str:
    return name.strip().lower().rsplit("/", 1)[-1].replace("_", "-")


def find_model(name: str) -> ModelSpec:
    """The catalogue entry called ``name`` (case-insensitive; aliases and ``org/name`` accepted)."""
    want = _norm(name)
    for spec in CATALOGUE:
        if want in {_norm(spec.name), *(_norm(a) for a in spec.aliases)}:
            return spec
    names = [s.name for s in CATALOGUE]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UsageError(
        f"unknown model {name!r}{hint}; `traceflow models` lists the catalogue, or pass --config config.json"
    )


def resolve(
    model: str | None,
    config: str | Path | None,
    dtype: str | None = None,
    *,
    swa_capped: bool = True,
    mtp: bool = False,
    state_dtype: str | None = None,
) -> tuple[str, KVSize]:
    """The model's display name and KV size from ``--model`` or ``--config`` (and ``--dtype``)."""
    if config is not None:
        cfg = load_config(config)
        name = model or str(cfg.get("_name_or_path") or Path(config).parent.name or "config")
        return name, kv_size(cfg, dtype or "bf16", swa_capped=swa_capped, mtp=mtp, state_dtype=state_dtype)
    if model is None:
        raise UsageError("give --model NAME (see `traceflow models`) or --config config.json")
    spec = find_model(model)
    return spec.name, spec.kv(dtype, swa_capped=swa_capped, mtp=mtp, state_dtype=state_dtype)


def catalogue_rows() -> list[dict[str, Any]]:
    """One row per catalogue model for ``traceflow models`` (stable keys)."""
    rows = []
    for spec in CATALOGUE:
        bf16, fp8 = spec.kv("bf16"), spec.kv("fp8")
        rows.append(
            {
                "model": spec.name,
                "arch": bf16.arch,
                "full_layers": bf16.full_layers,
                "sliding_layers": bf16.sliding_layers,
                "state_layers": bf16.state_layers,
                "kv_heads": bf16.kv_heads,
                "head_dim": bf16.head_dim,
                "kv_bytes_per_token_bf16": bf16.per_token_bytes,
                "kv_bytes_per_token_fp8": fp8.per_token_bytes,
                "per_session_bytes_bf16": bf16.per_session_bytes,
                "aliases": ", ".join(spec.aliases),
                "note": spec.note,
            }
        )
    return rows
