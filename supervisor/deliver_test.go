package supervisor

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script"
)

// midTurn is a provider whose turns, in the middle, have USER send the
// agent a message and call check_inbox, then end as fail says.
type midTurn struct {
	provider.Provider
	c    **Core
	fail bool
	got  *string // what check_inbox returned
}

func (p midTurn) Create(ctx context.Context, cfg provider.Config) (provider.Session, error) {
	return &midTurnSession{p: p}, nil
}

type midTurnSession struct {
	provider.Session
	p midTurn
}

func (s *midTurnSession) Send(ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	if _, err := (*s.p.c).Send(api.SendParams{To: "a", Text: "late news"}); err != nil {
		return provider.TurnResult{}, err
	}
	*s.p.got = turn.Tools.CallTool(ctx, provider.ToolCall{ID: "k", Name: "check_inbox", Args: []byte(`{}`)}).Text
	if s.p.fail {
		return provider.TurnResult{}, errors.New("the model crashed")
	}
	return provider.TurnResult{Text: "ok"}, nil
}

func (s *midTurnSession) Stop() error { return nil }

// Messages that check_inbox hands over are delivered when the turn ends,
// with the prompt's, in one message_delivered event: a turn that fails
// leaves them in the inbox for the next, as it leaves its prompt's.
func TestCheckInboxDeliversAtTurnEnd(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var c *Core
		var got string
		c = newCoreWith(t, t.TempDir(), false, Config{Providers: provider.NewRegistry(midTurn{script.New(), &c, fail, &got})})
		mustCreate(t, c, api.CreateParams{Name: "a"})
		send(t, c, "a", "first")
		n := nodeOf(t, c, "a")
		if err := c.RunTurn(context.Background(), n.id()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, "late news") {
			t.Fatalf("fail=%v: check_inbox returned %q", fail, got)
		}
		pending := pendingTexts(t, n)
		var delivered [][]string
		err := fsstore.ReadEvents(c.store.FS(), n.agent.Files().Events(), func(e fsstore.Event) error {
			if e.Type == fsstore.EvDelivered {
				var d fsstore.Delivered
				if err := e.Decode(&d); err != nil {
					return err
				}
				delivered = append(delivered, d.IDs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if fail {
			if !slices.Equal(pending, []string{"first", "late news"}) || len(delivered) != 0 {
				t.Errorf("failed turn: pending %q, delivered %v; want both messages kept and none delivered", pending, delivered)
			}
			continue
		}
		if len(pending) != 0 || len(delivered) != 1 || len(delivered[0]) != 2 {
			t.Errorf("turn: pending %q, delivered %v; want both delivered in one event", pending, delivered)
		}
	}
}
