package fsstore

import (
	"context"
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"
)

// Identity fields edited in session.json with the daemon stopped are not
// trusted: the created event says who the agent is. Two agents made each
// other's parents used to load as a loop (fsck: "0 problems").
func TestIdentityEditedOffline(t *testing.T) {
	home := t.TempDir()
	s, err := Open(home, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateAgent(&Session{Name: "b", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	edit := func(ag *Agent, field, value string) {
		t.Helper()
		data, err := os.ReadFile(ag.Files().Session())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(data, &m)
		m[field] = value
		out, _ := json.MarshalIndent(m, "", "  ")
		if err := os.WriteFile(ag.Files().Session(), out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit(a, "parent_id", b.ID())
	edit(b, "parent_id", a.ID())

	res, err := s.Scan(context.Background(), ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agents) != 0 {
		t.Fatalf("loaded %d agents", len(res.Agents))
	}
	var kept []string
	for _, f := range res.Findings {
		if f.Kind == FindKeptOut && strings.Contains(f.Detail, "parent_id") && strings.Contains(f.Detail, "created event") {
			kept = append(kept, f.Agent)
		}
	}
	if len(kept) != 2 {
		t.Fatalf("findings %+v", res.Findings)
	}
	// fsck --repair rebuilds them from their logs: roots again.
	res, err = s.Scan(context.Background(), ScanOptions{Repair: true, RebuildSnapshots: true, Deep: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ag := range res.Agents {
		if ag.Session().ParentID != "" {
			t.Errorf("%s: parent %s after the rebuild", ag.Session().Name, ag.Session().ParentID)
		}
		ids = append(ids, ag.ID())
		ag.Close()
	}
	sort.Strings(ids)
	if len(ids) != 2 {
		t.Fatalf("after repair: %v, %+v", ids, res.Findings)
	}
}

func TestCycles(t *testing.T) {
	got := cycles(map[string]string{"a": "b", "b": "a", "c": "a", "d": "", "e": "e", "f": "g", "g": "h", "h": "f", "i": "missing"})
	var ids []string
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "a,b,e,f,g,h" {
		t.Fatalf("cycles: %v", ids)
	}
}
