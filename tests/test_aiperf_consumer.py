"""A real consumer of the exports: NVIDIA AIPerf (PyPI ``aiperf``, pinned 0.13.0).

* AIPerf's own dataset loader (``MooncakeTraceDatasetLoader``: load, then prompt synthesis from
  ``hash_ids``) reads the ``mooncake`` and ``aiperf`` exports; AIPerf's ``WekaTrace`` model validates
  the ``kvcache-tester`` export of the real Claude Code sessions.
* ``aiperf profile`` replays a short ``aiperf`` export against an OpenAI-compatible stub server that
  this test starts on 127.0.0.1; the stub logs what AIPerf sent (requests, messages, token counts),
  and the test checks the request count, the order within each session, the prompt lengths and the
  schedule.

AIPerf runs offline (scripts/install_aiperf.sh; docs/formats.md#aiperf-mooncake_trace-export): a tokenizer
trained here on the
corpus AIPerf ships, in a fake Hugging Face cache, with ``HF_HUB_OFFLINE=1``. AIPerf's pins clash
with the project's own dependencies, so it may live in its own virtual environment:
``TRACEFLOW_AIPERF_PYTHON`` names that environment's python (else the test interpreter is used when
it can import ``aiperf``, else an ``aiperf`` on PATH). Without AIPerf the tests are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from traceflow.replay.export import export
from traceflow.replay.synth import generate, preset
from traceflow.replay.synth_trace import write_lake
from traceflow.store.lake import Lake


def _aiperf_python() -> str | None:
    env = os.environ.get("TRACEFLOW_AIPERF_PYTHON")
    if env:
        return env
    # where scripts/install_aiperf.sh (and scripts/install_test_tools.sh) put it by default
    venv = Path(__file__).resolve().parents[1] / ".ci" / "cache" / "aiperf-venv" / "bin" / "python"
    if venv.exists():
        return str(venv)
    try:
        import aiperf  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    exe = shutil.which("aiperf")
    if exe:
        first = Path(exe).read_bytes()[:256].split(b"\n", 1)[0]
        if first.startswith(b"#!"):
            return first[2:].decode().strip()
    return None


AIPERF_PY = _aiperf_python()
if AIPERF_PY is None and os.environ.get("CI"):
    # In CI a missing consumer is a failure, never a silent skip.
    raise RuntimeError(
        "AIPerf is not installed: run `bash scripts/install_aiperf.sh` and set TRACEFLOW_AIPERF_PYTHON "
        "to the python it prints (.ci/run does this)"
    )
pytestmark = pytest.mark.skipif(
    AIPERF_PY is None,
    reason="AIPerf is not installed (bash scripts/install_aiperf.sh, then set TRACEFLOW_AIPERF_PYTHON)",
)

MAKE_TOKENIZER = r"""
import json, pathlib, sys, aiperf
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
corpus = pathlib.Path(aiperf.__file__).parent / "dataset/generator/assets/shakespeare.txt"
tok = Tokenizer(models.BPE()); tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([str(corpus)], trainers.BpeTrainer(vocab_size=2000, special_tokens=["<s>", "</s>"],
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
rev = "0" * 40
repo = pathlib.Path(sys.argv[1]) / "hub" / "models--local--stubtok"
snap = repo / "snapshots" / rev; snap.mkdir(parents=True); (repo / "refs").mkdir()
(repo / "refs" / "main").write_text(rev)
tok.save(str(snap / "tokenizer.json"))
(snap / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>", "eos_token": "</s>", "model_max_length": 1000000}))
print(snap / "tokenizer.json")
"""

LOAD = r"""
import json, sys
from aiperf.common import random_generator as rng
from aiperf.common.tokenizer import Tokenizer
from aiperf.dataset.generator.prompt import PromptGenerator
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader
from aiperf.dataset.loader.weka_trace import WekaTraceLoader
from aiperf.dataset.loader.weka_trace_models import WekaTrace
rng.init(42)
tok = Tokenizer.from_pretrained("local/stubtok")
out = {"mooncake_trace": {}, "weka": {}}
for path in sys.argv[2].split(","):
    loader = MooncakeTraceDatasetLoader(
        filename=path, prompt_generator=PromptGenerator(prompts=None, prefix_prompts=None, tokenizer=tok))
    convs = loader.convert_to_conversations(loader.load_dataset())
    out["mooncake_trace"][path] = [
        {"session_id": c.session_id,
         "turns": [{"timestamp": t.timestamp, "delay": t.delay, "max_tokens": t.max_tokens,
                    "tokens": len(tok.encode(t.texts[0].contents[0], add_special_tokens=False))}
                   for t in c.turns]}
        for c in convs]
weka_dir = sys.argv[3]
if weka_dir != "-":
    import pathlib
    files = sorted(pathlib.Path(weka_dir).glob("*.json"))
    out["weka"] = {"can_load": WekaTraceLoader.can_load(filename=weka_dir),
                   "valid": [WekaTrace.model_validate_json(f.read_bytes()).id for f in files]}
pathlib = __import__("pathlib")
pathlib.Path(sys.argv[1]).write_text(json.dumps(out))
"""

STUB = r'''
"""OpenAI-compatible stub (stdlib + tokenizers): logs one JSON line per request."""
import hashlib, json, sys, threading, time, uuid
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from tokenizers import Tokenizer
LOG = sys.argv[1]
TOK = Tokenizer.from_file(sys.argv[2])
lock = threading.Lock()

def ntok(s):
    return len(TOK.encode(s, add_special_tokens=False).ids)

def text(c):
    if isinstance(c, list):
        return "".join(p.get("text", "") for p in c if isinstance(p, dict))
    return c or ""

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def _json(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        self._json(404, {"error": "not found"})
    def do_POST(self):
        t = time.time()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        msgs = body.get("messages", [])
        texts = [text(m.get("content")) for m in msgs]
        max_t = int(body.get("max_completion_tokens") or body.get("max_tokens") or 8)
        words = ["tok"] * max_t
        rid = "cmpl-" + uuid.uuid4().hex[:8]
        def send(obj):
            data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
            self.wfile.write(b"data: " + data + b"\n\n")
            self.wfile.flush()
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache"); self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for i, w in enumerate(words):
            piece = (" " if i else "") + w
            delta = {"role": "assistant", "content": piece} if i == 0 else {"content": piece}
            send({"id": rid, "object": "chat.completion.chunk", "created": int(t), "model": body.get("model"),
                  "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        usage = {"prompt_tokens": sum(ntok(x) for x in texts), "completion_tokens": max_t,
                 "total_tokens": sum(ntok(x) for x in texts) + max_t}
        send({"id": rid, "object": "chat.completion.chunk", "created": int(t), "model": body.get("model"),
              "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}], "usage": usage})
        send(b"[DONE]")
        rec = {"t": t, "done": time.time(), "path": self.path, "max_tokens": max_t,
               "roles": [m.get("role") for m in msgs], "msg_tokens": [ntok(x) for x in texts],
               "first": hashlib.sha1(texts[0].encode()).hexdigest() if texts else None}
        with lock, open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")

ThreadingHTTPServer.daemon_threads = True
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
'''


def _env(root: Path) -> dict[str, str]:
    for sub in ("hf", "tmp", "mmap"):
        (root / sub).mkdir(exist_ok=True)
    return {
        **os.environ,
        "HF_HOME": str(root / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TMPDIR": str(root / "tmp"),
        "AIPERF_DATASET_MMAP_BASE_PATH": str(root / "mmap"),
        "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false",
    }


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """The environment for AIPerf runs and the path of the local tokenizer.json."""
    root = tmp_path_factory.mktemp("aiperf")
    env = _env(root)
    assert AIPERF_PY is not None
    res = subprocess.run(
        [AIPERF_PY, "-c", MAKE_TOKENIZER, env["HF_HOME"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return env, Path(res.stdout.strip().splitlines()[-1])


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_aiperf_loader_reads_the_exports(offline: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    from conftest import TESTDATA

    env, _ = offline
    prof = preset("agentic-coding")
    prof["context"] = {
        "cap": 9000,
        "on_cap": "compact",
        "compact_to": {"kind": "uniform", "low": 2500, "high": 3500},
    }
    lake = Lake(tmp_path / "data")
    write_lake(generate(prof, 1200, seed=21, rate_scale=2), lake)
    con = lake.connect(["requests"])
    flat, sess = tmp_path / "m.jsonl", tmp_path / "a.jsonl"
    export(con, None, "mooncake", flat, limit=80)
    manifest = export(con, None, "aiperf", sess, limit=80)
    assert manifest["counts"]["resets"] > 0  # sessions with a compaction: "<id>~1"
    weka = "-"
    if (TESTDATA / "weka_cc_traces").is_dir():
        from traceflow.importers import get
        from traceflow.importers.run import run_import

        wl = Lake(tmp_path / "weka")
        run_import(wl, get("kvcache-tester"), [TESTDATA / "weka_cc_traces"])
        export(wl.connect(["requests"]), None, "kvcache-tester", tmp_path / "kv")
        weka = str(tmp_path / "kv")
    result = tmp_path / "loaded.json"
    assert AIPERF_PY is not None
    proc = subprocess.run(
        [AIPERF_PY, "-c", LOAD, str(result), f"{flat},{sess}", weka],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = json.loads(result.read_text())

    # flat: one conversation per row, prompts of exactly input_length tokens, timestamps kept
    rows = jsonl(flat)
    convs = loaded["mooncake_trace"][str(flat)]
    assert len(convs) == len(rows)
    got = sorted(
        (c["turns"][0]["timestamp"], c["turns"][0]["tokens"], c["turns"][0]["max_tokens"]) for c in convs
    )
    want = sorted((r["timestamp"], r["input_length"], r["output_length"]) for r in rows)
    assert got == want

    # sessions: AIPerf's conversations are our sessions, turn by turn
    rows = jsonl(sess)
    ours: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        ours[r["session_id"]].append(r)
    convs = loaded["mooncake_trace"][str(sess)]
    assert {c["session_id"] for c in convs} == set(ours)
    for c in convs:
        mine = ours[c["session_id"]]
        assert len(c["turns"]) == len(mine)
        for turn, row in zip(c["turns"], mine, strict=True):
            assert turn["tokens"] == row["input_length"]
            assert turn["max_tokens"] == row["output_length"]
            assert turn["timestamp"] == row.get("timestamp")
            assert (
                turn["delay"] == pytest.approx(row.get("delay")) if "delay" in row else turn["delay"] is None
            )

    if weka != "-":
        assert loaded["weka"]["can_load"] is True
        assert len(loaded["weka"]["valid"]) == 36


@pytest.fixture
def stub(offline: tuple[dict[str, str], Path], tmp_path: Path) -> Iterator[tuple[int, Path]]:
    env, tokenizer = offline
    script = tmp_path / "stub.py"
    script.write_text(STUB)
    log = tmp_path / "stub.jsonl"
    assert AIPERF_PY is not None
    proc = subprocess.Popen(
        [AIPERF_PY, str(script), str(log), str(tokenizer)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().strip())
        yield port, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _short_lake(path: Path) -> Lake:
    """Three sessions, 3 turns each, a few hundred ms apart (times in ms)."""
    lake = Lake(path)
    rows = []
    plan = {
        "s1": [(0, 600, 12), (400, 1400, 9), (800, 2300, 7)],
        "s2": [(300, 900, 10), (700, 1500, 8), (1200, 2000, 6)],
        "s3": [(600, 1100, 5), (1000, 1150, 11), (1500, 1900, 9)],
    }
    n = 0
    for sid, turns in plan.items():
        prev = 0
        for t_ms, ctx, out in turns:
            rows.append(
                {
                    "event_id": f"{sid}-{t_ms}",
                    "source": "synthetic",
                    "session_id": sid,
                    "model": "m",
                    "started_at": t_ms * 1000,
                    "ended_at": t_ms * 1000 + 100_000,
                    "cold_input_tokens": 0,
                    "cache_read_tokens": prev,
                    "cache_write_tokens": ctx - prev,
                    "output_tokens": out,
                    "seq": n,
                }
            )
            prev = ctx
            n += 1
    lake.append("requests", rows)
    return lake


@pytest.mark.slow
def test_aiperf_profile_replays_an_export_against_a_stub(
    offline: tuple[dict[str, str], Path], stub: tuple[int, Path], tmp_path: Path
) -> None:
    env, _ = offline
    port, log = stub
    lake = _short_lake(tmp_path / "data")
    trace = tmp_path / "trace.jsonl"
    export(lake.connect(["requests"]), None, "aiperf", trace)
    rows = jsonl(trace)
    assert AIPERF_PY is not None
    aiperf_exe = str(Path(AIPERF_PY).with_name("aiperf"))
    cmd = [aiperf_exe] if Path(aiperf_exe).exists() else [AIPERF_PY, "-m", "aiperf"]
    cmd += [
        "profile", "--model", "stub", "--url", f"http://127.0.0.1:{port}", "--endpoint-type", "chat",
        "--streaming", "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace",
        "--fixed-schedule", "--tokenizer", "local/stubtok", "--random-seed", "42", "--ui-type", "none",
        "--output-artifact-dir", str(tmp_path / "artifacts"), "--no-server-metrics", "--no-gpu-telemetry",
    ]  # fmt: skip
    started = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    sent = sorted(jsonl(log), key=lambda r: r["t"])
    assert len(sent) == len(rows) == 9
    assert all(started <= r["t"] for r in sent)

    # sessions as AIPerf sent them: grouped by their first message, in arrival order
    ours: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        ours[r["session_id"]].append(r)
    theirs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in sent:
        theirs[r["first"]].append(r)
    assert len(theirs) == len(ours) == 3
    by_first_len = {turns[0]["msg_tokens"][0]: turns for turns in theirs.values()}
    t0 = sent[0]["t"]
    for sid, turns in ours.items():
        got = by_first_len[turns[0]["input_length"]]
        assert len(got) == len(turns)
        for k, (want, req) in enumerate(zip(turns, got, strict=True)):
            # turn k carries the history: user, assistant, user, ... (live replies appended)
            assert req["roles"] == ["user", "assistant"] * k + ["user"]
            assert req["msg_tokens"][-1] == want["input_length"]  # the new tokens of this turn
            assert req["msg_tokens"][::2] == [t["input_length"] for t in turns[: k + 1]]
            assert req["max_tokens"] == want["output_length"]
            if k == 0:  # the first turn at its timestamp
                assert (req["t"] - t0) * 1000 == pytest.approx(
                    want["timestamp"] - rows[0]["timestamp"], abs=250
                )
            else:  # later turns `delay` ms after the previous response ended
                gap_ms = (req["t"] - got[k - 1]["done"]) * 1000
                assert want["delay"] - 50 <= gap_ms <= want["delay"] + 500, (sid, k, gap_ms)
    summary = json.loads(next((tmp_path / "artifacts").rglob("profile_export_aiperf.json")).read_text())
    assert summary["request_count"]["avg"] == 9
