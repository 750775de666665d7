package main

// The SQLite side of the bench (a program of its own, so that the
// daemon's binary does not carry a SQL engine). modernc.org/sqlite is
// SQLite compiled to pure Go.
//
// The database is set up as an application that wants the same durability
// as Substrat would set it up: WAL, synchronous=FULL (the WAL is fsynced at
// every commit), one transaction per operation, BEGIN IMMEDIATE so that
// writers queue on the lock instead of failing to upgrade. The rows hold the
// same bytes Substrat writes to its files.

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/substrat/substrat/fsstore"
)

func init() { sqlBackend = openSQLite }

const sqliteSchema = `
CREATE TABLE agents (
	id        TEXT PRIMARY KEY,
	parent_id TEXT,
	name      TEXT NOT NULL,
	session   TEXT NOT NULL,
	last_seq  INTEGER NOT NULL
);
CREATE TABLE events (
	agent_id TEXT NOT NULL,
	seq      INTEGER NOT NULL,
	ts       TEXT NOT NULL,
	type     TEXT NOT NULL,
	data     TEXT NOT NULL,
	PRIMARY KEY (agent_id, seq)
) WITHOUT ROWID;
CREATE TABLE messages (
	id       TEXT PRIMARY KEY,
	to_agent TEXT NOT NULL,
	state    TEXT NOT NULL,
	body     TEXT NOT NULL,
	sent_at  TEXT NOT NULL
);
CREATE INDEX messages_inbox ON messages (to_agent, state);
`

type sqliteDB struct {
	db      *sql.DB
	version string
}

func openSQLite(path string, conns int) (sqlDB, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(600000)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if _, err := db.Exec(sqliteSchema); err != nil {
		db.Close()
		return nil, err
	}
	s := &sqliteDB{db: db}
	var mode string
	var sync int
	if err := db.QueryRow("SELECT sqlite_version()").Scan(&s.version); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		db.Close()
		return nil, err
	}
	if mode != "wal" || sync != 2 {
		db.Close()
		return nil, fmt.Errorf("sqlite: journal_mode %s, synchronous %d; want wal and 2 (FULL)", mode, sync)
	}
	return s, nil
}

func (s *sqliteDB) Version() string {
	return "modernc.org/sqlite (SQLite " + s.version + "), WAL, synchronous=FULL, one transaction per operation"
}

func (s *sqliteDB) Close() error { return s.db.Close() }

// tx runs f in one transaction.
func (s *sqliteDB) tx(f func(*sql.Tx) error) error {
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// addAgent inserts an agent row and its created event.
func addAgent(tx *sql.Tx, id, name string, p *benchPayloads) error {
	if _, err := tx.Exec(`INSERT INTO agents (id, parent_id, name, session, last_seq) VALUES (?, NULL, ?, ?, 1)`,
		id, name, string(p.Session)); err != nil {
		return err
	}
	_, err := tx.Exec(`INSERT INTO events (agent_id, seq, ts, type, data) VALUES (?, 1, ?, 'created', ?)`,
		id, now(), string(p.Created))
	return err
}

func (s *sqliteDB) Prepare(op string, w, n int, p *benchPayloads) (func() error, error) {
	// Every worker has its agent, as in Substrat.
	agent := fsstore.NewID()
	if err := s.tx(func(tx *sql.Tx) error { return addAgent(tx, agent, fmt.Sprintf("agent-%d", w), p) }); err != nil {
		return nil, err
	}
	switch op {
	case "create":
		i := 0
		return func() error {
			i++
			return s.tx(func(tx *sql.Tx) error { return addAgent(tx, fsstore.NewID(), fmt.Sprintf("w%d-%d", w, i), p) })
		}, nil
	case "send":
		return func() error {
			return s.tx(func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO messages (id, to_agent, state, body, sent_at) VALUES (?, ?, 'new', ?, ?)`,
					fsstore.NewID(), agent, string(p.Message), now())
				return err
			})
		}, nil
	case "deliver":
		ids := make([]string, n)
		err := s.tx(func(tx *sql.Tx) error {
			for i := range ids {
				ids[i] = fsstore.NewID()
				if _, err := tx.Exec(`INSERT INTO messages (id, to_agent, state, body, sent_at) VALUES (?, ?, 'new', ?, ?)`,
					ids[i], agent, string(p.Message), now()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		i := 0
		return func() error {
			if i >= len(ids) {
				return errWorkerDone
			}
			id := ids[i]
			i++
			return s.tx(func(tx *sql.Tx) error {
				res, err := tx.Exec(`UPDATE messages SET state = 'cur' WHERE id = ? AND state = 'new'`, id)
				if err != nil {
					return err
				}
				if k, err := res.RowsAffected(); err != nil || k != 1 {
					return fmt.Errorf("deliver %s: %d rows (%v)", id, k, err)
				}
				return nil
			})
		}, nil
	case "append":
		seq := 1
		return func() error {
			seq++
			return s.tx(func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO events (agent_id, seq, ts, type, data) VALUES (?, ?, ?, 'message_sent', ?)`,
					agent, seq, now(), string(p.Event))
				return err
			})
		}, nil
	}
	return nil, fmt.Errorf("sqlite: unknown operation %q", op)
}

// sqliteMeasure measures op on a fresh SQLite database with workers
// writers over conns connections.
func (b *benchRun) sqliteMeasure(op string, workers, conns, per int, d time.Duration, round int) (benchRate, error) {
	dir := filepath.Join(b.dir, "sqlite", fmt.Sprintf("%s-%d-%d-%d", op, workers, conns, round))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return benchRate{}, err
	}
	defer b.cleanup(dir)
	db, err := sqlBackend(filepath.Join(dir, "bench.db"), conns)
	if err != nil {
		return benchRate{}, err
	}
	defer db.Close()
	if b.res.SQLite == sqliteMissing {
		b.res.SQLite, b.res.HasSQLite = db.Version(), true
	}
	var r benchRate
	err = b.profiled(fmt.Sprintf("sqlite-%s-%d-%d-%d", op, workers, conns, round), func() (err error) {
		r, err = b.measure(workers, d, func(w int) (func() error, func(), error) {
			f, err := db.Prepare(op, w, per, b.pay)
			return f, nil, err
		})
		return err
	})
	return r, err
}

// Start-up recovery and RSS.
