package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// AgentLimitsCmd shows or changes an agent's resource limits.
type AgentLimitsCmd struct {
	Ref       string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Memory    string `help:"Memory of its processes together: 512M, 2G; 'none', or 'default' for config.json's." placeholder:"SIZE"`
	Pids      string `help:"How many processes (and threads) it may run at once; 'none' or 'default'." placeholder:"N"`
	CPUWeight string `name:"cpu-weight" help:"Its share of the CPU, 1 to 10000 (100 is an ordinary process's); 'none' or 'default'." placeholder:"W"`
}

// Run sets the limits given and prints them; with no flag it prints
// them.
func (c *AgentLimitsCmd) Run(g *Globals) error {
	p := api.LimitsParams{Ref: c.Ref}
	var err error
	if p.MemoryBytes, err = limitFlag("--memory", c.Memory, fsstore.ParseBytes); err != nil {
		return err
	}
	if p.Pids, err = limitFlag("--pids", c.Pids, parseCount); err != nil {
		return err
	}
	if p.CPUWeight, err = limitFlag("--cpu-weight", c.CPUWeight, parseCount); err != nil {
		return err
	}
	if p.MemoryBytes != nil || p.Pids != nil || p.CPUWeight != nil {
		if _, err := call(g, api.AgentLimits, p); err != nil {
			return err
		}
	}
	res, err := call(g, api.AgentInspect, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	var l fsstore.Limits
	if res.Session != nil && res.Session.Limits != nil {
		l = *res.Session.Limits
	}
	if g.JSON {
		return printJSON(l)
	}
	fmt.Printf("%s: %s\n", res.Agent.Path, l)
	return nil
}

// limitFlag reads one limit flag: nil if not given, 0 for "default".
func limitFlag(name, v string, parse func(string) (int64, error)) (*int64, error) {
	if v == "" {
		return nil, nil
	}
	var n int64
	if !strings.EqualFold(v, "default") {
		var err error
		if n, err = parse(v); err != nil {
			return nil, &exitError{code: 2, msg: fmt.Sprintf("%s: %v", name, err), hint: "sizes are like 512M or 2G; counts are numbers; 'none' is no limit"}
		}
	}
	return &n, nil
}

// parseCount reads a positive number, or "none" (fsstore.NoLimit).
func parseCount(s string) (int64, error) {
	if strings.EqualFold(s, "none") || strings.EqualFold(s, "max") {
		return fsstore.NoLimit, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive number (or none)", s)
	}
	return n, nil
}

// createLimits are the limits of agent create's flags, or nil.
func createLimits(memory, pids, weight string) (*fsstore.Limits, error) {
	var l fsstore.Limits
	for _, f := range []struct {
		name, v string
		to      *int64
		parse   func(string) (int64, error)
	}{{"--memory", memory, &l.MemoryBytes, fsstore.ParseBytes}, {"--pids", pids, &l.Pids, parseCount}, {"--cpu-weight", weight, &l.CPUWeight, parseCount}} {
		n, err := limitFlag(f.name, f.v, f.parse)
		if err != nil {
			return nil, err
		}
		if n != nil {
			*f.to = *n
		}
	}
	if l.IsZero() {
		return nil, nil
	}
	return &l, nil
}
