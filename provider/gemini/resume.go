package gemini

import (
	"bytes"
	"os"
	"path/filepath"
)

// A session whose turns never got an answer from the model (its first
// turn hit a rate limit, say) cannot be resumed: the pinned CLI (0.61.0)
// says "Error resuming session: No previous sessions found for this
// project." and exits 42, and it refuses --session-id with that id
// ("already exists"). Such a session is started afresh instead (the CLI
// picks a new id, which the engine learns); what it held was the prompt
// of a turn that failed, which Substrat delivers again.

// resumable reports whether the CLI kept a model answer for session id in
// the CLI home home: one of its chat files,
// .gemini/tmp/<project>/chats/session-<time>-<id's first 8>.json[l], has
// a message of type "gemini".
func resumable(home, id string) bool {
	if len(id) < 8 {
		return false
	}
	files, _ := filepath.Glob(filepath.Join(home, ".gemini", "tmp", "*", "chats", "session-*-"+id[:8]+".json*"))
	for _, f := range files {
		if contains(f, []byte(`"type":"gemini"`)) {
			return true
		}
	}
	return false
}

// contains reports whether file name holds pattern, reading it in pieces.
func contains(name string, pattern []byte) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	buf := make([]byte, 64<<10)
	keep := 0 // the tail of the last piece, for a pattern cut across pieces
	for {
		n, err := f.Read(buf[keep:])
		total := keep + n
		if bytes.Contains(buf[:total], pattern) {
			return true
		}
		if err != nil { // io.EOF, or unreadable: not resumable
			return false
		}
		keep = min(len(pattern)-1, total)
		copy(buf, buf[total-keep:total])
	}
}
