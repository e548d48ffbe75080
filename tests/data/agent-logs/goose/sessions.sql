-- Goose session database (block/goose, schema_version 13 layout): built by the tests into
-- <home>/.local/share/goose/sessions/sessions.db. Token columns are the session's running totals.
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
INSERT INTO schema_version (version) VALUES (13);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL DEFAULT '',
    description TEXT NOT NULL DEFAULT '',
    user_set_name BOOLEAN DEFAULT FALSE,
    session_type TEXT NOT NULL DEFAULT 'user',
    working_dir TEXT NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    extension_data TEXT DEFAULT '{}',
    total_tokens INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    accumulated_total_tokens INTEGER,
    accumulated_input_tokens INTEGER,
    accumulated_output_tokens INTEGER,
    accumulated_cost REAL,
    schedule_id TEXT,
    recipe_json TEXT,
    user_recipe_values_json TEXT,
    provider_name TEXT,
    model_config_json TEXT,
    goose_mode TEXT NOT NULL DEFAULT 'auto',
    archived_at TIMESTAMP,
    project_id TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content_json TEXT NOT NULL,
    created_timestamp INTEGER NOT NULL,
    timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    tokens INTEGER,
    metadata_json TEXT
);
INSERT INTO sessions (id, name, working_dir, created_at, updated_at, total_tokens, input_tokens, output_tokens,
    accumulated_total_tokens, accumulated_input_tokens, accumulated_output_tokens, provider_name, model_config_json)
VALUES
    ('20260601_1', 'fix flaky test', '/home/dev/api', '2026-06-01 09:12:44', '2026-06-01 09:58:02',
     31844, 30210, 1634, 412906, 398112, 14794, 'anthropic',
     '{"model_name":"claude-sonnet-4-5-20250929","context_limit":200000,"temperature":null,"toolshim":false}'),
    ('20260601_2', 'plan migration', '/home/dev/api', '2026-06-01 23:41:10', '2026-06-02 00:20:31',
     20995, 18320, 1211, 96440, 84113, 6391, 'openai',
     '{"model_name":"gpt-5","context_limit":400000,"temperature":null,"toolshim":false}'),
    ('20260602_1', 'one question', '/home/dev/web', '2026-06-02 14:03:27', '2026-06-02 14:04:02',
     5530, 5102, 428, NULL, NULL, NULL, 'google',
     '{"model_name":"gemini-2.5-pro","context_limit":1000000}'),
    ('20260602_2', 'no model chosen', '/home/dev/web', '2026-06-02 15:00:00', '2026-06-02 15:00:00',
     900, 800, 100, 900, 800, 100, NULL, NULL),
    ('20260602_3', 'opened and closed', '/home/dev/web', '2026-06-02 16:10:00', '2026-06-02 16:10:05',
     NULL, NULL, NULL, NULL, NULL, NULL, 'anthropic', '{"model_name":"claude-sonnet-4-5-20250929"}');
INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, tokens)
VALUES ('m1', '20260601_1', 'user', '[{"type":"text","text":"the test fails one run in ten"}]', 1780305164, NULL);
