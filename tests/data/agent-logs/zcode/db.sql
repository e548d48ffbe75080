-- ZCode usage database (cli/db/db.sqlite), the layout ccusage 20.0.24 reads ("session-versioned":
-- model_usage joined to session): built by the tests into $ZCODE_HOME/cli/db/db.sqlite.
CREATE TABLE session (
    id TEXT PRIMARY KEY,
    directory TEXT,
    title TEXT,
    version INTEGER,
    created_at INTEGER,
    updated_at INTEGER
);
CREATE TABLE model_usage (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    completed_at INTEGER,
    model_id TEXT NOT NULL,
    provider_id TEXT,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_creation_input_tokens INTEGER,
    cache_read_input_tokens INTEGER,
    computed_total_tokens INTEGER,
    status TEXT NOT NULL
);
INSERT INTO session VALUES
    ('ses_a', '/home/dev/billing', 'invoice rounding', 3, 1785751318000, 1785801633000),
    ('ses_b', '/home/dev/docs', 'typos', 3, 1785836390000, 1785836465000);
INSERT INTO model_usage VALUES
    ('mu_01', 'ses_a', 'msg_01', 1785751331250, 1785751333050, 'glm-4.6', 'zai-coding-plan', 14210, 612, 14000, 0, 14822, 'completed'),
    ('mu_02', 'ses_a', 'msg_02', 1785751360902, 1785751362839, 'glm-4.6', 'zai-coding-plan', 15305, 380, 1090, 14000, 15685, 'completed'),
    ('mu_03', 'ses_a', 'msg_03', 1785751502004, 1785751504078, 'glm-4.5-air', 'zai-coding-plan', 3120, 211, 0, 2048, NULL, 'completed'),
    ('mu_04', 'ses_a', 'msg_04', 1785751530000, 1785751532211, 'glm-4.6', 'zai-coding-plan', 16002, 0, 0, 0, 16002, 'failed'),
    ('mu_05', 'ses_a', 'msg_05', 1785801598700, 1785801601048, 'glm-4.6', 'zai-coding-plan', 17280, 945, 1180, 16000, 18225, 'completed'),
    ('mu_06', 'ses_a', 'msg_06', 1785801631115, 1785801633600, 'glm-4.6', 'zai-coding-plan', 18610, 522, 0, 17152, 19132, 'completed'),
    ('mu_07', 'ses_b', 'msg_07', 1785836400000, 1785836402622, 'glm-4.6', 'bigmodel-coding-plan', 0, 0, 0, 0, 0, 'completed'),
    ('mu_08', 'ses_b', 'msg_08', 1785836412480, 1785836415239, 'glm-4.6', 'bigmodel-coding-plan', 9050, 1301, 8800, 0, 10351, 'completed'),
    ('mu_09', 'ses_b', 'msg_09', 1785836463009, 1785836465905, 'glm-4.6', 'bigmodel-coding-plan', 10420, 77, 1200, 8800, 10497, 'running');
