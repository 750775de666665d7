package supervisor

import (
	"context"
	"encoding/json"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// FollowEvents is Events that goes on: after the history p asks for, it
// calls fn with each event of the agent as it is committed, in seq
// order, none twice and none left out, until ctx ends or the agent's
// directory leaves agents/ (then it returns nil). The log is the truth
// and the subscription a hint: an event that comes out of order (one
// that was not published, or a subscriber that fell behind) makes it
// read the log again after the last seq it has passed on.
func (c *Core) FollowEvents(ctx context.Context, p api.EventsParams, fn func(fsstore.Event) error) (api.EventsResult, error) {
	id, err := c.Resolve(p.Ref)
	if err != nil {
		return api.EventsResult{}, err
	}
	p.Ref = id
	sub := c.Subscribe(id) // before the log is read: nothing committed in between is missed
	defer sub.Close()
	res, err := c.Events(p, fn)
	if err != nil {
		return res, err
	}
	p.Tail = 0
	p.After = max(p.After, res.LastSeq)
	dropped := 0
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case w := <-sub.C:
			if w.Type == api.WatchDetached || w.Type == api.WatchArchived {
				return res, nil
			}
			if w.Seq == 0 || w.Seq <= p.After {
				continue // not an event of the log, or one already passed
			}
			n := sub.Dropped()
			if w.Seq == p.After+1 && n == dropped {
				e, err := logEvent(w)
				if err != nil {
					return res, err
				}
				match := p.Match(e)
				p.After, res.LastSeq = e.Seq, e.Seq
				res.Events++
				if match {
					if err := fn(e); err != nil {
						return res, err
					}
				}
				continue
			}
			dropped = n
			// A gap: read what the log holds after the last seq passed on.
			again, err := c.Events(p, fn)
			if err != nil {
				return res, err
			}
			res.Events, res.LastSeq = again.Events, again.LastSeq
			p.After = max(p.After, again.LastSeq)
		}
	}
}

// logEvent is the event of the log a published WatchEvent stands for.
func logEvent(w api.WatchEvent) (fsstore.Event, error) {
	e := fsstore.Event{Seq: w.Seq, Time: w.Time, Type: string(w.Type)}
	if w.Data != nil {
		raw, err := json.Marshal(w.Data)
		if err != nil {
			return e, err
		}
		e.Data = raw
	}
	return e, nil
}
