package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/rpc"
)

// substrat bench measures, in one run and on one file system, the disk's
// own limits (bare write+fsync with 1 and 64 writers, atomic replace),
// Substrat's durable operations through the real code (the supervisor core
// and fsstore) with 1 agent and with 64 agents at once, the same logical
// operations on SQLite (only when built with -tags sqlitebench, which
// `make bench` does), start-up recovery against a bare read of the same
// files, and a real daemon: RPC round trip of `agent send`, hand-edit
// latency and RSS with many idle agents.
//
// Every operation is counted in the fsyncs it needs, measured at each run
// (the operation runs a few times on an FS that counts them), so that its
// rate can be compared with the disk's 64-writer fsync rate. At the time of
// writing:
//
//	create agent   Core.CreateAgent     5: events.jsonl, session.json, inbox/, the agent dir, agents/
//	send message   Core.Send            2: the message in inbox/tmp, then inbox/new after the rename
//	deliver        Agent.MarkDelivered  1: inbox/cur after the hard link (new/ is swept later)
//	append event   Agent.Commit         1: events.jsonl
//	full turn      Core.Send+RunTurn    8: send 2, deliver 1, the turn's events, session.json and its dir
//
// Each operation is also run as bare system calls (the same creates,
// renames, links and fsyncs made directly with package os), which tells
// Substrat's own overhead from the file system's cost of that pattern.
//
// SQLite (WAL, synchronous=FULL) needs one fsync of the WAL per
// transaction, plus the checkpoints it runs now and then.

// BenchCmd measures Substrat against this disk's limits and against SQLite.
type BenchCmd struct {
	Dir      string        `help:"Parent of the bench directory (default: next to --home, so on the same file system)." type:"path" placeholder:"DIR"`
	Quick    bool          `help:"Smaller sizes (1,000 agents, shorter runs): about 30 s."`
	Duration time.Duration `help:"How long each throughput figure is measured (default 2s; 300ms with --quick)."`
	Profile  string        `help:"Write a CPU profile of each in-process phase into this directory (go tool pprof)." type:"path" placeholder:"DIR"`
	Keep     bool          `help:"Keep the bench directory instead of removing it."`
	Daemon   string        `help:"The substrat binary the measured daemons run from (default: this one). make bench passes the one built without SQLite." type:"path" placeholder:"FILE"`
	Procs    int           `name:"gomaxprocs" help:"Run the in-process measurements (everything but the daemon) with this GOMAXPROCS instead of the Go runtime's default, the number of cores." placeholder:"N"`
}

// benchConfig sizes a run.
type benchConfig struct {
	Quick       bool
	Duration    time.Duration // of each throughput figure
	Workers     int           // agents (goroutines) at once: 64
	Recovery    []int         // agent counts of the recovery fixtures
	Events      int           // events per agent in the fixtures
	Rounds      int           // recovery rounds; the best is kept
	RPCSamples  int
	EditSamples int
	EditProbe   time.Duration // how long the first hand edit may take to show
	MaxPrepared int           // messages prepared for deliver, all workers together
	OpRounds    int           // slices of each operation figure, in alternating order
	Settle      time.Duration // idle time before RSS is read
	Exe         string        // the substrat binary the daemon runs from
	ProfileDir  string
}

func defaultBenchConfig(quick bool) benchConfig {
	if quick {
		return benchConfig{Quick: true, Duration: 300 * time.Millisecond, Workers: 64, Recovery: []int{1000}, Events: 100,
			Rounds: 2, RPCSamples: 40, EditSamples: 20, EditProbe: 2 * time.Second, Settle: 300 * time.Millisecond, MaxPrepared: 3000, OpRounds: 1}
	}
	return benchConfig{Duration: 2 * time.Second, Workers: 64, Recovery: []int{1000, 10000}, Events: 100,
		Rounds: 3, RPCSamples: 200, EditSamples: 100, EditProbe: 5 * time.Second, Settle: time.Second, MaxPrepared: 20000, OpRounds: 2}
}

// Run runs the bench and prints the results.
func (c *BenchCmd) Run(g *Globals) error {
	cfg := defaultBenchConfig(c.Quick)
	if c.Duration > 0 {
		cfg.Duration = c.Duration
	}
	cfg.ProfileDir = c.Profile
	cfg.Exe = c.Daemon
	if c.Procs > 0 {
		// With 64 goroutines blocked in fsync, a P stays with each until
		// the runtime hands it off; with as many Ps as cores (2 here),
		// that, not the disk, bounds the rate of bare and Substrat alike.
		runtime.GOMAXPROCS(c.Procs)
	}
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.Exe = exe
	}
	parent := c.Dir
	if parent == "" {
		parent = filepath.Dir(g.Home)
		if fi, err := os.Stat(parent); err != nil || !fi.IsDir() {
			parent = os.TempDir()
		}
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(parent, "substrat-bench-")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := runBench(ctx, cfg, dir, os.Stderr)
	if err == nil {
		if g.JSON {
			err = printJSON(res)
		} else {
			writeBenchReport(os.Stdout, res)
		}
	}
	if c.Keep {
		fmt.Fprintf(os.Stderr, "bench directory kept: %s\n", dir)
	} else {
		fmt.Fprintf(os.Stderr, "removing %s\n", dir)
		os.RemoveAll(dir)
	}
	if err != nil {
		return fail("bench: "+err.Error(), "run it again with --keep to look at the bench directory")
	}
	return nil
}

// sqlBackend opens a fresh SQLite database at path with at most conns
// connections. It is set by bench_sqlite.go (build tag sqlitebench); nil
// when SQLite is not built in.
var sqlBackend func(path string, conns int) (sqlDB, error)

// sqlDB is the SQLite side of the comparison.
type sqlDB interface {
	// Prepare returns worker w's operation op ("create", "send",
	// "deliver", "append"), each call one transaction. For "deliver", n
	// messages are inserted first (not timed).
	Prepare(op string, w, n int, p *benchPayloads) (func() error, error)
	Version() string
	Close() error
}

// benchPayloads are the bytes Substrat writes for each operation, which the
// SQLite side stores too.
type benchPayloads struct {
	Session []byte // a session.json
	Created []byte // data of a created event
	Event   []byte // data of an appended event
	Message []byte // a message file
	Text    string // a message text
	Line    []byte // an event line, for the bare write+fsync
}

// The results. Rates are operations per second; ratios compare fsyncs per
// second with the disk's limit, or Substrat's rate with SQLite's.

type benchRate struct {
	Ops          int64   `json:"ops"`
	Seconds      float64 `json:"seconds"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	FsyncsPerSec float64 `json:"fsyncs_per_sec,omitempty"`
}

type benchMachine struct {
	CPUs     int     `json:"cpus"`
	Procs    int     `json:"gomaxprocs"` // of the in-process measurements
	CPUModel string  `json:"cpu_model,omitempty"`
	MemGiB   float64 `json:"mem_gib"`
	Kernel   string  `json:"kernel,omitempty"`
	Go       string  `json:"go"`
	Dir      string  `json:"dir"`
	Device   string  `json:"device,omitempty"`
	FSType   string  `json:"fs_type,omitempty"`
	Mount    string  `json:"mount,omitempty"`
	MountOps string  `json:"mount_options,omitempty"`
	Size     string  `json:"size,omitempty"`
	Avail    string  `json:"avail,omitempty"`
}

type benchDisk struct {
	Fsync1   benchRate `json:"write_fsync_1"`
	FsyncN   benchRate `json:"write_fsync_n"`
	Replace1 benchRate `json:"replace_1"`
	ReplaceN benchRate `json:"replace_n"`
	// NewFile1 and NewFileN create a new file, write it and fsync it;
	// Create1 only creates an empty file, without fsync: what a
	// namespace operation costs here.
	NewFile1  benchRate `json:"new_file_1"`
	NewFileN  benchRate `json:"new_file_n"`
	Create1   benchRate `json:"create_1"`
	LineBytes int       `json:"line_bytes"`
}

type benchOp struct {
	Name        string  `json:"name"`
	Label       string  `json:"label"`
	CodePath    string  `json:"code_path"`
	FsyncsPerOp float64 `json:"fsyncs_per_op"`
	Target      bool    `json:"target"` // the fsync and SQLite targets apply

	Substrat1 benchRate `json:"substrat_1"`
	SubstratN benchRate `json:"substrat_n"`
	// LimitRatio1 is Substrat's fsyncs/s with 1 agent over the 1-writer
	// limit; LimitRatioN with N agents over the N-writer limit.
	LimitRatio1 float64 `json:"limit_ratio_1"`
	LimitRatioN float64 `json:"limit_ratio_n"`

	// Bare1 and BareN run the same system calls without Substrat;
	// BareRatio is Substrat's rate over theirs.
	Bare1      *benchRate `json:"bare_1,omitempty"`
	BareN      *benchRate `json:"bare_n,omitempty"`
	BareRatio1 float64    `json:"bare_ratio_1,omitempty"`
	BareRatioN float64    `json:"bare_ratio_n,omitempty"`

	SQLite1 *benchRate `json:"sqlite_1,omitempty"`
	// SQLiteN is the better of SQLiteNConns (N connections) and
	// SQLiteNSerial (N goroutines sharing one connection).
	SQLiteN       *benchRate `json:"sqlite_n,omitempty"`
	SQLiteNConns  *benchRate `json:"sqlite_n_conns,omitempty"`
	SQLiteNSerial *benchRate `json:"sqlite_n_one_conn,omitempty"`
	SQLiteRatio1  float64    `json:"sqlite_ratio_1,omitempty"`
	SQLiteRatioN  float64    `json:"sqlite_ratio_n,omitempty"`
}

type benchRecovery struct {
	Agents   int     `json:"agents"`
	Events   int     `json:"events_per_agent"`
	Bytes    int64   `json:"bytes"`
	BuildSec float64 `json:"fixture_build_sec"`
	ReadMS   float64 `json:"read_ms"`
	// ListMS also lists every directory a scan lists (agent dir,
	// inbox/tmp, inbox/new) and stats inbox/cur: the syscall floor of
	// a scan. For information; the target is against ReadMS.
	ListMS    float64   `json:"read_list_ms"`
	RecoverMS float64   `json:"recover_ms"`
	Ratio     float64   `json:"ratio"`
	ReadAll   []float64 `json:"read_ms_all"`
	ListAll   []float64 `json:"read_list_ms_all"`
	RecAll    []float64 `json:"recover_ms_all"`
}

type benchLatency struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
	NA    string  `json:"na,omitempty"` // why it could not be measured
}

type benchRSS struct {
	Agents  int     `json:"agents"`
	RSSMB   float64 `json:"rss_mb"`
	PeakMB  float64 `json:"peak_mb"`
	StartMS float64 `json:"start_ms"` // daemon start to socket, recovery included
}

type benchTarget struct {
	Name    string  `json:"name"`
	Value   float64 `json:"value"`
	Want    string  `json:"want"`
	Verdict string  `json:"verdict"` // PASS, MISS or n/a
	Note    string  `json:"note,omitempty"`
}

type benchResult struct {
	Version    int             `json:"version"`
	StartedAt  time.Time       `json:"started_at"`
	Seconds    float64         `json:"seconds"`
	Quick      bool            `json:"quick"`
	Workers    int             `json:"workers"`
	DurationMS int64           `json:"duration_ms"`
	Machine    benchMachine    `json:"machine"`
	SQLite     string          `json:"sqlite"` // version, or why it is absent
	HasSQLite  bool            `json:"has_sqlite"`
	Disk       benchDisk       `json:"disk"`
	Ops        []*benchOp      `json:"ops"`
	Recovery   []benchRecovery `json:"recovery"`
	RPC        benchLatency    `json:"rpc_send"`
	HandEdit   benchLatency    `json:"hand_edit"`
	RSS        benchRSS        `json:"rss"`
	Targets    []benchTarget   `json:"targets"`
}

// sqliteMissing is what the SQLite column says when it is not built in.
const sqliteMissing = "not built in: run 'make bench' (it builds with -tags sqlitebench) for the SQLite column"

const handEditNA = "n/a (needs the watcher, issue 5)"

type benchRun struct {
	ctx   context.Context
	cfg   benchConfig
	dir   string
	log   io.Writer
	start time.Time
	res   *benchResult
	pay   *benchPayloads
}

// runBench runs every phase in dir (which it fills but does not remove)
// and returns the results; progress goes to log.
func runBench(ctx context.Context, cfg benchConfig, dir string, log io.Writer) (*benchResult, error) {
	b := &benchRun{ctx: ctx, cfg: cfg, dir: dir, log: log, start: time.Now()}
	b.res = &benchResult{Version: 1, StartedAt: b.start.UTC(), Quick: cfg.Quick, Workers: cfg.Workers,
		DurationMS: cfg.Duration.Milliseconds(), Machine: machineInfo(dir), SQLite: sqliteMissing}
	pay, err := makePayloads()
	if err != nil {
		return nil, err
	}
	b.pay = pay
	b.res.Disk.LineBytes = len(pay.Line)
	m := b.res.Machine
	b.progress("bench in %s (%s on %s); %d agents at once, %s per figure", dir, m.FSType, m.Device, cfg.Workers, cfg.Duration)
	if sqlBackend == nil {
		b.progress("SQLite %s", sqliteMissing)
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	phases := []struct {
		name string
		f    func() error
	}{
		{"disk", b.diskLimits},
		{"substrat", b.substratOps},
		{"daemon", b.daemonLatency},
		{"recovery", b.recovery},
	}
	for _, p := range phases {
		f := p.f
		if p.name != "substrat" && p.name != "recovery" { // profiled piece by piece
			f = func() error { return b.profiled(p.name, p.f) }
		}
		if err := f(); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	b.res.Seconds = time.Since(b.start).Seconds()
	b.res.Targets = benchTargets(b.res)
	b.progress("done in %.0f s", b.res.Seconds)
	return b.res, nil
}

func (b *benchRun) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

// profiled runs f, under a CPU profile if asked.
func (b *benchRun) profiled(name string, f func() error) error {
	if b.cfg.ProfileDir == "" {
		return f()
	}
	out, err := os.Create(filepath.Join(b.cfg.ProfileDir, name+".pprof"))
	if err != nil {
		return err
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		return err
	}
	defer pprof.StopCPUProfile()
	return f()
}

// makePayloads builds typical Substrat files: the bench's agents and
// messages look like these.
func makePayloads() (*benchPayloads, error) {
	t := time.Now().UTC()
	sess := &fsstore.Session{Version: fsstore.Version, ID: fsstore.NewID(), Name: "worker-1", Provider: "script",
		Instructions: benchInstructions, AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionCreated,
		CreatedAt: t, UpdatedAt: t, LastSeq: 1}
	created, err := json.Marshal(sess)
	if err != nil {
		return nil, err
	}
	snap, err := fsstore.EncodeSession(sess)
	if err != nil {
		return nil, err
	}
	ev, err := json.Marshal(fsstore.MessageRef{ID: fsstore.NewID(), To: fsstore.User})
	if err != nil {
		return nil, err
	}
	line, err := fsstore.EncodeEvent(fsstore.Event{Seq: 1000, Time: t, Type: fsstore.EvSent, Data: ev})
	if err != nil {
		return nil, err
	}
	msg, err := json.MarshalIndent(&fsstore.Message{Version: fsstore.Version, ID: fsstore.NewID(), From: fsstore.User,
		FromName: fsstore.User, To: sess.ID, Kind: fsstore.KindMessage, Text: benchText, SentAt: t}, "", "  ")
	if err != nil {
		return nil, err
	}
	return &benchPayloads{Session: snap, Created: created, Event: ev, Message: append(msg, '\n'), Text: benchText, Line: line}, nil
}

const (
	benchInstructions = "Work on the task you are given, report back to your parent, and keep your notes short."
	benchText         = "Please look at the failing test in the store package and tell me what you find."
)

// A factory prepares worker w: its operation, and what to do after.
type benchFactory func(w int) (op func() error, done func(), err error)

// errWorkerDone ends a worker's loop early without failing the run.
var errWorkerDone = errors.New("worker done")

// measure runs workers goroutines, each calling its op until d has passed
// (or the op returns errWorkerDone), and returns their total rate.
func (b *benchRun) measure(workers int, d time.Duration, f benchFactory) (benchRate, error) {
	ops := make([]func() error, workers)
	var dones []func()
	defer func() {
		for _, done := range dones {
			done()
		}
	}()
	for w := range workers {
		op, done, err := f(w)
		if err != nil {
			return benchRate{}, err
		}
		ops[w] = op
		if done != nil {
			dones = append(dones, done)
		}
	}
	runtime.GC()
	var (
		total   atomic.Int64
		stop    atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
		start   time.Time
	)
	gate := make(chan struct{})
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			n := int64(0)
			for !stop.Load() && time.Since(start) < d {
				if err := op(); err != nil {
					if !errors.Is(err, errWorkerDone) {
						errOnce.Do(func() { first = err })
						stop.Store(true)
					}
					break
				}
				n++
			}
			total.Add(n)
		}()
	}
	stopCtx := context.AfterFunc(b.ctx, func() { stop.Store(true) })
	defer stopCtx()
	start = time.Now()
	close(gate)
	wg.Wait()
	el := time.Since(start).Seconds()
	if first != nil {
		return benchRate{}, first
	}
	if err := b.ctx.Err(); err != nil {
		return benchRate{}, err
	}
	r := benchRate{Ops: total.Load(), Seconds: el}
	if el > 0 {
		r.OpsPerSec = float64(r.Ops) / el
	}
	return r, nil
}

// The disk's limits.

func (b *benchRun) diskLimits() error {
	dir := filepath.Join(b.dir, "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	line := b.pay.Line
	base := dir // a new directory for each measurement
	fsyncOp := func(w int) (func() error, func(), error) {
		f, err := os.OpenFile(filepath.Join(base, fmt.Sprintf("w%02d.jsonl", w)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, err
		}
		return func() error {
			if _, err := f.Write(line); err != nil {
				return err
			}
			return f.Sync()
		}, func() { f.Close() }, nil
	}
	data := b.pay.Session
	replaceOp := func(w int) (func() error, func(), error) {
		d := filepath.Join(base, fmt.Sprintf("r%02d", w))
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, nil, err
		}
		df, err := os.Open(d)
		if err != nil {
			return nil, nil, err
		}
		target, tmp := filepath.Join(d, "session.json"), filepath.Join(d, ".session.json.tmp")
		return func() error {
			f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return err
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp, target); err != nil {
				return err
			}
			return df.Sync()
		}, func() { df.Close() }, nil
	}
	newFileOp := func(sync bool) benchFactory {
		return func(w int) (func() error, func(), error) {
			d := filepath.Join(base, fmt.Sprintf("n%02d", w))
			if err := os.Mkdir(d, 0o700); err != nil {
				return nil, nil, err
			}
			i := 0
			return func() error {
				i++
				name := filepath.Join(d, strconv.Itoa(i))
				if sync {
					return createSync(name, data)
				}
				f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return err
				}
				return f.Close()
			}, nil, nil
		}
	}
	n, d := b.cfg.Workers, b.cfg.Duration
	steps := []struct {
		what    string
		workers int
		f       benchFactory
		out     *benchRate
		fsyncs  float64
	}{
		{"write+fsync, 1 writer", 1, fsyncOp, &b.res.Disk.Fsync1, 1},
		{fmt.Sprintf("write+fsync, %d writers", n), n, fsyncOp, &b.res.Disk.FsyncN, 1},
		{"atomic replace, 1 writer", 1, replaceOp, &b.res.Disk.Replace1, 2},
		{fmt.Sprintf("atomic replace, %d writers", n), n, replaceOp, &b.res.Disk.ReplaceN, 2},
		{"new file+fsync, 1 writer", 1, newFileOp(true), &b.res.Disk.NewFile1, 1},
		{fmt.Sprintf("new file+fsync, %d writers", n), n, newFileOp(true), &b.res.Disk.NewFileN, 1},
		{"create empty file, no fsync", 1, newFileOp(false), &b.res.Disk.Create1, 0},
	}
	for i, s := range steps {
		base = filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(base, 0o700); err != nil {
			return err
		}
		r, err := b.measure(s.workers, d, s.f)
		if err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		r.FsyncsPerSec = r.OpsPerSec * s.fsyncs
		*s.out = r
		b.progress("disk: %-28s %9.0f ops/s", s.what, r.OpsPerSec)
	}
	return nil
}

// Substrat's operations.

// countFS counts the fsyncs that go through it. WriteFileAtomic counts as
// one: renameio fsyncs the temporary file; the directory fsync is a
// SyncDir of its own.
type countFS struct {
	fsstore.FS
	n *atomic.Int64
}

type countFile struct {
	fsstore.File
	n *atomic.Int64
}

func (f countFile) Sync() error { f.n.Add(1); return f.File.Sync() }

func (c countFS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	f, err := c.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.n}, nil
}

func (c countFS) OpenAppend(name string) (fsstore.File, error) {
	f, err := c.FS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.n}, nil
}

func (c countFS) SyncDir(name string) error { c.n.Add(1); return c.FS.SyncDir(name) }

func (c countFS) WriteFileAtomic(name string, data []byte, perm fs.FileMode) error {
	c.n.Add(1)
	return c.FS.WriteFileAtomic(name, data, perm)
}

// noSyncFS skips every fsync: it builds fixtures fast.
type noSyncFS struct{ fsstore.FS }

type noSyncFile struct{ fsstore.File }

func (noSyncFile) Sync() error { return nil }

func (n noSyncFS) Create(name string, perm fs.FileMode) (fsstore.File, error) {
	f, err := n.FS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (n noSyncFS) OpenAppend(name string) (fsstore.File, error) {
	f, err := n.FS.OpenAppend(name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) SyncDir(string) error { return nil }

// benchOpSpec describes one of Substrat's operations.
type benchOpSpec struct {
	name, label, path string
	target            bool
	prepared          bool // works on messages prepared in advance
	// setup prepares a home for workers workers (each with perWorker
	// prepared messages if prepared) and returns the factory and a
	// cleanup.
	setup func(b *benchRun, home string, fsys fsstore.FS, workers, perWorker int) (benchFactory, func(), error)
	// check, if set, verifies after a calibration of ops operations on
	// one worker that they did what they should.
	check func(ops int) error
}

func benchProviders() *provider.Registry { return provider.NewRegistry(script.New()) }

// newBenchCore opens a store and a core on home, recovered (empty) as the
// daemon does. The default pool holds a session for every worker.
func (b *benchRun) newBenchCore(home string, fsys fsstore.FS) (*fsstore.Store, *supervisor.Core, func(), error) {
	st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
	if err != nil {
		return nil, nil, nil, err
	}
	core := supervisor.New(supervisor.Config{Store: st, Providers: benchProviders(),
		Pools: map[string]int{supervisor.DefaultPool: b.cfg.Workers + 8}})
	if _, err := core.Recover(b.ctx, false); err != nil {
		return nil, nil, nil, err
	}
	return st, core, func() { core.Shutdown(context.Background(), 10*time.Second) }, nil
}

// benchAgents creates n root agents through the core.
func benchAgents(core *supervisor.Core, n int) ([]string, error) {
	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range ids {
		g.Go(func() error {
			info, err := core.CreateAgent(supervisor.CreateParams{Name: fmt.Sprintf("agent-%d", i), Provider: "script",
				Instructions: benchInstructions})
			ids[i] = info.ID
			return err
		})
	}
	return ids, g.Wait()
}

// storeAgents creates n agents through fsstore.
func storeAgents(st *fsstore.Store, n int) ([]*fsstore.Agent, error) {
	as := make([]*fsstore.Agent, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range as {
		g.Go(func() error {
			a, err := st.CreateAgent(&fsstore.Session{Name: fmt.Sprintf("agent-%d", i), Provider: "script", Instructions: benchInstructions})
			as[i] = a
			return err
		})
	}
	if err := g.Wait(); err != nil {
		for _, a := range as {
			if a != nil {
				a.Close()
			}
		}
		return nil, err
	}
	return as, nil
}

func closeAgents(as []*fsstore.Agent) func() {
	return func() {
		for _, a := range as {
			a.Close()
		}
	}
}

func (b *benchRun) opSpecs() []*benchOpSpec {
	var turnCore *supervisor.Core
	var turnID string
	return []*benchOpSpec{{
		name: "create", label: "create agent", path: "Core.CreateAgent", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			return func(w int) (func() error, func(), error) {
				i := 0
				return func() error {
					i++
					_, err := core.CreateAgent(supervisor.CreateParams{Name: fmt.Sprintf("w%d-%d", w, i), Provider: "script",
						Instructions: benchInstructions})
					return err
				}, nil, nil
			}, done, nil
		},
	}, {
		name: "send", label: "send message, until acknowledged", path: "Core.Send", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			ids, err := benchAgents(core, workers)
			if err != nil {
				done()
				return nil, nil, err
			}
			return func(w int) (func() error, func(), error) {
				return func() error {
					_, err := core.Send(supervisor.SendParams{To: ids[w], Text: benchText})
					return err
				}, nil, nil
			}, done, nil
		},
	}, {
		name: "append", label: "append event", path: "Agent.Commit", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
			if err != nil {
				return nil, nil, err
			}
			as, err := storeAgents(st, workers)
			if err != nil {
				return nil, nil, err
			}
			ref := fsstore.MessageRef{ID: fsstore.NewID(), To: fsstore.User}
			return func(w int) (func() error, func(), error) {
				return func() error {
					_, err := as[w].Commit(fsstore.EvSent, ref)
					return err
				}, nil, nil
			}, closeAgents(as), nil
		},
	}, {
		name: "deliver", label: "deliver message (new/ -> cur/)", path: "Agent.MarkDelivered", target: true, prepared: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, perWorker int) (benchFactory, func(), error) {
			st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
			if err != nil {
				return nil, nil, err
			}
			as, err := storeAgents(st, workers)
			if err != nil {
				return nil, nil, err
			}
			// The messages to deliver are written without fsync, then
			// flushed once: the fixture is not what is measured.
			ids := make([][]string, workers)
			var g errgroup.Group
			g.SetLimit(8)
			for w, a := range as {
				ids[w] = make([]string, perWorker)
				g.Go(func() error {
					for i := range ids[w] {
						m := &fsstore.Message{From: fsstore.User, FromName: fsstore.User, To: a.ID(), Kind: fsstore.KindMessage, Text: benchText}
						m.ID = fsstore.NewID()
						if err := fsstore.Publish(noSyncFS{fsstore.OS{}}, a.Files().Inbox(), m); err != nil {
							return err
						}
						ids[w][i] = m.ID
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				closeAgents(as)()
				return nil, nil, err
			}
			if err := syncFS(home); err != nil {
				closeAgents(as)()
				return nil, nil, err
			}
			return func(w int) (func() error, func(), error) {
				i := 0
				return func() error {
					if i >= len(ids[w]) {
						return errWorkerDone
					}
					err := as[w].MarkDelivered(ids[w][i : i+1])
					i++
					return err
				}, nil, nil
			}, closeAgents(as), nil
		},
	}, {
		name: "turn", label: "full turn: send + turn (script provider)", path: "Core.Send + Core.RunTurn",
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			ids, err := benchAgents(core, workers)
			if err != nil {
				done()
				return nil, nil, err
			}
			turnCore, turnID = core, ids[0]
			return func(w int) (func() error, func(), error) {
				return func() error {
					if _, err := core.Send(supervisor.SendParams{To: ids[w], Text: "ping"}); err != nil {
						return err
					}
					return core.RunTurn(b.ctx, ids[w])
				}, nil, nil
			}, done, nil
		},
		check: func(ops int) error {
			info, err := turnCore.Inspect(turnID)
			if err != nil {
				return err
			}
			if int(info.Counters.Turns) != ops {
				return fmt.Errorf("%d turns ran for %d sends", info.Counters.Turns, ops)
			}
			return nil
		},
	}}
}

// calibrate runs op a few times on one worker through a counting FS and
// returns the fsyncs of one operation (after a first, warm-up one).
func (b *benchRun) calibrate(s *benchOpSpec) (float64, error) {
	const ops = 6
	var n atomic.Int64
	home := filepath.Join(b.dir, "ops", "calibrate-"+s.name)
	f, done, err := s.setup(b, home, countFS{fsstore.OS{}, &n}, 1, ops)
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(home)
	defer done()
	op, wdone, err := f(0)
	if err != nil {
		return 0, err
	}
	if wdone != nil {
		defer wdone()
	}
	if err := op(); err != nil {
		return 0, err
	}
	n.Store(0)
	for range ops - 1 {
		if err := op(); err != nil {
			return 0, err
		}
	}
	if s.check != nil {
		if err := s.check(ops); err != nil {
			return 0, err
		}
	}
	return float64(n.Load()) / float64(ops-1), nil
}

// substratOps measures each operation with 1 agent and with Workers
// agents at once: as bare system calls, through Substrat, and on SQLite,
// back to back so that they see the same machine. With Rounds > 1 each
// figure is split into that many slices, run in alternating order, so that
// neither side always runs in the wake of the other.
func (b *benchRun) substratOps() error {
	n, d := b.cfg.Workers, b.cfg.Duration
	rounds := max(b.cfg.OpRounds, 1)
	slice := d / time.Duration(rounds)
	// An operation on prepared messages (deliver) gets as many as the
	// append rate would use up in a slice, at most MaxPrepared in all
	// (each is a file to create first); a worker that runs out stops, and
	// as they all have the same number they stop at about the same time.
	appendRate := map[int]float64{}
	for _, s := range b.opSpecs() {
		fsyncs, err := b.calibrate(s)
		if err != nil {
			return fmt.Errorf("%s: calibrate: %w", s.label, err)
		}
		row := &benchOp{Name: s.name, Label: s.label, CodePath: s.path, FsyncsPerOp: fsyncs, Target: s.target}
		for _, workers := range []int{1, n} {
			per := 0
			if s.prepared {
				per = min(perWorker(1.2*appendRate[workers], slice, workers), max(b.cfg.MaxPrepared/rounds/workers, 4))
			}
			type contender struct {
				what string
				out  *benchRate
				run  func(i int) (benchRate, error)
			}
			var cs []contender
			if b.bareFactory(s.name, "", 0, 0) != nil {
				r := &benchRate{}
				if workers == 1 {
					row.Bare1 = r
				} else {
					row.BareN = r
				}
				cs = append(cs, contender{fmt.Sprintf("bare:     %-42s %2d writers", s.label, workers), r, func(i int) (benchRate, error) {
					base := filepath.Join(b.dir, "ops", fmt.Sprintf("bare-%s-%d-%d", s.name, workers, i))
					defer b.cleanup(base)
					var r benchRate
					err := b.profiled(fmt.Sprintf("bare-%s-%d-%d", s.name, workers, i), func() (err error) {
						r, err = b.measure(workers, slice, b.bareFactory(s.name, base, workers, per))
						return err
					})
					return r, err
				}})
			}
			sub := &row.Substrat1
			if workers > 1 {
				sub = &row.SubstratN
			}
			cs = append(cs, contender{fmt.Sprintf("substrat: %-42s %2d agents ", s.label, workers), sub, func(i int) (benchRate, error) {
				home := filepath.Join(b.dir, "ops", fmt.Sprintf("%s-%d-%d", s.name, workers, i))
				defer b.cleanup(home)
				f, done, err := s.setup(b, home, fsstore.OS{}, workers, per)
				if err != nil {
					return benchRate{}, err
				}
				defer done()
				var r benchRate
				err = b.profiled(fmt.Sprintf("substrat-%s-%d-%d", s.name, workers, i), func() (err error) {
					r, err = b.measure(workers, slice, f)
					return err
				})
				return r, err
			}})
			if sqlBackend != nil && s.target {
				// With many writers, both a connection each and one
				// shared connection; the better one counts.
				conns := []int{1}
				if workers > 1 {
					conns = []int{workers, 1}
				}
				for _, c := range conns {
					r := &benchRate{}
					switch {
					case workers == 1:
						row.SQLite1 = r
					case c == 1:
						row.SQLiteNSerial = r
					default:
						row.SQLiteNConns = r
					}
					cs = append(cs, contender{fmt.Sprintf("sqlite:   %-42s %2d writers, %d conns", s.label, workers, c), r, func(i int) (benchRate, error) {
						return b.sqliteMeasure(s.name, workers, c, per, slice, i)
					}})
				}
			}
			for i := range rounds {
				order := slices.Clone(cs)
				if i%2 == 1 {
					slices.Reverse(order)
				}
				for _, c := range order {
					r, err := c.run(i)
					if err != nil {
						return fmt.Errorf("%s: %w", strings.Join(strings.Fields(c.what), " "), err)
					}
					c.out.Ops += r.Ops
					c.out.Seconds += r.Seconds
				}
			}
			for _, c := range cs {
				if c.out.Seconds > 0 {
					c.out.OpsPerSec = float64(c.out.Ops) / c.out.Seconds
				}
				c.out.FsyncsPerSec = c.out.OpsPerSec * fsyncs
				b.progress("%s %9.0f ops/s", c.what, c.out.OpsPerSec)
			}
			if s.name == "append" {
				appendRate[workers] = sub.OpsPerSec
			}
		}
		for _, r := range []*benchRate{row.SQLite1, row.SQLiteN, row.SQLiteNConns, row.SQLiteNSerial} {
			if r != nil {
				r.FsyncsPerSec = 0 // SQLite's fsyncs are its own
			}
		}
		row.LimitRatio1 = ratio(row.Substrat1.FsyncsPerSec, b.res.Disk.Fsync1.OpsPerSec)
		row.LimitRatioN = ratio(row.SubstratN.FsyncsPerSec, b.res.Disk.FsyncN.OpsPerSec)
		if row.Bare1 != nil {
			row.BareRatio1 = ratio(row.Substrat1.OpsPerSec, row.Bare1.OpsPerSec)
			row.BareRatioN = ratio(row.SubstratN.OpsPerSec, row.BareN.OpsPerSec)
		}
		if row.SQLite1 != nil {
			row.SQLiteN = row.SQLiteNConns
			if row.SQLiteNSerial.OpsPerSec > row.SQLiteN.OpsPerSec {
				row.SQLiteN = row.SQLiteNSerial
			}
			row.SQLiteRatio1 = ratio(row.Substrat1.OpsPerSec, row.SQLite1.OpsPerSec)
			row.SQLiteRatioN = ratio(row.SubstratN.OpsPerSec, row.SQLiteN.OpsPerSec)
		}
		b.res.Ops = append(b.res.Ops, row)
	}
	return nil
}

// cleanup removes a measurement's directory and flushes the file system,
// so that the next measurement does not pay for this one's writes.
func (b *benchRun) cleanup(dir string) {
	os.RemoveAll(dir)
	syncFS(b.dir)
}

// bareFactory returns the system calls of Substrat's operation op, made
// directly with package os, in dir: what the file system allows for that
// pattern, so that Substrat's own overhead can be told from the file
// system's. Nil for an operation that has no bare form.
//
// With dir "" it only tells whether op has a bare form (a non-nil result).
func (b *benchRun) bareFactory(op, dir string, workers, perWorker int) benchFactory {
	line, msg, snap := b.pay.Line, b.pay.Message, b.pay.Session
	if dir == "" {
		switch op {
		case "create", "send", "deliver", "append":
			return func(int) (func() error, func(), error) { return nil, nil, errors.New("no directory") }
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return func(int) (func() error, func(), error) { return nil, nil, err }
	}
	switch op {
	case "create":
		// All workers create in one agents/, as agents of one home do.
		agents := filepath.Join(dir, "agents")
		if err := os.Mkdir(agents, 0o700); err != nil {
			return func(int) (func() error, func(), error) { return nil, nil, err }
		}
		return func(w int) (func() error, func(), error) {
			i := 0
			return func() error {
				i++
				name := fmt.Sprintf("%d-%d", w, i)
				tmp, final := filepath.Join(agents, ".tmp-"+name), filepath.Join(agents, name)
				inbox := filepath.Join(tmp, "inbox")
				for _, d := range []string{tmp, inbox, filepath.Join(inbox, "tmp"), filepath.Join(inbox, "new"), filepath.Join(inbox, "cur")} {
					if err := os.Mkdir(d, 0o700); err != nil {
						return err
					}
				}
				if err := createSync(filepath.Join(tmp, "events.jsonl"), line); err != nil {
					return err
				}
				if err := createSync(filepath.Join(tmp, "session.json"), snap); err != nil {
					return err
				}
				for _, d := range []string{inbox, tmp} {
					if err := syncDir(d); err != nil {
						return err
					}
				}
				if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, final, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				return syncDir(agents)
			}, nil, nil
		}
	case "send":
		return func(w int) (func() error, func(), error) {
			inbox := filepath.Join(dir, strconv.Itoa(w))
			for _, d := range []string{inbox, filepath.Join(inbox, "tmp"), filepath.Join(inbox, "new")} {
				if err := os.Mkdir(d, 0o700); err != nil {
					return nil, nil, err
				}
			}
			return func() error {
				id := fsstore.NewID() + ".json"
				tmp, dst := filepath.Join(inbox, "tmp", id), filepath.Join(inbox, "new", id)
				if err := createSync(tmp, msg); err != nil {
					return err
				}
				if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
					return err
				}
				return syncDir(filepath.Join(inbox, "new"))
			}, nil, nil
		}
	case "deliver":
		ids := make([][]string, workers)
		var g errgroup.Group
		g.SetLimit(8)
		for w := range workers {
			g.Go(func() error {
				inbox := filepath.Join(dir, strconv.Itoa(w))
				for _, d := range []string{inbox, filepath.Join(inbox, "new"), filepath.Join(inbox, "cur")} {
					if err := os.Mkdir(d, 0o700); err != nil {
						return err
					}
				}
				for range perWorker {
					id := fsstore.NewID() + ".json"
					if err := os.WriteFile(filepath.Join(inbox, "new", id), msg, 0o600); err != nil {
						return err
					}
					ids[w] = append(ids[w], id)
				}
				return nil
			})
		}
		err := g.Wait()
		if err == nil {
			err = syncFS(dir)
		}
		if err != nil {
			return func(int) (func() error, func(), error) { return nil, nil, err }
		}
		return func(w int) (func() error, func(), error) {
			inbox := filepath.Join(dir, strconv.Itoa(w))
			i := 0
			return func() error {
				if i >= len(ids[w]) {
					return errWorkerDone
				}
				id := ids[w][i]
				i++
				// As fsstore.MarkDelivered: a hard link into cur/ (the new/
				// name is swept later), then cur/ is fsynced.
				if err := os.Link(filepath.Join(inbox, "new", id), filepath.Join(inbox, "cur", id)); err != nil {
					return err
				}
				return syncDir(filepath.Join(inbox, "cur"))
			}, nil, nil
		}
	case "append":
		return func(w int) (func() error, func(), error) {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.jsonl", w)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return nil, nil, err
			}
			return func() error {
				if _, err := f.Write(line); err != nil {
					return err
				}
				return f.Sync()
			}, func() { f.Close() }, nil
		}
	}
	return nil
}

// createSync creates name exclusively, writes data and fsyncs it.
func createSync(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// syncDir fsyncs a directory.
func syncDir(name string) error {
	d, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// perWorker sizes the messages prepared for each worker so that they last
// about d at the given rate (ops/s of all workers together).
func perWorker(rate float64, d time.Duration, workers int) int {
	if rate <= 0 {
		rate = 1000
	}
	return min(max(int(math.Ceil(rate*d.Seconds()/float64(workers))), 4), 20000)
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// syncFS flushes the file system that holds dir, so that fixture writes
// are not written back during a measurement.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// SQLite.

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

func (b *benchRun) recovery() error {
	sizes := slices.Sorted(slices.Values(b.cfg.Recovery))
	for i, agents := range sizes {
		home := filepath.Join(b.dir, fmt.Sprintf("recovery-%d", agents))
		t0 := time.Now()
		size, err := buildFixture(home, agents, b.cfg.Events)
		if err != nil {
			return fmt.Errorf("fixture: %w", err)
		}
		if err := syncFS(home); err != nil {
			return err
		}
		row := benchRecovery{Agents: agents, Events: b.cfg.Events, Bytes: size, BuildSec: time.Since(t0).Seconds()}
		b.progress("recovery: fixture of %d agents x %d events (%.0f MB) built in %.1f s", agents, b.cfg.Events, float64(size)/1e6, row.BuildSec)
		// A first read warms the page cache; then each round reads and
		// recovers once, and the best of each is kept.
		if _, err := bareRead(home); err != nil {
			return err
		}
		err = b.profiled(fmt.Sprintf("recovery-%d", agents), func() error {
			for range b.cfg.Rounds {
				runtime.GC()
				t := time.Now()
				if _, err := bareRead(home); err != nil {
					return err
				}
				row.ReadAll = append(row.ReadAll, ms(time.Since(t)))
				t = time.Now()
				if err := bareReadList(home); err != nil {
					return err
				}
				row.ListAll = append(row.ListAll, ms(time.Since(t)))
				runtime.GC()
				dt, err := b.recoverOnce(home, agents)
				if err != nil {
					return err
				}
				row.RecAll = append(row.RecAll, ms(dt))
			}
			return nil
		})
		if err != nil {
			return err
		}
		row.ReadMS, row.ListMS, row.RecoverMS = slices.Min(row.ReadAll), slices.Min(row.ListAll), slices.Min(row.RecAll)
		row.Ratio = ratio(row.RecoverMS, row.ReadMS)
		b.res.Recovery = append(b.res.Recovery, row)
		b.progress("recovery: %d agents: read %.0f ms, Core.Recover %.0f ms (%.2fx)", agents, row.ReadMS, row.RecoverMS, row.Ratio)
		if i == len(sizes)-1 {
			// The largest home is left for the end of the run to remove.
			if err := b.rss(home, agents); err != nil {
				return fmt.Errorf("rss: %w", err)
			}
			continue
		}
		os.RemoveAll(home)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// recoverOnce times what a daemon start does to its store: open it, then
// Core.Recover (scan, replay, recovery steps, recovery.json).
func (b *benchRun) recoverOnce(home string, agents int) (time.Duration, error) {
	t := time.Now()
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		return 0, err
	}
	core := supervisor.New(supervisor.Config{Store: st, Providers: benchProviders()})
	rep, err := core.Recover(b.ctx, false)
	dt := time.Since(t)
	if err != nil {
		return 0, err
	}
	defer core.Shutdown(context.Background(), 10*time.Second)
	if rep.Agents != agents || len(rep.KeptOut) > 0 {
		return 0, fmt.Errorf("recovered %d agents of %d, %d kept out", rep.Agents, agents, len(rep.KeptOut))
	}
	return dt, nil
}

// bareRead lists agents/ and reads every agent's files once, with as many
// workers as a scan uses: the floor under any start-up.
func bareRead(home string) (int64, error) {
	dir := fsstore.Layout{Home: home}.AgentsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total atomic.Int64
	var g errgroup.Group
	g.SetLimit(4 * runtime.GOMAXPROCS(0))
	for _, e := range entries {
		g.Go(func() error {
			files := fsstore.Layout{Home: home}.Agent(e.Name())
			for _, p := range []string{files.Session(), files.Events()} {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				total.Add(int64(len(data)))
			}
			return nil
		})
	}
	err = g.Wait()
	return total.Load(), err
}

// bareReadList does what bareRead does and also lists the directories a
// scan lists and stats inbox/cur, with as many workers.
func bareReadList(home string) error {
	layout := fsstore.Layout{Home: home}
	entries, err := os.ReadDir(layout.AgentsDir())
	if err != nil {
		return err
	}
	var g errgroup.Group
	g.SetLimit(4 * runtime.GOMAXPROCS(0))
	for _, e := range entries {
		g.Go(func() error {
			files := layout.Agent(e.Name())
			inbox := files.Inbox()
			for _, d := range []string{files.Dir, inbox.Sub(fsstore.InboxTmp), inbox.Sub(fsstore.InboxNew)} {
				if _, err := os.ReadDir(d); err != nil {
					return err
				}
			}
			if _, err := os.Stat(inbox.Sub(fsstore.InboxCur)); err != nil {
				return err
			}
			for _, p := range []string{files.Session(), files.Events()} {
				if _, err := os.ReadFile(p); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// buildFixture writes a home of agents agents with events events each,
// directly and without fsync, as a daemon stopped cleanly leaves them: idle,
// sessions suspended, session.json up to date. It returns the bytes of
// session.json and events.jsonl written.
func buildFixture(home string, agents, events int) (int64, error) {
	if _, err := fsstore.Open(home, fsstore.Options{FS: noSyncFS{fsstore.OS{}}}); err != nil {
		return 0, err
	}
	layout := fsstore.Layout{Home: home}
	t0 := time.Now().UTC().Add(-time.Hour)
	tmpl := &fsstore.Session{Version: fsstore.Version, ID: fsstore.NewID(), Name: "worker", Provider: "script",
		Instructions: benchInstructions, AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionCreated,
		CreatedAt: t0, UpdatedAt: t0}
	event := func(seq int, data any) fsstore.Event {
		raw, _ := json.Marshal(data)
		return fsstore.Event{Seq: uint64(seq), Time: t0.Add(time.Duration(seq) * time.Second), Type: "", Data: raw}
	}
	createdData, err := json.Marshal(tmpl)
	if err != nil {
		return 0, err
	}
	cur, err := fsstore.Apply(nil, fsstore.Event{Seq: 1, Time: t0, Type: fsstore.EvCreated, Data: createdData})
	if err != nil {
		return 0, err
	}
	var rest []byte // events 2..events, the same for every agent
	for seq := 2; seq <= events; seq++ {
		var e fsstore.Event
		switch {
		case seq == events:
			e = event(seq, fsstore.StateChange{AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionSuspended, Reason: "daemon stopped"})
			e.Type = fsstore.EvState
		case seq%4 == 2:
			e = event(seq, fsstore.StateChange{AgentState: fsstore.AgentBusy, SessionState: fsstore.SessionActive})
			e.Type = fsstore.EvState
		case seq%4 == 3:
			e = event(seq, fsstore.MessageRef{ID: fsstore.NewID(), To: fsstore.User})
			e.Type = fsstore.EvSent
		case seq%4 == 0:
			e = event(seq, fsstore.Counters{Turns: 1, InputTokens: 1234, OutputTokens: 567, CostUSD: 0.0123})
			e.Type = fsstore.EvTurn
		default:
			e = event(seq, fsstore.StateChange{AgentState: fsstore.AgentIdle})
			e.Type = fsstore.EvState
		}
		if cur, err = fsstore.Apply(cur, e); err != nil {
			return 0, err
		}
		line, err := fsstore.EncodeEvent(e)
		if err != nil {
			return 0, err
		}
		rest = append(rest, line...)
	}
	var total atomic.Int64
	var g errgroup.Group
	g.SetLimit(8)
	for i := range agents {
		g.Go(func() error {
			id := fsstore.NewID()
			files := layout.Agent(id)
			first := tmpl.Clone()
			first.ID, first.Name = id, fmt.Sprintf("worker-%d", i)
			data, err := json.Marshal(first)
			if err != nil {
				return err
			}
			line, err := fsstore.EncodeEvent(fsstore.Event{Seq: 1, Time: t0, Type: fsstore.EvCreated, Data: data})
			if err != nil {
				return err
			}
			snap := cur.Clone()
			snap.ID, snap.Name = id, first.Name
			sdata, err := fsstore.EncodeSession(snap)
			if err != nil {
				return err
			}
			inbox := files.Inbox()
			for _, d := range []string{files.Dir, inbox.Dir, inbox.Sub(fsstore.InboxTmp), inbox.Sub(fsstore.InboxNew), inbox.Sub(fsstore.InboxCur)} {
				if err := os.Mkdir(d, 0o700); err != nil {
					return err
				}
			}
			log := append(line, rest...)
			if err := os.WriteFile(files.Events(), log, 0o600); err != nil {
				return err
			}
			total.Add(int64(len(log) + len(sdata)))
			return os.WriteFile(files.Session(), sdata, 0o600)
		})
	}
	return total.Load(), g.Wait()
}

// The daemon: the real binary.

type benchDaemon struct {
	cmd  *exec.Cmd
	home string
	done chan error
}

// startBenchDaemon starts `substrat daemon run` on home and waits until it
// answers, that is until its recovery is done.
func startBenchDaemon(ctx context.Context, exe, home string, timeout time.Duration) (*benchDaemon, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(home, "bench-daemon.out"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(exe, "daemon", "run", "--home", home)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "SUBSTRAT_HOME="+home)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &benchDaemon{cmd: cmd, home: home, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	deadline := time.Now().Add(timeout)
	for {
		c, err := rpc.Dial(ctx, fsstore.Layout{Home: home}.Socket())
		if err == nil {
			var st supervisor.StatusResult
			err = c.Call(ctx, "daemon.status", nil, &st)
			c.Close()
			if err == nil {
				return d, nil
			}
		}
		select {
		case err := <-d.done:
			d.done <- err
			data, _ := os.ReadFile(filepath.Join(home, "bench-daemon.out"))
			return nil, fmt.Errorf("the daemon exited at start (%v): %s", err, strings.TrimSpace(string(data)))
		case <-ctx.Done():
			d.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.kill()
			return nil, fmt.Errorf("the daemon did not answer within %s", timeout)
		}
	}
}

func (d *benchDaemon) pid() int { return d.cmd.Process.Pid }

func (d *benchDaemon) call(ctx context.Context, method string, params, result any) error {
	c, err := rpc.Dial(ctx, fsstore.Layout{Home: d.home}.Socket())
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(ctx, method, params, result)
}

// stop asks the daemon to stop and waits for it; it is killed if it does
// not exit in time.
func (d *benchDaemon) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.call(ctx, "daemon.stop", nil, nil)
	select {
	case err := <-d.done:
		return err
	case <-time.After(60 * time.Second):
		d.kill()
		return fmt.Errorf("the daemon did not stop within 60 s; killed")
	}
}

func (d *benchDaemon) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// daemonLatency measures, on a real daemon, the round trip of `agent send`
// waiting for the turn, and how long a hand edit of session.json takes to
// show in `agent inspect`.
func (b *benchRun) daemonLatency() error {
	home := filepath.Join(b.dir, "daemon")
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 60*time.Second)
	if err != nil {
		return err
	}
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	var info supervisor.AgentInfo
	if err := d.call(b.ctx, "agent.create", supervisor.CreateParams{Name: "echo", Provider: "script",
		Instructions: benchInstructions}, &info); err != nil {
		return err
	}
	send := func(i int) (time.Duration, error) {
		t := time.Now()
		c, err := rpc.Dial(b.ctx, fsstore.Layout{Home: home}.Socket())
		if err != nil {
			return 0, err
		}
		defer c.Close()
		var res supervisor.SendResult
		err = c.Stream(b.ctx, "agent.send", map[string]any{"ref": "echo", "text": fmt.Sprintf("ping %d", i), "wait": true},
			func(json.RawMessage) error { return nil }, &res)
		if err == nil && res.Failed != "" {
			err = fmt.Errorf("turn failed: %s", res.Failed)
		}
		return time.Since(t), err
	}
	for i := range 3 { // warm-up
		if _, err := send(-i); err != nil {
			return fmt.Errorf("agent send: %w", err)
		}
	}
	var lat []time.Duration
	for i := range b.cfg.RPCSamples {
		dt, err := send(i)
		if err != nil {
			return fmt.Errorf("agent send: %w", err)
		}
		lat = append(lat, dt)
	}
	b.res.RPC = latencies(lat)
	b.progress("daemon: agent send round trip p50 %.1f ms, p99 %.1f ms (n=%d)", b.res.RPC.P50MS, b.res.RPC.P99MS, b.res.RPC.N)

	b.res.HandEdit, err = b.handEdits(home, info)
	if err != nil {
		return fmt.Errorf("hand edit: %w", err)
	}
	if b.res.HandEdit.NA != "" {
		b.progress("daemon: hand edit: %s", b.res.HandEdit.NA)
	} else {
		b.progress("daemon: hand edit visible p50 %.1f ms, p99 %.1f ms (n=%d)", b.res.HandEdit.P50MS, b.res.HandEdit.P99MS, b.res.HandEdit.N)
	}
	err = d.stop()
	d = nil
	return err
}

// handEdits edits the agent's session.json as a person would (write a copy
// elsewhere, mv it over session.json) and polls agent.inspect until the
// change shows. If the first edit does not show within EditProbe, no
// watcher adopts hand edits: the figure is n/a.
func (b *benchRun) handEdits(home string, info supervisor.AgentInfo) (benchLatency, error) {
	c, err := rpc.Dial(b.ctx, fsstore.Layout{Home: home}.Socket())
	if err != nil {
		return benchLatency{}, err
	}
	defer c.Close()
	path := fsstore.AgentFiles{Dir: info.Dir}.Session()
	tmp := filepath.Join(b.dir, "session.json.edit")
	edit := func(i int, timeout time.Duration) (time.Duration, bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, false, err
		}
		sess, err := fsstore.DecodeSession(data)
		if err != nil {
			return 0, false, err
		}
		want := fmt.Sprintf("%s (hand edit %d)", benchInstructions, i)
		sess.Instructions = want
		out, err := fsstore.EncodeSession(sess)
		if err != nil {
			return 0, false, err
		}
		if err := os.WriteFile(tmp, out, 0o600); err != nil {
			return 0, false, err
		}
		t := time.Now()
		if err := os.Rename(tmp, path); err != nil {
			return 0, false, err
		}
		for time.Since(t) < timeout {
			var res supervisor.InspectResult
			if err := c.Call(b.ctx, "agent.inspect", map[string]string{"ref": info.ID}, &res); err != nil {
				return 0, false, err
			}
			if res.Session != nil && res.Session.Instructions == want {
				return time.Since(t), true, nil
			}
			time.Sleep(500 * time.Microsecond)
		}
		return 0, false, nil
	}
	dt, ok, err := edit(0, b.cfg.EditProbe)
	if err != nil || !ok {
		return benchLatency{NA: handEditNA}, err
	}
	lat := []time.Duration{dt}
	for i := 1; i < b.cfg.EditSamples; i++ {
		time.Sleep(20 * time.Millisecond) // let the daemon settle (edited event, snapshot)
		dt, ok, err := edit(i, 5*time.Second)
		if err != nil {
			return benchLatency{}, err
		}
		if !ok {
			dt = 5 * time.Second // counted as the timeout
		}
		lat = append(lat, dt)
	}
	return latencies(lat), nil
}

func latencies(ds []time.Duration) benchLatency {
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[min(max(i, 0), len(ds)-1)])
	}
	return benchLatency{N: len(ds), P50MS: q(0.50), P99MS: q(0.99), MaxMS: ms(ds[len(ds)-1])}
}

// rss starts the real daemon on a fixture home and reads its resident set
// once its recovery is done and it has been idle a moment.
func (b *benchRun) rss(home string, agents int) error {
	t := time.Now()
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 5*time.Minute)
	if err != nil {
		return err
	}
	start := time.Since(t)
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	var st supervisor.StatusResult
	if err := d.call(b.ctx, "daemon.status", nil, &st); err != nil {
		return err
	}
	if st.Agents != agents {
		return fmt.Errorf("the daemon has %d agents, want %d", st.Agents, agents)
	}
	time.Sleep(b.cfg.Settle)
	rss, peak, err := procMem(d.pid())
	if err != nil {
		return err
	}
	b.res.RSS = benchRSS{Agents: agents, RSSMB: rss, PeakMB: peak, StartMS: ms(start)}
	b.progress("daemon: %d idle agents: RSS %.0f MB (peak %.0f MB), started in %.0f ms", agents, rss, peak, ms(start))
	err = d.stop()
	d = nil
	return err
}

// procMem returns VmRSS and VmHWM of a process, in MB (10^6 bytes).
func procMem(pid int) (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			rss = kb * 1024 / 1e6
		case "VmHWM":
			peak = kb * 1024 / 1e6
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, peak, sc.Err()
}

// The machine.

func machineInfo(dir string) benchMachine {
	m := benchMachine{CPUs: runtime.NumCPU(), Procs: runtime.GOMAXPROCS(0), Go: runtime.Version(), Dir: dir}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				m.MemGiB = math.Round(kb/(1<<20)*10) / 10
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = "Linux " + unix.ByteSliceToString(u.Release[:])
	}
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil {
		m.Size = humanBytes(float64(st.Blocks) * float64(st.Bsize))
		m.Avail = humanBytes(float64(st.Bavail) * float64(st.Bsize))
	}
	// The mount that holds dir: the longest mount point that prefixes it.
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		best := -1
		for _, l := range strings.Split(string(data), "\n") {
			pre, post, ok := strings.Cut(l, " - ")
			if !ok {
				continue
			}
			f, g := strings.Fields(pre), strings.Fields(post)
			if len(f) < 6 || len(g) < 2 {
				continue
			}
			mp := f[4]
			if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
				best = len(mp)
				m.Mount, m.MountOps, m.FSType, m.Device = mp, f[5], g[0], g[1]
			}
		}
	}
	return m
}

func humanBytes(n float64) string {
	for _, u := range []string{"B", "K", "M", "G", "T"} {
		if n < 1024 || u == "T" {
			if n < 10 && u != "B" {
				return fmt.Sprintf("%.1f%s", n, u)
			}
			return fmt.Sprintf("%.0f%s", n, u)
		}
		n /= 1024
	}
	return ""
}

// The targets.

func benchTargets(r *benchResult) []benchTarget {
	var ts []benchTarget
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	for _, op := range r.Ops {
		if !op.Target {
			continue
		}
		ts = append(ts, benchTarget{Name: fmt.Sprintf("%s, %d agents: fsyncs/s over the %d-writer limit", op.Label, r.Workers, r.Workers),
			Value: op.LimitRatioN, Want: ">= 0.8", Verdict: verdict(op.LimitRatioN >= 0.8)})
		t := benchTarget{Name: fmt.Sprintf("%s, %d agents: times faster than SQLite", op.Label, r.Workers), Want: ">= 3"}
		if op.SQLiteN == nil {
			t.Verdict, t.Note = "n/a", "SQLite "+sqliteMissing
		} else {
			t.Value, t.Verdict = op.SQLiteRatioN, verdict(op.SQLiteRatioN >= 3)
		}
		ts = append(ts, t)
	}
	for _, rc := range r.Recovery {
		ts = append(ts, benchTarget{Name: fmt.Sprintf("start-up recovery, %d agents: times the bare read", rc.Agents),
			Value: rc.Ratio, Want: "<= 2", Verdict: verdict(rc.Ratio <= 2)})
	}
	t := benchTarget{Name: "hand edit visible in agent inspect: p99 ms", Want: "<= 100"}
	if r.HandEdit.NA != "" {
		t.Verdict, t.Note = "n/a", r.HandEdit.NA
	} else {
		t.Value, t.Verdict = r.HandEdit.P99MS, verdict(r.HandEdit.P99MS <= 100)
	}
	ts = append(ts, t)
	t = benchTarget{Name: fmt.Sprintf("daemon RSS with %d idle agents: MB", r.RSS.Agents), Value: r.RSS.RSSMB, Want: "<= 150",
		Verdict: verdict(r.RSS.RSSMB <= 150)}
	if r.RSS.Agents < 10000 {
		t.Note = "the target is for 10,000 agents"
	}
	ts = append(ts, t)
	return ts
}

// The report.

// benchTable lays out rows: the first column left-aligned, the others
// right-aligned, two spaces apart.
type benchTable [][]string

func (t *benchTable) add(cells ...string) { *t = append(*t, cells) }

func (t benchTable) write(w io.Writer) {
	var width []int
	for _, row := range t {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range t {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func writeBenchReport(w io.Writer, r *benchResult) {
	m := r.Machine
	mode := "full run"
	if r.Quick {
		mode = "quick run"
	}
	fmt.Fprintf(w, "Substrat bench (%s, %.0f s, %s per throughput figure), %s\n", mode, r.Seconds,
		time.Duration(r.DurationMS)*time.Millisecond, r.StartedAt.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "machine: %d cores", m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(w, " (%s)", m.CPUModel)
	}
	fmt.Fprintf(w, ", %.0f GiB RAM, %s, %s, GOMAXPROCS %d\n", m.MemGiB, m.Kernel, m.Go, m.Procs)
	fmt.Fprintf(w, "disk:    %s, %s on %s (%s), %s, %s free; bench dir %s\n", m.Device, m.FSType, m.Mount, m.MountOps, m.Size, m.Avail, m.Dir)
	fmt.Fprintf(w, "SQLite:  %s\n", r.SQLite)
	fmt.Fprintln(w, "The page cache is warm throughout; every fsync reaches the device.")
	n := r.Workers
	num := func(v float64) string { return thousands(v) }
	x := func(v float64) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", v)
	}
	opt := func(rt *benchRate) string {
		if rt == nil {
			return "-"
		}
		return num(rt.OpsPerSec)
	}

	fmt.Fprintln(w)
	d := r.Disk
	var t benchTable
	t.add("DISK LIMITS", "ops/s", "fsyncs/op", "fsyncs/s")
	t.add(fmt.Sprintf("write+fsync (%d-byte line), 1 writer", d.LineBytes), num(d.Fsync1.OpsPerSec), "1", num(d.Fsync1.FsyncsPerSec))
	t.add(fmt.Sprintf("write+fsync, %d writers on separate files: the limit", n), num(d.FsyncN.OpsPerSec), "1", num(d.FsyncN.FsyncsPerSec))
	t.add("atomic replace (write, fsync, rename, dir fsync), 1 writer", num(d.Replace1.OpsPerSec), "2", num(d.Replace1.FsyncsPerSec))
	t.add(fmt.Sprintf("atomic replace, %d writers in separate dirs", n), num(d.ReplaceN.OpsPerSec), "2", num(d.ReplaceN.FsyncsPerSec))
	t.add("new file (create, write, fsync), 1 writer", num(d.NewFile1.OpsPerSec), "1", num(d.NewFile1.FsyncsPerSec))
	t.add(fmt.Sprintf("new file, %d writers in separate dirs", n), num(d.NewFileN.OpsPerSec), "1", num(d.NewFileN.FsyncsPerSec))
	t.add("create an empty file, no fsync (a namespace operation), 1 writer", num(d.Create1.OpsPerSec), "0", "-")
	t.write(w)

	fmt.Fprintln(w)
	t = nil
	t.add("OPERATIONS, 1 AGENT", "code path", "fsyncs/op", "ops/s", "fsyncs/s", "x limit(1)", "bare ops/s", "x bare", "SQLite ops/s", "x SQLite")
	for _, op := range r.Ops {
		t.add(op.Label, op.CodePath, fmt.Sprintf("%g", op.FsyncsPerOp), num(op.Substrat1.OpsPerSec), num(op.Substrat1.FsyncsPerSec),
			x(op.LimitRatio1), opt(op.Bare1), x(op.BareRatio1), opt(op.SQLite1), x(op.SQLiteRatio1))
	}
	t.write(w)
	fmt.Fprintln(w)
	t = nil
	t.add(fmt.Sprintf("OPERATIONS, %d AGENTS AT ONCE", n), "ops/s", "fsyncs/s", "x limit", ">=0.8", "bare ops/s", "x bare", "SQLite ops/s", "x SQLite", ">=3x")
	for _, op := range r.Ops {
		v1, v2 := "info", "info"
		if op.Target {
			v1 = pass(op.LimitRatioN >= 0.8)
			v2 = "n/a"
			if op.SQLiteN != nil {
				v2 = pass(op.SQLiteRatioN >= 3)
			}
		}
		t.add(op.Label, num(op.SubstratN.OpsPerSec), num(op.SubstratN.FsyncsPerSec), x(op.LimitRatioN), v1,
			opt(op.BareN), x(op.BareRatioN), opt(op.SQLiteN), x(op.SQLiteRatioN), v2)
	}
	t.write(w)
	fmt.Fprintf(w, "  limit: write+fsync with %d writers, in fsyncs/s (limit(1): with 1 writer). bare: the operation's own system calls\n", n)
	fmt.Fprintf(w, "  made directly, without Substrat. SQLite with %d writers: the better of %d connections and one shared connection.\n", n, n)
	if !r.HasSQLite {
		fmt.Fprintf(w, "  SQLite %s.\n", sqliteMissing)
	}

	fmt.Fprintln(w)
	t = nil
	t.add("START-UP RECOVERY (warm cache, best of rounds)", "read every file", "Core.Recover", "x read", "<=2x", "read+list dirs", "x read+list")
	for _, rc := range r.Recovery {
		t.add(fmt.Sprintf("%s agents x %d events (%.0f MB)", thousands(float64(rc.Agents)), rc.Events, float64(rc.Bytes)/1e6),
			fmt.Sprintf("%.0f ms", rc.ReadMS), fmt.Sprintf("%.0f ms", rc.RecoverMS), fmt.Sprintf("%.2f", rc.Ratio), pass(rc.Ratio <= 2),
			fmt.Sprintf("%.0f ms", rc.ListMS), x(ratio(rc.RecoverMS, rc.ListMS)))
	}
	t.write(w)
	fmt.Fprintln(w, "  read: session.json and events.jsonl of every agent; read+list also lists the directories a scan must list")
	fmt.Fprintln(w, "  (the agent dir, inbox/tmp, inbox/new) and stats inbox/cur. Both with as many workers as the scan.")

	fmt.Fprintln(w)
	t = nil
	t.add("DAEMON (the real binary, script provider)", "p50", "p99", "n", "target")
	t.add("agent send, waiting for the turn (RPC round trip)", fmt.Sprintf("%.1f ms", r.RPC.P50MS), fmt.Sprintf("%.1f ms", r.RPC.P99MS),
		strconv.Itoa(r.RPC.N), "-")
	if r.HandEdit.NA != "" {
		t.add("hand edit of session.json -> visible in agent inspect", r.HandEdit.NA, "", "", "p99 <= 100 ms: n/a")
	} else {
		t.add("hand edit of session.json -> visible in agent inspect", fmt.Sprintf("%.1f ms", r.HandEdit.P50MS),
			fmt.Sprintf("%.1f ms", r.HandEdit.P99MS), strconv.Itoa(r.HandEdit.N), "p99 <= 100 ms: "+pass(r.HandEdit.P99MS <= 100))
	}
	t.write(w)
	fmt.Fprintf(w, "RSS with %s idle agents, after recovery: %.0f MB (peak %.0f MB); target <= 150 MB: %s\n",
		thousands(float64(r.RSS.Agents)), r.RSS.RSSMB, r.RSS.PeakMB, pass(r.RSS.RSSMB <= 150))
	fmt.Fprintf(w, "daemon start with %s agents, until it answers: %.0f ms\n", thousands(float64(r.RSS.Agents)), r.RSS.StartMS)

	counts := map[string]int{}
	for _, t := range r.Targets {
		counts[t.Verdict]++
	}
	fmt.Fprintf(w, "\nTARGETS: %d PASS, %d MISS, %d n/a\n", counts["PASS"], counts["MISS"], counts["n/a"])
	for _, t := range r.Targets {
		line := fmt.Sprintf("  %-4s %s", t.Verdict, t.Name)
		if t.Verdict != "n/a" {
			line += fmt.Sprintf(" = %.2f (want %s)", t.Value, t.Want)
		}
		if t.Note != "" {
			line += ": " + t.Note
		}
		fmt.Fprintln(w, line)
	}
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
