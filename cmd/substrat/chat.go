package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// AgentChatCmd talks with an agent line by line.
type AgentChatCmd struct {
	Ref string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
}

// Run reads lines from standard input (a terminal or a pipe); each is a
// message from USER, and its turn streams back as a conversation
// (daemon log's view). Ctrl-D ends the chat. Ctrl-C during a turn stops
// following it (the message is stored and the turn goes on in the
// daemon); at the prompt it ends the chat.
func (c *AgentChatCmd) Run(g *Globals) error {
	tty := term.IsTerminal(int(os.Stdin.Fd()))
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	lines := readChatLines(os.Stdin)
	v := &convo{w: os.Stdout}
	if tty {
		fmt.Fprintf(os.Stderr, "chatting with %s: each line is a message from USER; Ctrl-D ends, Ctrl-C stops following a turn\n", c.Ref)
	}
	for {
		if tty {
			fmt.Fprint(os.Stderr, "> ")
		}
		var in chatLine
		select {
		case in = <-lines:
		case <-sigs:
			fmt.Fprintln(os.Stderr)
			return &exitError{code: 130, msg: "interrupted"}
		}
		if in.err == io.EOF {
			return nil
		}
		if in.err != nil {
			return in.err
		}
		if strings.TrimSpace(in.text) == "" {
			continue
		}
		if err := c.turn(g, v, in.text, sigs); err != nil {
			return err
		}
	}
}

// turn sends text and prints its turn as it streams, until it ends or
// SIGINT; an error only when the chat cannot go on.
func (c *AgentChatCmd) turn(g *Globals, v *convo, text string, sigs <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-stopped:
		}
	}()
	defer close(stopped)
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	stored, streamed := "", false
	res, err := rpc.StreamRaw(ctx, cl, api.AgentSend, api.SendMessageParams{Ref: c.Ref, Text: text, Wait: true}, func(raw json.RawMessage) error {
		if g.JSON {
			return printJSONLine(raw)
		}
		var e struct {
			Type      api.WatchType  `json:"type"`
			Data      provider.Chunk `json:"data"`
			Count     int            `json:"count"`
			MessageID string         `json:"message_id"`
		}
		if json.Unmarshal(raw, &e) != nil {
			return nil
		}
		switch e.Type {
		case api.WatchSent: // stored: shown from here on
			stored = e.MessageID
			v.line(time.Now(), "< USER", text)
		case api.WatchOutput:
			v.chunk(time.Now(), e.Data, true)
			streamed = streamed || e.Data.Kind == provider.ChunkText
		case api.WatchDropped:
			v.line(time.Now(), "...", fmt.Sprintf("%d events dropped: this reader fell behind the daemon", e.Count))
		}
		return nil
	})
	switch {
	case err != nil && ctx.Err() != nil && stored != "":
		fmt.Fprintf(os.Stderr, "interrupted; message %s is stored, and its turn goes on in the daemon ('substrat daemon log %s -f' follows it)\n", stored, c.Ref)
		return nil
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "interrupted before the message was stored: it was not sent")
		return nil
	case err != nil:
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code != api.CodeNotFound {
			// The daemon refused this message (too large...): say so, and
			// go on with the next line.
			v.line(time.Now(), "ERROR", err.Error())
			return nil
		}
		return err
	case res.Held != "":
		v.line(time.Now(), "held", fmt.Sprintf("message %s stored; no turn takes it now: %s", res.MessageID, res.Held))
	case res.Failed != "":
		v.line(time.Now(), "ERROR", fmt.Sprintf("the turn failed: %s (message %s stays in the inbox)", res.Failed, res.MessageID))
	default:
		if (!streamed || res.Dropped > 0) && res.Text != "" {
			v.line(time.Now(), "text", res.Text) // a provider that streams no text, or a reader that fell behind
		}
		v.line(time.Now(), "-- turn", "done (message "+res.MessageID+" delivered)")
	}
	return nil
}

// chatLine is a line read, or why reading stopped.
type chatLine struct {
	text string
	err  error
}

// readChatLines reads lines (each at most a message's size) into a
// channel, in a goroutine, so that the chat can also wait for Ctrl-C.
func readChatLines(r io.Reader) <-chan chatLine {
	out := make(chan chatLine)
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			var line []byte
			var err error
			for {
				var part []byte
				part, err = br.ReadSlice('\n')
				line = append(line, part...)
				if len(line) > fsstore.MaxMessageSize {
					out <- chatLine{err: fmt.Errorf("a line longer than %d bytes: send it with 'substrat agent send REF -'", fsstore.MaxMessageSize)}
					return
				}
				if err != bufio.ErrBufferFull {
					break
				}
			}
			if len(line) > 0 {
				out <- chatLine{text: strings.TrimRight(string(line), "\r\n")}
			}
			if err != nil {
				out <- chatLine{err: err}
				return
			}
		}
	}()
	return out
}

// chatHint tells a person who attaches, on a terminal, how to talk to the
// agent too.
func chatHint(ref string) {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		fmt.Fprintf(os.Stderr, "following %s (Ctrl-C ends); to talk to it: substrat agent chat %s\n", ref, ref)
	}
}
