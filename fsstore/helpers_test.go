package fsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fixed canonical UUIDv7s, so that paths and golden files are stable.
const (
	idA     = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a01"
	idB     = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a02"
	idC     = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a03"
	idGhost = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6aff"
	idMsg1  = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01"
	idMsg2  = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b02"
	idMsg3  = "019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b03"
	idV4    = "0f8fad5b-d9cb-469f-a165-70867728950e" // a canonical UUIDv4
)

// epoch is the start of the test clocks.
var epoch = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

// stepClock is an Options.Now that advances by one millisecond per call.
type stepClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newStepClock() *stepClock { return &stepClock{t: epoch} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func mustOpen(t testing.TB, home string, opts Options) *Store {
	t.Helper()
	s, err := Open(home, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", home, err)
	}
	return s
}

func mustScan(t testing.TB, s *Store, opts ScanOptions) *ScanResult {
	t.Helper()
	res, err := s.Scan(context.Background(), opts)
	if err != nil {
		t.Fatalf("Scan(%+v): %v", opts, err)
	}
	return res
}

func closeAgents(res *ScanResult) {
	for _, a := range res.Agents {
		a.Close()
	}
}

func liveIDs(res *ScanResult) []string {
	ids := []string{}
	for _, a := range res.Agents {
		ids = append(ids, a.ID())
	}
	return ids
}

func findAgent(res *ScanResult, id string) *Agent {
	for _, a := range res.Agents {
		if a.ID() == id {
			return a
		}
	}
	return nil
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// lines splits a log into its lines, each with its newline (the last one
// may lack it).
func lines(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			out = append(out, data)
			break
		}
		out = append(out, data[:i+1])
		data = data[i+1:]
	}
	return out
}

func mustEncodeEvent(t testing.TB, e Event) []byte {
	t.Helper()
	line, err := EncodeEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// tree maps every path under a root (relative) to a description of it:
// its type, permissions and, for a regular file, a hash of its content.
type tree map[string]string

func hashTree(t testing.TB, root string) tree {
	t.Helper()
	m := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			m[rel] = fmt.Sprintf("dir %v", info.Mode().Perm())
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			m[rel] = fmt.Sprintf("file %v %d %s", info.Mode().Perm(), len(b), hex.EncodeToString(sum[:8]))
		default:
			m[rel] = fmt.Sprintf("other %v", info.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// diff lists the differences between two trees, restricted to paths under
// prefix ("" for all).
func (a tree) diff(b tree, prefix string) []string {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if prefix != "" && k != prefix && !strings.HasPrefix(k, prefix+string(filepath.Separator)) {
			continue
		}
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %q -> %q", k, a[k], b[k]))
		}
	}
	sort.Strings(out)
	return out
}

// editSessionJSON rewrites a session.json after edit has changed its fields
// as a generic JSON object.
func editSessionJSON(t testing.TB, path string, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readFile(t, path), &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	writeFile(t, path, b)
	return b
}
