package top

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/substrat/substrat/fsstore"
)

// styles are the frame's styles, plain when colors are off.
type styles struct {
	r                            *lipgloss.Renderer
	title, dim, sel, bad, warn   lipgloss.Style
	busy, ok, heading, separator lipgloss.Style
}

func newStyles(noColor bool) styles {
	r := lipgloss.NewRenderer(os.Stdout)
	if noColor {
		r.SetColorProfile(termenv.Ascii)
	}
	s := styles{r: r}
	s.title = r.NewStyle().Bold(true)
	s.dim = r.NewStyle().Faint(true)
	s.sel = r.NewStyle().Reverse(true)
	s.bad = r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	s.warn = r.NewStyle().Foreground(lipgloss.Color("3"))
	s.busy = r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true)
	s.ok = r.NewStyle().Foreground(lipgloss.Color("2"))
	s.heading = r.NewStyle().Bold(true).Underline(true)
	s.separator = r.NewStyle().Faint(true)
	if noColor {
		// NO_COLOR: no colors, and no other attributes either.
		plain := r.NewStyle()
		s.title, s.dim, s.sel, s.bad, s.warn, s.busy, s.ok, s.heading, s.separator = plain, plain, plain, plain, plain, plain, plain, plain, plain
	}
	return s
}

// Layout: two header lines, the column heads, the list, the detail pane
// and the footer.
func (m *Model) listHeight() int {
	body := max(m.height-4, 2)
	return max(body-m.detailHeight(), 1)
}

func (m *Model) detailHeight() int {
	body := max(m.height-4, 2)
	return max(body*2/5, 1)
}

// View renders the frame: exactly height lines of at most width cells.
func (m *Model) View() string {
	var lines []string
	lines = append(lines, m.header()...)
	switch m.mode {
	case modeHelp:
		lines = append(lines, m.help()...)
	case modeAttach:
		lines = append(lines, m.attach(m.height-3)...)
	case modeInbox:
		lines = append(lines, m.inbox(m.height-3)...)
	case modeApprovals:
		lines = append(lines, m.approvals(m.height-3)...)
	case modeConfirm:
		if m.back == modeApprovals {
			lines = append(lines, m.approvals(m.height-3)...)
			break
		}
		fallthrough
	default:
		lines = append(lines, m.columns(), "")
		lines = lines[:len(lines)-1]
		lines = append(lines, m.list()...)
		lines = append(lines, m.detailPane()...)
	}
	for len(lines) < m.height-1 {
		lines = append(lines, "")
	}
	lines = append(lines[:m.height-1], m.footer())
	for i, l := range lines {
		lines[i] = clip(l, m.width)
	}
	return strings.Join(lines, "\n")
}

func (m *Model) header() []string {
	st := m.snap.Status
	first := m.styles.title.Render("substrat top")
	if m.have {
		first += fmt.Sprintf("  pid %d  up %s  %d agents (%d busy)", st.Pid, since(m.now(), st.StartedAt), st.Agents, st.Busy)
		if n := unread(m.snap.Inbox); n > 0 {
			first += "  " + m.styles.warn.Render(fmt.Sprintf("inbox %d", n))
		}
		if n := len(m.snap.Approvals); n > 0 {
			first += "  " + m.styles.bad.Render(fmt.Sprintf("approvals %d (v)", n))
		}
		for _, p := range st.Pools {
			first += fmt.Sprintf("  %s %d/%d", p.Name, p.Live, p.Size)
		}
	}
	var second string
	switch {
	case !m.up && m.lost != "":
		second = m.styles.bad.Render(fmt.Sprintf("✗ daemon gone for %s (%s): reconnecting…", since(m.now(), m.lostAt), m.lost))
	case !m.have:
		second = "connecting…"
	case m.recovery != nil:
		second = recoverySummary(m.recovery)
	}
	if m.dropped > 0 {
		second += m.styles.warn.Render(fmt.Sprintf("  (%d events dropped: top fell behind)", m.dropped))
	}
	return []string{first, second}
}

// recoverySummary says in one line what the daemon's start did.
func recoverySummary(r *api.Report) string {
	how := "clean stop"
	if r.Unclean {
		how = "unclean stop"
	}
	s := fmt.Sprintf("recovery %s (%s): %d agents in %d ms", r.FinishedAt.Local().Format("15:04:05"), how, r.Agents, r.DurationMS)
	for _, part := range []struct {
		n    int
		what string
	}{{len(r.Redelivered), "redelivered"}, {len(r.Resumed), "resumed"}, {len(r.Suspended), "suspended"},
		{len(r.KeptOut), "kept out"}, {len(r.Reaped), "processes reaped"}, {len(r.Findings), "findings"}} {
		if part.n > 0 {
			s += fmt.Sprintf(", %d %s", part.n, part.what)
		}
	}
	return s
}

// Column widths of the list.
type cols struct{ name, state, turns, tokens, cost, pend, budget, now int }

func (m *Model) cols() cols {
	c := cols{name: max(14, min(32, m.width*28/100)), state: 9, turns: 5, tokens: 13, cost: 7, pend: 4}
	if m.width >= 100 {
		c.budget = 6
	}
	used := c.name + c.state + c.turns + c.tokens + c.cost + c.pend + c.budget + 8
	c.now = max(m.width-used, 0)
	return c
}

func (m *Model) columns() string {
	c := m.cols()
	s := fmt.Sprintf("  %-*s %-*s %*s %*s %*s %*s", c.name, "NAME", c.state, "STATE", c.turns, "TURNS", c.tokens, "TOKENS IN/OUT", c.cost, "COST", c.pend, "PEND")
	if c.budget > 0 {
		s += fmt.Sprintf(" %*s", c.budget, "BUDGET")
	}
	return m.styles.dim.Render(s + " NOW")
}

func (m *Model) list() []string {
	h := m.listHeight()
	out := make([]string, 0, h)
	if m.have && len(m.rows) == 0 {
		if m.filter != "" {
			out = append(out, "  no agent matches /"+m.filter)
		} else {
			out = append(out, "  no agents: create one with 'substrat agent create NAME'")
		}
	}
	c := m.cols()
	for i := m.top; i < len(m.rows) && len(out) < h; i++ {
		out = append(out, m.rowLine(m.rows[i], c))
	}
	for len(out) < h {
		out = append(out, "")
	}
	return out
}

func (m *Model) rowLine(r row, c cols) string {
	a := r.a
	glyph := "  "
	switch {
	case r.collapsed:
		glyph = "▸ "
	case r.kids > 0:
		glyph = "▾ "
	}
	name := strings.Repeat("  ", r.depth) + glyph + a.Name
	if r.collapsed {
		name += fmt.Sprintf(" (+%d)", r.kids)
	}
	f := r.figures()
	state := stateOf(a)
	line := fmt.Sprintf("%-*s %-*s %*d %*s %*s %*d", c.name, clip(name, c.name), c.state, state, c.turns, f.Turns,
		c.tokens, count(f.InputTokens)+"/"+count(f.OutputTokens), c.cost, fmt.Sprintf("$%.2f", f.CostUSD), c.pend, a.Pending)
	if c.budget > 0 {
		line += fmt.Sprintf(" %*s", c.budget, budgetUse(a))
	}
	if c.now > 0 {
		line += " " + clip(m.doing(a), c.now)
	}
	if a.ID == m.sel {
		return m.styles.sel.Render("›" + " " + line)
	}
	line = "  " + line
	switch state {
	case "failed", "gated":
		return m.styles.bad.Render(line)
	case "BUSY":
		return m.styles.busy.Render(line)
	case "ended":
		return m.styles.dim.Render(line)
	}
	return line
}

// detailPane shows the selected agent: its settings, figures and stream.
func (m *Model) detailPane() []string {
	h := m.detailHeight()
	a := m.tree.byID[m.sel]
	if a == nil {
		return make([]string, h)
	}
	out := []string{m.styles.separator.Render(fmt.Sprintf("── %s · %s · %s ", a.Path, a.ID, stateOf(a)) + strings.Repeat("─", m.width))}
	where := "…"
	perm := "…"
	if s := m.detail.Inspect.Session; s != nil && m.detailOf == a.ID {
		if s.WorkDir != "" {
			where = termtext.Row(s.WorkDir) + ", no sandbox"
		}
		if s.Permissions != nil {
			perm = termtext.Row(s.Permissions.Mode)
		}
	}
	if a.Workspace != "" {
		where = "sandbox of workspace " + a.Workspace
	}
	who := termtext.Row(strings.TrimSpace(a.Provider + " " + a.Model))
	if a.Executor != "" {
		who += " · executor " + termtext.Row(a.Executor)
	}
	out = append(out, fmt.Sprintf("%s · %s · permissions %s · pool %s", who, termtext.Row(where), perm, termtext.Row(a.Pool)))
	kids := a.Children // their names
	figures := fmt.Sprintf("turns %d · tokens %s in / %s out · $%.4f · pending %d", a.Counters.Turns, count(a.Counters.InputTokens),
		count(a.Counters.OutputTokens), a.Counters.CostUSD, a.Pending)
	if w := a.Counters.ContextWindow; w > 0 {
		figures += fmt.Sprintf(" · context %s of %s (%d%%)", count(a.Counters.ContextTokens), count(w), a.Counters.ContextTokens*100/w)
	}
	if a.Budget != nil {
		figures += " · budget " + budgetUse(a)
	}
	if len(kids) > 0 {
		figures += " · children " + strings.Join(kids, " ")
	}
	out = append(out, figures)
	if why := firstNonEmpty(a.DiskInvalid, parkedFor(a), a.StateReason); why != "" {
		out = append(out, m.styles.warn.Render("reason: "+oneLine(why)))
	}
	if i := m.approvalOf(a.ID); i >= 0 {
		ap := m.snap.Approvals[i]
		out = append(out, m.styles.bad.Render(fmt.Sprintf("approval %s waits: %s %s (v shows it whole; a/d there answer)",
			termtext.Row(ap.ID), termtext.Row(ap.Tool), api.InputSummary(ap.Input, 60))))
	}
	return append(out, tail(m.lines(a.ID), h-len(out))...)
}

// lines is an agent's stream as top saw it live, or else the last events
// of its log.
func (m *Model) lines(id string) []string {
	if s := m.stream[id]; len(s) > 0 {
		return s
	}
	if m.detailOf != id {
		return nil
	}
	var out []string
	for _, e := range m.detail.Events {
		line, _ := describe(Event{Type: api.WatchType(e.Type), Data: e.Data, Time: e.Time})
		out = append(out, e.Time.Local().Format("15:04:05")+" "+line)
	}
	return out
}

func (m *Model) attach(h int) []string {
	a := m.tree.byID[m.sel]
	if a == nil {
		return nil
	}
	out := []string{m.styles.heading.Render(fmt.Sprintf("attached to %s (%s), live; esc to go back", a.Path, stateOf(a)))}
	return append(out, tail(m.lines(a.ID), h-1)...)
}

func (m *Model) inbox(h int) []string {
	out := []string{m.styles.heading.Render(fmt.Sprintf("USER inbox: %d unread (m marks them read; esc to go back)", unread(m.snap.Inbox)))}
	for _, msg := range m.snap.Inbox {
		if msg.Message == nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s  %s: %s", msg.SentAt.Local().Format("15:04:05"), termtext.Row(msg.FromName), oneLine(msg.Text)))
	}
	return tail(out, h)
}

// approvals shows one waiting request, its input whole (wrapped, not
// cut): scroll with the arrows and pages, answer with a or d.
func (m *Model) approvals(h int) []string {
	lines := m.approvalLines()
	all := len(lines)
	top := max(0, min(m.apTop, all-(h-1)))
	lines = lines[top:]
	if len(lines) > h-1 {
		lines = lines[:h-1]
	}
	n := len(m.snap.Approvals)
	out := []string{m.styles.heading.Render(fmt.Sprintf("request %d of %d, input whole: lines %d-%d of %d (a approve, d deny, tab next; esc)",
		min(m.apSel+1, n), n, top+1, top+len(lines), all))}
	return append(out, lines...)
}

// approvalLines are the lines of the request shown: who asks, and the
// input as one line of JSON wrapped to the width (api.InputText: what
// would hide text is escaped, nothing is cut).
func (m *Model) approvalLines() []string {
	a := m.shownApproval()
	if a == nil {
		return []string{"no approval request waits"}
	}
	approver := "USER"
	if a.Approver != fsstore.User {
		approver = "its parent"
	}
	text := api.InputText(a.Input)
	out := []string{m.styles.title.Render(fmt.Sprintf("%s  %s wants %s, %d bytes; %s answers until %s", termtext.Row(a.ID), termtext.Row(a.Agent), termtext.Row(a.Tool), len(text),
		approver, a.Deadline.Local().Format("15:04:05")))}
	return append(out, wrap(text, max(m.width, 10))...)
}

// shownApproval is the request the approvals view shows, or nil.
// While an answer waits for y, it is the request being answered, found
// by its id (the list may have changed meanwhile), or nil if it is gone.
func (m *Model) shownApproval() *api.PendingApproval {
	if m.answering() {
		for i := range m.snap.Approvals {
			if m.snap.Approvals[i].ID == m.confirm.ID {
				m.apSel = i
				return &m.snap.Approvals[i]
			}
		}
		return nil
	}
	if len(m.snap.Approvals) == 0 {
		return nil
	}
	m.apSel = max(0, min(m.apSel, len(m.snap.Approvals)-1))
	return &m.snap.Approvals[m.apSel]
}

// answering reports whether an answer to a request waits for y.
func (m *Model) answering() bool { return m.mode == modeConfirm && m.back == modeApprovals }

// approvalOf returns the index of the request agent id waits on, or -1.
func (m *Model) approvalOf(id string) int {
	a := m.tree.byID[id]
	for i := range m.snap.Approvals {
		if a != nil && termtext.Row(m.snap.Approvals[i].Agent) == a.Path {
			return i
		}
	}
	return -1
}

// doing is what an agent does now, for its row: the approval it waits
// on, its park, or what its stream last said.
func (m *Model) doing(a *api.AgentInfo) string {
	if i := m.approvalOf(a.ID); i >= 0 {
		ap := m.snap.Approvals[i]
		return "approve? " + termtext.Row(ap.Tool) + " " + api.InputSummary(ap.Input, 200)
	}
	if a.Parked != nil {
		return parkedFor(a)
	}
	now := m.activity[a.ID]
	if now == "" && a.AgentState == fsstore.AgentBusy {
		now = "thinking…"
	}
	return now
}

// parkedFor says until when a is parked, and why ("" if it is not).
func parkedFor(a *api.AgentInfo) string {
	if a.Parked == nil {
		return ""
	}
	return fmt.Sprintf("until %s: %s", a.Parked.Until.Local().Format("15:04:05"), oneLine(a.Parked.Reason))
}

// wrap cuts s into lines of at most w cells, keeping every character.
func wrap(s string, w int) []string {
	var out []string
	var line strings.Builder
	width := 0
	for _, r := range s {
		rw := lipgloss.Width(string(r))
		if width+rw > w && width > 0 {
			out = append(out, line.String())
			line.Reset()
			width = 0
		}
		line.WriteRune(r)
		width += rw
	}
	return append(out, line.String())
}

func (m *Model) footer() string {
	switch m.mode {
	case modeFilter, modeSend:
		return m.input.View()
	case modeConfirm:
		if a := m.shownApproval(); m.back == modeApprovals && a != nil {
			return m.styles.bad.Render(fmt.Sprintf("%s %s's %s (%d bytes, above)? y to confirm, any other key cancels",
				m.confirm.Kind, termtext.Row(a.Agent), termtext.Row(a.Tool), len(api.InputText(a.Input))))
		}
		return m.styles.bad.Render(fmt.Sprintf("%s %s? y to confirm, any other key cancels", m.confirm.Kind, m.selName()))
	}
	if m.flash != "" && m.now().Sub(m.flashAt) < 5*time.Second {
		return m.flash
	}
	if m.mode == modeApprovals {
		return "a approve · d deny (each asks) · tab next · ↑/↓ pgup/pgdn scroll · esc back"
	}
	if m.filter != "" {
		return fmt.Sprintf("filter /%s (%d shown; esc clears) · ? help · q quit", m.filter, len(m.rows))
	}
	h := help.New()
	h.Width = m.width
	return h.ShortHelpView(keys.ShortHelp())
}

// help lists every key, in two columns when they fit.
func (m *Model) help() []string {
	var items []string
	for _, group := range keys.FullHelp() {
		for _, b := range group {
			items = append(items, fmt.Sprintf("%-8s %s", b.Help().Key, b.Help().Desc))
		}
	}
	out := []string{m.styles.heading.Render("keys (? or esc to go back)")}
	half := (len(items) + 1) / 2
	if m.width < 80 {
		return append(out, items...)
	}
	left := 0
	for _, it := range items[:half] {
		left = max(left, lipgloss.Width(it)+2)
	}
	for i := range half {
		right := ""
		if i+half < len(items) {
			right = items[i+half]
		}
		out = append(out, fmt.Sprintf("%-*s%s", left, items[i], right))
	}
	return append(out, "",
		"States: BUSY, WAITING (for a reply or an approval), IDLE, suspended (no",
		"live session), gated (turns wait for a permit), PARKED (until its",
		"provider's limit resets), failed (the last turn failed; it is retried",
		"with backoff), ended. A folded agent (▸) shows its subtree's totals.",
		"Rows refresh at most ten times a second; the stream is live.")
}

func unread(in []api.InboxMessage) int {
	n := 0
	for _, m := range in {
		if m.Unread {
			n++
		}
	}
	return n
}

func budgetUse(a *api.AgentInfo) string {
	if a.Budget == nil {
		return "-"
	}
	switch {
	case a.Budget.Tokens > 0:
		return fmt.Sprintf("%d%%", (a.Subtree.InputTokens+a.Subtree.OutputTokens)*100/a.Budget.Tokens)
	case a.Budget.CostUSD > 0:
		return fmt.Sprintf("%.0f%%", a.Subtree.CostUSD*100/a.Budget.CostUSD)
	}
	return "-"
}

// count writes a token count short: 950, 12.3k, 4.1M.
func count(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprint(n)
	case n < 1000000:
		return fmt.Sprintf("%.1fk", float64(n)/1000)
	}
	return fmt.Sprintf("%.1fM", float64(n)/1000000)
}

func since(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return now.Sub(t).Round(time.Second).String()
}

func tail(s []string, n int) []string {
	if n <= 0 {
		return nil
	}
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// clip cuts s to at most w cells, styles kept (lipgloss counts cells).
func clip(s string, w int) string {
	if lipgloss.Width(s) <= w {
		return s
	}
	return lipgloss.NewStyle().MaxWidth(w).Render(s)
}
