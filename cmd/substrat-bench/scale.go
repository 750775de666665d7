package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// benchScale is one size of the scale phase: a real daemon on a tree of
// Agents agents (ten roots, each a tree of ten children per agent).
type benchScale struct {
	Agents   int     `json:"agents"`
	BuildSec float64 `json:"build_s"`
	StartMS  float64 `json:"start_ms"` // daemon start to its first answer, recovery included
	RSSMB    float64 `json:"rss_mb"`   // VmRSS after the measurements
	PeakMB   float64 `json:"peak_mb"`  // VmHWM
	// ListCLIMS is `substrat agent list` (the whole tree, drawn), the
	// process included; ListMS the agent.list call alone, ListBytes its
	// answer.
	ListCLIMS float64 `json:"list_cli_ms"`
	ListMS    float64 `json:"list_ms"`
	ListBytes int     `json:"list_bytes"`
	// PageMS is agent.query of 100 agents of a subtree (agent list
	// lead --limit 100).
	PageMS float64 `json:"page_ms"`
	// TopReadMS is top's whole read at start (paged), TopRefreshMS one of
	// its refreshes: daemon.status and the 50 agents it shows or events
	// touched, with TopRefreshBytes answered.
	TopReadMS       float64 `json:"top_read_ms"`
	TopRefreshMS    float64 `json:"top_refresh_ms"`
	TopRefreshBytes int     `json:"top_refresh_bytes"`
	// CreatePerSec is `substrat agent create` through the CLI, one after
	// another, each waiting for its answer.
	CreatePerSec float64 `json:"create_per_s"`
	Creates      int     `json:"creates"`
}

// scaleSizes are the tree sizes of the scale phase.
func scaleSizes(quick bool) []int {
	if quick {
		return []int{200, 1000}
	}
	return []int{1000, 10000}
}

// scale measures, at each size, a daemon started on a tree built in the
// store: start-up, agent list, top's reads, agent create through the CLI
// and the daemon's memory.
func (b *benchRun) scale() error {
	for _, n := range b.cfg.Scale {
		row, err := b.scaleOne(n)
		if err != nil {
			return fmt.Errorf("%d agents: %w", n, err)
		}
		b.res.Scale = append(b.res.Scale, row)
		b.progress("scale: %d agents: start %.0f ms, agent list %.0f ms (CLI %.0f ms), top refresh %.1f ms (%d bytes), %.0f creates/s, RSS %.0f MB (peak %.0f)",
			n, row.StartMS, row.ListMS, row.ListCLIMS, row.TopRefreshMS, row.TopRefreshBytes, row.CreatePerSec, row.RSSMB, row.PeakMB)
	}
	return nil
}

func (b *benchRun) scaleOne(n int) (benchScale, error) {
	row := benchScale{Agents: n}
	home := filepath.Join(b.dir, fmt.Sprintf("scale-%d", n))
	defer os.RemoveAll(home)
	t := time.Now()
	ids, err := buildTree(home, n)
	if err != nil {
		return row, fmt.Errorf("fixture: %w", err)
	}
	if err := syncFS(home); err != nil {
		return row, err
	}
	row.BuildSec = time.Since(t).Seconds()
	t = time.Now()
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 5*time.Minute)
	if err != nil {
		return row, err
	}
	row.StartMS = ms(time.Since(t))
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	c, err := rpc.Dial(b.ctx, fsstore.Layout{Home: home}.Socket())
	if err != nil {
		return row, err
	}
	defer c.Close()
	rounds := max(b.cfg.Rounds, 3)
	var raw json.RawMessage
	if row.ListMS, err = best(rounds, func() (err error) {
		raw, err = rpc.CallRaw(b.ctx, c, api.AgentList, api.ListParams{})
		return err
	}); err != nil {
		return row, err
	}
	row.ListBytes = len(raw)
	var all []api.AgentInfo
	if err := json.Unmarshal(raw, &all); err != nil || len(all) != n {
		return row, fmt.Errorf("agent.list gave %d agents of %d (%v)", len(all), n, err)
	}
	if row.ListCLIMS, err = best(rounds, func() error {
		cmd := exec.CommandContext(b.ctx, b.cfg.Exe, "agent", "list", "--home", home)
		cmd.Stdout = io.Discard
		return cmd.Run()
	}); err != nil {
		return row, fmt.Errorf("substrat agent list: %w", err)
	}
	if row.PageMS, err = best(rounds, func() (err error) {
		raw, err = rpc.CallRaw(b.ctx, c, api.AgentQuery, api.ListParams{Ref: ids[0], Limit: 100})
		return err
	}); err != nil {
		return row, err
	}
	if row.TopReadMS, err = best(rounds, func() error { return topRead(b.ctx, c) }); err != nil {
		return row, err
	}
	shown := make([]string, 0, 50) // the rows of a screen, and some the events touched
	for i := 0; len(shown) < 50; i += max(n/50, 1) {
		shown = append(shown, ids[i%n])
	}
	var st json.RawMessage
	if row.TopRefreshMS, err = best(rounds*10, func() (err error) {
		if st, err = rpc.CallRaw(b.ctx, c, api.DaemonStatus, struct{}{}); err != nil {
			return err
		}
		raw, err = rpc.CallRaw(b.ctx, c, api.AgentQuery, api.ListParams{IDs: shown})
		return err
	}); err != nil {
		return row, err
	}
	row.TopRefreshBytes = len(st) + len(raw)
	if row.Creates, row.CreatePerSec, err = b.cliCreates(home, ids[0]); err != nil {
		return row, err
	}
	if row.RSSMB, row.PeakMB, err = procMem(d.pid()); err != nil {
		return row, err
	}
	err = d.stop()
	d = nil
	return row, err
}

// topRead is top's read at its start: the status, then every agent a
// page of 2,000 at a time.
func topRead(ctx context.Context, c *rpc.Client) error {
	if _, err := rpc.Call(ctx, c, api.DaemonStatus, struct{}{}); err != nil {
		return err
	}
	p := api.ListParams{Limit: 2000}
	for {
		page, err := rpc.Call(ctx, c, api.AgentQuery, p)
		if err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		p.After = page.Next
	}
}

// cliCreates runs `substrat agent create` one after another under the
// first root for the figures' duration (at least 10), and returns how
// many and their rate.
func (b *benchRun) cliCreates(home, parent string) (int, float64, error) {
	t := time.Now()
	n := 0
	for n < 10 || time.Since(t) < b.cfg.Duration {
		cmd := exec.CommandContext(b.ctx, b.cfg.Exe, "agent", "create", fmt.Sprintf("cli-%d", n), "--parent", parent, "--home", home)
		if out, err := cmd.CombinedOutput(); err != nil {
			return n, 0, fmt.Errorf("substrat agent create: %v: %s", err, out)
		}
		n++
	}
	return n, float64(n) / time.Since(t).Seconds(), nil
}

// best runs f rounds times and returns its fastest time, in ms.
func best(rounds int, f func() error) (float64, error) {
	var all []float64
	for range rounds {
		t := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		all = append(all, ms(time.Since(t)))
	}
	return slices.Min(all), nil
}

// buildTree writes a home of n idle agents, directly and without fsync:
// ten roots, each the top of a tree where agent i's parent is agent
// (i-10)/10 of the same numbering, every agent with one turn counted.
// It returns the ids, roots first.
func buildTree(home string, n int) ([]string, error) {
	if _, err := fsstore.Open(home, fsstore.Options{FS: noSyncFS{fsstore.OS{}}}); err != nil {
		return nil, err
	}
	layout := fsstore.Layout{Home: home}
	t0 := time.Now().UTC().Add(-time.Hour)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fsstore.NewID()
	}
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			// As agent create leaves it: a scratch directory to work in,
			// the default permissions.
			work := filepath.Join(home, "scratch", ids[i])
			if err := os.MkdirAll(work, 0o700); err != nil {
				return err
			}
			s := &fsstore.Session{Version: fsstore.Version, ID: ids[i], Name: fmt.Sprintf("agent-%d", i), Provider: "script",
				AgentState: fsstore.AgentIdle, SessionState: fsstore.SessionCreated, CreatedAt: t0, UpdatedAt: t0,
				WorkDir: work, Permissions: &fsstore.Permissions{Mode: fsstore.ModeDefault}}
			if i >= 10 {
				s.ParentID = ids[(i-10)/10]
			}
			created, err := json.Marshal(s)
			if err != nil {
				return err
			}
			turn, _ := json.Marshal(fsstore.Counters{Turns: 1, InputTokens: 1234, OutputTokens: 567, CostUSD: 0.0123})
			var log []byte
			cur := (*fsstore.Session)(nil)
			for seq, e := range []fsstore.Event{{Seq: 1, Time: t0, Type: fsstore.EvCreated, Data: created},
				{Seq: 2, Time: t0, Type: fsstore.EvTurn, Data: turn}} {
				line, err := fsstore.EncodeEvent(e)
				if err != nil {
					return err
				}
				log = append(log, line...)
				if cur, err = fsstore.Apply(cur, e); err != nil {
					return fmt.Errorf("event %d: %w", seq+1, err)
				}
			}
			snap, err := fsstore.EncodeSession(cur)
			if err != nil {
				return err
			}
			files := layout.Agent(ids[i])
			inbox := files.Inbox()
			for _, d := range []string{files.Dir, inbox.Dir, inbox.Sub(fsstore.InboxTmp), inbox.Sub(fsstore.InboxNew), inbox.Sub(fsstore.InboxCur)} {
				if err := os.Mkdir(d, 0o700); err != nil {
					return err
				}
			}
			if err := os.WriteFile(files.Events(), log, 0o600); err != nil {
				return err
			}
			return os.WriteFile(files.Session(), snap, 0o600)
		})
	}
	return ids, g.Wait()
}

// writeScaleReport writes the scale phase's table.
func writeScaleReport(w io.Writer, r *benchResult) {
	if len(r.Scale) == 0 {
		return
	}
	fmt.Fprintln(w)
	var t benchTable
	t.add("SCALE (a real daemon on a tree built in the store)", "start", "agent list", "CLI list", "page of 100", "top read", "top refresh", "creates/s (CLI)", "RSS", "peak")
	for _, s := range r.Scale {
		t.add(thousands(float64(s.Agents))+" agents", fmt.Sprintf("%.0f ms", s.StartMS), fmt.Sprintf("%.0f ms", s.ListMS),
			fmt.Sprintf("%.0f ms", s.ListCLIMS), fmt.Sprintf("%.1f ms", s.PageMS), fmt.Sprintf("%.0f ms", s.TopReadMS),
			fmt.Sprintf("%.1f ms, %s", s.TopRefreshMS, humanBytes(float64(s.TopRefreshBytes))), fmt.Sprintf("%.0f", s.CreatePerSec),
			fmt.Sprintf("%.0f MB", s.RSSMB), fmt.Sprintf("%.0f MB", s.PeakMB))
	}
	t.write(w)
	fmt.Fprintln(w, "  agent list: the agent.list call for the whole tree (best of rounds); CLI list: `substrat agent list`, process included.")
	fmt.Fprintln(w, "  top read: its whole read at start (pages of 2,000); top refresh: what it reads per tick (status and 50 agents by id).")
	fmt.Fprintln(w, "  creates/s: `substrat agent create` under a root, one after another. RSS: VmRSS and VmHWM after all of it.")
}
