package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// TestLargeResultsComeInParts: a result far longer than MaxLine (the list
// of 10,000 agents is about 8 MiB) reaches the client whole, in parts
// each under the line limit, hostile characters included.
func TestLargeResultsComeInParts(t *testing.T) {
	type agent struct {
		ID, Name, Path string
		Counters       map[string]float64
	}
	var list []agent
	for i := range 10000 {
		name := fmt.Sprintf("agent-%05d \"\\\x01\u2028<&>", i)
		list = append(list, agent{ID: fmt.Sprintf("01a2%028d", i), Name: name, Path: "root/" + name,
			Counters: map[string]float64{"turns": float64(i), "cost_usd": 0.0024}})
	}
	var got []agent
	c := callBig(t, list, &got)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(got) != len(list) || got[9999].Name != list[9999].Name || got[1].Counters["turns"] != 1 {
		t.Fatalf("got %d agents; the last %q", len(got), got[len(got)-1].Name)
	}
	b, _ := json.Marshal(list)
	if len(b) < MaxLine+PartSize {
		t.Fatalf("the result is only %d bytes: the test proves nothing", len(b))
	}
	// The connection serves the next call as usual.
	if _, err := Call(ctx, c, echoMethod, "hi"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "agent-09999") {
		t.Fatal("bad fixture")
	}
}

// TestPartsKeepMultibyteText: a part ends on a character boundary, so
// text in any script reaches the client as sent (a cut in the middle of
// a character would come back as U+FFFD).
func TestPartsKeepMultibyteText(t *testing.T) {
	var list []string
	for i := range 30000 {
		list = append(list, fmt.Sprintf("エージェント-%05d-é", i))
	}
	var got []string
	callBig(t, list, &got)
	if len(got) != len(list) {
		t.Fatalf("got %d names of %d", len(got), len(list))
	}
	for i := range list {
		if got[i] != list[i] {
			t.Fatalf("name %d came back as %q, sent %q", i, got[i], list[i])
		}
	}
}

// callBig serves result as the answer of a method "big" and calls it,
// decoding into got; it returns the connection for more calls.
func callBig(t *testing.T, result, got any) *Client {
	t.Helper()
	s := newTestServer()
	Handle(s, api.Method[struct{}, any]{Name: "big"}, func(ctx context.Context, _ struct{}) (any, error) {
		return result, nil
	})
	sock := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	raw, err := Call(ctx, c, api.Method[struct{}, json.RawMessage]{Name: "big"}, struct{}{})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, got); err != nil {
		t.Fatal(err)
	}
	return c
}
