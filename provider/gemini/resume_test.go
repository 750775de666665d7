package gemini

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumable: a session is resumable when a chat file of its id holds
// a model message, wherever the pattern falls (across the 64 KiB pieces
// it is read in); not with user messages only, nor for another id.
func TestResumable(t *testing.T) {
	home := t.TempDir()
	chats := filepath.Join(home, ".gemini", "tmp", "proj", "chats")
	if err := os.MkdirAll(chats, 0o700); err != nil {
		t.Fatal(err)
	}
	id := "0123abcd-0000-4000-8000-000000000000"
	file := filepath.Join(chats, "session-2026-11-25T16-21-0123abcd.jsonl")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"sessionId":"` + id + `"}` + "\n" + `{"id":"1","type":"user","content":[{"text":"hello"}]}` + "\n")
	if resumable(home, id) {
		t.Error("a session with user messages only is resumable")
	}
	for _, at := range []int{0, 64<<10 - 5, 64 << 10, 3 << 16} {
		write(strings.Repeat("x", at) + `{"type":"gemini","content":"ok"}` + "\n")
		if !resumable(home, id) {
			t.Errorf("a model message at byte %d is not found", at)
		}
	}
	if resumable(home, "fedcba98-0000-4000-8000-000000000000") || resumable(home, "") {
		t.Error("another id is resumable")
	}
}
