package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// BenchCmd runs substrat-bench, the benchmark program (make bench builds
// it beside bin/substrat): the disk's own limits, Substrat and SQLite in
// one run. It is a program of its own so that the daemon's binary carries
// no SQL engine and no measuring code.
type BenchCmd struct {
	Args []string `arg:"" optional:"" passthrough:"" help:"Arguments of substrat-bench (--quick, --json, --keep...; substrat bench -- --help lists them)."`
}

// Run replaces this process with substrat-bench, passing --home, --daemon
// (this binary) and --json first and the user's arguments last, so that
// theirs win.
func (c *BenchCmd) Run(g *Globals) error {
	path, err := benchBinary()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{path, "--home", g.Home, "--daemon", self}
	if g.JSON {
		args = append(args, "--json")
	}
	if len(c.Args) > 0 && c.Args[0] == "--" {
		c.Args = c.Args[1:]
	}
	args = append(args, c.Args...)
	return syscall.Exec(path, args, os.Environ())
}

// benchBinary finds substrat-bench beside this binary, or in PATH.
func benchBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(exe), "substrat-bench")
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() {
			return beside, nil
		}
	}
	if path, err := exec.LookPath("substrat-bench"); err == nil {
		return path, nil
	}
	return "", fail("substrat-bench is not installed beside substrat or in PATH", "run 'make bench' (it builds both into bin/)")
}
