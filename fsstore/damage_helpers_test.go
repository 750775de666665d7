package fsstore

// The helpers of TestDamage: running a case, the kinds of cases, and
// the assertions on what a scan found.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func runDamageCase(t *testing.T, tc damageCase) {
	f := newFixture(t)
	if tc.damage != nil {
		tc.damage(t, f)
	}
	f.damaged = hashTree(t, f.home)
	f.damagedSessA, _ = os.ReadFile(f.A.Session())

	// Verify: report, change nothing.
	vopts := tc.opts
	vopts.Repair = false
	res := mustScan(t, f.s, vopts)
	wantVerify := tc.wantVerify
	if wantVerify == nil {
		wantVerify = func(f *fixture) []wantFinding {
			ws := tc.want(f)
			for i := range ws {
				if ws[i].Kind != FindReplayed {
					ws[i].Repaired = false
				}
			}
			return ws
		}
	}
	assertFindings(t, "verify", res, wantVerify(f))
	live := tc.liveVerify
	if live == nil {
		live = tc.live
	}
	assertLive(t, "verify", res, live)
	// The scan makes its own system calls on OS; through the FS methods
	// it finds exactly the same.
	assertSameScan(t, res, mustScan(t, mustOpen(t, f.home, Options{FS: plainFS{OS{}}}), vopts))
	closeAgents(res)
	if d := f.damaged.diff(hashTree(t, f.home), ""); len(d) > 0 {
		t.Fatalf("a scan without Repair changed the home:\n%s", strings.Join(d, "\n"))
	}

	// Repair.
	ropts := tc.opts
	ropts.Repair = true
	res = mustScan(t, f.s, ropts)
	assertFindings(t, "repair", res, tc.want(f))
	assertLive(t, "repair", res, tc.live)
	if tc.check != nil {
		tc.check(t, f, res)
	}
	closeAgents(res)

	// A second repair finds nothing more to repair: what was repaired is
	// gone, the rest is reported again.
	res = mustScan(t, f.s, ropts)
	var again []wantFinding
	for _, fd := range tc.want(f) {
		if !fd.Repaired || fd.Kind == FindReplayed {
			again = append(again, wantFinding{Finding: fd.Finding})
		}
	}
	assertFindings(t, "second repair", res, again)
	assertLive(t, "second repair", res, tc.live)

	// Every live agent takes appends, and they read back.
	want := map[string]*Session{}
	for _, a := range res.Agents {
		s, err := a.Commit(Counters{Turns: 1, OutputTokens: 3})
		if err != nil {
			t.Fatalf("append to %s after repair: %v", a.ID(), err)
		}
		want[a.ID()] = s
	}
	closeAgents(res)
	dopts := ropts
	dopts.Deep = true
	res = mustScan(t, f.s, dopts)
	defer closeAgents(res)
	assertLive(t, "after appends", res, tc.live)
	for _, a := range res.Agents {
		assertSession(t, a.Session(), want[a.ID()])
		data := readFile(t, a.Files().Events())
		ls := lines(data)
		e, err := DecodeEvent(ls[len(ls)-1])
		if err != nil || e.Seq != want[a.ID()].LastSeq || e.Type != EvTurn {
			t.Errorf("%s: last line %q decodes to %+v, %v", a.ID(), ls[len(ls)-1], e, err)
		}
	}
	for _, fd := range res.Findings {
		if fd.Kind == FindTornTail && want[fd.Agent] != nil {
			t.Errorf("after appends: %s %s: %s", fd.Kind, fd.Path, fd.Detail)
		}
	}
}

// tornCase appends tail(line5) to A's log: damage with nothing valid after
// it, which a repair cuts off into a .broken copy.
func tornCase(name string, tail func(line5 []byte) []byte, reason string) damageCase {
	return damageCase{
		name: name,
		damage: func(t *testing.T, f *fixture) {
			appendFile(t, f.A.Events(), tail(f.line5))
		},
		want: func(f *fixture) []wantFinding {
			n := len(tail(f.line5))
			return []wantFinding{
				w(f.tornA(int64(len(f.logA))), fmt.Sprintf("%d bytes after the last valid event (seq 4)", n), reason),
				w(f.replayedA()),
			}
		},
		live: []string{idA, idB},
		check: func(t *testing.T, f *fixture, res *ScanResult) {
			off := int64(len(f.logA))
			assertFile(t, f.A.Events(), f.logA)
			assertFile(t, f.A.Broken(off, 0), tail(f.line5))
			if fi, err := os.Stat(f.A.Broken(off, 0)); err != nil || fi.Mode().Perm() != filePerm {
				t.Errorf("broken copy: %v, %v", fi, err)
			}
			a := findAgent(res, idA)
			if a.Log().LastSeq() != 4 {
				t.Errorf("LastSeq = %d, want 4", a.Log().LastSeq())
			}
			assertSession(t, a.Session(), f.wantA)
			// Nothing else changed.
			got := hashTree(t, f.home)
			delete(got, f.rel(f.A.Broken(off, 0)))
			delete(got, f.rel(f.A.Events()))
			want := f.damaged
			delete(want, f.rel(f.A.Events()))
			if d := want.diff(got, ""); len(d) > 0 {
				t.Errorf("repair changed more than the log:\n%s", strings.Join(d, "\n"))
			}
		},
	}
}

// sessionCase damages A's session.json, which keeps A out of the live tree.
func sessionCase(name string, damage func(t *testing.T, f *fixture), detail string) damageCase {
	return damageCase{
		name:   name,
		damage: damage,
		want: func(f *fixture) []wantFinding {
			return []wantFinding{
				w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA,
					Hint: HintFsckRepair + " to rebuild session.json from events.jsonl"}, detail),
				w(f.orphanB()),
			}
		},
		live:  []string{idB},
		check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.A.Dir) },
	}
}

// rebuildCase damages A's session.json and rebuilds it from the log.
func rebuildCase(name string, damage func(t *testing.T, f *fixture), keepsOld bool) damageCase {
	return damageCase{
		name:   name,
		opts:   ScanOptions{RebuildSnapshots: true},
		damage: damage,
		want: func(f *fixture) []wantFinding {
			return []wantFinding{w(Finding{Kind: FindSnapshotRebuilt, Path: f.A.Session(), Agent: idA, Repaired: true}, "rebuilt from 4 events")}
		},
		wantVerify: func(f *fixture) []wantFinding {
			return []wantFinding{
				w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA,
					Hint: HintFsckRepair + " to rebuild session.json from events.jsonl"}),
				w(f.orphanB()),
			}
		},
		live:       []string{idA, idB},
		liveVerify: []string{idB},
		check: func(t *testing.T, f *fixture, res *ScanResult) {
			if keepsOld {
				assertFile(t, f.A.BrokenSession(0), f.damagedSessA)
			} else if exists(f.A.BrokenSession(0)) {
				t.Errorf("%s made from nothing", f.A.BrokenSession(0))
			}
			s, err := DecodeSession(readFile(t, f.A.Session()))
			if err != nil {
				t.Fatal(err)
			}
			assertSession(t, s, f.wantA)
			assertSession(t, findAgent(res, idA).Session(), f.wantA)
			assertFile(t, f.A.Events(), f.logA)
		},
	}
}

// checkCorrupt checks that A's log is reported as corrupt at line n by
// openLog too, even when asked to repair, and is left untouched.
func checkCorrupt(line int, reason string) func(t *testing.T, f *fixture, res *ScanResult) {
	return func(t *testing.T, f *fixture, res *ScanResult) {
		f.assertUntouched(t, f.A.Dir)
		_, err := openLog(OS{}, f.A.Events(), true)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("openLog: %v, want a *CorruptError", err)
		}
		wantOff := f.lineOffset(line)
		if line == 5 {
			wantOff = int64(len(f.logA))
		}
		if ce.Path != f.A.Events() || ce.Line != line || ce.Offset != wantOff || !strings.Contains(ce.Reason, reason) {
			t.Errorf("CorruptError = %+v, want line %d offset %d %q", ce, line, wantOff, reason)
		}
		if Hint(err) != HintFsck {
			t.Errorf("Hint = %q", Hint(err))
		}
		f.assertUntouched(t, f.A.Dir)
	}
}

func assertFindings(t *testing.T, what string, res *ScanResult, want []wantFinding) {
	t.Helper()
	if !sort.SliceIsSorted(res.Findings, func(i, j int) bool { return res.Findings[i].Path < res.Findings[j].Path }) {
		t.Errorf("%s: findings not sorted by path", what)
	}
	pin := func(f Finding) Finding {
		return Finding{Kind: f.Kind, Path: f.Path, Agent: f.Agent, Line: f.Line, Offset: f.Offset, Repaired: f.Repaired}
	}
	var got, exp []Finding
	for _, f := range res.Findings {
		got = append(got, pin(f))
	}
	for _, f := range want {
		exp = append(exp, pin(f.Finding))
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("%s findings:\n%s\nwant:\n%s", what, fmtFindings(res.Findings), fmtFindings(exp))
		return
	}
	for i, f := range want {
		for _, d := range f.detail {
			if !strings.Contains(res.Findings[i].Detail, d) {
				t.Errorf("%s finding %d (%s) detail %q lacks %q", what, i, f.Kind, res.Findings[i].Detail, d)
			}
		}
		if f.Hint != "" && res.Findings[i].Hint != f.Hint {
			t.Errorf("%s finding %d (%s) hint %q, want %q", what, i, f.Kind, res.Findings[i].Hint, f.Hint)
		}
		if res.Findings[i].Detail == "" {
			t.Errorf("%s finding %d (%s) has no detail", what, i, f.Kind)
		}
	}
}

func fmtFindings(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "  %s %s agent=%s line=%d offset=%d repaired=%v (%s)\n", f.Kind, f.Path, f.Agent, f.Line, f.Offset, f.Repaired, f.Detail)
	}
	return b.String()
}

func assertLive(t *testing.T, what string, res *ScanResult, want []string) {
	t.Helper()
	if got := liveIDs(res); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: live agents %v, want %v", what, got, want)
	}
}

func assertSession(t *testing.T, got, want *Session) {
	t.Helper()
	g, err := EncodeSession(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := EncodeSession(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("session:\n%s\nwant:\n%s", g, w)
	}
}

func assertFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: %d bytes %q, want %d bytes %q", path, len(got), trunc(got), len(want), trunc(want))
	}
}

func assertExists(t *testing.T, path string) {
	t.Helper()
	if !exists(path) {
		t.Errorf("%s does not exist", path)
	}
}

func trunc(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func sortWant(ws []wantFinding) []wantFinding {
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].Path < ws[j].Path })
	return ws
}

// checkRebuiltFromLog checks agent A after a repair of a snapshot that was
// ahead of its log: the state is the log's, and the old file is kept.
func checkRebuiltFromLog(t *testing.T, f *fixture, res *ScanResult, logEnd, ahead int) {
	t.Helper()
	a := findAgent(res, idA)
	if a == nil {
		t.Fatal("A is not live")
	}
	if got := a.Session().LastSeq; got != uint64(logEnd) {
		t.Errorf("A's state is as of event %d, want %d (the log's end)", got, logEnd)
	}
	disk, err := DecodeSession(readFile(t, f.A.Session()))
	if err != nil || disk.LastSeq != uint64(logEnd) {
		t.Errorf("session.json after repair: %+v, %v", disk, err)
	}
	old, err := DecodeSession(readFile(t, f.A.BrokenSession(0)))
	if err != nil || old.LastSeq != uint64(ahead) {
		t.Errorf("kept copy: %+v, %v; want the old snapshot (last_seq %d)", old, err, ahead)
	}
}
