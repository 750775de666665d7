package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// TestTypedRoundTrip: a plain and a streaming method of the contract
// (their descriptors, not copies) go through a real Server and Client on
// a Unix socket: params, frames and results arrive as typed, and bad
// params are refused with invalid_params before the handler runs.
func TestTypedRoundTrip(t *testing.T) {
	s := newTestServer()
	Handle(s, api.AgentInspect, func(ctx context.Context, p api.RefParams) (api.InspectResult, error) {
		if p.Ref == "" {
			return api.InspectResult{}, api.Errorf(api.CodeNotFound, "no agent")
		}
		return api.InspectResult{Agent: api.AgentInfo{ID: "id-" + p.Ref, Name: p.Ref}, Pending: 2}, nil
	})
	HandleStream(s, api.AgentSend, func(ctx context.Context, p api.SendMessageParams, send func(api.WatchFrame) error) (api.SendResult, error) {
		if err := send(api.WatchFrame{Type: api.WatchSent, MessageID: "m1"}); err != nil {
			return api.SendResult{}, err
		}
		if p.Wait {
			e := api.WatchEvent{Agent: "id-" + p.Ref, Name: p.Ref, Type: api.WatchOutput, Time: time.Unix(1, 0).UTC(),
				Data: map[string]string{"text": p.Text}}
			f, err := e.Frame()
			if err != nil {
				return api.SendResult{}, err
			}
			if err := send(f); err != nil {
				return api.SendResult{}, err
			}
		}
		return api.SendResult{MessageID: "m1", Text: "re: " + p.Text}, nil
	})
	sock := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	res, err := Call(ctx, c, api.AgentInspect, api.RefParams{Ref: "lead"})
	if err != nil || res.Agent.ID != "id-lead" || res.Agent.Name != "lead" || res.Pending != 2 {
		t.Fatalf("agent.inspect: %+v, %v", res, err)
	}
	var ae *api.Error
	if _, err := Call(ctx, c, api.AgentInspect, api.RefParams{}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("agent.inspect of nothing: %v", err)
	}

	var frames []api.WatchFrame
	sent, err := Stream(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "lead", Text: "hi", Wait: true}, func(f api.WatchFrame) error {
		frames = append(frames, f)
		return nil
	})
	if err != nil || sent.MessageID != "m1" || sent.Text != "re: hi" {
		t.Fatalf("agent.send: %+v, %v", sent, err)
	}
	if len(frames) != 2 || frames[0].Type != api.WatchSent || frames[0].MessageID != "m1" ||
		frames[1].Type != api.WatchOutput || frames[1].Agent != "id-lead" || string(frames[1].Data) != `{"text":"hi"}` ||
		!frames[1].Time.Equal(time.Unix(1, 0)) {
		t.Fatalf("agent.send frames: %+v", frames)
	}
	var raw []string
	if _, err := StreamRaw(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "lead", Text: "hi"}, func(b json.RawMessage) error {
		raw = append(raw, string(b))
		return nil
	}); err != nil || len(raw) != 1 || raw[0] != `{"type":"sent","message_id":"m1"}` {
		t.Fatalf("agent.send without wait, raw: %q, %v", raw, err)
	}

	// Strict params: an unknown field is refused with the handler unrun.
	_, err = Call(ctx, c, api.Method[map[string]any, api.InspectResult]{Name: api.AgentInspect.Name}, map[string]any{"ref": "x", "no_such": 1})
	if !errors.As(err, &ae) || ae.Code != api.CodeInvalidParams || ae.Message != `invalid params: json: unknown field "no_such"` {
		t.Fatalf("unknown field: %v", err)
	}
}
