package script

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
	"github.com/substrat/substrat/provider/script/native"
)

// Limits of model mode. Variables so that tests can shorten them.
var (
	// maxLineSize bounds one line of model output, without its newline.
	maxLineSize = 1 << 20
	// maxTurnText bounds the streamed text of one turn.
	maxTurnText = 16 << 20
	// exitGrace is how long the program has to exit after it ended the
	// turn (or closed stdout) before its process group is killed.
	exitGrace = 5 * time.Second
)

const (
	stderrKeep   = 64 << 10 // bytes of stderr kept
	stderrQuote  = 2 << 10  // bytes of stderr quoted in an error
	outputQuote  = 200      // bytes of a bad output line quoted in an error
	readBufSize  = 64 << 10
	maxErrorText = 4 << 10 // bytes of an "error" line's message kept
)

// Lines Substrat writes.
type turnMsg struct {
	Type         string `json:"type"`
	AgentID      string `json:"agent_id"`
	Name         string `json:"name"`
	SessionID    string `json:"session_id"`
	Instructions string `json:"instructions,omitempty"`
	Prompt       string `json:"prompt"`
	Turn         int    `json:"turn"`
}

type resultMsg struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Text    string `json:"text"`
	IsError bool   `json:"is_error"`
}

// outMsg is any line the program writes.
type outMsg struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Name    string          `json:"name"`
	Args    json.RawMessage `json:"args"`
	Text    *string         `json:"text"`
	Message string          `json:"message"`
	Usage   *provider.Usage `json:"usage"`
}

var errLineTooLong = errors.New("line too long")

// modelRun is one turn of a model program.
type modelRun struct {
	t      native.ModelTurn
	turn   provider.Turn
	ctx    context.Context // the turn's
	key    string          // native.PromptKey(turn.Prompt)
	in     *lineWriter
	lines  int    // lines read
	last   []byte // the last non-blank line read
	calls  int
	texts  []string
	size   int // total length of texts
	done   *outMsg
	failed error // an "error" line
}

// runModel runs one turn of a session in model mode.
func runModel(ctx context.Context, t native.ModelTurn) (provider.TurnResult, error) {
	turn, n := t.Turn, t.N
	fail := func(err error) (provider.TurnResult, error) {
		return provider.TurnResult{}, fmt.Errorf("script: model %s: %w", t.Path, err)
	}
	// runCtx is what kills the process group: the turn's context, or
	// killRun when the grace period after the turn ends runs out.
	runCtx, killRun := context.WithCancel(ctx)
	defer killRun()

	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return fail(err)
	}
	defer outR.Close()

	stderr := &proc.TailBuffer{Max: stderrKeep}
	process := provider.Process{Path: t.Path, Args: []string{t.Path}, Dir: t.Config.WorkDir, Env: []string{
		"SUBSTRAT_AGENT_ID=" + t.Config.AgentID,
		"SUBSTRAT_AGENT_NAME=" + t.Config.Name,
		"SUBSTRAT_SESSION_ID=" + t.SessionID}}
	if t.Config.Sandbox != nil {
		if process, err = t.Config.Sandbox(runCtx, process, provider.SandboxNeeds{}); err != nil {
			inR.Close()
			inW.Close()
			outW.Close()
			return fail(fmt.Errorf("script: sandbox for %s: %w", t.Path, err))
		}
	} else {
		process.Env = append(os.Environ(), process.Env...)
	}
	if t.Config.Limit != nil {
		if err := t.Config.Limit(&process); err != nil {
			proc.CloseFiles(process)
			inR.Close()
			inW.Close()
			outW.Close()
			return fail(fmt.Errorf("resource limits for %s: %w", t.Path, err))
		}
	}
	h, err := proc.Launch(runCtx, process, provider.Stdio{Stdin: inR, Stdout: outW, Stderr: stderr}, t.Config.Start)
	inR.Close()
	outW.Close()
	proc.CloseFiles(process)
	if err != nil {
		inW.Close()
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(err)
	}
	if t.Config.Track != nil {
		defer t.Config.Track(h.Pid())()
	}

	r := &modelRun{t: t, turn: turn, ctx: ctx, key: native.PromptKey(turn.Prompt), in: startLineWriter(inW)}
	// Unblock our reads and writes when the turn is cancelled or the
	// program killed, even if an escaped grandchild holds the pipes.
	stopUnblock := context.AfterFunc(runCtx, func() {
		past := time.Unix(1, 0)
		outR.SetReadDeadline(past)
		inW.SetWriteDeadline(past)
	})
	defer stopUnblock()

	r.in.send(turnMsg{
		Type: "turn", AgentID: t.Config.AgentID, Name: t.Config.Name, SessionID: t.SessionID,
		Instructions: provider.InstructionsOf(t.Config, turn), Prompt: turn.Prompt, Turn: n,
	})
	readErr := r.read(bufio.NewReaderSize(outR, readBufSize))

	// End the process. After done, error or EOF the program may exit by
	// itself; otherwise it is killed at once.
	var graceKilled atomic.Bool
	r.in.close()
	if readErr == nil && ctx.Err() == nil {
		t := time.AfterFunc(exitGrace, func() { graceKilled.Store(true); killRun() })
		h.Exited()
		t.Stop()
	}
	// A local leader is not reaped yet, so its pid still names the group.
	h.Kill()
	waitErr := h.Wait()
	inW.SetWriteDeadline(time.Unix(1, 0))
	<-r.in.done

	stderrNote := ""
	if tail := stderr.Tail(stderrQuote); tail != "" {
		stderrNote = "; stderr: " + tail
	}
	switch {
	case ctx.Err() != nil:
		return fail(fmt.Errorf("%w%s", ctx.Err(), stderrNote))
	case readErr != nil:
		return fail(fmt.Errorf("%w%s", readErr, stderrNote))
	case r.failed != nil:
		return fail(fmt.Errorf("%w%s", r.failed, stderrNote))
	case r.done == nil:
		status := "exited"
		switch {
		case graceKilled.Load():
			status = "closed stdout, then was killed"
		case waitErr != nil:
			status = waitErr.Error()
		}
		return fail(fmt.Errorf("%w: %s without a done line (%d lines read, last %s)%s",
			provider.ErrProtocol, status, r.lines, r.lastQuoted(), stderrNote))
	case waitErr != nil && !graceKilled.Load() && !errors.Is(waitErr, exec.ErrWaitDelay):
		return fail(fmt.Errorf("%w after its done line%s", waitErr, stderrNote))
	}
	return r.result(), nil
}

// read handles the program's output until done, error, EOF or a failure.
// A nil return means the program ended the turn or closed stdout; cancelling
// the turn also returns nil (the caller checks the context).
func (r *modelRun) read(br *bufio.Reader) error {
	for r.done == nil && r.failed == nil {
		b, err := readLine(br, maxLineSize)
		switch {
		case errors.Is(err, io.EOF), err != nil && r.ctx.Err() != nil:
			return nil
		case errors.Is(err, errLineTooLong):
			return fmt.Errorf("%w: line %d is longer than %d bytes (starts %s)",
				provider.ErrProtocol, r.lines+1, maxLineSize, proc.Quote(b, outputQuote))
		case err != nil:
			return fmt.Errorf("reading output: %w", err)
		}
		r.lines++
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		r.last = b
		if err := r.handle(b); err != nil {
			return err
		}
		if r.ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// handle acts on one non-blank line of output.
func (r *modelRun) handle(b []byte) error {
	var m outMsg
	reason := ""
	if b = bytes.TrimSpace(b); b[0] != '{' {
		reason = "is not a JSON object"
	} else if err := json.Unmarshal(b, &m); err != nil {
		reason = "is not a valid message (" + err.Error() + ")"
	} else if m.Type == "" {
		reason = "has no type"
	}
	if reason != "" {
		return fmt.Errorf("%w: line %d %s: %s", provider.ErrProtocol, r.lines, reason, proc.Quote(b, outputQuote))
	}
	switch m.Type {
	case "text":
		if m.Text != nil && *m.Text != "" {
			if r.size += len(*m.Text); r.size > maxTurnText {
				return fmt.Errorf("%w: line %d: more than %d bytes of text in one turn", provider.ErrProtocol, r.lines, maxTurnText)
			}
			r.texts = append(r.texts, *m.Text)
			native.Emit(r.turn, "text", *m.Text)
		}
	case "call":
		if m.Name == "" {
			return fmt.Errorf("%w: line %d: call without a name: %s", provider.ErrProtocol, r.lines, proc.Quote(b, outputQuote))
		}
		r.call(m)
	case "done":
		if m.Usage != nil && (m.Usage.InputTokens < 0 || m.Usage.OutputTokens < 0 || m.Usage.CostUSD < 0) {
			return fmt.Errorf("%w: line %d: negative usage: %s", provider.ErrProtocol, r.lines, proc.Quote(b, outputQuote))
		}
		r.done = &m
	case "error":
		msg := m.Message
		if msg == "" {
			msg = "(no message)"
		}
		if len(msg) > maxErrorText {
			msg = msg[:maxErrorText] + "..."
		}
		r.failed = fmt.Errorf("model reported an error: %s", msg)
	default:
		return fmt.Errorf("%w: line %d has unknown type %q: %s", provider.ErrProtocol, r.lines, m.Type, proc.Quote(b, outputQuote))
	}
	return nil
}

// call runs one tool call and writes its result back.
func (r *modelRun) call(m outMsg) {
	id := m.ID
	if id == "" {
		id = native.ToolUseID(r.t.Config.AgentID, r.key, r.calls)
	}
	r.calls++
	args := json.RawMessage(bytes.TrimSpace(m.Args))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	var res provider.ToolResult
	if args[0] != '{' {
		res = provider.ToolResult{Text: "args must be a JSON object, got " + proc.Quote(args, 80), IsError: true}
	} else {
		native.Emit(r.turn, "tool_call", m.Name+" "+string(args))
		res = native.CallTool(r.ctx, r.turn.Tools, provider.ToolCall{ID: id, Name: m.Name, Args: args})
	}
	native.Emit(r.turn, "tool_result", native.ResultLine(m.Name, res))
	r.in.send(resultMsg{Type: "result", ID: id, Text: res.Text, IsError: res.IsError})
}

func (r *modelRun) result() provider.TurnResult {
	text := strings.Join(r.texts, "")
	if r.done.Text != nil {
		text = *r.done.Text
	}
	usage := native.Estimate(r.turn.Prompt, text)
	if r.done.Usage != nil {
		usage = *r.done.Usage
	}
	return provider.TurnResult{Text: text, Usage: usage}
}

func (r *modelRun) lastQuoted() string {
	if r.last == nil {
		return "(none)"
	}
	return proc.Quote(r.last, outputQuote)
}

// readLine reads one line without its "\n" (or "\r\n"). A last line without
// a newline counts. A line longer than max fails with errLineTooLong and its
// first max bytes; the reader is then left mid-line.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if len(bytes.TrimSuffix(line, []byte("\n"))) > max {
			return line[:max], errLineTooLong
		}
		switch {
		case err == nil:
			line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimSuffix(line, []byte("\r")), nil
		default:
			return line, err
		}
	}
}

// lineWriter writes lines to the program's stdin from its own goroutine, so
// that a program that does not read stdin can never block the turn. After a
// write fails the rest is dropped.
type lineWriter struct {
	f    *os.File
	wake chan struct{} // capacity 1
	done chan struct{} // closed when the goroutine has closed f and ended

	mu      sync.Mutex // guards the fields below
	queue   [][]byte
	closing bool
}

func startLineWriter(f *os.File) *lineWriter {
	w := &lineWriter{f: f, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// send queues v as one JSON line.
func (w *lineWriter) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own message types always marshal
	}
	w.mu.Lock()
	if !w.closing {
		w.queue = append(w.queue, append(b, '\n'))
	}
	w.mu.Unlock()
	w.poke()
}

// close makes the goroutine close f once the queue is written.
func (w *lineWriter) close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.poke()
}

func (w *lineWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *lineWriter) run() {
	defer close(w.done)
	defer w.f.Close()
	failed := false
	for {
		w.mu.Lock()
		q, closing := w.queue, w.closing
		w.queue = nil
		w.mu.Unlock()
		if len(q) == 0 {
			if closing {
				return
			}
			<-w.wake
			continue
		}
		for _, b := range q {
			if !failed {
				_, err := w.f.Write(b)
				failed = err != nil
			}
		}
	}
}
