package openai

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/substrat/substrat/provider"
)

// conv is a conversation and what is known of it.
type conv struct {
	msgs       []message // the system message first, if any
	requests   int       // requests made, for call ids
	gen        int64     // of the base file (see state.go)
	turns      int       // turns had
	summarized int       // the first turns, replaced by summary
	summary    string
	// saved says the state files hold msgs, so that the next turn
	// appends to the journal; otherwise it writes a base.
	saved bool
}

func (c *conv) blob(id string) *blob {
	return &blob{Version: 1, SessionID: id, Requests: c.requests, Gen: c.gen, Turns: c.turns,
		Summarized: c.summarized, Summary: c.summary, Messages: c.msgs}
}

// session is one conversation.
type session struct {
	p     *Provider
	cfg   provider.Config
	model string
	id    string

	mu      sync.Mutex // guards the fields below
	busy    bool
	stopped bool
	c       conv
	// ratio is the server's prompt tokens per estimated token, from the
	// last request that reported them (1 until then; at most 4).
	ratio float64
	// written counts the bytes written to the state files, for tests and
	// benchmarks.
	written int64
}

func (s *session) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		s.mu.Unlock()
		return provider.TurnResult{}, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrBusy)
	}
	s.busy = true
	c := s.c
	c.msgs = append([]message(nil), s.c.msgs...)
	ratio := s.ratio
	s.mu.Unlock()

	instructions := provider.InstructionsOf(s.cfg, turn)
	c.msgs = withSystem(c.msgs, instructions, c.summary, c.summarized)
	t := &turnRun{s: s, turn: turn, c: c, instructions: instructions, ratio: ratio}
	res, err := t.run(ctx)
	if err == nil {
		t.c.turns++
		err = t.save()
	}
	s.mu.Lock()
	s.busy = false
	s.ratio = t.ratio
	s.written += t.written
	switch {
	case s.stopped:
	case err == nil:
		s.c = t.c
		s.c.msgs = append(t.c.msgs, t.cur...)
	case t.compacted || !t.c.saved:
		// The turn failed, but what it compacted (written, or to be
		// written by the next turn) stays compacted.
		s.c = t.c
		s.c.turns = c.turns
	}
	s.mu.Unlock()
	if err != nil {
		return provider.TurnResult{}, fmt.Errorf("openai: model %s: %w", s.model, err)
	}
	return res, nil
}

// save writes the turn to the state files, if there are any: a line in
// the journal, or a whole base for a session's first turn.
func (t *turnRun) save() error {
	f := t.s.p.stateFiles(t.s.cfg)
	if f.base == "" {
		return nil
	}
	if t.c.saved {
		n, err := f.appendTurn(journalLine{Gen: t.c.gen, Turn: t.c.turns, Requests: t.c.requests, Messages: t.cur})
		t.written += n
		if err != nil {
			t.c.saved = false // a torn line, perhaps: the next turn writes a base
		}
		return err
	}
	all := t.c
	all.msgs = append(append([]message(nil), t.c.msgs...), t.cur...)
	return t.writeBase(f, &all)
}

// writeBase writes c as a new base, of the next generation, and records
// in t.c whether it was written.
func (t *turnRun) writeBase(f stateFiles, c *conv) error {
	b := c.blob(t.s.id)
	b.Gen = t.c.gen + 1
	n, err := f.writeBase(b)
	t.written += n
	c.gen = b.Gen
	t.c.gen, t.c.saved = b.Gen, err == nil
	return err
}

func (s *session) Suspend(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return nil, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrStopped)
	case s.busy:
		return nil, fmt.Errorf("openai: session %s: %w", s.id, provider.ErrBusy)
	}
	s.stopped = true
	return json.Marshal(s.c.blob(s.id))
}

func (s *session) Stop() error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return nil
}

// turnRun is one turn: requests until a final answer.
type turnRun struct {
	s            *session
	turn         provider.Turn
	instructions string
	c            conv      // the conversation before this turn (compacted, perhaps)
	cur          []message // this turn's messages
	usage        provider.Usage
	size         int
	quiet        bool // streams nothing (a summary request)

	window      int     // the model's context window, in tokens
	ratio       float64 // see session.ratio
	toolTokens  int     // estimated tokens of the tool definitions
	retried     bool    // compacted and retried after a context error
	compacted   bool
	compactions []provider.Compaction
	// lastPrompt and lastOutput are the last request's usage as the
	// server reported it.
	lastPrompt, lastOutput int64
	written                int64
}

func (t *turnRun) emit(kind, text string) {
	if t.turn.Output != nil && text != "" && !t.quiet {
		t.turn.Output(provider.Chunk{Kind: kind, Text: text})
	}
}

func (t *turnRun) run(ctx context.Context) (provider.TurnResult, error) {
	if err := ctx.Err(); err != nil {
		return provider.TurnResult{}, err
	}
	t.window = t.s.p.window(ctx, t.s.model, t.turn.ContextWindow)
	t.toolTokens = toolTokens(t.tools())
	t.cur = append(t.cur, message{Role: "user", Content: strPtr(t.turn.Prompt)})
	var texts []string
	for round := 0; round < t.s.p.opts.MaxRounds; round++ {
		if t.estimate() > t.threshold() {
			if err := t.compact(ctx, provider.CompactThreshold); err != nil {
				return provider.TurnResult{}, err
			}
		}
		reply, err := t.complete(ctx)
		var ce *contextError
		if errors.As(err, &ce) && !t.retried {
			// Over the window after all: the estimate was low, or the
			// window smaller than thought. Compact and retry, once.
			t.retried = true
			t.overflowed(ce)
			if err := t.compact(ctx, provider.CompactOverflow); err != nil {
				return provider.TurnResult{}, err
			}
			reply, err = t.complete(ctx)
		}
		if err != nil {
			return provider.TurnResult{}, err
		}
		t.c.requests++
		if reply.text != "" {
			texts = append(texts, reply.text)
		}
		am := message{Role: "assistant", Content: strPtr(reply.text), ToolCalls: reply.calls}
		t.cur = append(t.cur, am)
		if len(reply.calls) == 0 {
			res := provider.TurnResult{Text: strings.Join(texts, "\n"), Usage: t.usage, Compactions: t.compactions,
				ContextTokens: t.estimate(), ContextWindow: t.window}
			if t.lastPrompt > 0 {
				res.ContextTokens = int(t.lastPrompt + t.lastOutput)
			}
			return res, nil
		}
		for i := range reply.calls {
			c := &reply.calls[i]
			if c.ID == "" {
				c.ID = t.callID(i)
			}
			res := t.callTool(ctx, c)
			if err := ctx.Err(); err != nil {
				return provider.TurnResult{}, err
			}
			t.cur = append(t.cur, message{Role: "tool", ToolCallID: c.ID, Content: strPtr(toolText(res))})
		}
	}
	return provider.TurnResult{}, fmt.Errorf("the model was still calling tools after %d requests in one turn", t.s.p.opts.MaxRounds)
}

// messages are what the next request sends.
func (t *turnRun) messages() []message {
	return append(append(make([]message, 0, len(t.c.msgs)+len(t.cur)), t.c.msgs...), t.cur...)
}

// toolText is what the model reads of a tool result.
func toolText(res provider.ToolResult) string {
	if res.IsError {
		return "error: " + res.Text
	}
	return res.Text
}

func (t *turnRun) callID(i int) string {
	sum := sha256.Sum256([]byte(t.s.id + "\x00" + strconv.Itoa(t.c.requests) + "\x00" + strconv.Itoa(i)))
	return "call_" + hex.EncodeToString(sum[:])[:24]
}

func (t *turnRun) callTool(ctx context.Context, c *toolCall) provider.ToolResult {
	args := json.RawMessage(strings.TrimSpace(c.Function.Arguments))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	var res provider.ToolResult
	switch {
	case json.Unmarshal(args, &obj) != nil || obj == nil:
		res = provider.ToolResult{IsError: true, Text: fmt.Sprintf("the arguments of %s are not a JSON object: %.200s", c.Function.Name, args)}
	case t.turn.Tools == nil:
		res = provider.ToolResult{IsError: true, Text: "no agent tools in this turn"}
	default:
		t.emit("tool_call", c.Function.Name+" "+string(args))
		res = t.turn.Tools.CallTool(ctx, provider.ToolCall{ID: c.ID, Name: c.Function.Name, Args: args})
	}
	line := c.Function.Name + " -> " + res.Text
	if res.IsError {
		line = c.Function.Name + " -> error: " + res.Text
	}
	t.emit("tool_result", line)
	return res
}
