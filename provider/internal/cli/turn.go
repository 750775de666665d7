package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/proc"
	"github.com/substrat/substrat/provider/internal/retry"
)

// turnRead is what a turn's output gave, read line by line (read).
type turnRead struct {
	final       *Final
	compactions []provider.Compaction
	texts       []string // the streamed text, for a final line without any
	err         error    // why reading stopped before a final line
	lines       int
	last        []byte // the last line that was not blank
}

// read reads the CLI's lines until its final one, an error, or the end
// of its output, streaming the chunks to turn.Output.
func (s *session) read(ctx context.Context, pr *proc.Proc, turn provider.Turn) turnRead {
	var (
		r    turnRead
		size int
	)
	for r.final == nil && r.err == nil {
		b, err := pr.Line()
		switch {
		case ctx.Err() != nil:
			r.err = ctx.Err()
			continue
		case errors.Is(err, io.EOF):
		case errors.Is(err, proc.ErrLineTooLong):
			r.err = fmt.Errorf("%w: line %d is longer than %d bytes (starts %s)", provider.ErrProtocol, r.lines+1, s.p.spec.MaxLine, proc.Quote(b, lineQuote))
			continue
		case err != nil:
			r.err = fmt.Errorf("reading the output: %w", err)
			continue
		}
		if err != nil {
			break // EOF
		}
		r.lines++
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		r.last = b
		l, err := s.p.spec.Parse(bytes.TrimSpace(b))
		if err != nil {
			r.err = fmt.Errorf("%w: line %d: %v: %s", provider.ErrProtocol, r.lines, err, proc.Quote(b, lineQuote))
			continue
		}
		if l.SessionID != "" && l.SessionID != s.ID() {
			if err := s.learn(l.SessionID); err != nil {
				r.err = err
				continue
			}
		}
		for _, ch := range l.Chunks {
			if ch.Text == "" {
				continue
			}
			if size += len(ch.Text); size > maxTurnText {
				r.err = fmt.Errorf("%w: more than %d bytes of output in one turn", provider.ErrProtocol, maxTurnText)
				break
			}
			if turn.Output != nil {
				turn.Output(ch)
			}
			if ch.Kind == provider.ChunkText {
				r.texts = append(r.texts, ch.Text)
			}
		}
		r.compactions = append(r.compactions, l.Compactions...)
		r.final = l.Final
	}
	return r
}

// outcome is the turn's result from what read gave and how the process
// ended (waitErr, when it was waited for): the final line's text and
// usage, or why there is none.
func (s *session) outcome(ctx context.Context, path string, pr *proc.Proc, r turnRead, waitErr error) (provider.TurnResult, error) {
	stderr := ""
	if tail := pr.Stderr(stderrQuote); tail != "" {
		stderr = "; stderr: " + tail
	}
	switch {
	case ctx.Err() != nil:
		return provider.TurnResult{}, fmt.Errorf("%w%s", ctx.Err(), stderr)
	case r.err != nil:
		return provider.TurnResult{}, fmt.Errorf("%w%s", r.err, stderr)
	case r.final == nil:
		status := "exited"
		if waitErr != nil {
			status = waitErr.Error()
		}
		lastLine := "(none)"
		if r.last != nil {
			lastLine = proc.Quote(r.last, lineQuote)
		}
		err := fmt.Errorf("%s %s without a result (%d lines read, last %s)%s", filepath.Base(path), status, r.lines, lastLine, stderr)
		if retry.IsOverloaded(stderr + lastLine) {
			return provider.TurnResult{}, &retry.Transient{Err: err}
		}
		return provider.TurnResult{}, err
	case r.final.Err != nil:
		return provider.TurnResult{}, r.final.Err
	}
	final := r.final
	if final.Text == "" { // a CLI whose last line carries no text: what it said
		final.Text = strings.Join(r.texts, s.p.spec.TextSeparator)
	}
	usage, err := s.turnUsage(final)
	if err != nil {
		return provider.TurnResult{}, err
	}
	return provider.TurnResult{Text: final.Text, Usage: usage, Compactions: r.compactions}, nil
}

// turnUsage returns the turn's own usage: for the running totals a CLI
// reports, the difference from the last ones seen, which it then saves.
// Only once saved are they remembered: if saving fails, the turn fails,
// and the next turn's difference counts this one's usage too. When the
// last totals are not known (a session that began before Substrat kept
// them), the running parts of this turn's usage are unknown, and its
// totals become the base of the next.
func (s *session) turnUsage(f *Final) (provider.Usage, error) {
	u := f.Usage
	if !f.CumulativeTokens && !f.CumulativeCost {
		return u, nil
	}
	s.mu.Lock()
	id, known := s.id, s.totals
	s.mu.Unlock()
	var last Totals
	if known != nil {
		last = *known
	}
	next := last
	if f.CumulativeTokens && !u.TokensUnknown {
		next.InputTokens, next.OutputTokens = u.InputTokens, u.OutputTokens
		switch {
		case known == nil:
			u.InputTokens, u.OutputTokens, u.TokensUnknown = 0, 0, true
		case u.InputTokens < last.InputTokens || u.OutputTokens < last.OutputTokens:
			// The CLI's count started over: taken whole.
		default:
			u.InputTokens -= last.InputTokens
			u.OutputTokens -= last.OutputTokens
		}
	}
	if f.CumulativeCost && !u.CostUnknown {
		next.CostUSD = u.CostUSD
		switch {
		case known == nil:
			u.CostUSD, u.CostUnknown = 0, true
		case u.CostUSD < last.CostUSD:
		default:
			u.CostUSD -= last.CostUSD
		}
	}
	if err := s.save(id, &next); err != nil {
		return provider.Usage{}, fmt.Errorf("saving the usage totals: %w", err)
	}
	s.mu.Lock()
	s.totals = &next
	s.mu.Unlock()
	return u, nil
}
