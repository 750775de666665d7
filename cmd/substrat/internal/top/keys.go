package top

import (
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// keyMap is every key of the tree mode; help.go shows it.
type keyMap struct {
	Up, Down, PgUp, PgDown, First, Last key.Binding
	Fold, Unfold, Toggle                key.Binding
	Send, Attach, Inbox, Filter         key.Binding
	Approvals                           key.Binding
	Gate, Permit, Suspend, Resume       key.Binding
	Terminate, Archive                  key.Binding
	Help, Quit                          key.Binding
	// In the approval requests: answer the one shown, go to another.
	Approve, Deny, NextReq, PrevReq key.Binding
}

var keys = keyMap{
	Up:        key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "up")),
	Down:      key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "down")),
	PgUp:      key.NewBinding(key.WithKeys("pgup", "ctrl+u"), key.WithHelp("pgup", "page up")),
	PgDown:    key.NewBinding(key.WithKeys("pgdown", "ctrl+d"), key.WithHelp("pgdn", "page down")),
	First:     key.NewBinding(key.WithKeys("home"), key.WithHelp("home", "first")),
	Last:      key.NewBinding(key.WithKeys("end"), key.WithHelp("end", "last")),
	Fold:      key.NewBinding(key.WithKeys("left", "h"), key.WithHelp("←/h", "fold (or go to parent)")),
	Unfold:    key.NewBinding(key.WithKeys("right", "l"), key.WithHelp("→/l", "unfold")),
	Toggle:    key.NewBinding(key.WithKeys(" "), key.WithHelp("space", "fold/unfold")),
	Send:      key.NewBinding(key.WithKeys("s"), key.WithHelp("s", "send a message")),
	Attach:    key.NewBinding(key.WithKeys("a", "enter"), key.WithHelp("a/enter", "attach: its stream, full screen")),
	Inbox:     key.NewBinding(key.WithKeys("i"), key.WithHelp("i", "USER inbox")),
	Filter:    key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter by name or state")),
	Approvals: key.NewBinding(key.WithKeys("v"), key.WithHelp("v", "approvals, whole; a/d answer")),
	Gate:      key.NewBinding(key.WithKeys("g"), key.WithHelp("g", "gate / ungate")),
	Permit:    key.NewBinding(key.WithKeys("p"), key.WithHelp("p", "permit one turn")),
	Suspend:   key.NewBinding(key.WithKeys("z"), key.WithHelp("z", "suspend")),
	Resume:    key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "resume")),
	Terminate: key.NewBinding(key.WithKeys("T"), key.WithHelp("T", "terminate (asks)")),
	Archive:   key.NewBinding(key.WithKeys("A"), key.WithHelp("A", "archive (asks)")),
	Help:      key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
	Quit:      key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
	Approve:   key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "approve the request shown (asks)")),
	Deny:      key.NewBinding(key.WithKeys("d"), key.WithHelp("d", "deny it (asks)")),
	NextReq:   key.NewBinding(key.WithKeys("tab", "n"), key.WithHelp("tab/n", "next request")),
	PrevReq:   key.NewBinding(key.WithKeys("shift+tab", "N"), key.WithHelp("N", "previous request")),
}

// ShortHelp is the footer: the same keys, said shortly.
func (k keyMap) ShortHelp() []key.Binding {
	short := func(b key.Binding, desc string) key.Binding {
		return key.NewBinding(key.WithKeys(b.Keys()...), key.WithHelp(b.Help().Key, desc))
	}
	return []key.Binding{short(k.Help, "help"), short(k.Filter, "filter"), short(k.Send, "send"),
		short(k.Attach, "attach"), short(k.Gate, "gate"), short(k.Terminate, "end"), short(k.Inbox, "inbox"), k.Quit}
}

// FullHelp is the ? screen.
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.PgUp, k.PgDown, k.First, k.Last, k.Fold, k.Unfold, k.Toggle},
		{k.Send, k.Attach, k.Inbox, k.Approvals, k.Filter, k.Help, k.Quit},
		{k.Gate, k.Permit, k.Suspend, k.Resume, k.Terminate, k.Archive},
	}
}

// typing reports whether keys go into an input line.
func (m *Model) typingMode() bool { return m.mode == modeFilter || m.mode == modeSend }

// keyBurst handles a key press, or the keys of one read: Bubble Tea
// gives runes that arrive together ("jjj" typed fast, or sent by a
// script) as one message, and outside an input line each of them is a
// key of its own. A paste outside an input line does nothing: text is
// not a series of commands.
func (m *Model) keyBurst(msg tea.KeyMsg) tea.Cmd {
	if msg.Paste && !m.typingMode() {
		return nil
	}
	if msg.Type != tea.KeyRunes || len(msg.Runes) <= 1 || m.typingMode() {
		return m.key(msg)
	}
	var cmds []tea.Cmd
	for i, r := range msg.Runes {
		if m.typingMode() { // a key opened a line: the rest is typed into it
			cmds = append(cmds, m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: msg.Runes[i:]}))
			break
		}
		cmds = append(cmds, m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: msg.Alt}))
	}
	return tea.Batch(cmds...)
}

// key handles a key press in the current mode.
func (m *Model) key(msg tea.KeyMsg) tea.Cmd {
	if msg.Type == tea.KeyCtrlC {
		return tea.Quit
	}
	switch m.mode {
	case modeFilter, modeSend:
		return m.typing(msg)
	case modeConfirm:
		gone := m.answering() && m.shownApproval() == nil
		m.mode = m.back
		if strings.EqualFold(msg.String(), "y") && !gone {
			return m.act(m.confirm)
		}
		m.flash, m.flashAt = m.confirm.Kind+": cancelled", m.now()
		return nil
	case modeApprovals:
		return m.approvalsKey(msg)
	case modeHelp, modeAttach, modeInbox:
		switch {
		case msg.Type == tea.KeyEsc, key.Matches(msg, keys.Quit), key.Matches(msg, keys.Help) && m.mode == modeHelp,
			key.Matches(msg, keys.Attach) && m.mode == modeAttach, key.Matches(msg, keys.Inbox) && m.mode == modeInbox:
			m.mode = modeTree
		case m.mode == modeInbox && msg.String() == "m":
			return m.act(Action{Kind: ActReadInbox})
		}
		return nil
	}
	return m.treeKey(msg)
}

func (m *Model) treeKey(msg tea.KeyMsg) tea.Cmd {
	i := m.index(m.sel)
	switch {
	case key.Matches(msg, keys.Quit):
		return tea.Quit
	case msg.Type == tea.KeyEsc:
		if m.filter != "" {
			m.filter = ""
			m.relayout()
		}
	case key.Matches(msg, keys.Up):
		m.move(i - 1)
	case key.Matches(msg, keys.Down):
		m.move(i + 1)
	case key.Matches(msg, keys.PgUp):
		m.move(i - m.listHeight())
	case key.Matches(msg, keys.PgDown):
		m.move(i + m.listHeight())
	case key.Matches(msg, keys.First):
		m.move(0)
	case key.Matches(msg, keys.Last):
		m.move(len(m.rows) - 1)
	case key.Matches(msg, keys.Fold):
		if i >= 0 && m.rows[i].kids > 0 && !m.rows[i].collapsed && m.filter == "" {
			m.collapsed[m.sel] = true
			m.relayout()
		} else if i >= 0 {
			m.move(m.index(m.rows[i].a.ParentID))
		}
	case key.Matches(msg, keys.Unfold):
		delete(m.collapsed, m.sel)
		m.relayout()
	case key.Matches(msg, keys.Toggle):
		m.collapsed[m.sel] = !m.collapsed[m.sel]
		m.relayout()
	case key.Matches(msg, keys.Help):
		m.mode = modeHelp
	case key.Matches(msg, keys.Inbox):
		m.mode = modeInbox
	case key.Matches(msg, keys.Approvals):
		m.mode, m.apTop = modeApprovals, 0
		if i := m.approvalOf(m.sel); i >= 0 {
			m.apSel = i
		}
	case key.Matches(msg, keys.Filter):
		m.mode = modeFilter
		m.input.Prompt, m.input.Placeholder = "/", "name, path or state"
		m.input.SetValue(m.filter)
		return m.input.Focus()
	case m.sel == "":
		// the rest acts on the selection
	case key.Matches(msg, keys.Attach):
		m.mode = modeAttach
	case key.Matches(msg, keys.Send):
		m.mode = modeSend
		m.input.Prompt, m.input.Placeholder = "message to "+m.selName()+": ", ""
		m.input.SetValue("")
		return m.input.Focus()
	case key.Matches(msg, keys.Gate):
		kind := ActGate
		if a := m.tree.byID[m.sel]; a != nil && a.Gated {
			kind = ActUngate
		}
		return m.act(Action{Kind: kind, ID: m.sel})
	case key.Matches(msg, keys.Permit):
		return m.act(Action{Kind: ActPermit, ID: m.sel})
	case key.Matches(msg, keys.Suspend):
		return m.act(Action{Kind: ActSuspend, ID: m.sel})
	case key.Matches(msg, keys.Resume):
		return m.act(Action{Kind: ActResume, ID: m.sel})
	case key.Matches(msg, keys.Terminate):
		m.confirm, m.mode, m.back = Action{Kind: ActTerminate, ID: m.sel}, modeConfirm, modeTree
	case key.Matches(msg, keys.Archive):
		m.confirm, m.mode, m.back = Action{Kind: ActArchive, ID: m.sel}, modeConfirm, modeTree
	}
	return nil
}

// approvalsKey scrolls the request shown, goes to another, or asks to
// answer it: the confirmation keeps the whole input on screen.
func (m *Model) approvalsKey(msg tea.KeyMsg) tea.Cmd {
	page := max(m.height-4, 1)
	reqs := len(m.snap.Approvals)
	switch {
	case msg.Type == tea.KeyEsc, key.Matches(msg, keys.Quit), key.Matches(msg, keys.Approvals):
		m.mode = modeTree
	case reqs > 0 && (key.Matches(msg, keys.Approve) || key.Matches(msg, keys.Deny)):
		kind := ActApprove
		if key.Matches(msg, keys.Deny) {
			kind = ActDeny
		}
		m.confirm, m.mode, m.back = Action{Kind: kind, ID: m.shownApproval().ID}, modeConfirm, modeApprovals
	case reqs > 0 && key.Matches(msg, keys.NextReq):
		m.apSel, m.apTop = (m.apSel+1)%reqs, 0
	case reqs > 0 && key.Matches(msg, keys.PrevReq):
		m.apSel, m.apTop = (m.apSel+reqs-1)%reqs, 0
	case key.Matches(msg, keys.Up):
		m.apTop--
	case key.Matches(msg, keys.Down):
		m.apTop++
	case key.Matches(msg, keys.PgUp):
		m.apTop -= page
	case key.Matches(msg, keys.PgDown):
		m.apTop += page
	case key.Matches(msg, keys.First):
		m.apTop = 0
	case key.Matches(msg, keys.Last):
		m.apTop = len(m.approvalLines())
	}
	m.apTop = max(0, min(m.apTop, len(m.approvalLines())-page))
	return nil
}

// typing feeds the input line of the filter or a message.
func (m *Model) typing(msg tea.KeyMsg) tea.Cmd {
	switch msg.Type {
	case tea.KeyEsc:
		if m.mode == modeFilter {
			m.filter = ""
			m.relayout()
		}
		m.mode = modeTree
		m.input.Blur()
		return nil
	case tea.KeyEnter:
		mode, text := m.mode, m.input.Value()
		m.mode = modeTree
		m.input.Blur()
		if mode == modeSend {
			if strings.TrimSpace(text) == "" {
				return nil
			}
			return m.act(Action{Kind: ActSend, ID: m.sel, Text: text})
		}
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	if m.mode == modeFilter {
		m.filter = m.input.Value()
		m.relayout()
	}
	return cmd
}

// move selects row i (clamped) and scrolls to it.
func (m *Model) move(i int) {
	if len(m.rows) == 0 {
		return
	}
	i = max(0, min(i, len(m.rows)-1))
	m.sel = m.rows[i].a.ID
	m.scroll()
}

// scroll keeps the selected row inside the list's window.
func (m *Model) scroll() {
	h, i := m.listHeight(), m.index(m.sel)
	if i < 0 {
		m.top = 0
		return
	}
	if i < m.top {
		m.top = i
	}
	if i >= m.top+h {
		m.top = i - h + 1
	}
	m.top = max(0, min(m.top, len(m.rows)-h))
}

func (m *Model) selName() string {
	if a := m.tree.byID[m.sel]; a != nil {
		return a.Path
	}
	return m.sel
}
