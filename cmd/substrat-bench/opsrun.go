package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// contender is one way to run an operation for a figure: bare system
// calls, Substrat, its no-fsync ceiling, or SQLite. run measures slice i
// of its figure, which is added up in out.
type contender struct {
	what string
	out  *benchRate
	run  func(i int) (benchRate, error)
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
			cs := b.contenders(s, row, workers, per, slice)
			if err := runRounds(cs, rounds); err != nil {
				return err
			}
			for _, c := range cs {
				if c.out.Seconds > 0 {
					c.out.OpsPerSec = float64(c.out.Ops) / c.out.Seconds
				}
				c.out.FsyncsPerSec = c.out.OpsPerSec * fsyncs
				b.progress("%s %9.0f ops/s", c.what, c.out.OpsPerSec)
			}
			if s.name == "append" {
				appendRate[workers] = row.Substrat1.OpsPerSec
				if workers > 1 {
					appendRate[workers] = row.SubstratN.OpsPerSec
				}
			}
		}
		row.ratios(b.res.Disk)
		b.res.Ops = append(b.res.Ops, row)
	}
	return nil
}

// runRounds runs every contender's slices, in alternating order.
func runRounds(cs []contender, rounds int) error {
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
	return nil
}

// contenders are the ways operation s runs with workers at once, each
// writing into its figure of row: bare (if it has a bare form), Substrat,
// with many workers its no-fsync ceiling, and SQLite (for a target).
func (b *benchRun) contenders(s *benchOpSpec, row *benchOp, workers, per int, slice time.Duration) []contender {
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
		var r benchRate
		err := b.profiled(fmt.Sprintf("substrat-%s-%d-%d", s.name, workers, i), func() (err error) {
			r, err = b.measureStore(s, fsstore.OS{}, fmt.Sprintf("%s-%d-%d", s.name, workers, i), workers, per, slice)
			return err
		})
		return r, err
	}})
	if workers > 1 && s.target {
		row.CeilingN = &benchRate{}
		cs = append(cs, contender{fmt.Sprintf("ceiling:  %-42s %2d agents, no fsync", s.label, workers), row.CeilingN, func(i int) (benchRate, error) {
			return b.measureStore(s, noSyncFS{fsstore.OS{}}, fmt.Sprintf("ceiling-%s-%d-%d", s.name, workers, i), workers, per, slice)
		}})
	}
	if sqlBackend != nil && s.target {
		// With many writers, both a connection each and one shared
		// connection; the better one counts.
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
	return cs
}

// measureStore measures operation s through Substrat on fsys, in a home
// of its own named name, removed after.
func (b *benchRun) measureStore(s *benchOpSpec, fsys fsstore.FS, name string, workers, per int, slice time.Duration) (benchRate, error) {
	home := filepath.Join(b.dir, "ops", name)
	defer b.cleanup(home)
	f, done, err := s.setup(b, home, fsys, workers, per)
	if err != nil {
		return benchRate{}, err
	}
	defer done()
	return b.measure(workers, slice, f)
}

// ratios sets row's ratios from its figures and the disk's limits.
func (row *benchOp) ratios(disk benchDisk) {
	for _, r := range []*benchRate{row.SQLite1, row.SQLiteN, row.SQLiteNConns, row.SQLiteNSerial, row.CeilingN} {
		if r != nil {
			r.FsyncsPerSec = 0 // SQLite's fsyncs are its own; the ceiling makes none
		}
	}
	row.LimitRatio1 = ratio(row.Substrat1.FsyncsPerSec, disk.Fsync1.OpsPerSec)
	row.LimitRatioN = ratio(row.SubstratN.FsyncsPerSec, disk.FsyncN.OpsPerSec)
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
		if row.CeilingN != nil {
			row.CeilingSQLiteRatioN = ratio(row.CeilingN.OpsPerSec, row.SQLiteN.OpsPerSec)
		}
	}
}
