package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider/fakeapi"
	wire "github.com/substrat/substrat/supervisor/api"
)

// TestOpenAIContextE2E: an openai agent of the real daemon lives 60 turns
// of about 190 tokens against a server with an 8,192-token window (the
// provider's default, which the server does not report) that refuses a
// request over it. Every turn answers; the compactions are events in
// events.jsonl; the transcript keeps every turn; the provider's files stay
// small; inspect shows the context use.
func TestOpenAIContextE2E(t *testing.T) {
	api := fakeapi.NewOpenAI(func(r fakeapi.OpenAIRequest) fakeapi.OpenAIOut {
		if strings.HasPrefix(r.System(), "You write the summary") {
			return fakeapi.OpenAIOut{Text: "SUMMARY: the user sent numbered notes; nothing is open."}
		}
		return fakeapi.OpenAIOut{Text: "noted " + strings.Repeat("n", 360)}
	})
	t.Cleanup(api.Close)
	api.SetWindow(8192)
	d := runDaemon(t, "OPENAI_BASE_URL="+api.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_MODEL=fake-model", "OPENAI_CONTEXT_WINDOW=")
	var a wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "long", Provider: "openai", WorkDir: t.TempDir(), Instructions: "Keep notes."}, &a)
	var maxState int64
	layout := fsstore.Layout{Home: d.home}
	sessions := filepath.Join(layout.ProviderDir("openai"), "sessions")
	for i := 1; i <= 60; i++ {
		note := fmt.Sprintf("note %d: ", i)
		if res := d.send("long", note+strings.Repeat("p", 380-len(note))); !strings.HasPrefix(res.Text, "noted ") {
			t.Fatalf("turn %d: %q", i, res.Text)
		}
		var size int64
		for _, ext := range []string{".json", ".journal"} {
			if st, err := os.Stat(filepath.Join(sessions, a.ID+ext)); err == nil {
				size += st.Size()
			}
		}
		maxState = max(maxState, size)
	}
	events, err := os.ReadFile(layout.Agent(a.ID).Events())
	if err != nil {
		t.Fatal(err)
	}
	var compactions []fsstore.Compaction
	for _, line := range strings.Split(string(events), "\n") {
		var e fsstore.Event
		if json.Unmarshal([]byte(line), &e) == nil && e.Type == fsstore.EvCompaction {
			var c fsstore.Compaction
			e.Decode(&c)
			compactions = append(compactions, c)
		}
	}
	if len(compactions) == 0 || compactions[0].Provider != "openai" || compactions[0].FirstTurn != 1 || !strings.HasPrefix(compactions[0].Summary, "SUMMARY:") {
		t.Errorf("compaction events %+v", compactions)
	}
	transcript, err := os.ReadFile(layout.Agent(a.ID).Transcript())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 60; i++ {
		if !strings.Contains(string(transcript), fmt.Sprintf("note %d: ", i)) {
			t.Errorf("the transcript lacks turn %d", i)
		}
	}
	if !strings.Contains(string(transcript), "=== context compacted (threshold): turns 1-") {
		t.Errorf("the transcript does not say the context was compacted")
	}
	var res wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "long"}, &res)
	if k := res.Agent.Counters; k.ContextWindow != 8192 || k.ContextTokens <= 0 || k.ContextTokens > 8192 || k.Turns != 60 {
		t.Errorf("counters %+v", k)
	}
	if limit := int64(4 * 8192 * 2); maxState > limit {
		t.Errorf("the provider's files grew to %d bytes, over %d", maxState, limit)
	}
	t.Logf("%d compactions, %d requests over the window; provider files at most %d bytes; context %d of %d",
		len(compactions), api.Overflows(), maxState, res.Agent.Counters.ContextTokens, res.Agent.Counters.ContextWindow)
}
