package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/substrat/substrat/supervisor/daemon"
	"github.com/substrat/substrat/supervisor/workspace"

	"github.com/substrat/substrat/fsstore"
)

// FsckCmd verifies the store straight from the directories.
type FsckCmd struct {
	Repair bool `help:"Remove leftovers, cut torn tails, recreate missing inbox directories and rebuild unreadable session.json files from their logs. Refused while a daemon runs."`
}

// FsckResult is fsck's JSON output.
type FsckResult struct {
	Home     string            `json:"home"`
	Agents   int               `json:"agents"`
	Findings []fsstore.Finding `json:"findings"`
	Problems int               `json:"problems"`
	// Workspaces are git workspaces whose clone or repository is gone, or whose root/.git was replaced.
	Workspaces []string `json:"workspace_problems,omitempty"`
	Repair     bool     `json:"repair"`
}

// Run scans and reports. It exits 1 if problems remain.
func (c *FsckCmd) Run(g *Globals) error {
	layout := fsstore.Layout{Home: g.Home}
	held, pid := daemon.Held(layout.Lock())
	if c.Repair {
		// The lock for the whole repair: a daemon started meanwhile
		// refuses, saying why, instead of repairing the same store.
		if err := os.MkdirAll(g.Home, 0o700); err != nil {
			return err
		}
		lock, err := daemon.TryLockAs(layout.Lock(), g.Home, daemon.RoleRepair)
		var running *daemon.RunningError
		if errors.As(err, &running) && running.Role == daemon.RoleRepair {
			return fail(running.Error(), "wait for it to finish")
		}
		if errors.As(err, &running) {
			return fail(fmt.Sprintf("a daemon (pid %d) is running on %s; fsck --repair needs it stopped", running.Pid, g.Home),
				"run 'substrat daemon stop' first, or run fsck without --repair")
		}
		if err != nil {
			return err
		}
		defer lock.Unlock()
		held = false
	}
	store, err := fsstore.Open(g.Home, fsstore.Options{})
	if err != nil {
		return err
	}
	res, err := store.Scan(context.Background(), fsstore.ScanOptions{Repair: c.Repair, Deep: true, RebuildSnapshots: c.Repair})
	if err != nil {
		return err
	}
	out := FsckResult{Home: layout.Home, Agents: len(res.Agents), Findings: res.Findings, Repair: c.Repair}
	if out.Findings == nil {
		out.Findings = []fsstore.Finding{}
	}
	for _, f := range res.Findings {
		if f.Problem() {
			out.Problems++
		}
	}
	out.Workspaces = workspace.NewStore(layout, nil).GitProblems()
	out.Problems += len(out.Workspaces)
	for _, a := range res.Agents {
		a.Close()
	}
	if g.JSON {
		printJSON(out)
	} else {
		if held {
			fmt.Printf("note: a daemon (pid %d) is running; writes in progress may show as torn tails\n", pid)
		}
		for _, f := range out.Findings {
			fmt.Printf("%-16s %s: %s%s\n", f.Kind, f.Path, f.Detail, repaired(f))
			if f.Hint != "" && f.Problem() {
				fmt.Printf("%-16s hint: %s\n", "", f.Hint)
			}
		}
		for _, p := range out.Workspaces {
			fmt.Printf("%-16s %s\n", "workspace", p)
		}
		fmt.Printf("%s, %s, %s\n", plural(out.Agents, "live agent"), plural(len(out.Findings), "finding"), plural(out.Problems, "problem"))
	}
	if out.Problems > 0 {
		hint := "run 'substrat fsck --repair' with the daemon stopped"
		if c.Repair {
			hint = "what remains needs a person: see the findings above and fsstore/doc.go"
		}
		return &exitError{code: 1, msg: fmt.Sprintf("%d problem(s) found in %s", out.Problems, layout.Home), hint: hint}
	}
	return nil
}

// plural returns "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
