package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
	"github.com/substrat/substrat/supervisor"
	"golang.org/x/sync/errgroup"
)

// benchOpSpec describes one of Substrat's operations.
type benchOpSpec struct {
	name, label, path string
	target            bool
	prepared          bool // works on messages prepared in advance
	// setup prepares a home for workers workers (each with perWorker
	// prepared messages if prepared) and returns the factory and a
	// cleanup.
	setup func(b *benchRun, home string, fsys fsstore.FS, workers, perWorker int) (benchFactory, func(), error)
	// check, if set, verifies after a calibration of ops operations on
	// one worker that they did what they should.
	check func(ops int) error
}

func benchProviders() *provider.Registry { return provider.NewRegistry(script.New()) }

// newBenchCore opens a store and a core on home, recovered (empty) as the
// daemon does. The default pool holds a session for every worker.
func (b *benchRun) newBenchCore(home string, fsys fsstore.FS) (*fsstore.Store, *supervisor.Core, func(), error) {
	st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
	if err != nil {
		return nil, nil, nil, err
	}
	core := supervisor.New(supervisor.Config{Store: st, Providers: benchProviders(),
		Pools: map[string]int{supervisor.DefaultPool: b.cfg.Workers + 8}})
	if _, err := core.Recover(b.ctx, false); err != nil {
		return nil, nil, nil, err
	}
	return st, core, func() { core.Shutdown(context.Background(), 10*time.Second) }, nil
}

// benchAgents creates n root agents through the core.
func benchAgents(core *supervisor.Core, n int) ([]string, error) {
	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range ids {
		g.Go(func() error {
			info, err := core.CreateAgent(api.CreateParams{Name: fmt.Sprintf("agent-%d", i), Provider: "script",
				Instructions: benchInstructions})
			ids[i] = info.ID
			return err
		})
	}
	return ids, g.Wait()
}

// storeAgents creates n agents through fsstore.
func storeAgents(st *fsstore.Store, n int) ([]*fsstore.Agent, error) {
	as := make([]*fsstore.Agent, n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range as {
		g.Go(func() error {
			a, err := st.CreateAgent(&fsstore.Session{Name: fmt.Sprintf("agent-%d", i), Provider: "script", Instructions: benchInstructions})
			as[i] = a
			return err
		})
	}
	if err := g.Wait(); err != nil {
		for _, a := range as {
			if a != nil {
				a.Close()
			}
		}
		return nil, err
	}
	return as, nil
}

func closeAgents(as []*fsstore.Agent) func() {
	return func() {
		for _, a := range as {
			a.Close()
		}
	}
}

func (b *benchRun) opSpecs() []*benchOpSpec {
	var turnCore *supervisor.Core
	var turnID string
	return []*benchOpSpec{{
		name: "create", label: "create agent", path: "Core.CreateAgent", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			return func(w int) (func() error, func(), error) {
				i := 0
				return func() error {
					i++
					_, err := core.CreateAgent(api.CreateParams{Name: fmt.Sprintf("w%d-%d", w, i), Provider: "script",
						Instructions: benchInstructions})
					return err
				}, nil, nil
			}, done, nil
		},
	}, {
		name: "send", label: "send message, until acknowledged", path: "Core.Send", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			ids, err := benchAgents(core, workers)
			if err != nil {
				done()
				return nil, nil, err
			}
			return func(w int) (func() error, func(), error) {
				return func() error {
					_, err := core.Send(api.SendParams{To: ids[w], Text: benchText})
					return err
				}, nil, nil
			}, done, nil
		},
	}, {
		name: "append", label: "append event", path: "Agent.Commit", target: true,
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
			if err != nil {
				return nil, nil, err
			}
			as, err := storeAgents(st, workers)
			if err != nil {
				return nil, nil, err
			}
			ref := fsstore.MessageRef{ID: fsstore.NewID(), To: fsstore.User}
			return func(w int) (func() error, func(), error) {
				return func() error {
					_, err := as[w].Commit(ref)
					return err
				}, nil, nil
			}, closeAgents(as), nil
		},
	}, {
		name: "deliver", label: "deliver message (event, new/ -> cur/)", path: "Agent.Commit(Delivered) + Agent.MarkDelivered", target: true, prepared: true,
		setup: setupDeliver,
	}, {
		name: "turn", label: "full turn: send + turn (script provider)", path: "Core.Send + Core.RunTurn",
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, _ int) (benchFactory, func(), error) {
			_, core, done, err := b.newBenchCore(home, fsys)
			if err != nil {
				return nil, nil, err
			}
			ids, err := benchAgents(core, workers)
			if err != nil {
				done()
				return nil, nil, err
			}
			turnCore, turnID = core, ids[0]
			return func(w int) (func() error, func(), error) {
				return func() error {
					if _, err := core.Send(api.SendParams{To: ids[w], Text: "ping"}); err != nil {
						return err
					}
					return core.RunTurn(b.ctx, ids[w])
				}, nil, nil
			}, done, nil
		},
		check: func(ops int) error {
			info, err := turnCore.Inspect(turnID)
			if err != nil {
				return err
			}
			if int(info.Agent.Counters.Turns) != ops {
				return fmt.Errorf("%d turns ran for %d sends", info.Agent.Counters.Turns, ops)
			}
			return nil
		},
	}}
}

// calibrate runs op a few times on one worker through a counting FS and
// returns the fsyncs of one operation (after a first, warm-up one).
func (b *benchRun) calibrate(s *benchOpSpec) (float64, error) {
	const ops = 6
	var n atomic.Int64
	home := filepath.Join(b.dir, "ops", "calibrate-"+s.name)
	f, done, err := s.setup(b, home, countFS{fsstore.OS{}, &n}, 1, ops)
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(home)
	defer done()
	op, wdone, err := f(0)
	if err != nil {
		return 0, err
	}
	if wdone != nil {
		defer wdone()
	}
	if err := op(); err != nil {
		return 0, err
	}
	n.Store(0)
	for range ops - 1 {
		if err := op(); err != nil {
			return 0, err
		}
	}
	if s.check != nil {
		if err := s.check(ops); err != nil {
			return 0, err
		}
	}
	return float64(n.Load()) / float64(ops-1), nil
}

// cleanup removes a measurement's directory and flushes the file system,
// so that the next measurement does not pay for this one's writes.
func (b *benchRun) cleanup(dir string) {
	os.RemoveAll(dir)
	syncFS(b.dir)
}

// setupDeliver prepares the deliver operation: workers agents with
// perWorker messages each in inbox/new.
func setupDeliver(b *benchRun, home string, fsys fsstore.FS, workers, perWorker int) (benchFactory, func(), error) {
	st, err := fsstore.Open(home, fsstore.Options{FS: fsys})
	if err != nil {
		return nil, nil, err
	}
	as, err := storeAgents(st, workers)
	if err != nil {
		return nil, nil, err
	}
	// The messages to deliver are written without fsync, then
	// flushed once: the fixture is not what is measured.
	ids := make([][]string, workers)
	var g errgroup.Group
	g.SetLimit(8)
	for w, a := range as {
		ids[w] = make([]string, perWorker)
		g.Go(func() error {
			for i := range ids[w] {
				m := &fsstore.Message{From: fsstore.User, FromName: fsstore.User, To: a.ID(), Kind: fsstore.KindMessage, Text: benchText}
				m.ID = fsstore.NewID()
				if err := fsstore.Publish(noSyncFS{fsstore.OS{}}, a.Files().Inbox(), m); err != nil {
					return err
				}
				ids[w][i] = m.ID
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		closeAgents(as)()
		return nil, nil, err
	}
	if err := syncFS(home); err != nil {
		closeAgents(as)()
		return nil, nil, err
	}
	return func(w int) (func() error, func(), error) {
		i := 0
		return func() error {
			if i >= len(ids[w]) {
				return errWorkerDone
			}
			// As a turn delivers: the message_delivered event
			// makes it durable, then the link into cur/ (whose
			// fsync the next snapshot makes).
			batch := ids[w][i : i+1]
			i++
			if _, err := as[w].Commit(fsstore.Delivered{IDs: batch}); err != nil {
				return err
			}
			return as[w].MarkDelivered(batch)
		}, nil, nil
	}, closeAgents(as), nil
}
