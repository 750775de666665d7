package openai

// # Compaction
//
// Before each request the conversation's tokens are estimated (window.go);
// over Options.CompactAt of the window (default 80%), or when the server
// answers that the request is over the window (and then the request is
// retried once, and the turn does not fail for it), the conversation is
// compacted. The system message (the agent's instructions), the turn
// under way (with its tool calls and their results, so that no call is
// parted from its result) and the most recent turns that fit in
// keepShare of the window are kept; the older turns are replaced by a
// summary the model writes in a request of its own, without tools: what
// was asked, decided and done, the open tasks, the agents and workspaces
// involved. The summary covers the earlier summary too, and follows the
// instructions in the system message. Its request's tokens count in the
// turn's usage.
//
// Where the older turns do not fit in the summary request, the oldest of
// them are dropped unsummarized; where the request fails, they are all
// dropped, and the summary says so. Where the turn under way alone is over
// the threshold, its longest messages are cut, saying so in their place.
//
// A compaction writes a new base of the state files (state.go), and is
// reported in the turn's result (provider.Compaction): the provider's turn
// numbers it replaced, the summary, and the tokens before and after.

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/substrat/substrat/provider"
)

const (
	// keepShare is the share of the window the recent turns kept by a
	// compaction may take, with the turn under way.
	keepShare = 0.4
	// renderCap bounds the bytes of one message in a summary request,
	// as a share of the window's bytes.
	renderCap = 0.25
)

// summaryBlock is the summary as the system message shows it.
func summaryBlock(summary string, summarized int) string {
	return fmt.Sprintf("# Earlier in this conversation\n\nTurns 1-%d of this conversation were replaced by the summary below when it outgrew the model's context window (people can still read them in the agent's transcript):\n\n%s", summarized, summary)
}

// splitTurns parts msgs into its system message (if first) and its turns,
// each from a user message to the next.
func splitTurns(msgs []message) (sys []message, turns [][]message) {
	if len(msgs) > 0 && msgs[0].Role == "system" {
		sys, msgs = msgs[:1], msgs[1:]
	}
	for i, m := range msgs {
		if m.Role == "user" || i == 0 {
			turns = append(turns, nil)
		}
		turns[len(turns)-1] = append(turns[len(turns)-1], m)
	}
	return sys, turns
}

// compact compacts the conversation before the turn under way (t.c) and,
// if that is not enough, cuts the turn's longest messages.
func (t *turnRun) compact(ctx context.Context, reason string) error {
	before := t.estimate()
	_, turns := splitTurns(t.c.msgs)
	if t.c.turns < t.c.summarized+len(turns) {
		t.c.turns = t.c.summarized + len(turns) // a conversation saved before turns were counted
	}
	budget := int(keepShare*float64(t.window)) - t.scale(msgsTokens(t.cur)+t.toolTokens)
	if reason == provider.CompactOverflow {
		budget /= 2
	}
	keep, used := len(turns), 0
	for keep > 0 {
		n := t.scale(msgsTokens(turns[keep-1]))
		if used+n > budget {
			break
		}
		used += n
		keep--
	}
	old, kept := turns[:keep], turns[keep:]
	rec := provider.Compaction{Reason: reason, TokensBefore: before}
	if len(old) > 0 {
		first := t.c.summarized + 1
		last := t.c.summarized + len(old)
		summary, dropped, err := t.summarize(ctx, old, first)
		if err != nil {
			return err
		}
		var msgs []message
		for _, tm := range kept {
			msgs = append(msgs, tm...)
		}
		t.c.summary, t.c.summarized = summary, last
		t.c.msgs = withSystem(msgs, t.instructions, summary, last)
		rec.FirstTurn, rec.LastTurn, rec.Dropped, rec.Summary = first, last, dropped, summary
		rec.Replaced = fmt.Sprintf("turns %d-%d", first, last)
		if dropped > 0 {
			rec.Replaced += fmt.Sprintf(" (%d dropped unsummarized)", dropped)
		}
	}
	if cut := t.cutTurn(); cut > 0 {
		if rec.Replaced != "" {
			rec.Replaced += "; "
		}
		rec.Replaced += fmt.Sprintf("%d long messages of the turn under way cut", cut)
	}
	if rec.Replaced == "" {
		return nil // nothing to compact: the request goes as it is
	}
	rec.TokensAfter = t.estimate()
	t.compacted = true
	t.compactions = append(t.compactions, rec)
	if rec.LastTurn == 0 {
		return nil // the turn under way is saved with the turn
	}
	// The new base: the compacted conversation before this turn.
	if f := t.s.p.stateFiles(t.s.cfg); f.base != "" {
		if err := fault("summarized"); err != nil {
			return err
		}
		c := t.c
		if err := t.writeBase(f, &c); err != nil {
			return fmt.Errorf("saving the compacted conversation: %w", err)
		}
	}
	return nil
}

// summarize asks the model for a summary of old (the turns from first on,
// with the earlier summary). It returns the summary and how many of the
// oldest turns it dropped unsummarized. Only a ctx error is returned: a
// failed request drops the turns, saying so.
func (t *turnRun) summarize(ctx context.Context, old [][]message, first int) (string, int, error) {
	maxOut := min(max(t.window/8, 256), 4096)
	room := t.window - maxOut - t.scale(600+(len(t.summarySystem())+3)/4)
	rendered := make([]string, len(old))
	tokens := 0
	for i, tm := range old {
		rendered[i] = renderTurn(tm, first+i, int(renderCap*float64(t.window)*4))
		tokens += t.scale((len(rendered[i]) + 3) / 4)
	}
	prev := ""
	if t.c.summary != "" {
		prev = fmt.Sprintf("Summary of turns 1-%d, written earlier:\n\n%s\n\n", t.c.summarized, t.c.summary)
		tokens += t.scale((len(prev) + 3) / 4)
	}
	dropped := 0
	for dropped < len(old) && tokens > room {
		tokens -= t.scale((len(rendered[dropped]) + 3) / 4)
		dropped++
	}
	last := first + len(old) - 1
	var notes []string
	if dropped > 0 {
		notes = append(notes, fmt.Sprintf("(Turns %d-%d were dropped without a summary: they did not fit in the summary request.)", first, first+dropped-1))
	}
	var text string
	if dropped < len(old) {
		var err error
		text, err = t.askSummary(ctx, prev, rendered[dropped:], maxOut)
		if err != nil {
			if ctx.Err() != nil {
				return "", 0, ctx.Err()
			}
			notes = append(notes, fmt.Sprintf("(Turns %d-%d were dropped without a summary: the summary request failed: %.300v.)", first+dropped, last, err))
			dropped = len(old)
		}
	}
	if text == "" {
		text = t.c.summary // the earlier summary still holds
	}
	if limit := maxOut * 6; len(text) > limit {
		text = prefix(text, limit) + " [...]"
	}
	return strings.TrimSpace(strings.Join(append([]string{text}, notes...), "\n\n")), dropped, nil
}

// askSummary makes the summary request.
func (t *turnRun) askSummary(ctx context.Context, prev string, turns []string, maxOut int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Summarize the conversation below for the agent that had it: it will continue from your summary alone, since the conversation no longer fits in its context window. Cover, in at most %d words:\n", maxOut*2/3)
	b.WriteString("- what was asked, and by whom;\n- what was decided and done, and with what result;\n- the open tasks, and what to do next;\n- the agents (names and ids), workspaces, files and branches involved;\n- any name, number or fact the agent must remember.\nWrite the summary only.\n\n")
	b.WriteString(prev)
	b.WriteString("<conversation>\n")
	for _, r := range turns {
		b.WriteString(r)
	}
	b.WriteString("</conversation>\n")
	sys := t.summarySystem()
	req := chatRequest{Model: t.s.model, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}, MaxTokens: maxOut,
		Messages: []message{{Role: "system", Content: strPtr(sys)}, {Role: "user", Content: strPtr(b.String())}}}
	sub := &turnRun{s: t.s, quiet: true, window: t.window, ratio: t.ratio}
	r, _, err := sub.post(ctx, req)
	t.usage.InputTokens += sub.usage.InputTokens
	t.usage.OutputTokens += sub.usage.OutputTokens
	if err != nil {
		return "", err
	}
	text := strings.TrimSpace(r.text)
	if rest, ok := strings.CutPrefix(text, "<think>"); ok { // a reasoning model's thoughts
		if _, after, found := strings.Cut(rest, "</think>"); found {
			text = strings.TrimSpace(after)
		}
	}
	if text == "" {
		return "", fmt.Errorf("the summary is empty")
	}
	return text, nil
}

// summarySystem is the system message of a summary request: the agent's
// instructions (cut to renderCap of the window), for what matters to it.
func (t *turnRun) summarySystem() string {
	sys := "You write the summary that replaces the older part of an agent's conversation."
	if t.instructions != "" {
		sys += " The agent's instructions were:\n\n" + cut(t.instructions, int(renderCap*float64(t.window)*4))
	}
	return sys
}

// renderTurn writes a turn for a summary request, each message cut to
// limit bytes.
func renderTurn(msgs []message, n, limit int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[turn %d]\n", n)
	for _, m := range msgs {
		text := ""
		if m.Content != nil {
			text = *m.Content
		}
		switch {
		case m.Role == "tool":
			fmt.Fprintf(&b, "tool result: %s\n", cut(text, limit))
		case text != "":
			fmt.Fprintf(&b, "%s: %s\n", m.Role, cut(text, limit))
		}
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "%s called %s %s\n", m.Role, c.Function.Name, cut(c.Function.Arguments, limit))
		}
	}
	return b.String()
}

func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	p := prefix(s, limit)
	return p + fmt.Sprintf(" [... %d bytes cut]", len(s)-len(p))
}

// prefix returns s's first n bytes or fewer, whole UTF-8 characters.
func prefix(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutTurn cuts the longest messages of the turn under way (never its
// tool calls' arguments) while the request is over the threshold. It
// returns how many it cut.
func (t *turnRun) cutTurn() int {
	target := int(0.9 * float64(t.threshold()))
	if t.estimate() <= target {
		return 0
	}
	idx := make([]int, 0, len(t.cur))
	for i, m := range t.cur {
		if m.Content != nil && len(*m.Content) > 2048 {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return len(*t.cur[idx[a]].Content) > len(*t.cur[idx[b]].Content) })
	n := 0
	for _, i := range idx {
		over := t.estimate() - target
		if over <= 0 {
			break
		}
		text := *t.cur[i].Content
		keep := max(1024, len(text)-over*4*2)
		if keep >= len(text) {
			continue
		}
		p := prefix(text, keep)
		t.cur[i].Content = strPtr(p + fmt.Sprintf("\n[... %d bytes cut here: the message did not fit in the model's context window]", len(text)-len(p)))
		n++
	}
	return n
}
