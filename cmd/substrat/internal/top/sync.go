package top

import (
	"context"
	"errors"
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
)

// How top keeps its tree current (see the package doc): a whole read at
// the start, at a reconnect and when events were dropped; otherwise, at
// most every tick, a read of the agents that events touched, and every
// refreshSlow the rows on screen as well (what no event announces, such
// as a provider's park, shows within that).
const (
	tickEvery = 100 * time.Millisecond
	// maxRead bounds the agents one partial read asks for; the rest wait
	// for the next tick.
	maxRead = 1000
	// batchGap is the least time between two batches of events handed
	// to the view: a stream of events costs at most ten frames a second.
	batchGap = 100 * time.Millisecond
)

// partMsg is a partial read: the status, the agents asked for (those
// not in the page have gone), and the inbox and approvals if asked.
type partMsg struct {
	st        api.StatusResult
	page      api.ListPage
	asked     []string
	inbox     []api.InboxMessage
	approvals []api.PendingApproval
	withInbox bool
	withAppr  bool
	err       error
}

// want marks an agent to be read back at the next tick.
func (m *Model) want(ids ...string) {
	for _, id := range ids {
		if id != "" && id != fsstore.User {
			m.wanted[id] = true
		}
	}
}

// noted applies what a watch event says needs reading back.
func (m *Model) noted(e Event) {
	switch {
	case e.Type == api.WatchDropped:
		m.full = true
		return
	case e.Agent == fsstore.User:
		m.needInbox = m.needInbox || e.Type == api.WatchMessage
		return
	case e.Type == api.WatchOutput || e.Type == api.WatchTool:
		return // a turn's stream: nothing of the row changes
	}
	m.want(e.Agent)
	switch e.Type {
	case fsstore.EvTurn, fsstore.EvBudget: // the subtree figures above it change
		m.want(m.tree.ancestors(e.Agent)...)
	case fsstore.EvCreated, "adopted":
		if a := m.tree.byID[e.Agent]; a != nil {
			m.want(a.ParentID)
		}
	case "archived", "detached", "reloaded", fsstore.EvEdited: // names and paths below it change
		m.want(m.tree.subtree(e.Agent)...)
		m.want(m.tree.ancestors(e.Agent)...)
	case fsstore.EvApprovalRequested, fsstore.EvApprovalAnswered:
		m.needAppr = true
	}
}

// refresh asks for what is due: a whole read, a partial one, the
// selected agent's detail.
func (m *Model) refresh() tea.Cmd {
	var cmds []tea.Cmd
	now := m.now()
	switch {
	case m.fetching:
	case !m.up || !m.have || m.full && now.Sub(m.wholeAt) >= refreshSlow:
		// While the daemon is away, twice a second; after dropped events,
		// at most every refreshSlow (a flood must not make top read the
		// whole tree over and over).
		if m.up || now.Sub(m.fetchedAt) >= refreshFast {
			m.fetching, m.full, m.wholeAt = true, false, now
			cmds = append(cmds, m.fetch())
		}
	case len(m.wanted) > 0 || m.needInbox || m.needAppr || now.Sub(m.visibleAt) >= refreshSlow:
		m.fetching = true
		cmds = append(cmds, m.fetchPart())
	}
	if m.up && m.sel != "" && (m.detailOf != m.sel || now.Sub(m.detailAt) >= refreshSlow) {
		cmds = append(cmds, m.fetchDetail(m.sel))
	}
	return tea.Batch(cmds...)
}

// fetchPart reads the wanted agents back, with the rows on screen when
// they are due.
func (m *Model) fetchPart() tea.Cmd {
	slow := m.now().Sub(m.visibleAt) >= refreshSlow
	if slow {
		m.visibleAt = m.now()
		for i := m.top; i < len(m.rows) && i < m.top+m.listHeight(); i++ {
			m.want(m.rows[i].a.ID)
		}
		m.want(m.sel)
	}
	ids := make([]string, 0, min(len(m.wanted), maxRead))
	for id := range m.wanted {
		if len(ids) == maxRead {
			break
		}
		ids = append(ids, id)
		delete(m.wanted, id)
	}
	r := partMsg{asked: ids, withInbox: m.needInbox || slow, withAppr: m.needAppr || slow}
	m.needInbox, m.needAppr = false, false
	m.reads++
	m.readAgents += len(ids)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		defer cancel()
		if r.st, r.err = m.src.Status(ctx); r.err != nil {
			return r
		}
		if len(r.asked) > 0 {
			if r.page, r.err = m.src.Agents(ctx, api.ListParams{IDs: r.asked}); r.err != nil {
				return r
			}
		}
		if r.withInbox {
			if r.inbox, r.err = m.src.Inbox(ctx); r.err != nil {
				return r
			}
		}
		if r.withAppr {
			r.approvals, r.err = m.src.Approvals(ctx)
		}
		return r
	}
}

// approvalsChanged ends an answer waiting for y whose request no longer
// waits (answered elsewhere, or timed out).
func (m *Model) approvalsChanged() {
	if m.answering() && m.shownApproval() == nil {
		m.mode = modeApprovals
		m.flash, m.flashAt = fmt.Sprintf("request %s no longer waits: not answered from here", termtext.Row(m.confirm.ID)), m.now()
	}
}

// applyPart updates the rows read back in place; the shape of the tree
// is linked again only when it changed.
func (m *Model) applyPart(r partMsg) {
	m.fetching, m.fetchedAt = false, m.now()
	if r.err != nil {
		m.want(r.asked...)
		m.needInbox, m.needAppr = m.needInbox || r.withInbox, m.needAppr || r.withAppr
		if ae := (*api.Error)(nil); errors.As(r.err, &ae) { // the daemon answered: it is there
			m.flash, m.flashAt = "refresh failed: "+termtext.Row(ae.Error()), m.now()
			return
		}
		m.markLost(r.err)
		return
	}
	m.snap.Status = r.st
	shape := false
	got := make(map[string]bool, len(r.page.Agents))
	for _, a := range r.page.Agents {
		got[a.ID] = true
		if m.tree.byID[a.ID] == nil {
			m.want(a.ParentID) // a new child: its parent's list of children changed
		}
		if m.tree.update(a) {
			shape = true
		}
	}
	for _, id := range r.asked {
		if !got[id] && m.tree.byID[id] != nil { // gone: what was below it moves up
			m.want(m.tree.subtree(id)[1:]...)
			m.tree.remove(id)
			shape = true
		}
	}
	if r.withInbox {
		m.snap.Inbox = r.inbox
	}
	if r.withAppr {
		m.snap.Approvals = r.approvals
		m.approvalsChanged()
	}
	if shape {
		m.tree.link()
	}
	if shape || m.filter != "" { // a state change can change what a filter shows
		m.relayout()
	}
}
