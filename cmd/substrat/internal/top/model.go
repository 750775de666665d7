package top

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
)

// How often top retries a daemon that went away (refreshFast), and reads
// the rows on screen and the selected agent again (refreshSlow).
const (
	refreshFast = 500 * time.Millisecond
	refreshSlow = 3 * time.Second
	// detailTail is how many of the selected agent's events are read.
	detailTail = 40
	// streamKeep is how many live lines top keeps per agent.
	streamKeep = 200
	// feedSize bounds the events waiting for the view; beyond it they are
	// counted and dropped (the next snapshot has the states anyway).
	feedSize = 4096
)

// mode is what the keys currently do.
type mode int

const (
	modeTree      mode = iota // move, fold, act
	modeFilter                // typing a filter
	modeSend                  // typing a message
	modeConfirm               // y/n for a destructive action
	modeHelp                  // the full help
	modeAttach                // the selected agent's stream, full screen
	modeInbox                 // the USER inbox
	modeApprovals             // the approval requests that wait, inputs whole
)

// Model is the state of the view. Its zero value is not usable: use New.
type Model struct {
	src    Source
	ctx    context.Context
	feed   chan Event
	lostCh chan error
	now    func() time.Time

	snap      Snapshot
	have      bool // a snapshot arrived
	tree      tree
	rows      []row
	collapsed map[string]bool
	sel       string // the selected agent's id
	top       int    // the first row shown
	apTop     int    // the first line shown of the approval requests

	activity map[string]string   // what each agent is doing now
	stream   map[string][]string // each agent's recent live lines
	detail   Detail
	detailOf string
	detailAt time.Time

	up         bool // the daemon answered the last snapshot
	lost       string
	lostAt     time.Time
	recovery   *api.Report
	recovered  time.Time
	fetching   bool
	full       bool            // read the whole tree at the next tick
	wholeAt    time.Time       // when the last whole read started
	wanted     map[string]bool // agents to read back at the next tick (sync.go)
	needInbox  bool
	needAppr   bool
	visibleAt  time.Time // when the rows on screen were last read
	reads      int       // partial reads made
	readAgents int       // agents they asked for
	fetchedAt  time.Time
	events     int // watch events seen
	dropped    int // events the feed or the daemon dropped

	mode    mode
	input   textinput.Model
	filter  string
	confirm Action
	apSel   int  // the approval request shown
	back    mode // where a confirmation returns to
	flash   string
	flashAt time.Time

	width, height int
	styles        styles
}

// Options configure a Model.
type Options struct {
	NoColor bool
	Now     func() time.Time // the clock; time.Now by default
}

// New returns a model that reads src. Its watch runs until ctx ends.
func New(ctx context.Context, src Source, o Options) *Model {
	in := textinput.New()
	in.CharLimit = 4000
	m := &Model{
		src: src, ctx: ctx, feed: make(chan Event, feedSize), lostCh: make(chan error, 1), now: o.Now,
		collapsed: map[string]bool{}, activity: map[string]string{}, stream: map[string][]string{}, wanted: map[string]bool{},
		input: in, width: 80, height: 24, styles: newStyles(o.NoColor),
	}
	if m.now == nil {
		m.now = time.Now
	}
	return m
}

// Messages of the program.
type (
	snapMsg struct {
		s   Snapshot
		err error
	}
	detailMsg struct {
		id  string
		d   Detail
		err error
	}
	eventsMsg   []Event
	lostMsg     struct{ err error }
	tickMsg     time.Time
	recoveryMsg struct {
		r   api.Report
		err error
	}
	actedMsg struct {
		a   Action
		err error
	}
)

// Init starts the watch and the first snapshot.
func (m *Model) Init() tea.Cmd {
	go m.watch()
	m.fetching = true
	return tea.Batch(m.fetch(), m.listen(), tick(), m.fetchRecovery())
}

// watch follows daemon.watch into the feed, reconnecting while ctx lasts.
func (m *Model) watch() {
	backoff := 100 * time.Millisecond
	for m.ctx.Err() == nil {
		start := time.Now()
		err := m.src.Watch(m.ctx, func(e Event) {
			select {
			case m.feed <- e:
			default:
				select {
				case m.feed <- Event{Type: "dropped", Count: 1}:
				default:
				}
			}
		})
		if m.ctx.Err() != nil {
			return
		}
		if time.Since(start) > 5*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case m.lostCh <- err:
		case <-m.ctx.Done():
			return
		}
		select {
		case <-time.After(backoff):
		case <-m.ctx.Done():
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// listen waits for the feed and hands the view everything queued at once,
// at most one batch every batchGap, so that a stream of events costs at
// most ten frames a second.
func (m *Model) listen() tea.Cmd {
	return func() tea.Msg {
		var batch eventsMsg
		select {
		case e := <-m.feed:
			batch = append(batch, e)
		case err := <-m.lostCh:
			return lostMsg{err}
		case <-m.ctx.Done():
			return nil
		}
		select {
		case <-time.After(batchGap): // let the rest of a burst arrive
		case <-m.ctx.Done():
			return nil
		}
		for len(batch) < feedSize {
			select {
			case e := <-m.feed:
				batch = append(batch, e)
			default:
				return batch
			}
		}
		return batch
	}
}

func tick() tea.Cmd {
	return tea.Tick(tickEvery, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (m *Model) fetch() tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		s, err := ReadSnapshot(ctx, m.src)
		return snapMsg{s, err}
	}
}

func (m *Model) fetchRecovery() tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		r, err := m.src.Recovery(ctx)
		return recoveryMsg{r, err}
	}
}

func (m *Model) fetchDetail(id string) tea.Cmd {
	m.detailAt = m.now()
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		d, err := m.src.Detail(ctx, id, detailTail)
		return detailMsg{id, d, err}
	}
}

func (m *Model) act(a Action) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		defer cancel()
		return actedMsg{a, m.src.Act(ctx, a)}
	}
}

// Update applies a message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scroll()
	case tea.KeyMsg:
		sel := m.sel
		cmd := m.keyBurst(msg) // keys.go
		if m.sel != sel && m.sel != "" && m.up {
			cmd = tea.Batch(cmd, m.fetchDetail(m.sel))
		}
		return m, cmd
	case snapMsg:
		return m, m.applySnapshot(msg)
	case partMsg:
		m.applyPart(msg) // sync.go
	case recoveryMsg:
		if msg.err == nil {
			m.recovery, m.recovered = &msg.r, m.now()
		}
	case detailMsg:
		if msg.err == nil && msg.id == m.sel {
			m.detail, m.detailOf = msg.d, msg.id
		}
	case eventsMsg:
		m.applyEvents(msg)
		return m, m.listen()
	case lostMsg:
		m.markLost(msg.err)
		return m, m.listen()
	case tickMsg:
		return m, tea.Batch(tick(), m.refresh())
	case actedMsg:
		m.flash, m.flashAt = done(msg.a, msg.err), m.now()
		if msg.a.Kind == ActApprove || msg.a.Kind == ActDeny {
			m.needAppr = true
		} else {
			m.want(msg.a.ID)
		}
	}
	return m, nil
}

func (m *Model) applySnapshot(msg snapMsg) tea.Cmd {
	m.fetching, m.fetchedAt = false, m.now()
	if msg.err != nil {
		m.markLost(msg.err)
		return nil
	}
	var cmd tea.Cmd
	if !m.up && m.have && m.snap.Status.Pid != msg.s.Status.Pid {
		cmd = m.fetchRecovery() // a new daemon: what did its recovery do?
	}
	m.up, m.lost = true, ""
	m.snap, m.have, m.visibleAt = msg.s, true, m.now()
	m.tree = newTree(m.snap.Agents)
	m.snap.Agents = nil // the tree holds them
	m.approvalsChanged()
	m.relayout()
	if m.sel != "" && m.detailOf != m.sel {
		cmd = tea.Batch(cmd, m.fetchDetail(m.sel))
	}
	return cmd
}

func (m *Model) markLost(err error) {
	if m.up || m.lost == "" {
		m.lostAt = m.now()
	}
	m.up = false
	m.lost = "connection refused"
	if err != nil {
		m.lost, _, _ = strings.Cut(termtext.Row(err.Error()), " (") // the reason, without the socket's path
	}
}

// relayout flattens the tree again and keeps the selection in view.
func (m *Model) relayout() {
	m.rows = m.tree.rows(m.collapsed, m.filter)
	if m.index(m.sel) < 0 {
		m.sel = ""
		if len(m.rows) > 0 {
			m.sel = m.rows[0].a.ID
		}
	}
	m.scroll()
}

// index returns the row of agent id, or -1.
func (m *Model) index(id string) int {
	for i, r := range m.rows {
		if r.a.ID == id {
			return i
		}
	}
	return -1
}

// applyEvents keeps what each agent is doing now, and its live lines.
func (m *Model) applyEvents(batch eventsMsg) {
	for _, e := range batch {
		if e.Type == api.WatchDropped {
			m.dropped += max(e.Count, 1)
			m.full = true
			continue
		}
		m.events++
		if line, now := describe(e); line != "" {
			s := append(m.stream[e.Agent], e.Time.Local().Format("15:04:05")+" "+line)
			if len(s) > streamKeep {
				s = s[len(s)-streamKeep:]
			}
			m.stream[e.Agent] = s
			if now != "" {
				m.activity[e.Agent] = now
			}
		}
		if a := m.tree.byID[e.Agent]; a != nil && e.Type == api.WatchMessage {
			a.Pending++
		}
		m.noted(e) // sync.go
	}
}

// done says how an action went, for the status line.
func done(a Action, err error) string {
	if err != nil {
		return fmt.Sprintf("%s failed: %s", a.Kind, termtext.Row(err.Error()))
	}
	if a.Kind == ActReadInbox {
		return "inbox marked read"
	}
	return a.Kind + ": done"
}
