package top

import (
	"encoding/json"
	"testing"

	"github.com/substrat/substrat/fsstore"
)

func TestDescribeCompaction(t *testing.T) {
	for _, c := range []struct {
		d    fsstore.Compaction
		want string
	}{
		{fsstore.Compaction{Replaced: "turns 1-12", TokensBefore: 2450, TokensAfter: 1200}, "context compacted: turns 1-12, 2450 → 1200 tokens"},
		{fsstore.Compaction{Replaced: "the conversation before this point, summarized by Claude Code", TokensBefore: 155012},
			"context compacted: the conversation before this point, summarized by Claude Code, from 155012 tokens"},
	} {
		data, _ := json.Marshal(c.d)
		if line, now := describe(Event{Type: fsstore.EvCompaction, Data: data}); line != c.want || now != "" {
			t.Errorf("describe = %q, %q; want %q", line, now, c.want)
		}
	}
}
