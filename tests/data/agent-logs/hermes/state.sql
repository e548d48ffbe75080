-- Hermes Agent state database (NousResearch/hermes-agent): built by the tests into
-- $HERMES_HOME/state.db. Token columns are the session's running totals; started_at in epoch seconds.
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    timestamp REAL NOT NULL
);
INSERT INTO sessions (id, source, model, started_at, ended_at, end_reason, message_count, tool_call_count,
    input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, billing_provider,
    estimated_cost_usd, actual_cost_usd, title)
VALUES
    ('20260707_091502_a1b2c3', 'cli', 'claude-sonnet-4-5-20250929', 1783415702.318, 1783418410.9, 'user_exit',
     48, 21, 21934, 11872, 1502336, 88410, 0, 'anthropic', 1.1031, NULL, 'refactor loader'),
    ('20260707_220911_d4e5f6', 'telegram', 'gpt-5', 1783462151.044, 1783470012.5, 'idle',
     30, 12, 61210, 8123, 240640, 0, 4416, 'openai', 0.4117, 0.3952, 'deploy notes'),
    ('20260708_101520_0a9b8c', 'cli', 'anthropic/claude-opus-4.1', 1783505720.75, NULL, NULL,
     12, 5, 5021, 2290, 118784, 20480, 0, 'openrouter', NULL, NULL, 'review'),
    ('20260708_111111_ffffff', 'cli', NULL, 1783509071.0, 1783509080.0, 'user_exit',
     1, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, NULL),
    ('20260708_120000_eeeeee', 'cli', 'gpt-5', 1783512000.0, 1783512003.0, 'user_exit',
     1, 0, 0, 0, 0, 0, 0, 'openai', 0.0, 0.0, 'empty');
INSERT INTO messages (session_id, role, content, timestamp)
VALUES ('20260707_091502_a1b2c3', 'user', 'refactor the loader', 1783415702.5);
