package openai

// The saved conversation of an agent is two files in
// <StateDir>/sessions/ (see Options.StateDir):
//
//   - <agent-id>.json, the base: a state blob (as Suspend returns) with a
//     generation number "gen". It is written whole, atomically (a temp
//     file, fsynced, renamed over the old, the directory fsynced), at the
//     first turn of a session and at each compaction, and only then.
//   - <agent-id>.journal, one JSON line per turn since the base:
//     {"gen":G,"turn":N,"requests":R,"messages":[…]}, the messages the turn
//     added, appended and fsynced when the turn ends.
//
// The conversation is the base's messages, then those of each journal
// line of the base's generation. A compaction writes the new base (gen+1)
// and then empties the journal: a crash between the two leaves lines of
// the old generation, which are skipped, so that a kill -9 at any point
// of a compaction leaves the old conversation or the new one, never a
// mix. A torn last line (a crash during an append, before the turn was
// reported done) is cut off, its bytes kept in <agent-id>.journal.broken;
// a bad line followed by good ones is damage that is never repaired:
// Restore fails with provider.ErrBadState, naming the file.
//
// So the bytes written per turn are those of the turn (plus a base at
// each compaction, which is bounded by the context window), never the
// whole conversation.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/renameio/v2"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// maxJournalLine bounds one journal line (one turn's messages).
const maxJournalLine = 64 << 20

// faultHook, if set, is called between the steps of a compaction
// ("summarized", then those of writing a base: "temp-written",
// "renamed"); an error from it stops the write there, as
// a crash would. Overridden by tests.
var faultHook func(step string) error

func fault(step string) error {
	if faultHook == nil {
		return nil
	}
	return faultHook(step)
}

// journalLine is one turn in the journal.
type journalLine struct {
	Gen      int64     `json:"gen"`
	Turn     int       `json:"turn"`
	Requests int       `json:"requests"`
	Messages []message `json:"messages"`
}

// stateFiles are an agent's base and journal; zero if it has none.
type stateFiles struct {
	base, journal string
}

func (p *Provider) stateFiles(cfg provider.Config) stateFiles {
	f := p.stateFile(cfg)
	if f == "" {
		return stateFiles{}
	}
	return stateFiles{base: f, journal: strings.TrimSuffix(f, ".json") + ".journal"}
}

// remove deletes both files.
func (f stateFiles) remove() error {
	for _, name := range []string{f.journal, f.journal + ".broken", f.base} {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// load reads the conversation: the base, then the journal lines of its
// generation. A torn last line is cut off (kept in .broken). Errors:
// os.ErrNotExist when there is no base; provider.ErrBadState.
func (f stateFiles) load() (*blob, error) {
	data, err := fsstore.ReadRegular(f.base, fsstore.MaxFileSize) // never a FIFO or device, capped
	if err != nil {
		return nil, err
	}
	f.sweep()
	b, err := decodeBlob(data)
	if err != nil {
		return nil, err
	}
	jf, err := os.OpenFile(f.journal, os.O_RDWR|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	defer jf.Close()
	if fi, err := jf.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", provider.ErrBadState, f.journal)
	}
	br := bufio.NewReader(jf)
	var good int64 // bytes of whole, readable lines
	for {
		line, err := readLine(br, maxJournalLine)
		if err == io.EOF {
			break
		}
		var l journalLine
		if err == nil {
			err = json.Unmarshal(line, &l)
		}
		if err == nil {
			err = checkMessages(l.Messages)
		}
		if err != nil {
			// The last line, torn? Anything readable after it is damage.
			rest, _ := io.ReadAll(br)
			if bytes.Contains(rest, []byte("\n")) {
				return nil, fmt.Errorf("%w: journal line at byte %d: %v", provider.ErrBadState, good, err)
			}
			if err := f.cutTail(jf, good); err != nil {
				return nil, err
			}
			break
		}
		good += int64(len(line)) + 1
		if l.Gen != b.Gen {
			continue // replaced by the base (a crash before the journal was emptied)
		}
		b.Messages = append(b.Messages, l.Messages...)
		b.Turns, b.Requests = l.Turn, l.Requests
	}
	return b, nil
}

// readLine reads one newline-terminated line, without its newline; a last
// line without one is an error (torn), as is one over max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, fmt.Errorf("a line over %d bytes", max)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, errors.New("a last line without its newline")
		default:
			return nil, err
		}
	}
}

// cutTail keeps the journal's bytes from off on in .broken, then cuts
// them off.
func (f stateFiles) cutTail(jf *os.File, off int64) error {
	tail, err := io.ReadAll(io.NewSectionReader(jf, off, 1<<62))
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(f.journal+".broken", tail, 0o600, renameio.WithTempDir(filepath.Dir(f.journal))); err != nil {
		return fmt.Errorf("keeping the journal's torn tail: %w", err)
	}
	if err := jf.Truncate(off); err != nil {
		return err
	}
	return jf.Sync()
}

// sweep removes the temp files a crash left behind (renameio's: the
// name with a dot before and digits after).
func (f stateFiles) sweep() {
	for _, name := range []string{f.base, f.journal + ".broken"} {
		prefix := "." + filepath.Base(name)
		matches, _ := filepath.Glob(filepath.Join(filepath.Dir(name), prefix+"*"))
		for _, m := range matches {
			rest := strings.TrimPrefix(filepath.Base(m), prefix)
			if rest != "" && strings.Trim(rest, "0123456789") == "" {
				os.Remove(m)
			}
		}
	}
}

// journalGen returns the generation of the journal's lines (all of one:
// the journal is emptied whenever a base is written), or -1.
func (f stateFiles) journalGen() int64 {
	jf, err := fsstore.OpenRegular(f.journal)
	if err != nil {
		return -1
	}
	defer jf.Close()
	buf := make([]byte, 40)
	n, _ := io.ReadFull(jf, buf)
	rest, ok := bytes.CutPrefix(buf[:n], []byte(`{"gen":`))
	if !ok {
		return -1
	}
	end := bytes.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return -1
	}
	g, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	if err != nil {
		return -1
	}
	return g
}

// writeBase replaces the base with b, atomically, then empties the
// journal. b.Gen is raised over the journal's generation if need be (a
// blob restored from the daemon may be older than the files), so that the
// journal's lines never pass for the new base's. It returns the bytes
// written.
func (f stateFiles) writeBase(b *blob) (int64, error) {
	if g := f.journalGen(); g >= b.Gen {
		b.Gen = g + 1
	}
	data, err := json.Marshal(b)
	if err != nil {
		return 0, err
	}
	dir := filepath.Dir(f.base)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	t, err := renameio.TempFile(dir, f.base)
	if err != nil {
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	defer t.Cleanup()
	if err := t.Chmod(0o600); err != nil {
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	if _, err := t.Write(data); err != nil {
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	if err := fault("temp-written"); err != nil {
		return 0, err
	}
	if err := t.CloseAtomicallyReplace(); err != nil { // fsyncs, then renames
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("saving the conversation: %w", err)
	}
	if err := fault("renamed"); err != nil {
		return 0, err
	}
	// The journal's lines are of the old generation now: empty it.
	if err := os.Truncate(f.journal, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("emptying the journal: %w", err)
	}
	return int64(len(data)), nil
}

// appendTurn appends a turn's line to the journal and fsyncs it. It
// returns the bytes written.
func (f stateFiles) appendTurn(l journalLine) (int64, error) {
	data, err := json.Marshal(l)
	if err != nil {
		return 0, err
	}
	data = append(data, '\n')
	if len(data) > maxJournalLine {
		return 0, fmt.Errorf("saving the turn: %d bytes, over the journal's %d", len(data), maxJournalLine)
	}
	jf, err := fsstore.OpenAppendRegular(f.journal, 0o600)
	if err != nil {
		return 0, fmt.Errorf("saving the turn: %w", err)
	}
	n, err := jf.Write(data)
	if err == nil {
		err = jf.Sync()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = jf.Stat(); err == nil {
			size = st.Size()
		}
	}
	if cerr := jf.Close(); err == nil {
		err = cerr
	}
	if err == nil && size == int64(n) {
		err = syncDir(filepath.Dir(f.journal)) // a new journal's name
	}
	if err != nil {
		return 0, fmt.Errorf("saving the turn: %w", err)
	}
	return int64(len(data)), nil
}

func syncDir(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0) // never blocks on a FIFO
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
