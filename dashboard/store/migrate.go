package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fw-serve/fw/dashboard/query"
)

// migration is one schema version. SQL is a template: {{pk}} (integer
// identity primary key), {{real}} (double column type), {{norowid}}
// (SQLite's WITHOUT ROWID), {{collate}} (byte-order collation) and
// {{keep_replaced}} (the trigger of migration 12: SQLite writes a trigger's
// body inline, PostgreSQL as a function) are filled per dialect.
type migration struct {
	version int
	name    string
	sql     string
}

// Rollup levels: blocks of 2^shift steps kept per (run, key) by migration 2.
// They let Metrics downsample a million points by reading a few thousand
// rows; see rollupShifts in read.go.
const migrationsHelp = "schema_migrations(version, name, applied)"

func migrations() []migration {
	return []migration{
		{1, "initial schema", `
CREATE TABLE experiments (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL UNIQUE,
	description TEXT NOT NULL DEFAULT '',
	created BIGINT NOT NULL,
	updated BIGINT NOT NULL,
	archived INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE experiment_tags (
	experiment_id TEXT NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
	key TEXT NOT NULL,
	value TEXT NOT NULL,
	PRIMARY KEY (experiment_id, key)
);
CREATE TABLE runs (
	rid {{pk}},
	id TEXT NOT NULL UNIQUE,
	experiment_id TEXT NOT NULL REFERENCES experiments(id),
	name TEXT NOT NULL,
	status TEXT NOT NULL,
	created BIGINT NOT NULL,
	updated BIGINT NOT NULL,
	started BIGINT,
	ended BIGINT,
	error TEXT,
	traceback TEXT,
	exit_code INTEGER,
	step BIGINT,
	total_steps BIGINT,
	epoch {{real}},
	total_epochs {{real}},
	progress_time BIGINT,
	source_recipe TEXT,
	source_command TEXT,
	source_args TEXT,
	git_commit TEXT,
	host TEXT,
	pid INTEGER,
	parent_run_id TEXT,
	parent_checkpoint TEXT
);
CREATE INDEX runs_experiment ON runs (experiment_id, created);
CREATE INDEX runs_created ON runs (created);
CREATE INDEX runs_status ON runs (status);
CREATE TABLE run_writers (
	run_rid BIGINT NOT NULL,
	writer TEXT NOT NULL,
	seq BIGINT NOT NULL,
	PRIMARY KEY (run_rid, writer)
){{norowid}};
CREATE TABLE run_tags (
	run_rid BIGINT NOT NULL,
	key TEXT NOT NULL,
	value TEXT NOT NULL,
	PRIMARY KEY (run_rid, key)
){{norowid}};
CREATE TABLE params (
	run_rid BIGINT NOT NULL,
	key TEXT NOT NULL,
	value_json TEXT NOT NULL,
	value_num {{real}},
	value_str TEXT,
	PRIMARY KEY (run_rid, key)
){{norowid}};
CREATE TABLE metric_keys (
	id {{pk}},
	kind INTEGER NOT NULL,
	name TEXT NOT NULL,
	UNIQUE (kind, name)
);
CREATE TABLE metrics (
	run_rid BIGINT NOT NULL,
	key_id BIGINT NOT NULL,
	step BIGINT NOT NULL,
	value {{real}},
	wall BIGINT NOT NULL,
	PRIMARY KEY (run_rid, key_id, step)
){{norowid}};
CREATE TABLE metric_summary (
	run_rid BIGINT NOT NULL,
	key_id BIGINT NOT NULL,
	last_value {{real}},
	last_step BIGINT NOT NULL,
	last_time BIGINT NOT NULL,
	min_value {{real}},
	min_step BIGINT NOT NULL,
	max_value {{real}},
	max_step BIGINT NOT NULL,
	n BIGINT NOT NULL,
	PRIMARY KEY (run_rid, key_id)
){{norowid}};
CREATE TABLE logs (
	id {{pk}},
	run_rid BIGINT NOT NULL,
	stream TEXT NOT NULL,
	time BIGINT NOT NULL,
	line TEXT NOT NULL
);
CREATE INDEX logs_run ON logs (run_rid, id);
CREATE TABLE checkpoints (
	run_rid BIGINT NOT NULL,
	path TEXT NOT NULL,
	step BIGINT NOT NULL,
	epoch {{real}},
	metrics TEXT NOT NULL,
	time BIGINT NOT NULL,
	PRIMARY KEY (run_rid, path)
);
CREATE TABLE artifacts (
	run_rid BIGINT NOT NULL,
	path TEXT NOT NULL,
	size BIGINT NOT NULL,
	time BIGINT NOT NULL,
	PRIMARY KEY (run_rid, path)
)`},
		{2, "metric rollups for downsampling", `
CREATE TABLE metric_rollup (
	run_rid BIGINT NOT NULL,
	key_id BIGINT NOT NULL,
	level INTEGER NOT NULL,
	block BIGINT NOT NULL,
	first_step BIGINT NOT NULL,
	last_step BIGINT NOT NULL,
	min_value {{real}},
	max_value {{real}},
	last_value {{real}},
	n BIGINT NOT NULL,
	PRIMARY KEY (run_rid, key_id, level, block)
){{norowid}};
INSERT INTO metric_rollup (run_rid, key_id, level, block, first_step, last_step, min_value, max_value, n)
	SELECT run_rid, key_id, 4, step / 16, MIN(step), MAX(step), MIN(value), MAX(value), COUNT(*) FROM metrics GROUP BY run_rid, key_id, step / 16;
INSERT INTO metric_rollup (run_rid, key_id, level, block, first_step, last_step, min_value, max_value, n)
	SELECT run_rid, key_id, 8, step / 256, MIN(step), MAX(step), MIN(value), MAX(value), COUNT(*) FROM metrics GROUP BY run_rid, key_id, step / 256;
INSERT INTO metric_rollup (run_rid, key_id, level, block, first_step, last_step, min_value, max_value, n)
	SELECT run_rid, key_id, 12, step / 4096, MIN(step), MAX(step), MIN(value), MAX(value), COUNT(*) FROM metrics GROUP BY run_rid, key_id, step / 4096;
UPDATE metric_rollup SET last_value = (SELECT m.value FROM metrics m WHERE m.run_rid = metric_rollup.run_rid AND m.key_id = metric_rollup.key_id AND m.step = metric_rollup.last_step)`},
		{3, "dashboard records (model registry, export jobs, deployments)", `
CREATE TABLE records (
	kind TEXT NOT NULL,
	key TEXT NOT NULL,
	rev BIGINT NOT NULL,
	created BIGINT NOT NULL,
	updated BIGINT NOT NULL,
	body TEXT NOT NULL,
	PRIMARY KEY (kind, key)
)`},
		{4, "change feed of the live stream", `
CREATE TABLE feed_cursor (
	id INTEGER PRIMARY KEY,
	last BIGINT NOT NULL
);
INSERT INTO feed_cursor (id, last) VALUES (1, 0);
CREATE TABLE feed (
	cursor BIGINT PRIMARY KEY,
	type TEXT NOT NULL,
	run_id TEXT NOT NULL,
	seq BIGINT NOT NULL,
	time BIGINT NOT NULL,
	data TEXT NOT NULL
)`},
		{5, "leases of replicas, training jobs and deployments", `
CREATE TABLE leases (
	name TEXT PRIMARY KEY,
	owner TEXT NOT NULL,
	expires BIGINT NOT NULL,
	acquired BIGINT NOT NULL,
	renewed BIGINT NOT NULL,
	info TEXT NOT NULL
);
CREATE INDEX leases_owner ON leases (owner)`},
		{6, "experiment summaries kept at write time", `
CREATE TABLE experiment_run_counts (
	experiment_id TEXT NOT NULL,
	status TEXT NOT NULL,
	n BIGINT NOT NULL,
	PRIMARY KEY (experiment_id, status)
){{norowid}};
INSERT INTO experiment_run_counts (experiment_id, status, n) SELECT experiment_id, status, COUNT(*) FROM runs GROUP BY experiment_id, status;
CREATE TABLE experiment_metrics (
	experiment_id TEXT NOT NULL,
	key_id BIGINT NOT NULL,
	runs BIGINT NOT NULL,
	min_value {{real}},
	min_run TEXT,
	max_value {{real}},
	max_run TEXT,
	PRIMARY KEY (experiment_id, key_id)
){{norowid}};
INSERT INTO experiment_metrics (experiment_id, key_id, runs, min_value, min_run, max_value, max_run)
WITH v AS (SELECT r.experiment_id AS e, s.key_id AS k, r.id AS run, s.min_value AS mn, s.max_value AS mx
  FROM metric_summary s JOIN runs r ON r.rid = s.run_rid JOIN metric_keys k ON k.id = s.key_id WHERE k.kind = 0),
lo AS (SELECT e, k, run, mn, ROW_NUMBER() OVER (PARTITION BY e, k ORDER BY mn, run{{collate}}) AS i FROM v WHERE mn IS NOT NULL),
hi AS (SELECT e, k, run, mx, ROW_NUMBER() OVER (PARTITION BY e, k ORDER BY mx DESC, run{{collate}}) AS i FROM v WHERE mx IS NOT NULL),
c AS (SELECT e, k, COUNT(*) AS n FROM v GROUP BY e, k)
SELECT c.e, c.k, c.n, lo.mn, lo.run, hi.mx, hi.run
  FROM c LEFT JOIN lo ON lo.e = c.e AND lo.k = c.k AND lo.i = 1 LEFT JOIN hi ON hi.e = c.e AND hi.k = c.k AND hi.i = 1;
CREATE INDEX runs_experiment_updated ON runs (experiment_id, updated)`},
		{7, "indexes that serve the run table's sorts within an experiment", `
ALTER TABLE metric_summary ADD COLUMN experiment_id TEXT;
UPDATE metric_summary SET experiment_id = (SELECT r.experiment_id FROM runs r WHERE r.rid = metric_summary.run_rid);
ALTER TABLE params ADD COLUMN experiment_id TEXT;
ALTER TABLE params ADD COLUMN run_id TEXT;
UPDATE params SET experiment_id = (SELECT r.experiment_id FROM runs r WHERE r.rid = params.run_rid), run_id = (SELECT r.id FROM runs r WHERE r.rid = params.run_rid);
CREATE INDEX params_sort_num ON params (experiment_id, key, value_num, run_id{{collate}}, run_rid) WHERE value_num IS NOT NULL;
CREATE INDEX params_sort_str ON params (experiment_id, key, value_str{{collate}}, run_id{{collate}}, run_rid) WHERE value_num IS NULL;
CREATE INDEX runs_experiment_id ON runs (experiment_id, id{{collate}});
CREATE INDEX runs_experiment_name ON runs (experiment_id, name{{collate}});
CREATE INDEX runs_experiment_started ON runs (experiment_id, started)`},
		{8, "request traces received over OTLP (the deployments' spans)", `
CREATE TABLE spans (
	trace_id TEXT NOT NULL,
	span_id TEXT NOT NULL,
	parent_id TEXT NOT NULL,
	service TEXT NOT NULL,
	deployment TEXT NOT NULL,
	name TEXT NOT NULL,
	kind INTEGER NOT NULL,
	start_ns BIGINT NOT NULL,
	end_ns BIGINT NOT NULL,
	duration_ns BIGINT NOT NULL,
	status INTEGER NOT NULL,
	status_message TEXT NOT NULL,
	attributes TEXT NOT NULL,
	links TEXT NOT NULL,
	received BIGINT NOT NULL,
	PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX spans_requests_start ON spans (deployment, service, kind, start_ns);
CREATE INDEX spans_requests_duration ON spans (deployment, service, kind, duration_ns);
CREATE INDEX spans_received ON spans (received)`},
		{9, "request/response records logged by deployments (payload logging)", `
CREATE TABLE payloads (
	id TEXT NOT NULL,
	deployment TEXT NOT NULL,
	model TEXT NOT NULL,
	version TEXT NOT NULL,
	time_ns BIGINT NOT NULL,
	received BIGINT NOT NULL,
	failed INTEGER NOT NULL,
	record TEXT NOT NULL,
	PRIMARY KEY (deployment, id)
);
CREATE INDEX payloads_deployment_time ON payloads (deployment, time_ns);
CREATE INDEX payloads_model_time ON payloads (model, version, time_ns);
CREATE INDEX payloads_received ON payloads (received)`},
		{10, "MLflow's traces (MLflow 3's tracing API) and their spans", `
CREATE TABLE mlflow_traces (
	trace_id TEXT NOT NULL PRIMARY KEY,
	experiment_id TEXT NOT NULL,
	request_time BIGINT NOT NULL,
	body TEXT NOT NULL
);
CREATE INDEX mlflow_traces_experiment_time ON mlflow_traces (experiment_id, request_time, trace_id{{collate}});
CREATE TABLE mlflow_trace_spans (
	trace_id TEXT NOT NULL,
	span_id TEXT NOT NULL,
	start_ns BIGINT NOT NULL,
	content TEXT NOT NULL,
	text TEXT NOT NULL,
	PRIMARY KEY (trace_id, span_id)
)`},
		{11, "experiments' artifact locations (MLflow's artifact_location)", `
ALTER TABLE experiments ADD COLUMN artifact_location TEXT NOT NULL DEFAULT ''`},
		// A metric point has one value per step in metrics (fw's series);
		// MLflow keeps every value logged, a second one at the same step
		// included. The value a later write replaces is kept here, by a
		// trigger, so only a replacing write pays for it; MLflow's history
		// reads both tables (History's Replaced).
		{12, "metric values replaced at the same step (MLflow keeps every value)", `
CREATE TABLE metric_replaced (
	run_rid BIGINT NOT NULL,
	key_id BIGINT NOT NULL,
	step BIGINT NOT NULL,
	value {{real}},
	wall BIGINT NOT NULL
);
CREATE INDEX metric_replaced_point ON metric_replaced (run_rid, key_id, step);
{{keep_replaced}}`},
		{13, "an index of the runs' names by trigram (the runs table's name search; SQLite)", `{{run_names}}`},
	}
}

// LatestSchemaVersion is the schema version this code migrates to.
func LatestSchemaVersion() int { return len(migrations()) }

func (s *sqlStore) render(tmpl string) string {
	// The value a metrics write replaces goes to metric_replaced (one
	// statement a line: migrate splits on ";\n").
	const keep = `INSERT INTO metric_replaced (run_rid, key_id, step, value, wall) VALUES (OLD.run_rid, OLD.key_id, OLD.step, OLD.value, OLD.wall);`
	// run_names: FTS5's trigram index of runs.name (an external-content
	// table: it keeps no copy of the names), kept by triggers; a search
	// reads candidates from it (nameCandidates). PostgreSQL has none.
	const runNames = `CREATE VIRTUAL TABLE run_names USING fts5(name, content='runs', content_rowid='rid', tokenize='trigram');
CREATE TRIGGER run_names_insert AFTER INSERT ON runs BEGIN INSERT INTO run_names (rowid, name) VALUES (NEW.rid, NEW.name); END;
CREATE TRIGGER run_names_delete AFTER DELETE ON runs BEGIN INSERT INTO run_names (run_names, rowid, name) VALUES ('delete', OLD.rid, OLD.name); END;
CREATE TRIGGER run_names_update AFTER UPDATE OF name ON runs BEGIN INSERT INTO run_names (run_names, rowid, name) VALUES ('delete', OLD.rid, OLD.name); INSERT INTO run_names (rowid, name) VALUES (NEW.rid, NEW.name); END;
INSERT INTO run_names (run_names) VALUES ('rebuild')`
	r := strings.NewReplacer("{{pk}}", "INTEGER PRIMARY KEY", "{{real}}", "REAL", "{{norowid}}", " WITHOUT ROWID", "{{collate}}", s.collate(),
		"{{keep_replaced}}", `CREATE TRIGGER metrics_keep_replaced BEFORE UPDATE ON metrics FOR EACH ROW WHEN OLD.wall <> NEW.wall OR OLD.value IS NOT NEW.value BEGIN `+keep+` END`,
		"{{run_names}}", runNames)
	if s.d == query.Postgres {
		r = strings.NewReplacer("{{run_names}}", "", "{{pk}}", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", "{{real}}", "DOUBLE PRECISION", "{{norowid}}", "", "{{collate}}", s.collate(),
			"{{keep_replaced}}", `CREATE FUNCTION fw_metrics_keep_replaced() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF OLD.wall <> NEW.wall OR OLD.value IS DISTINCT FROM NEW.value THEN `+keep+` END IF; RETURN NEW; END $$;
CREATE TRIGGER metrics_keep_replaced BEFORE UPDATE ON metrics FOR EACH ROW EXECUTE FUNCTION fw_metrics_keep_replaced()`)
	}
	return r.Replace(tmpl)
}

// migrate brings the schema up to date (or to cfg.migrateTo), one
// transaction per version, recording each in schema_migrations.
func (s *sqlStore) migrate(ctx context.Context) error {
	if _, err := s.wdb.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("creating %s: %w", migrationsHelp, err)
	}
	target := LatestSchemaVersion()
	if s.cfg.migrateTo > 0 {
		target = s.cfg.migrateTo
	}
	for _, m := range migrations() {
		if m.version > target {
			break
		}
		if err := s.applyMigration(ctx, m); err != nil {
			return err
		}
	}
	var v int
	if err := s.wdb.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if v > LatestSchemaVersion() {
		return fmt.Errorf("database schema version %d is newer than this program's %d: upgrade fw", v, LatestSchemaVersion())
	}
	return nil
}

func (s *sqlStore) applyMigration(ctx context.Context, m migration) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %d: beginning: %w", m.version, err)
	}
	defer tx.Rollback()
	if s.d == query.Postgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7270001)`); err != nil {
			return fmt.Errorf("migration %d: locking: %w", m.version, err)
		}
	}
	var n int
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM schema_migrations WHERE version = ?`), m.version).Scan(&n); err != nil {
		return fmt.Errorf("migration %d: checking: %w", m.version, err)
	}
	if n > 0 {
		return nil
	}
	for _, stmt := range strings.Split(s.render(m.sql), ";\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, name, applied) VALUES (?, ?, ?)`), m.version, m.name, time.Now().UnixNano()); err != nil {
		return fmt.Errorf("migration %d: recording: %w", m.version, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %d: committing: %w", m.version, err)
	}
	return nil
}
