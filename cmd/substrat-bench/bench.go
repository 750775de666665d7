package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/substrat/substrat/fsstore"
)

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
	CLITurns    int           // turns of each agent CLI, bare and through Substrat (0: none)
	CLIDir      string        // where the CLIs are (default: the repository's .tools, else PATH)
	ParkAgents  int           // agents the parking phase parks at one reset (0: none; park.go)
	Exe         string        // the substrat binary the daemon runs from
	ProfileDir  string
	Scale       []int // tree sizes of the scale phase (scale.go)
}

func defaultBenchConfig(quick bool) benchConfig {
	cfg := defaultBenchSizes(quick)
	cfg.Scale = scaleSizes(quick)
	return cfg
}

func defaultBenchSizes(quick bool) benchConfig {
	if quick {
		return benchConfig{Quick: true, Duration: 300 * time.Millisecond, Workers: 64, Recovery: []int{1000}, Events: 100,
			Rounds: 2, RPCSamples: 40, EditSamples: 20, EditProbe: 2 * time.Second, Settle: 300 * time.Millisecond, MaxPrepared: 3000, OpRounds: 1, CLITurns: 3, ParkAgents: 200}
	}
	return benchConfig{Duration: 2 * time.Second, Workers: 64, Recovery: []int{1000, 10000}, Events: 100,
		Rounds: 3, RPCSamples: 200, EditSamples: 100, EditProbe: 5 * time.Second, Settle: time.Second, MaxPrepared: 20000, OpRounds: 2, CLITurns: 10, ParkAgents: 1000}
}

// sqlBackend opens a fresh SQLite database at path with at most conns
// connections (sqlite.go sets it).
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

	// CeilingN is the same operation through Substrat with N agents and
	// every fsync and syncfs made a no-op: the most that any batching of
	// fsyncs could reach with this on-disk format on this file system
	// (what is left is the names created, the writes and the CPU).
	// CeilingSQLiteRatioN is it over SQLiteN.
	CeilingN            *benchRate `json:"ceiling_n,omitempty"`
	CeilingSQLiteRatioN float64    `json:"ceiling_sqlite_ratio_n,omitempty"`
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
	CLIs       []benchCLI      `json:"cli_turns"`
	Scale      []benchScale    `json:"scale"`
	Parking    *benchParking   `json:"parking,omitempty"` // park.go
	Targets    []benchTarget   `json:"targets"`
}

// sqliteMissing is what the SQLite column says when it was not measured.
const sqliteMissing = "not measured"

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
		{"clis", b.cliTurns},
		{"scale", b.scale},
		{"parking", b.parking},
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
