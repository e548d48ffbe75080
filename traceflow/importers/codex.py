"""OpenAI Codex CLI rollout files: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``.

Each line is ``{"timestamp": ISO, "type": T, "payload": {...}}`` (docs/schemas.md#codex).
A request row comes from an ``event_msg``/``token_count`` line whose cumulative
``info.total_token_usage`` *advances*; the row holds the difference to the previous total:

* ``cold_input = Δinput − Δcached − Δcache_write`` (Codex ``input_tokens`` includes cached),
  ``cache_read = Δcached`` (clamped to ≤ Δinput), ``cache_write = Δcache_write_input_tokens``
  (0 when the field is absent; no 5m/1h split), ``output = Δoutput`` (includes reasoning),
  ``reasoning = Δreasoning_output_tokens``. So ``cold + read + write == Δinput`` exactly.
* ``token_count`` with ``info: null`` (rate-limit refresh) and re-emits with an unchanged total
  produce nothing; neither do all-zero deltas.
* The model is the one of the last ``turn_context`` (carried across imports in ``ctx.state``).

**Replayed history (forks and sub-agents).** A forked or spawned thread writes the parent's rollout
items into its own new file, under *fresh* timestamps (a sub-second burst at spawn), and its
cumulative counter continues from the parent's. The request ``event_id`` is therefore built only
from what the replay copies verbatim — ``stable_id("codex-usage", turn_id, model, cumulative
tuple)`` — with neither the session id nor the line timestamp in it: the parent's row and every
replayed copy share one id, and the lake's ``event_id`` dedup counts the request once. The
cumulative tuple is unique within a session (it only grows), and the enclosing ``task_started``
``turn_id`` separates unrelated sessions; the remaining collision case is two sessions with the same
turn id string and an identical cumulative 5-tuple (same model, same input, cached, output and
reasoning counts), which only identical scripted first requests can produce.

Counter irregularities: a total that goes *down* (a restarted counter) is taken as a new baseline and
that line contributes its ``last_token_usage``; in a child file (fork / sub-agent) whose first
token_count already includes inherited history (total > last_token_usage) the line contributes its
``last_token_usage`` too, so an un-replayed seeded counter is not counted as the child's own usage.

Events: ``user_message`` → ``user_prompt``, ``context_compacted`` → ``compaction``,
``turn_aborted`` → ``turn_aborted``. Event ids are ``stable_id("codex-event", name, turn_id,
ordinal in turn)`` when the turn id is known (replay-stable, like the request ids), else they hash
the session id, the line timestamp, the name and the payload.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

import orjson

from traceflow.importers.base import FileContext, json_records
from traceflow.importers.files import files_under
from traceflow.rows import LineError, Parsed, Row, as_int, iso_micros, split_inclusive, stable_id

SOURCE = "codex-jsonl"
AGENT = "codex"

#: Cumulative counters read from ``total_token_usage`` (and ``last_token_usage``), in key order.
_FIELDS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
    "cache_write_input_tokens",
)

_UUID_TAIL = re.compile(r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")

#: event_msg payload type → events.name
_EVENT_NAMES = {
    "user_message": "user_prompt",
    "context_compacted": "compaction",
    "turn_aborted": "turn_aborted",
}


class BadLine(ValueError):
    """A line that cannot be imported (becomes a LineError)."""


def _usage(obj: Any, what: str) -> dict[str, int] | None:
    """The numeric counters of a token-usage object; None when absent. Raises BadLine on junk."""
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise BadLine(f"{what} is not an object")
    out: dict[str, int] = {}
    for name in _FIELDS:
        try:
            v = as_int(obj.get(name))
        except (TypeError, ValueError) as exc:
            raise BadLine(f"{what}.{name} is not a number: {obj.get(name)!r}") from exc
        if v is not None:
            out[name] = v
    return out


def _get(u: dict[str, int], name: str) -> int:
    return u.get(name, 0)


def _session_from_path(path: Path) -> str | None:
    m = _UUID_TAIL.search(path.stem)
    return m.group(1) if m else None


def _parent_from_source(source: Any) -> str | None:
    """``source: {subagent: {thread_spawn: {parent_thread_id}}}`` → the parent thread id."""
    if not isinstance(source, dict):
        return None
    sub = source.get("subagent")
    if not isinstance(sub, dict):
        return None
    spawn = sub.get("thread_spawn")
    if isinstance(spawn, dict):
        pid = spawn.get("parent_thread_id")
        if isinstance(pid, str) and pid:
            return pid
    return None


class CodexImporter:
    """Rows from Codex rollout JSONL (incremental: ``parse`` gets only the new lines)."""

    name: ClassVar[str] = "codex"
    whole_file: ClassVar[bool] = False

    def default_paths(self) -> list[Path]:
        from traceflow.store import local_logs

        return [Path(p) for p in local_logs.default_folders(self.name)]

    def discover(self, root: Path) -> list[Path]:
        return files_under(root, "rollout-*", (".jsonl",))

    def parse(self, data: bytes, ctx: FileContext) -> Parsed:
        out = Parsed()
        st = ctx.state
        path = str(ctx.path)
        if not st.get("session_id"):
            st["session_id"] = _session_from_path(ctx.plain)
        for line_no, _, obj in json_records(data, ctx, out.errors, "invalid JSON: {}"):
            try:
                self._line(obj, line_no, st, out)
            except BadLine as exc:
                out.errors.append(LineError(path, line_no, str(exc)))
            except (TypeError, ValueError, AttributeError, KeyError) as exc:  # defensive: never raise
                out.errors.append(LineError(path, line_no, f"{type(exc).__name__}: {exc}"))
        return out

    # -- one line ------------------------------------------------------------------------------
    def _line(self, obj: Any, line_no: int, st: dict[str, Any], out: Parsed) -> None:
        if not isinstance(obj, dict):
            raise BadLine("line is not a JSON object")
        kind = obj.get("type")
        payload = obj.get("payload")
        if kind not in ("session_meta", "turn_context", "event_msg"):
            return  # response_item, compacted, and future types carry no usage
        if not isinstance(payload, dict):
            raise BadLine(f"{kind} line without an object payload")
        if kind == "session_meta":
            self._session_meta(payload, st)
        elif kind == "turn_context":
            self._turn_context(payload, st)
        else:
            ptype = payload.get("type")
            if ptype == "token_count":
                self._token_count(obj, payload, line_no, st, out)
            elif ptype == "task_started":
                tid = payload.get("turn_id")
                self._start_turn(tid if isinstance(tid, str) and tid else None, st)
            elif ptype in ("task_complete", "turn_complete"):
                st["turn_open"] = False
            elif ptype in _EVENT_NAMES:
                self._event(obj, payload, _EVENT_NAMES[ptype], line_no, st, out)
                if ptype == "turn_aborted":
                    st["turn_open"] = False

    def _session_meta(self, p: dict[str, Any], st: dict[str, Any]) -> None:
        sid = p.get("id")
        if st.get("meta_seen"):
            # A second session_meta: the same session written again (resume), or the parent's
            # meta replayed into a fork. The latter marks the file as a child of that session.
            if isinstance(sid, str) and sid and sid != st.get("session_id"):
                st["is_child"] = True
                if not st.get("parent_session_id"):
                    st["parent_session_id"] = sid
            return
        st["meta_seen"] = True
        if isinstance(sid, str) and sid:
            st["session_id"] = sid
        parent = _parent_from_source(p.get("source"))
        forked = p.get("forked_from_id")
        if not parent and isinstance(forked, str) and forked:
            parent = forked
        if parent:
            st["parent_session_id"] = parent
            st["is_child"] = True
        if isinstance(forked, str) and forked:
            st["forked_from_id"] = forked
        if isinstance(p.get("cli_version"), str):
            st["agent_version"] = p["cli_version"]
        meta: dict[str, Any] = {}
        for key in ("cwd", "originator", "model_provider"):
            if isinstance(p.get(key), str):
                meta[key] = p[key]
        src = p.get("source")
        if isinstance(src, str):
            meta["session_source"] = src
        elif isinstance(src, dict):
            meta["session_source"] = "subagent" if "subagent" in src else next(iter(src), None)
            if isinstance(src.get("subagent"), dict | str):
                meta["subagent"] = src["subagent"]
        git = p.get("git")
        if isinstance(git, dict):
            meta["git_branch"] = git.get("branch")
            meta["git_commit"] = git.get("commit_hash")
        st["meta"] = meta

    def _turn_context(self, p: dict[str, Any], st: dict[str, Any]) -> None:
        model = p.get("model")
        if isinstance(model, str) and model:
            st["model"] = model
        tc: dict[str, Any] = {}
        for key in ("effort", "summary", "approval_policy", "cwd"):
            if isinstance(p.get(key), str):
                tc[key] = p[key]
        sandbox = p.get("sandbox_policy")
        if isinstance(sandbox, dict) and isinstance(sandbox.get("type"), str):
            tc["sandbox"] = sandbox["type"]
        st["turn_ctx"] = tc
        tid = p.get("turn_id")
        if isinstance(tid, str) and tid and tid != st.get("turn_id"):
            self._start_turn(tid, st)

    @staticmethod
    def _start_turn(turn_id: str | None, st: dict[str, Any]) -> None:
        """A turn begins (task_started, or a turn_context that names a new turn)."""
        if turn_id is None or turn_id != st.get("turn_id"):
            st["turn_counts"] = {}
        st["turn_id"] = turn_id
        st["turn_open"] = True
        if turn_id:
            st["prompt_id"] = turn_id

    def _base(self, st: dict[str, Any], line_no: int) -> Row:
        return {
            "source": SOURCE,
            "agent": AGENT,
            "agent_version": st.get("agent_version"),
            "session_id": st.get("session_id"),
            "parent_session_id": st.get("parent_session_id"),
            "prompt_id": st.get("prompt_id"),
            "seq": line_no,
        }

    def _attrs(self, st: dict[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {k: v for k, v in (st.get("meta") or {}).items() if v is not None}
        attrs.update(st.get("turn_ctx") or {})
        if st.get("turn_id"):
            attrs["turn_id"] = st["turn_id"]
        if st.get("forked_from_id"):
            attrs["forked_from_id"] = st["forked_from_id"]
        return attrs

    def _token_count(
        self, obj: dict[str, Any], p: dict[str, Any], line_no: int, st: dict[str, Any], out: Parsed
    ) -> None:
        info = p.get("info")
        if info is None:
            return  # rate-limit-only update
        if not isinstance(info, dict):
            raise BadLine("token_count info is not an object")
        total = _usage(info.get("total_token_usage"), "total_token_usage")
        last = _usage(info.get("last_token_usage"), "last_token_usage")
        if total is None and last is None:
            return
        ts_raw = obj.get("timestamp")
        if not isinstance(ts_raw, str):
            raise BadLine("token_count line without a timestamp")
        try:
            ended = iso_micros(ts_raw)
        except ValueError as exc:
            raise BadLine(f"bad timestamp {ts_raw!r}") from exc

        prev: dict[str, int] | None = st.get("prev_total")
        basis = "total_delta"
        if total is None:
            # No cumulative counter (old or partial record): the line's own usage is all we have.
            assert last is not None
            delta = dict(last)
            basis = "last_token_usage"
            new_total = {k: _get(prev or {}, k) + _get(last, k) for k in _FIELDS}
        else:
            new_total = total
            if prev is None:
                seeded = (
                    st.get("is_child")
                    and last is not None
                    and any(_get(total, k) > _get(last, k) for k in _FIELDS)
                    and all(_get(total, k) >= _get(last, k) for k in _FIELDS)
                )
                if seeded:
                    assert last is not None
                    delta, basis = dict(last), "last_token_usage(seeded_total)"
                else:
                    delta = dict(total)
            elif any(_get(total, k) < _get(prev, k) for k in _FIELDS):
                # Counter restarted: new baseline; this line's own usage is its last_token_usage.
                delta = dict(last) if last is not None else {}
                basis = "last_token_usage(counter_reset)"
            else:
                delta = {k: _get(total, k) - _get(prev, k) for k in _FIELDS}
        st["prev_total"] = new_total

        d_in = max(0, _get(delta, "input_tokens"))
        d_cached = max(0, _get(delta, "cached_input_tokens"))
        d_write = max(0, _get(delta, "cache_write_input_tokens"))
        d_out = max(0, _get(delta, "output_tokens"))
        d_reason = max(0, _get(delta, "reasoning_output_tokens"))
        if d_in == 0 and d_cached == 0 and d_write == 0 and d_out == 0 and d_reason == 0:
            return  # a re-emit with an unchanged total, or an all-zero event
        tokens = split_inclusive(d_in, d_cached, d_write, d_out)

        model = p.get("model") or info.get("model") or st.get("model")
        model = model if isinstance(model, str) and model else None
        tup = tuple(new_total.get(k) for k in _FIELDS)
        event_id = stable_id("codex-usage", st.get("turn_id") or "", model, *tup)

        attrs = self._attrs(st)
        attrs["usage_basis"] = basis
        attrs["cumulative"] = {k: v for k, v in new_total.items() if v is not None}
        if last is not None:
            attrs["last_token_usage"] = last
        window = info.get("model_context_window")
        if isinstance(window, int | float | str) and not isinstance(window, bool):
            attrs["model_context_window"] = window
        if d_cached > d_in:
            attrs["cache_read_clamped_from"] = d_cached

        row = self._base(st, line_no)
        row.update(
            {
                "event_id": event_id,
                "ended_at": ended,
                "model": model,
                **tokens.columns(),
                "reasoning_tokens": d_reason,
                "attributes": attrs,
            }
        )
        out.requests.append(row)

    def _event(
        self, obj: dict[str, Any], p: dict[str, Any], name: str, line_no: int, st: dict[str, Any], out: Parsed
    ) -> None:
        ts_raw = obj.get("timestamp")
        if not isinstance(ts_raw, str):
            raise BadLine(f"{p.get('type')} line without a timestamp")
        try:
            ts = iso_micros(ts_raw)
        except ValueError as exc:
            raise BadLine(f"bad timestamp {ts_raw!r}") from exc
        attrs = self._attrs(st)
        digest = stable_id(orjson.dumps(p, option=orjson.OPT_SORT_KEYS).decode())
        if name == "user_prompt":
            msg = p.get("message")
            if isinstance(msg, str):
                attrs["prompt_length"] = len(msg)
            images = p.get("images")
            if isinstance(images, list) and images:
                attrs["images"] = len(images)
            if not (st.get("turn_open") and st.get("turn_id")):
                # No enclosing task_started turn id: the prompt itself names the turn.
                st["prompt_id"] = stable_id("codex-prompt", st.get("session_id"), ts_raw, digest)
        elif name == "turn_aborted":
            if isinstance(p.get("reason"), str):
                attrs["reason"] = p["reason"]
            tid = p.get("turn_id")
            if isinstance(tid, str) and tid:
                attrs["turn_id"] = tid
        turn_id = st.get("turn_id") if st.get("turn_open") else None
        if turn_id:
            counts: dict[str, int] = st.setdefault("turn_counts", {})
            n = counts.get(name, 0)
            counts[name] = n + 1
            event_id = stable_id("codex-event", name, turn_id, n)
        else:
            event_id = stable_id("codex-event", st.get("session_id"), ts_raw, name, digest)
        row = self._base(st, line_no)
        row.update({"event_id": event_id, "name": name, "timestamp": ts, "attributes": attrs})
        out.events.append(row)


IMPORTER = CodexImporter()
