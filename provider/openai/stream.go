package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/internal/retry"
)

// reply is one assistant message.
type reply struct {
	text  string
	calls []toolCall
}

// tools are the tool definitions a request offers.
func (t *turnRun) tools() []toolDef {
	var list []Tool
	switch {
	case t.turn.ToolList != nil:
		for _, tl := range t.turn.ToolList {
			list = append(list, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
		}
	case t.s.p.opts.Tools != nil:
		list = t.s.p.opts.Tools()
	}
	var defs []toolDef
	for _, tl := range list {
		params := tl.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		defs = append(defs, toolDef{Type: "function", Function: functionDef{Name: tl.Name, Description: tl.Description, Parameters: params}})
	}
	return defs
}

func (t *turnRun) request() chatRequest {
	return chatRequest{Model: t.s.model, Messages: t.messages(), Tools: t.tools(), Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
}

// complete makes one request of the turn, with retries.
func (t *turnRun) complete(ctx context.Context) (reply, error) {
	est := t.estimate()
	out, u, err := t.post(ctx, t.request())
	if err == nil {
		t.lastPrompt, t.lastOutput = u.PromptTokens, u.CompletionTokens
		t.calibrate(est, u.PromptTokens)
	}
	return out, err
}

// post makes one request, with retries, and adds its usage to the turn's.
func (t *turnRun) post(ctx context.Context, req chatRequest) (reply, usage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return reply{}, usage{}, err
	}
	url := t.s.p.baseURL() + "/chat/completions"
	var out reply
	var use usage
	err = t.s.p.opts.Retry.Do(ctx, "POST "+url, func(ctx context.Context) error {
		r, u, err := t.attempt(ctx, url, body)
		if err == nil {
			out, use = r, u
			t.usage.InputTokens += u.PromptTokens
			t.usage.OutputTokens += u.CompletionTokens
		}
		return err
	})
	return out, use, err
}

// attempt posts once and reads the whole answer.
func (t *turnRun) attempt(ctx context.Context, url string, body []byte) (reply, usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return reply{}, usage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if key := t.s.p.apiKey(); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := t.s.p.opts.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return reply{}, usage{}, ctx.Err()
		}
		if retry.NetworkTransient(err) {
			return reply{}, usage{}, &retry.Transient{Err: err}
		}
		return reply{}, usage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, raw := readSnippet(resp)
		if ce := asContextError(resp.StatusCode, raw, snippet); ce != nil {
			return reply{}, usage{}, ce
		}
		err := fmt.Errorf("%s: %s", resp.Status, snippet)
		if retry.RetryableStatus(resp.StatusCode) || retry.IsOverloaded(snippet) && resp.StatusCode >= 400 && resp.StatusCode != 401 && resp.StatusCode != 403 {
			return reply{}, usage{}, &retry.Transient{Status: resp.StatusCode, RetryAfter: retry.ParseRetryAfter(resp.Header, time.Now()), Err: errors.New(snippet)}
		}
		return reply{}, usage{}, err
	}
	var r reply
	var u usage
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		r, u, err = t.readJSON(resp)
	} else {
		r, u, err = t.readStream(ctx, resp)
	}
	if err != nil && ctx.Err() != nil {
		return reply{}, usage{}, ctx.Err()
	}
	return r, u, err
}

// readSnippet returns what an error response says, for the error, and
// the first bytes of its body.
func readSnippet(resp *http.Response) (string, []byte) {
	buf := make([]byte, errBodyRead)
	n, _ := fullRead(resp.Body, buf)
	raw := buf[:n]
	// Prefer the API's own message.
	var e struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != nil && e.Error.Message != "" {
		return e.Error.String(), raw
	}
	s := strings.TrimSpace(string(raw[:min(n, errBodyQuote)]))
	if s == "" {
		s = "(empty body)"
	}
	return s, raw
}

func fullRead(r interface{ Read([]byte) (int, error) }, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// chunk is one streamed event, or a whole JSON completion.
type chunk struct {
	Choices []struct {
		Delta   *delta `json:"delta"`
		Message *delta `json:"message"`
		Finish  string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

type delta struct {
	Content   *string `json:"content"`
	ToolCalls []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// assembler builds a reply from deltas.
type assembler struct {
	t     *turnRun
	text  strings.Builder
	calls []toolCall
	done  bool // a finish reason was seen
}

func (a *assembler) add(d *delta, stream bool) error {
	if d == nil {
		return nil
	}
	if d.Content != nil && *d.Content != "" {
		if a.t.size += len(*d.Content); a.t.size > maxTurnText {
			return fmt.Errorf("%w: more than %d bytes of text in one turn", provider.ErrProtocol, maxTurnText)
		}
		a.text.WriteString(*d.Content)
		if stream {
			a.t.emit(provider.ChunkText, *d.Content)
		}
	}
	for _, tc := range d.ToolCalls {
		i := len(a.calls)
		if tc.Index != nil {
			i = *tc.Index
		} else if tc.ID == "" && i > 0 {
			i-- // a continuation without an index
		}
		if i < 0 || i > len(a.calls) || i > 128 {
			return fmt.Errorf("%w: tool call index %d out of order", provider.ErrProtocol, i)
		}
		if i == len(a.calls) {
			a.calls = append(a.calls, toolCall{Type: "function"})
		}
		c := &a.calls[i]
		if tc.ID != "" {
			c.ID = tc.ID
		}
		c.Function.Name += tc.Function.Name
		c.Function.Arguments += tc.Function.Arguments
		if len(c.Function.Arguments) > maxEventSize {
			return fmt.Errorf("%w: tool call arguments over %d bytes", provider.ErrProtocol, maxEventSize)
		}
	}
	return nil
}

func (a *assembler) reply() (reply, error) {
	for i, c := range a.calls {
		if c.Function.Name == "" {
			return reply{}, fmt.Errorf("%w: tool call %d has no name", provider.ErrProtocol, i)
		}
	}
	return reply{text: a.text.String(), calls: a.calls}, nil
}

func (t *turnRun) readJSON(resp *http.Response) (reply, usage, error) {
	var c chunk
	dec := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, maxTurnText))
	if err := dec.Decode(&c); err != nil {
		return reply{}, usage{}, fmt.Errorf("%w: the completion is not JSON: %v", provider.ErrProtocol, err)
	}
	if c.Error != nil {
		return reply{}, usage{}, apiErr(c.Error)
	}
	if len(c.Choices) == 0 || c.Choices[0].Message == nil {
		return reply{}, usage{}, fmt.Errorf("%w: the completion has no message", provider.ErrProtocol)
	}
	a := &assembler{t: t}
	if err := a.add(c.Choices[0].Message, false); err != nil {
		return reply{}, usage{}, err
	}
	r, err := a.reply()
	if err == nil {
		if r.text != "" {
			t.emit("text", r.text)
		}
	}
	var u usage
	if c.Usage != nil {
		u = *c.Usage
	}
	return r, u, err
}

func apiErr(e *apiError) error {
	if ce := asContextError(http.StatusBadRequest, nil, e.Type+" "+e.Message+" "+fmt.Sprint(e.Code)); ce != nil {
		return ce
	}
	if retry.IsOverloaded(e.Type + " " + e.Message + " " + fmt.Sprint(e.Code)) {
		return &retry.Transient{Err: errors.New(e.String())}
	}
	return fmt.Errorf("the API reported an error: %s", e.String())
}

// readStream reads server-sent events until [DONE].
func (t *turnRun) readStream(ctx context.Context, resp *http.Response) (reply, usage, error) {
	sc := newEventScanner(resp.Body, maxEventSize)
	a := &assembler{t: t}
	var u usage
	events := 0
	for {
		data, err := sc.next()
		if err != nil {
			if ctx.Err() != nil {
				return reply{}, usage{}, ctx.Err()
			}
			if errors.Is(err, errEventTooLong) {
				return reply{}, usage{}, fmt.Errorf("%w: %v", provider.ErrProtocol, err)
			}
			if errors.Is(err, provider.ErrProtocol) {
				return reply{}, usage{}, err
			}
			if errors.Is(err, errEOF) {
				if a.done {
					break // some servers end without [DONE]
				}
				return reply{}, usage{}, &retry.Transient{Err: fmt.Errorf("the stream ended after %d events without [DONE]", events)}
			}
			if retry.NetworkTransient(err) {
				return reply{}, usage{}, &retry.Transient{Err: fmt.Errorf("reading the stream after %d events: %w", events, err)}
			}
			return reply{}, usage{}, fmt.Errorf("reading the stream: %w", err)
		}
		if string(data) == "[DONE]" {
			break
		}
		events++
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			return reply{}, usage{}, fmt.Errorf("%w: event %d is not JSON (%v): %q", provider.ErrProtocol, events, err, quote(data))
		}
		if c.Error != nil {
			return reply{}, usage{}, apiErr(c.Error)
		}
		if c.Usage != nil {
			u = *c.Usage
		}
		for _, ch := range c.Choices {
			if err := a.add(ch.Delta, true); err != nil {
				return reply{}, usage{}, err
			}
			if ch.Finish != "" {
				a.done = true
			}
		}
	}
	r, err := a.reply()
	return r, u, err
}

func quote(b []byte) string {
	if len(b) > badQuote {
		return string(b[:badQuote]) + "..."
	}
	return string(b)
}
