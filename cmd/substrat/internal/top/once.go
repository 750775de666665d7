package top

import (
	"context"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// Once is one look at the daemon, for a pipe or a script: what the full
// screen view would show of the whole tree, without the detail pane.
type Once struct {
	Snapshot
	Recovery *api.Report `json:"recovery,omitempty"`
}

// ReadOnce reads a snapshot and the last recovery's report.
func ReadOnce(ctx context.Context, src Source) (Once, error) {
	s, err := ReadSnapshot(ctx, src)
	if err != nil {
		return Once{}, err
	}
	o := Once{Snapshot: s}
	if r, err := src.Recovery(ctx); err == nil {
		o.Recovery = &r
	}
	return o, nil
}

// Text renders o as the view's header and tree, width cells wide, every
// agent on a line and nothing folded.
func (o Once) Text(width int, noColor bool, now time.Time) string {
	m := New(context.Background(), nil, Options{NoColor: noColor, Now: func() time.Time { return now }})
	m.width, m.up = width, true
	m.snap, m.have, m.recovery = o.Snapshot, true, o.Recovery
	m.tree = newTree(o.Agents)
	m.rows = m.tree.rows(nil, "")
	m.height = len(m.rows) + 4
	lines := append(m.header(), m.columns())
	c := m.cols()
	for _, r := range m.rows {
		lines = append(lines, m.rowLine(r, c))
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(clip(l, width), " ")
	}
	return strings.Join(lines, "\n") + "\n"
}
