// Command substrat-bench measures, in one run and on one file system, the disk's
// own limits (bare write+fsync with 1 and 64 writers, atomic replace),
// Substrat's durable operations through the real code (the supervisor core
// and fsstore) with 1 agent and with 64 agents at once, the same logical
// operations on SQLite, start-up recovery against a bare read of the same
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
//	deliver        Agent.Commit+Mark... 1: the message_delivered event; the link into inbox/cur is
//	                                    fsynced with the next snapshot (new/ is swept later)
//	append event   Agent.Commit         1: events.jsonl
//	full turn      Core.Send+RunTurn    6: send 2; BUSY; the turn's record, delivery and IDLE in one
//	                                    write; inbox/cur; session.json
//
// These are the counts of an operation alone. Creates and sends that run
// at once share them (group commit, fsstore/group.go): a batch makes its
// files durable with one syncfs (or their fsyncs, while syncfs costs
// more), and fsyncs each directory it renamed into once. The fsyncs/s figures of those two still count an
// operation's fsyncs alone: they say how far the operation is from the
// disk's limit, not how many fsyncs reached it.
//
// Each operation is also run as bare system calls (the same creates,
// renames, links and fsyncs made directly with package os), which tells
// Substrat's own overhead from the file system's cost of that pattern.
//
// SQLite (WAL, synchronous=FULL) needs one fsync of the WAL per
// transaction, plus the checkpoints it runs now and then.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/alecthomas/kong"
)

// BenchCmd measures Substrat against this disk's limits and against SQLite.
type BenchCmd struct {
	Home     string        `help:"The Substrat home whose file system is measured (the bench directory goes beside it)." env:"SUBSTRAT_HOME" type:"path"`
	JSON     bool          `name:"json" help:"Print the results as JSON."`
	Dir      string        `help:"Parent of the bench directory (default: next to --home, so on the same file system)." type:"path" placeholder:"DIR"`
	Quick    bool          `help:"Smaller sizes (1,000 agents, shorter runs): about 30 s."`
	Duration time.Duration `help:"How long each throughput figure is measured (default 2s; 300ms with --quick)."`
	Profile  string        `help:"Write a CPU profile of each in-process phase into this directory (go tool pprof)." type:"path" placeholder:"DIR"`
	Keep     bool          `help:"Keep the bench directory instead of removing it."`
	Daemon   string        `help:"The substrat binary the measured daemons run from (default: substrat beside this program, else in PATH)." type:"path" placeholder:"FILE"`
	CLITurns *int          `name:"cli-turns" help:"Turns of each agent CLI (claude, codex, gemini), bare and through Substrat (default 10; 3 with --quick; 0 skips them)." placeholder:"N"`
	CLIDir   string        `name:"cli-dir" help:"Where the agent CLIs are, and only there (default: .tools/npm/node_modules/.bin of the repository around the working directory, else PATH)." type:"path" placeholder:"DIR"`
	Procs    int           `name:"gomaxprocs" help:"Run the in-process measurements (everything but the daemon) with this GOMAXPROCS instead of the Go runtime's default, the number of cores." placeholder:"N"`
}

func main() {
	var c BenchCmd
	kong.Parse(&c, kong.Name("substrat-bench"),
		kong.Description("Measure Substrat against this disk's own limits and against SQLite, in one run (make bench)."))
	if c.Home == "" {
		if home, err := os.UserHomeDir(); err == nil {
			c.Home = filepath.Join(home, ".substrat")
		}
	}
	if err := c.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var be *benchError
		if errors.As(err, &be) && be.hint != "" {
			fmt.Fprintln(os.Stderr, "hint:", be.hint)
		}
		os.Exit(1)
	}
}

// benchError is a failure with a hint for the user.
type benchError struct{ msg, hint string }

func (e *benchError) Error() string { return e.msg }

func fail(msg, hint string) error { return &benchError{msg: msg, hint: hint} }

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// daemonBinary finds the substrat binary the measured daemons run from.
func daemonBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), "substrat")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() {
			return beside, nil
		}
	}
	path, err := exec.LookPath("substrat")
	if err != nil {
		return "", fail("no substrat binary beside substrat-bench or in PATH", "run 'make bench', or pass --daemon FILE")
	}
	return path, nil
}
