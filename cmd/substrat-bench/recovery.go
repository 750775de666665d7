package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
	"golang.org/x/sync/errgroup"
)

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
