package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/provider"
)

// BenchmarkTurn is one turn of an agent's life at turn 10 and at turn
// 1,000, in an 8,192-token window with turns of about 190 tokens: its
// time (a loopback server; the journal's fsync) and the bytes it writes
// to the state files (B-written/turn). B-written/life-turn is the mean
// over the life up to then, compactions included; B-whole-history is
// what saving the whole conversation after the turn, as the provider
// did before it compacted, would write.
func BenchmarkTurn(b *testing.B) {
	for _, at := range []int{10, 1000} {
		b.Run(fmt.Sprintf("turn=%d", at), func(b *testing.B) {
			f := newWindowFake(b, 8192)
			life := b.TempDir()
			opts := Options{BaseURL: f.srv.URL + "/v1", APIKey: "sk-test", Retry: fastRetry, StateDir: life,
				ContextWindows: map[string]int{"fake-model": 8192}}
			cfg := provider.Config{AgentID: "0199aaaa-0000-7000-8000-00000000beef", Model: "fake-model", Instructions: "You are a test agent."}
			p := New(opts)
			s, err := p.Create(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			for i := 1; i < at; i++ {
				if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
					b.Fatal(err)
				}
			}
			lifeBytes := s.(*session).written
			s.Stop()
			files := p.stateFiles(cfg)
			var written int64
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				b.StopTimer()
				dir := b.TempDir()
				for _, name := range []string{files.base, files.journal} {
					data, err := os.ReadFile(name)
					if err != nil {
						b.Fatal(err)
					}
					if err := os.MkdirAll(filepath.Join(dir, "sessions"), 0o700); err != nil {
						b.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, "sessions", filepath.Base(name)), data, 0o600); err != nil {
						b.Fatal(err)
					}
				}
				o := opts
				o.StateDir = dir
				r, err := New(o).Restore(context.Background(), cfg, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := r.Send(context.Background(), provider.Turn{Prompt: prompt(at)}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				written += r.(*session).written
				r.Stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(written)/float64(b.N), "B-written/turn")
			b.ReportMetric(float64(lifeBytes)/float64(at-1), "B-written/life-turn")
			b.ReportMetric(float64(wholeHistory(at)), "B-whole-history")
		})
	}
}

// wholeHistory is the size of the blob of n turns of the benchmark,
// uncompacted.
func wholeHistory(n int) int {
	msgs := []message{{Role: "system", Content: strPtr("You are a test agent.")}}
	for i := 1; i <= n; i++ {
		reply := fmt.Sprintf("reply to turn %d ", i) + strings.Repeat("r", 360)
		msgs = append(msgs, message{Role: "user", Content: strPtr(prompt(i))}, message{Role: "assistant", Content: strPtr(reply)})
	}
	data, _ := json.Marshal(blob{Version: 1, SessionID: "openai-" + strings.Repeat("0", 36), Requests: n, Messages: msgs})
	return len(data)
}
