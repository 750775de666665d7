package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		setup: func(b *benchRun, home string, fsys fsstore.FS, workers, perWorker int) (benchFactory, func(), error) {
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
		},
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

// substratOps measures each operation with 1 agent and with Workers
// agents at once: as bare system calls, through Substrat, and on SQLite,
// back to back so that they see the same machine. With Rounds > 1 each
// figure is split into that many slices, run in alternating order, so that
// neither side always runs in the wake of the other.
func (b *benchRun) substratOps() error {
	n, d := b.cfg.Workers, b.cfg.Duration
	rounds := max(b.cfg.OpRounds, 1)
	slice := d / time.Duration(rounds)
	// An operation on prepared messages (deliver) gets as many as the
	// append rate would use up in a slice, at most MaxPrepared in all
	// (each is a file to create first); a worker that runs out stops, and
	// as they all have the same number they stop at about the same time.
	appendRate := map[int]float64{}
	for _, s := range b.opSpecs() {
		fsyncs, err := b.calibrate(s)
		if err != nil {
			return fmt.Errorf("%s: calibrate: %w", s.label, err)
		}
		row := &benchOp{Name: s.name, Label: s.label, CodePath: s.path, FsyncsPerOp: fsyncs, Target: s.target}
		for _, workers := range []int{1, n} {
			per := 0
			if s.prepared {
				per = min(perWorker(1.2*appendRate[workers], slice, workers), max(b.cfg.MaxPrepared/rounds/workers, 4))
			}
			type contender struct {
				what string
				out  *benchRate
				run  func(i int) (benchRate, error)
			}
			var cs []contender
			if b.bareFactory(s.name, "", 0, 0) != nil {
				r := &benchRate{}
				if workers == 1 {
					row.Bare1 = r
				} else {
					row.BareN = r
				}
				cs = append(cs, contender{fmt.Sprintf("bare:     %-42s %2d writers", s.label, workers), r, func(i int) (benchRate, error) {
					base := filepath.Join(b.dir, "ops", fmt.Sprintf("bare-%s-%d-%d", s.name, workers, i))
					defer b.cleanup(base)
					var r benchRate
					err := b.profiled(fmt.Sprintf("bare-%s-%d-%d", s.name, workers, i), func() (err error) {
						r, err = b.measure(workers, slice, b.bareFactory(s.name, base, workers, per))
						return err
					})
					return r, err
				}})
			}
			sub := &row.Substrat1
			if workers > 1 {
				sub = &row.SubstratN
			}
			cs = append(cs, contender{fmt.Sprintf("substrat: %-42s %2d agents ", s.label, workers), sub, func(i int) (benchRate, error) {
				home := filepath.Join(b.dir, "ops", fmt.Sprintf("%s-%d-%d", s.name, workers, i))
				defer b.cleanup(home)
				f, done, err := s.setup(b, home, fsstore.OS{}, workers, per)
				if err != nil {
					return benchRate{}, err
				}
				defer done()
				var r benchRate
				err = b.profiled(fmt.Sprintf("substrat-%s-%d-%d", s.name, workers, i), func() (err error) {
					r, err = b.measure(workers, slice, f)
					return err
				})
				return r, err
			}})
			if sqlBackend != nil && s.target {
				// With many writers, both a connection each and one
				// shared connection; the better one counts.
				conns := []int{1}
				if workers > 1 {
					conns = []int{workers, 1}
				}
				for _, c := range conns {
					r := &benchRate{}
					switch {
					case workers == 1:
						row.SQLite1 = r
					case c == 1:
						row.SQLiteNSerial = r
					default:
						row.SQLiteNConns = r
					}
					cs = append(cs, contender{fmt.Sprintf("sqlite:   %-42s %2d writers, %d conns", s.label, workers, c), r, func(i int) (benchRate, error) {
						return b.sqliteMeasure(s.name, workers, c, per, slice, i)
					}})
				}
			}
			for i := range rounds {
				order := slices.Clone(cs)
				if i%2 == 1 {
					slices.Reverse(order)
				}
				for _, c := range order {
					r, err := c.run(i)
					if err != nil {
						return fmt.Errorf("%s: %w", strings.Join(strings.Fields(c.what), " "), err)
					}
					c.out.Ops += r.Ops
					c.out.Seconds += r.Seconds
				}
			}
			for _, c := range cs {
				if c.out.Seconds > 0 {
					c.out.OpsPerSec = float64(c.out.Ops) / c.out.Seconds
				}
				c.out.FsyncsPerSec = c.out.OpsPerSec * fsyncs
				b.progress("%s %9.0f ops/s", c.what, c.out.OpsPerSec)
			}
			if s.name == "append" {
				appendRate[workers] = sub.OpsPerSec
			}
		}
		for _, r := range []*benchRate{row.SQLite1, row.SQLiteN, row.SQLiteNConns, row.SQLiteNSerial} {
			if r != nil {
				r.FsyncsPerSec = 0 // SQLite's fsyncs are its own
			}
		}
		row.LimitRatio1 = ratio(row.Substrat1.FsyncsPerSec, b.res.Disk.Fsync1.OpsPerSec)
		row.LimitRatioN = ratio(row.SubstratN.FsyncsPerSec, b.res.Disk.FsyncN.OpsPerSec)
		if row.Bare1 != nil {
			row.BareRatio1 = ratio(row.Substrat1.OpsPerSec, row.Bare1.OpsPerSec)
			row.BareRatioN = ratio(row.SubstratN.OpsPerSec, row.BareN.OpsPerSec)
		}
		if row.SQLite1 != nil {
			row.SQLiteN = row.SQLiteNConns
			if row.SQLiteNSerial.OpsPerSec > row.SQLiteN.OpsPerSec {
				row.SQLiteN = row.SQLiteNSerial
			}
			row.SQLiteRatio1 = ratio(row.Substrat1.OpsPerSec, row.SQLite1.OpsPerSec)
			row.SQLiteRatioN = ratio(row.SubstratN.OpsPerSec, row.SQLiteN.OpsPerSec)
		}
		b.res.Ops = append(b.res.Ops, row)
	}
	return nil
}

// cleanup removes a measurement's directory and flushes the file system,
// so that the next measurement does not pay for this one's writes.
func (b *benchRun) cleanup(dir string) {
	os.RemoveAll(dir)
	syncFS(b.dir)
}
