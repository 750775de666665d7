package daemon

import (
	"context"

	"github.com/substrat/substrat/supervisor"
	"github.com/substrat/substrat/supervisor/api"
)

func (d *Daemon) register() {
	d.registerDaemon()
	d.registerAgent()
	d.registerSession()
	d.registerWorkspace()
	d.registerInbox()
	d.registerShell()
	registerTools(d.srv, d.core, "")
}

// waitTurn streams the agent's events while its turn runs, and returns
// the outcome of the message once the turn that took it ended (or
// failed). The outcome never depends on the stream: a client that reads
// late misses frames, is told how many, and still gets its result.
func waitTurn(ctx context.Context, s *supervisor.Sending, send func(api.WatchFrame) error) (api.SendResult, error) {
	res := api.SendResult{MessageID: s.Message.ID}
	sub := s.Sub
	reported := 0
	lagging := func() {
		if n := sub.Dropped(); n > reported {
			send(api.WatchFrame{Type: api.WatchDropped, Count: n - reported})
			reported = n
		}
	}
	for {
		select {
		case <-ctx.Done():
			return api.SendResult{}, ctx.Err()
		case o := <-s.Outcome:
			for len(sub.C) > 0 { // what is already queued comes first
				sendEvent(<-sub.C, send)
			}
			lagging()
			res.Text, res.Failed, res.Dropped = o.Text, o.Failed, reported
			return res, nil
		case e := <-sub.C:
			lagging()
			sendEvent(e, send)
			if e.Type == api.WatchDetached {
				res.Failed, res.Dropped = "the agent's directory was moved out of agents/", reported
				return res, nil
			}
		}
	}
}

// sendEvent sends e as a frame.
func sendEvent(e api.WatchEvent, send func(api.WatchFrame) error) error {
	f, err := e.Frame()
	if err != nil {
		return err
	}
	return send(f)
}

// stream sends every event of a subscription until the client goes away.
func stream(ctx context.Context, sub *supervisor.Subscription, send func(api.WatchFrame) error) (struct{}, error) {
	defer sub.Close()
	reported := 0 // events dropped and said so
	for {
		select {
		case <-ctx.Done():
			return struct{}{}, ctx.Err()
		case e := <-sub.C:
			if n := sub.Dropped(); n > reported {
				if err := send(api.WatchFrame{Type: api.WatchDropped, Count: n - reported}); err != nil {
					return struct{}{}, err
				}
				reported = n
			}
			if err := sendEvent(e, send); err != nil {
				return struct{}{}, err
			}
		}
	}
}
