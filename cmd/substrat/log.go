package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// DaemonLogCmd prints an agent's history.
type DaemonLogCmd struct {
	Agent  string   `arg:"" predictor:"agent" help:"The agent (a name, path or id; an archived agent's id or name too)."`
	Follow bool     `short:"f" help:"Keep printing events as they are committed (through a daemon restart too: none twice, none lost)."`
	Tail   int      `short:"n" help:"Only the last N events (of those the other filters keep)." placeholder:"N"`
	Since  string   `help:"Only events since a duration ago (10m, 2h) or a time (RFC 3339, or 2006-01-02)." placeholder:"WHEN"`
	Type   []string `help:"Only events of these types (repeat, or comma-separated); a bad one lists them all." placeholder:"TYPE"`
	View   string   `help:"conversation (messages in, text out, tool calls, turns, errors, parks, approvals) or events (one line per event)." enum:"conversation,events" default:"conversation"`
}

// eventTypes are the types of the events in an agent's log
// (fsstore/doc.go).
var eventTypes = []string{
	fsstore.EvCreated, fsstore.EvState, fsstore.EvProvider, fsstore.EvTurn, fsstore.EvTurnFailed,
	fsstore.EvMetadata, fsstore.EvEdited, fsstore.EvEditRefused, fsstore.EvSent, fsstore.EvDelivered,
	fsstore.EvSpawned, fsstore.EvPool, fsstore.EvBudget, fsstore.EvGate, fsstore.EvWaiting,
	fsstore.EvReminderSet, fsstore.EvReminderDone, fsstore.EvSubscribed, fsstore.EvUnsubscribed,
	fsstore.EvPermissions, fsstore.EvWorkDir, fsstore.EvToolDenied, fsstore.EvWork, fsstore.EvLimits,
	fsstore.EvApprovalRequested, fsstore.EvApprovalAnswered, fsstore.EvCompaction, fsstore.EvEffect,
	fsstore.EvParked,
}

// params turns the flags into agent.events' params.
func (c *DaemonLogCmd) params(now time.Time) (api.EventsParams, error) {
	p := api.EventsParams{Ref: c.Agent, Tail: c.Tail, Follow: c.Follow}
	if c.Tail < 0 {
		return p, usage("--tail: want a number of events, 0 or more", "")
	}
	for _, t := range c.Type {
		for _, t := range strings.Split(t, ",") {
			if t = strings.TrimSpace(t); t == "" {
				continue
			}
			if !slices.Contains(eventTypes, t) {
				return p, usage(fmt.Sprintf("--type: no event type %q", t), "the types are: "+strings.Join(eventTypes, ", "))
			}
			p.Types = append(p.Types, t)
		}
	}
	if c.Since != "" {
		since, err := parseSince(c.Since, now)
		if err != nil {
			return p, err
		}
		p.Since = since
	}
	return p, nil
}

// parseSince reads --since: a duration ago, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, usage(fmt.Sprintf("--since: %q is neither a duration nor a time", s),
		"give a duration ago (90s, 10m, 2h) or a time (2026-11-25T15:04:05Z, 2026-11-25)")
}

// usage is a bad-usage error (exit 2) with a hint.
func usage(msg, hint string) error { return &exitError{code: 2, msg: msg, hint: hint} }

// Run prints the events the flags ask for, as the view asks, and with
// --follow goes on printing them as they are committed.
func (c *DaemonLogCmd) Run(g *Globals) error {
	p, err := c.params(time.Now())
	if err != nil {
		return err
	}
	if len(p.Types) == 0 && c.View == "conversation" && !g.JSON {
		p.Types = convoTypes // so that --tail counts what is shown
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	print := c.printer(g)
	shown, err := followLog(ctx, g, p, print)
	if (notFound(err) || notRunning(err)) && !shown {
		// Not live: an archived agent, read from archive/.
		if found, aerr := archivedLog(g, p, print); found {
			return aerr
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted: what was asked for was printed
	}
	return err
}

// printer returns the function that prints one event frame.
func (c *DaemonLogCmd) printer(g *Globals) func(json.RawMessage, fsstore.Event) {
	v := &convo{w: os.Stdout}
	return func(raw json.RawMessage, e fsstore.Event) {
		switch {
		case g.JSON:
			printJSONLine(raw)
		case c.View == "events":
			fmt.Println(eventLine(e))
		default:
			v.event(e)
		}
	}
}

// followLog streams agent.events; with p.Follow it reconnects when the
// daemon goes away (a restart) and resumes after the last event printed.
// It says whether it printed any.
func followLog(ctx context.Context, g *Globals, p api.EventsParams, print func(json.RawMessage, fsstore.Event)) (bool, error) {
	var last uint64
	connected, lost := false, false
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		cl, err := g.client(ctx)
		if err == nil {
			connected = true
			lost = false
			_, err = rpc.StreamRaw(ctx, cl, api.AgentEvents, p, func(raw json.RawMessage) error {
				e, err := decodeEvent(raw)
				if err != nil {
					return err
				}
				if e.Seq <= last {
					return nil // never twice
				}
				last = e.Seq
				print(raw, e)
				wait = 100 * time.Millisecond
				return nil
			})
			cl.Close()
			if err == nil && p.Follow {
				fmt.Fprintf(os.Stderr, "%s left agents/ (archived or moved): nothing more to follow\n", p.Ref)
			}
		}
		// A daemon that stops (or dies) ends the stream with an error of
		// its own (internal, unavailable) or none at all: reconnect. An
		// answer about the agent (not found...) is final.
		var ae *api.Error
		final := errors.As(err, &ae) && ae.Code != api.CodeInternal && ae.Code != api.CodeUnavailable
		if err == nil || ctx.Err() != nil || !p.Follow || final || !connected {
			return last > 0, err
		}
		if last > 0 {
			p.After, p.Tail = last, 0
		}
		if !lost {
			fmt.Fprintf(os.Stderr, "lost the daemon (%v); reconnecting, to go on after event %d\n", err, last)
			lost = true
		}
		select {
		case <-ctx.Done():
			return last > 0, nil
		case <-time.After(wait):
		}
	}
}

// archivedLog prints the events of an archived agent, from its files;
// found false if no archived agent is ref.
func archivedLog(g *Globals, p api.EventsParams, print func(json.RawMessage, fsstore.Event)) (found bool, err error) {
	a, _, err := findArchived(g, p.Ref)
	if a == nil {
		return err != nil, err
	}
	if p.Follow {
		fmt.Fprintf(os.Stderr, "%s is archived: its log does not change, and is printed whole\n", a.Session.Name)
	}
	store, err := archivedStore(g)
	if err != nil {
		return true, err
	}
	show := func(e fsstore.Event) error {
		raw, err := json.Marshal(e)
		if err == nil {
			print(raw, e)
		}
		return err
	}
	tail := api.NewTail(p.Tail)
	err = fsstore.ReadEvents(store.FS(), fsstore.AgentFiles{Dir: a.Dir}.Events(), func(e fsstore.Event) error {
		switch {
		case !p.Match(e):
			return nil
		case p.Tail > 0:
			tail.Add(e)
			return nil
		}
		return show(e)
	})
	for _, e := range tail.Events() {
		if err != nil {
			break
		}
		err = show(e)
	}
	return true, err
}
