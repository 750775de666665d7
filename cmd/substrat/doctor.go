package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon/doctor"
)

// DoctorCmd checks what the daemon needs, before the first turn fails.
type DoctorCmd struct{}

// Run runs the checks in the daemon when it runs (its PATH and
// environment), else here, and prints one line per check. It fails (exit
// 1) if a check failed.
func (c *DoctorCmd) Run(g *Globals) error {
	ctx := context.Background()
	var where string
	rep, err := call(g, api.DaemonDoctor, struct{}{})
	var ee *exitError
	switch {
	case err == nil:
		where = fmt.Sprintf("checked in the daemon (pid %d) on %s: its PATH and environment", rep.Pid, g.Home)
	case errors.As(err, &ee) && ee.code == 3:
		in := doctor.Input{Home: g.Home, Where: "cli"}
		if err := countAgents(ctx, g.Home, &in); err != nil {
			return err
		}
		rep.Checks = doctor.Run(ctx, in)
		where = "the daemon is not running on " + g.Home + ": checked this environment, which 'substrat daemon start' hands on to it"
	default:
		return err
	}
	failed := 0
	for _, ch := range rep.Checks {
		if ch.Status == api.DoctorFail {
			failed++
		}
	}
	if g.JSON {
		if err := printJSON(rep.Checks); err != nil {
			return err
		}
	} else {
		printDoctor(where, rep.Checks)
	}
	if failed > 0 {
		return &exitError{code: 1, msg: plural(failed, "check") + " failed", hint: "fix what the FAIL lines say, then run 'substrat doctor' again"}
	}
	return nil
}

// countAgents counts the live agents of the home by provider, from the
// files (a scan that changes nothing on disk).
func countAgents(ctx context.Context, home string, in *doctor.Input) error {
	if _, err := os.Stat(fsstore.Layout{Home: home}.AgentsDir()); err != nil {
		return nil // no agents yet
	}
	st, err := fsstore.Open(home, fsstore.Options{})
	if err != nil {
		return err
	}
	res, err := st.Scan(ctx, fsstore.ScanOptions{})
	if err != nil {
		return err
	}
	for _, a := range res.Agents {
		if s := a.Session(); s.AgentState != fsstore.AgentTerminated {
			in.Count(s.Provider, s.Workspace)
			in.CountExecutor(s.Executor)
		}
	}
	return nil
}

// printDoctor prints one line per check: its status, what was checked,
// and what to do.
func printDoctor(where string, checks []api.DoctorCheck) {
	fmt.Println(termtext.Lines(where))
	counts := map[string]int{}
	for _, ch := range checks {
		counts[ch.Status]++
		line := fmt.Sprintf("%-4s  %-16s  %s", ch.Status, ch.Check, ch.Detail)
		if ch.Hint != "" {
			line += "; fix: " + ch.Hint
		}
		fmt.Println(termtext.Lines(oneLine(line, 1000)))
	}
	fmt.Printf("%d ok, %d warn, %d FAIL\n", counts[api.DoctorOK], counts[api.DoctorWarn], counts[api.DoctorFail])
}
