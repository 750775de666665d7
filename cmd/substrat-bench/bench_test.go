package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchTiny runs every phase of `substrat bench` at a tiny size and
// checks that the report has every row. It asserts nothing about speed:
// this machine is shared and the figures are noise at this size.
func TestBenchTiny(t *testing.T) {
	// The bench starts its daemons from a real substrat binary.
	exe := filepath.Join(t.TempDir(), "substrat")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/substrat/substrat/cmd/substrat").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := benchConfig{Quick: true, Duration: 50 * time.Millisecond, Workers: 4, Recovery: []int{30}, Events: 20,
		Rounds: 1, RPCSamples: 3, EditSamples: 2, EditProbe: 3 * time.Second, MaxPrepared: 200, Exe: exe,
		CLITurns: 1, CLIDir: t.TempDir(), // no CLI there: each is skipped (TestBenchCLIs runs them)
		ParkAgents: 10}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := runBench(ctx, cfg, t.TempDir(), &progress)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	var out bytes.Buffer
	writeBenchReport(&out, res)
	report := out.String()
	for _, row := range []string{
		"machine: ", "disk: ", "SQLite: ",
		"DISK LIMITS", "write+fsync (", "write+fsync, 4 writers", "atomic replace (write, fsync, rename, dir fsync), 1 writer",
		"atomic replace, 4 writers",
		"OPERATIONS, 1 AGENT", "OPERATIONS, 4 AGENTS AT ONCE",
		"create agent", "send message", "deliver message", "append event", "full turn",
		"START-UP RECOVERY", "30 agents x 20 events",
		"agent send, waiting for the turn", "hand edit of session.json", "RSS with 30 idle agents", "daemon start with 30 agents",
		"claude: not installed (no claude in ", "codex: not installed", "gemini: not installed",
		"TARGETS: ", "PARKING: 10 agents",
	} {
		if !strings.Contains(report, row) {
			t.Errorf("the report has no %q row", row)
		}
	}
	if sqlBackend == nil {
		t.Error("SQLite is not built into the bench")
	}
	if len(res.Ops) != 5 || len(res.Recovery) != 1 || res.RPC.N != 3 || res.RSS.Agents != 30 {
		t.Errorf("results: %d ops, %d recovery rows, %d RPC samples, RSS of %d agents", len(res.Ops), len(res.Recovery), res.RPC.N, res.RSS.Agents)
	}
	for _, op := range res.Ops {
		if op.Substrat1.Ops == 0 || op.SubstratN.Ops == 0 || op.FsyncsPerOp == 0 {
			t.Errorf("%s: %+v", op.Name, op)
		}
		if (op.SQLite1 != nil) != (sqlBackend != nil && op.Name != "turn") {
			t.Errorf("%s: SQLite figure present: %v", op.Name, op.SQLite1 != nil)
		}
	}
	if res.HandEdit.NA == "" && res.HandEdit.N != 2 {
		t.Errorf("hand edit: %+v", res.HandEdit)
	}
	if len(res.Targets) == 0 {
		t.Error("no targets")
	}
	// --json prints the same results.
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"disk"`, `"ops"`, `"recovery"`, `"rpc_send"`, `"hand_edit"`, `"rss"`, `"targets"`, `"machine"`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("JSON has no %s", key)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s\nprogress:\n%s", report, progress.String())
	}
}

// TestBenchCLIs runs the CLI TURNS phase for each pinned agent CLI that is
// installed (make tools), with one turn each, and checks its rows. It
// asserts nothing about speed.
func TestBenchCLIs(t *testing.T) {
	exe := os.Getenv("BENCH_SUBSTRAT") // by hand: another daemon's binary
	if exe == "" {
		exe = filepath.Join(t.TempDir(), "substrat")
		if out, err := exec.Command("go", "build", "-o", exe, "github.com/substrat/substrat/cmd/substrat").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	turns := 1
	if n, err := strconv.Atoi(os.Getenv("BENCH_CLI_TURNS")); err == nil {
		turns = n // by hand: more turns, for figures
	}
	cfg := benchConfig{Quick: true, CLITurns: turns, Exe: exe}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := &benchRun{ctx: ctx, cfg: cfg, dir: shortTemp(t), log: &progress, start: time.Now(), res: &benchResult{}}
	if err := b.cliTurns(); err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	var out bytes.Buffer
	writeBenchReport(&out, b.res)
	report := out.String()
	if len(b.res.CLIs) != len(cliProviders) {
		t.Fatalf("%d CLI rows: %+v", len(b.res.CLIs), b.res.CLIs)
	}
	for _, c := range b.res.CLIs {
		switch {
		case strings.HasPrefix(c.Skipped, "not installed"):
			if !strings.Contains(report, c.Name+": not installed") {
				t.Errorf("%s: no line saying it was skipped", c.Name)
			}
		case c.Skipped != "":
			t.Errorf("%s: %s", c.Name, c.Skipped)
		default:
			if c.Turns != turns || c.BareP50MS <= 0 || c.SubstratP50MS <= 0 || c.Ratio <= 0 || c.RSSMB <= 0 || c.BareRSSMB <= 0 {
				t.Errorf("%s: %+v", c.Name, c)
			}
			if !strings.Contains(report, "\n"+c.Name+" ") {
				t.Errorf("the report has no %s row", c.Name)
			}
		}
	}
	t.Logf("report:\n%s\nprogress:\n%s", report, progress.String())
}

// shortTemp is a temporary directory with a short path: the daemon's
// sockets must fit in a Unix socket address.
func shortTemp(t *testing.T) string {
	dir, err := os.MkdirTemp("", "sbb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// BenchmarkRecover times Core.Recover of a home of 1,000 and 10,000
// agents with 100 events each, as `substrat bench` does, next to a bare read
// of the same files, and reports their ratio (the target is at most 2).
// For profiling:
//
//	go test ./cmd/substrat-bench -run '^$' -bench Recover/1k -cpuprofile cpu.out
func BenchmarkRecover(b *testing.B) {
	for _, agents := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%dk", agents/1000), func(b *testing.B) {
			home := filepath.Join(b.TempDir(), "home")
			if _, err := buildFixture(home, agents, 100); err != nil {
				b.Fatal(err)
			}
			run := &benchRun{ctx: context.Background()}
			if _, err := bareRead(home); err != nil { // warm the cache
				b.Fatal(err)
			}
			var read, recov time.Duration
			for b.Loop() {
				runtime.GC()
				t := time.Now()
				if _, err := bareRead(home); err != nil {
					b.Fatal(err)
				}
				read += time.Since(t)
				runtime.GC()
				dt, err := run.recoverOnce(home, agents)
				if err != nil {
					b.Fatal(err)
				}
				recov += dt
			}
			b.ReportMetric(float64(read.Microseconds())/1000/float64(b.N), "read-ms")
			b.ReportMetric(float64(recov.Microseconds())/1000/float64(b.N), "recover-ms")
			b.ReportMetric(float64(recov)/float64(read), "x-read")
		})
	}
}
