package main

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestParkOnRateLimitE2E: a loopback fake of the OpenAI API answers 429
// with Retry-After for 6 s. The agent is PARKED during that window (its
// provider asked only a few times), survives a kill -9 of the daemon
// still parked, and answers by itself once the limit has reset; the park
// is no failed turn.
func TestParkOnRateLimitE2E(t *testing.T) {
	var mu sync.Mutex
	var reset time.Time
	limited := 0
	api := fakeapi.NewOpenAI(func(r fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		mu.Lock()
		defer mu.Unlock()
		if reset.IsZero() {
			reset = time.Now().Add(6 * time.Second)
		}
		if left := time.Until(reset); left > 0 {
			limited++
			h := http.Header{}
			h.Set("Retry-After", strconv.Itoa(int(left.Seconds())+1))
			return fakeapi.OpenAIOut{Status: http.StatusTooManyRequests, Header: h}
		}
		return fakeapi.OpenAIOut{Text: "answered after the reset"}
	})
	t.Cleanup(api.Close)
	d := runDaemon(t, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model")
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "w", Provider: "openai"}, nil)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "v", Provider: "openai"}, nil)
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "w", Text: "hello", Wait: false}, nil)

	parked := func(name string) *wire.AgentInfo {
		a := d.agents()[name]
		if a.Parked == nil {
			return nil
		}
		return &a
	}
	deadline := time.Now().Add(5 * time.Second)
	for parked("w") == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	w := parked("w")
	if w == nil {
		t.Fatalf("w is not parked: %+v", d.agents()["w"])
	}
	mu.Lock()
	until := reset
	mu.Unlock()
	if w.Parked.Until.Before(until.Add(-time.Second)) {
		t.Fatalf("parked until %v, the reset is %v", w.Parked.Until, until)
	}
	// Another agent of the same provider waits for the same reset.
	mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: "v", Text: "me too", Wait: false}, nil)
	time.Sleep(300 * time.Millisecond)
	if parked("v") == nil {
		t.Errorf("v, of the same provider, is not parked: %+v", d.agents()["v"])
	}

	var st wire.StatusResult
	mustCall(d, wire.DaemonStatus, struct{}{}, &st)
	if st.Parked["openai"].IsZero() {
		t.Errorf("daemon status does not show the park: %+v", st.Parked)
	}
	d.kill()
	d.start()
	if time.Now().Before(until) && parked("w") == nil {
		t.Fatalf("after a kill -9 w is no longer parked: %+v", d.agents()["w"])
	}
	deadline = until.Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if a := d.agents()["w"]; a.Counters.Turns == 1 && a.Parked == nil && d.agents()["v"].Counters.Turns == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	a := d.agents()["w"]
	if a.Counters.Turns != 1 || a.Parked != nil || a.Failing != 0 {
		t.Fatalf("after the reset: %+v", a)
	}
	if v := d.agents()["v"]; v.Counters.Turns != 1 {
		t.Fatalf("v after the reset: %+v", v)
	}
	var inbox []wire.InboxMessage
	mustCall(d, wire.InboxList, wire.InboxListParams{}, &inbox)
	var told, resumed bool
	for _, m := range inbox {
		told = told || strings.Contains(m.Text, "openai is rate limited until")
		resumed = resumed || strings.Contains(m.Text, "limit has reset")
	}
	if !told || !resumed {
		t.Errorf("USER was not told of the park (%v) and of its end (%v): %+v", told, resumed, inbox)
	}
	mu.Lock()
	n := limited
	mu.Unlock()
	if n > 4 {
		t.Errorf("%d requests were refused during the 6 s window; a parked agent should not keep asking", n)
	}
}
