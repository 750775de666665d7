package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
)

// Run runs the bench and prints the results.
func (c *BenchCmd) Run() error {
	cfg := defaultBenchConfig(c.Quick)
	if c.Duration > 0 {
		cfg.Duration = c.Duration
	}
	cfg.ProfileDir = c.Profile
	cfg.CLIDir = c.CLIDir
	if c.CLITurns != nil {
		cfg.CLITurns = *c.CLITurns
	}
	cfg.Exe = c.Daemon
	if c.Procs > 0 {
		// With 64 goroutines blocked in fsync, a P stays with each until
		// the runtime hands it off; with as many Ps as cores (2 here),
		// that, not the disk, bounds the rate of bare and Substrat alike.
		runtime.GOMAXPROCS(c.Procs)
	}
	if cfg.Exe == "" {
		exe, err := daemonBinary()
		if err != nil {
			return err
		}
		cfg.Exe = exe
	}
	parent := c.Dir
	if parent == "" {
		parent = filepath.Dir(c.Home)
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
		if c.JSON {
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
