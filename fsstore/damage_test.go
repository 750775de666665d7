package fsstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixture is a healthy home with two agents:
//
//	A "alpha", a root: events 1 created, 2 state, 3 turn, 4 state;
//	  session.json reflects event 3, so a scan replays event 4.
//	B "beta", A's child: event 1 created; one message from A in inbox/new.
type fixture struct {
	home  string
	s     *Store
	l     Layout
	A, B  AgentFiles
	logA  []byte   // A's events.jsonl as written
	sessA []byte   // A's session.json as written
	wantA *Session // A's session after its four events
	wantB *Session
	line5 []byte // the line A's next event would have (seq 5)

	damaged      tree   // the home right after the damage
	damagedSessA []byte // A's session.json right after the damage
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	home := t.TempDir()
	clock := newStepClock()
	s := mustOpen(t, home, Options{Now: clock.Now})
	a, err := s.CreateAgent(&Session{ID: idA, Name: "alpha", Provider: "script", Model: "m1", Instructions: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(Counters{Turns: 1, InputTokens: 120, OutputTokens: 40, CostUSD: 0.25}); err != nil {
		t.Fatal(err)
	}
	if err := a.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(StateChange{AgentState: AgentIdle}); err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateAgent(&Session{ID: idB, Name: "beta", ParentID: idA, Provider: "script", SpawnKey: "toolu_1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&Message{ID: idMsg1, From: idA, FromName: "alpha", To: idB, Kind: KindMessage, Text: "hello"}); err != nil {
		t.Fatal(err)
	}
	f := &fixture{home: home, s: s, l: s.Layout(), A: a.Files(), B: b.Files(), wantA: a.Session(), wantB: b.Session()}
	a.Close()
	b.Close()
	f.logA = readFile(t, f.A.Events())
	f.sessA = readFile(t, f.A.Session())
	f.line5 = mustEncodeEvent(t, Event{Seq: 5, Time: epoch.Add(30 * time.Second), Type: EvTurn, Data: []byte(`{"turns":1,"input_tokens":7}`)})
	if got := len(lines(f.logA)); got != 4 {
		t.Fatalf("fixture: A's log has %d lines, want 4", got)
	}
	return f
}

// lineOffset returns the byte offset of the start of A's n-th (1-based) line.
func (f *fixture) lineOffset(n int) int64 {
	var off int64
	for _, l := range lines(f.logA)[:n-1] {
		off += int64(len(l))
	}
	return off
}

// rel returns path relative to the home, for tree diffs.
func (f *fixture) rel(path string) string {
	r, err := filepath.Rel(f.home, path)
	if err != nil {
		panic(err)
	}
	return r
}

// assertUntouched checks that nothing under dir changed since the damage.
func (f *fixture) assertUntouched(t *testing.T, dir string) {
	t.Helper()
	if d := f.damaged.diff(hashTree(t, f.home), f.rel(dir)); len(d) > 0 {
		t.Errorf("%s changed although it must be left untouched:\n%s", f.rel(dir), strings.Join(d, "\n"))
	}
}

func (f *fixture) replayedA() Finding {
	return Finding{Kind: FindReplayed, Path: f.A.Events(), Agent: idA, Repaired: true}
}

func (f *fixture) orphanB() Finding {
	return Finding{Kind: FindOrphan, Path: f.B.Dir, Agent: idB}
}

func (f *fixture) tornA(off int64) Finding {
	return Finding{Kind: FindTornTail, Path: f.A.Events(), Agent: idA, Offset: off, Repaired: true}
}

// wantFinding is a Finding with the fields a test pins exactly, plus
// substrings its Detail must contain.
type wantFinding struct {
	Finding
	detail []string
}

func w(f Finding, detail ...string) wantFinding { return wantFinding{f, detail} }

type damageCase struct {
	name string
	opts ScanOptions // Repair is set by the test
	// damage breaks the healthy home.
	damage func(t *testing.T, f *fixture)
	// want lists the findings of the scan with Repair, in order.
	want func(f *fixture) []wantFinding
	// wantVerify lists the findings of the scan without Repair; nil means
	// want with Repaired false (except replayed, which is done in memory).
	wantVerify func(f *fixture) []wantFinding
	// live lists the agents a repairing scan loads; liveVerify those a
	// verifying scan loads (nil: the same).
	live, liveVerify []string
	// check inspects the home after the repairing scan.
	check func(t *testing.T, f *fixture, res *ScanResult)
}

func TestDamage(t *testing.T) {
	cases := []damageCase{
		{
			name: "healthy",
			want: func(f *fixture) []wantFinding {
				return []wantFinding{w(f.replayedA(), "replayed 1 events after last_seq 3")}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.home)
				assertSession(t, findAgent(res, idA).Session(), f.wantA)
				assertSession(t, findAgent(res, idB).Session(), f.wantB)
			},
		},
		tornCase("torn last line, 1 byte", func(l []byte) []byte { return l[:1] }, "unterminated last line"),
		tornCase("torn last line, mid-line", func(l []byte) []byte { return l[:len(l)/2] }, "unterminated last line"),
		tornCase("torn last line, just before the newline", func(l []byte) []byte { return l[:len(l)-1] }, "unterminated last line"),
		tornCase("last line with a bad checksum", func(l []byte) []byte {
			l = bytes.Clone(l)
			i := bytes.Index(l, []byte(`"turns":1`))
			l[i+len(`"turns":`)] = '9'
			return l
		}, "checksum mismatch"),
		tornCase("zero-filled tail", func([]byte) []byte { return make([]byte, 4096) }, "unterminated last line"),
		tornCase("zero-filled tail ending in a newline", func([]byte) []byte {
			b := make([]byte, 4096)
			b[len(b)-1] = '\n'
			return b
		}, "no crc field at the end of the line"),
		tornCase("two damaged lines at the end", func(l []byte) []byte {
			return append([]byte("garbage\n"), l[:20]...)
		}, "line 5 (offset "),
		{
			name: "torn tail whose .broken name is taken",
			damage: func(t *testing.T, f *fixture) {
				writeFile(t, f.A.Broken(int64(len(f.logA)), 0), []byte("an earlier cut\n"))
				appendFile(t, f.A.Events(), f.line5[:7])
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{w(f.tornA(int64(len(f.logA))), "7 bytes after the last valid event (seq 4)"), w(f.replayedA())}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				off := int64(len(f.logA))
				assertFile(t, f.A.Events(), f.logA)
				assertFile(t, f.A.Broken(off, 0), []byte("an earlier cut\n"))
				assertFile(t, f.A.Broken(off, 1), f.line5[:7])
			},
		},
		{
			// The name of the copy cannot be checked (a symlink loop):
			// nothing is cut, and the agent is kept out.
			name: "torn tail whose .broken name cannot be checked",
			damage: func(t *testing.T, f *fixture) {
				loop := f.A.Broken(int64(len(f.logA)), 0)
				if err := os.Symlink(filepath.Base(loop), loop); err != nil {
					t.Fatal(err)
				}
				appendFile(t, f.A.Events(), f.line5[:7])
			},
			want: func(f *fixture) []wantFinding {
				torn := f.tornA(int64(len(f.logA)))
				torn.Repaired = false
				return []wantFinding{
					w(torn, "7 bytes after the last valid event (seq 4)"),
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA}, "repair log", "too many levels of symbolic links"),
					w(f.orphanB()),
				}
			},
			wantVerify: func(f *fixture) []wantFinding {
				torn := f.tornA(int64(len(f.logA)))
				torn.Repaired = false
				return []wantFinding{w(torn), w(f.replayedA())}
			},
			live:       []string{idB},
			liveVerify: []string{idA, idB},
			check:      func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.A.Dir) },
		},
		{
			name: "bad middle line followed by good lines",
			damage: func(t *testing.T, f *fixture) {
				b := bytes.Clone(f.logA)
				i := f.lineOffset(2) + int64(bytes.Index(lines(f.logA)[1], []byte("BUSY")))
				b[i] = 'b' // BUSY -> bUSY: valid JSON, wrong checksum
				writeFile(t, f.A.Events(), b)
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Line: 2, Offset: f.lineOffset(2)},
						"line 2 (offset", "checksum mismatch"),
					w(f.orphanB(), "parent "+idA),
				}
			},
			live:  []string{idB},
			check: checkCorrupt(2, "checksum mismatch"),
		},
		{
			name: "bad middle line and a torn tail",
			damage: func(t *testing.T, f *fixture) {
				b := bytes.Clone(f.logA)
				b[f.lineOffset(3)+3] = 'X' // {"sXq":3...
				writeFile(t, f.A.Events(), append(b, f.line5[:30]...))
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Line: 3, Offset: f.lineOffset(3)}, "checksum mismatch"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: checkCorrupt(3, "checksum mismatch"),
		},
		{
			name: "good checksum, wrong seq in the middle",
			damage: func(t *testing.T, f *fixture) {
				ls := lines(f.logA)
				e, err := DecodeEvent(ls[2])
				if err != nil {
					t.Fatal(err)
				}
				e.Seq = 7
				ls[2] = mustEncodeEvent(t, e)
				writeFile(t, f.A.Events(), bytes.Join(ls, nil))
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Line: 3, Offset: f.lineOffset(3)}, "seq 7 where 3 was expected"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: checkCorrupt(3, "seq 7 where 3 was expected"),
		},
		{
			name: "good checksum, repeated seq at the end",
			damage: func(t *testing.T, f *fixture) {
				e, err := DecodeEvent(lines(f.logA)[3])
				if err != nil {
					t.Fatal(err)
				}
				appendFile(t, f.A.Events(), mustEncodeEvent(t, e))
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Line: 5, Offset: int64(len(f.logA))}, "seq 4 where 5 was expected"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: checkCorrupt(5, "seq 4 where 5 was expected"),
		},
		sessionCase("truncated session.json", func(t *testing.T, f *fixture) {
			writeFile(t, f.A.Session(), f.sessA[:len(f.sessA)/2])
		}, "invalid JSON"),
		sessionCase("session.json is not JSON", func(t *testing.T, f *fixture) {
			writeFile(t, f.A.Session(), []byte("version = 1\n"))
		}, "invalid JSON"),
		sessionCase("session.json with agent_state NAPPING", func(t *testing.T, f *fixture) {
			editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["agent_state"] = "NAPPING" })
		}, `agent_state "NAPPING"`),
		sessionCase("session.json with an unknown field", func(t *testing.T, f *fixture) {
			editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["colour"] = "red" })
		}, `unknown field "colour"`),
		sessionCase("session.json without a version", func(t *testing.T, f *fixture) {
			editSessionJSON(t, f.A.Session(), func(m map[string]any) { delete(m, "version") })
		}, "no version field"),
		sessionCase("session.json of another agent", func(t *testing.T, f *fixture) {
			writeFile(t, f.A.Session(), readFile(t, f.B.Session()))
		}, "does not match the directory name"),
		sessionCase("session.json is missing", func(t *testing.T, f *fixture) {
			if err := os.Remove(f.A.Session()); err != nil {
				t.Fatal(err)
			}
		}, "session.json is missing"),
		{
			name: "unknown version is never rebuilt",
			opts: ScanOptions{RebuildSnapshots: true},
			damage: func(t *testing.T, f *fixture) {
				editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["version"] = 2; m["new_field"] = true })
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA, Hint: HintUpgrade}, "version 2", "unknown format version"),
					w(f.orphanB()),
				}
			},
			live: []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.A.Dir)
			},
		},
		rebuildCase("rebuild an invalid session.json", func(t *testing.T, f *fixture) {
			editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["agent_state"] = "NAPPING" })
		}, true),
		rebuildCase("rebuild a truncated session.json", func(t *testing.T, f *fixture) {
			writeFile(t, f.A.Session(), f.sessA[:10])
		}, true),
		rebuildCase("rebuild a missing session.json", func(t *testing.T, f *fixture) {
			if err := os.Remove(f.A.Session()); err != nil {
				t.Fatal(err)
			}
		}, false),
		{
			name: "no rebuild from a torn log",
			opts: ScanOptions{RebuildSnapshots: true},
			damage: func(t *testing.T, f *fixture) {
				writeFile(t, f.A.Session(), []byte("{}"))
				appendFile(t, f.A.Events(), f.line5[:9])
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA, Hint: HintFsck}, "cannot be rebuilt", "empty or torn"),
					w(f.orphanB()),
				}
			},
			wantVerify: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA,
						Hint: HintFsckRepair + " to rebuild session.json from events.jsonl"}, "no version field"),
					w(f.orphanB()),
				}
			},
			live: []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.A.Dir)
			},
		},
		{
			name: "directories that are not agents",
			damage: func(t *testing.T, f *fixture) {
				agents := f.l.AgentsDir()
				// An upper-case spelling of a real agent's id, holding a copy of it.
				upper := filepath.Join(agents, strings.ToUpper(idC))
				mkdir(t, upper)
				writeFile(t, filepath.Join(upper, SessionName), readFile(t, f.B.Session()))
				mkdir(t, filepath.Join(agents, idV4))
				mkdir(t, filepath.Join(agents, "notes"))
				writeFile(t, filepath.Join(agents, "notes", "todo.txt"), []byte("buy milk\n"))
				writeFile(t, filepath.Join(agents, idC), []byte("a file named like an agent\n"))
				writeFile(t, filepath.Join(agents, "{"+idC+"}"), nil)
			},
			want: func(f *fixture) []wantFinding {
				agents := f.l.AgentsDir()
				na := func(name string) wantFinding {
					return w(Finding{Kind: FindNotAgent, Path: filepath.Join(agents, name)}, "left untouched")
				}
				return sortWant([]wantFinding{
					na(strings.ToUpper(idC)), na(idV4), na("notes"), na(idC), na("{" + idC + "}"),
					w(f.replayedA()),
				})
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.home)
			},
		},
		{
			name: "temporary leftovers",
			damage: func(t *testing.T, f *fixture) {
				agents := f.l.AgentsDir()
				tmp := f.l.TempAgentDir(idC)
				mkdir(t, tmp)
				mkdir(t, filepath.Join(tmp, InboxDirName))
				writeFile(t, filepath.Join(tmp, SessionName), readFile(t, f.B.Session()))
				writeFile(t, filepath.Join(agents, TempPrefix+"x"), []byte("x"))
				writeFile(t, filepath.Join(f.A.Dir, ".session.json12345"), f.sessA[:20])
				writeFile(t, filepath.Join(f.B.Dir, ".transcript.txt987"), []byte("half a transcript"))
			},
			want: func(f *fixture) []wantFinding {
				agents := f.l.AgentsDir()
				return []wantFinding{
					w(Finding{Kind: FindLeftover, Path: f.l.TempAgentDir(idC), Repaired: true}, "never committed"),
					w(Finding{Kind: FindLeftover, Path: filepath.Join(agents, TempPrefix+"x"), Repaired: true}),
					w(Finding{Kind: FindLeftover, Path: filepath.Join(f.A.Dir, ".session.json12345"), Agent: idA, Repaired: true}, "interrupted atomic replace"),
					w(f.replayedA()),
					w(Finding{Kind: FindLeftover, Path: filepath.Join(f.B.Dir, ".transcript.txt987"), Agent: idB, Repaired: true}),
				}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				for _, p := range []string{f.l.TempAgentDir(idC), filepath.Join(f.l.AgentsDir(), ".tmp-x"),
					filepath.Join(f.A.Dir, ".session.json12345"), filepath.Join(f.B.Dir, ".transcript.txt987")} {
					if exists(p) {
						t.Errorf("%s was not removed", p)
					}
				}
				assertFile(t, f.A.Session(), f.sessA)
				assertFile(t, f.A.Events(), f.logA)
			},
		},
		{
			name: "leftover in an agent kept out stays",
			damage: func(t *testing.T, f *fixture) {
				editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["agent_state"] = "NAPPING" })
				writeFile(t, filepath.Join(f.A.Dir, ".session.json777"), f.sessA)
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindLeftover, Path: filepath.Join(f.A.Dir, ".session.json777"), Agent: idA}, "interrupted atomic replace"),
					w(Finding{Kind: FindKeptOut, Path: f.A.Session(), Agent: idA, Hint: HintFsckRepair + " to rebuild session.json from events.jsonl"}, "NAPPING"),
					w(f.orphanB()),
				}
			},
			live: []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.A.Dir)
			},
		},
		{
			name: "missing events.jsonl",
			damage: func(t *testing.T, f *fixture) {
				if err := os.Remove(f.A.Events()); err != nil {
					t.Fatal(err)
				}
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Hint: HintFsck}, "events.jsonl is missing"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.A.Dir) },
		},
		{
			name:   "empty events.jsonl",
			damage: func(t *testing.T, f *fixture) { writeFile(t, f.A.Events(), nil) },
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Hint: HintFsck}, "holds no valid event"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.A.Dir) },
		},
		{
			name:   "events.jsonl holding only a torn line",
			damage: func(t *testing.T, f *fixture) { writeFile(t, f.A.Events(), f.logA[:40]) },
			want: func(f *fixture) []wantFinding {
				torn := f.tornA(0)
				torn.Repaired = false
				return []wantFinding{
					w(torn, "40 bytes after the last valid event (seq 0)"),
					w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Hint: HintFsck}, "holds no valid event"),
					w(f.orphanB()),
				}
			},
			live:  []string{idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.A.Dir) },
		},
		{
			name: "session.json last_seq beyond the log",
			damage: func(t *testing.T, f *fixture) {
				editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["last_seq"] = 9 })
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(Finding{Kind: FindSnapshotAhead, Path: f.A.Session(), Agent: idA, Repaired: true},
						"reflects event 9 but events.jsonl ends at event 4", "rebuilt from events.jsonl"),
				}
			},
			live:  []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) { checkRebuiltFromLog(t, f, res, 4, 9) },
		},
		{
			// The snapshot reflects event 4 but event 4 is torn (a copy
			// taken mid-append, or a lost write): the log is the truth.
			name: "torn tail under a snapshot that is ahead",
			damage: func(t *testing.T, f *fixture) {
				editSessionJSON(t, f.A.Session(), func(m map[string]any) { m["last_seq"] = 4 })
				writeFile(t, f.A.Events(), f.logA[:len(f.logA)-5])
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(f.tornA(f.lineOffset(4)), "after the last valid event (seq 3)"),
					w(Finding{Kind: FindSnapshotAhead, Path: f.A.Session(), Agent: idA, Repaired: true},
						"reflects event 4 but events.jsonl ends at event 3"),
				}
			},
			live:  []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) { checkRebuiltFromLog(t, f, res, 3, 4) },
		},
		{
			name: "message stuck in inbox tmp",
			damage: func(t *testing.T, f *fixture) {
				writeFile(t, f.B.Inbox().Path(InboxTmp, idMsg2), []byte(`{"version":1,"id":"`+idMsg2+`","fr`))
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(f.replayedA()),
					w(Finding{Kind: FindLeftover, Path: f.B.Inbox().Path(InboxTmp, idMsg2), Agent: idB, Repaired: true}, "never published"),
				}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				if exists(f.B.Inbox().Path(InboxTmp, idMsg2)) {
					t.Error("the message in tmp/ was not removed")
				}
				msgs, bad, err := findAgent(res, idB).Pending()
				if err != nil || len(msgs) != 1 || msgs[0].ID != idMsg1 || len(bad) != 0 {
					t.Errorf("Pending() = %v, %v, %v; want only %s", msgs, bad, err, idMsg1)
				}
			},
		},
		{
			name: "garbage in inbox new",
			damage: func(t *testing.T, f *fixture) {
				writeFile(t, filepath.Join(f.B.Inbox().Sub(InboxNew), "junk.txt"), []byte("junk"))
				writeFile(t, f.B.Inbox().Path(InboxNew, idMsg2), []byte("{"))
				m := fmt.Sprintf(`{"version":1,"id":%q,"from":"USER","to":%q,"kind":"message","text":"x","sent_at":"2026-11-22T10:00:00Z"}`, idMsg1, idB)
				writeFile(t, f.B.Inbox().Path(InboxNew, idMsg3), []byte(m))
			},
			want: func(f *fixture) []wantFinding {
				bad := func(path string, detail string) wantFinding {
					return w(Finding{Kind: FindBadMessage, Path: path, Agent: idB, Hint: "fix or remove the file by hand"}, detail, "left in place")
				}
				return []wantFinding{
					w(f.replayedA()),
					bad(f.B.Inbox().Path(InboxNew, idMsg2), "invalid JSON"),
					bad(f.B.Inbox().Path(InboxNew, idMsg3), "does not match the file name"),
					bad(filepath.Join(f.B.Inbox().Sub(InboxNew), "junk.txt"), "not a message file name"),
				}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				f.assertUntouched(t, f.B.Dir)
				msgs, bad, err := findAgent(res, idB).Pending()
				if err != nil || len(msgs) != 1 || msgs[0].ID != idMsg1 || len(bad) != 3 {
					t.Errorf("Pending() = %v, %v, %v; want %s and 3 bad files", msgs, bad, err, idMsg1)
				}
			},
		},
		{
			name: "missing inbox cur",
			damage: func(t *testing.T, f *fixture) {
				if err := os.Remove(f.B.Inbox().Sub(InboxCur)); err != nil {
					t.Fatal(err)
				}
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(f.replayedA()),
					w(Finding{Kind: FindMissingDir, Path: f.B.Inbox().Sub(InboxCur), Agent: idB, Repaired: true}, "missing"),
				}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				if fi, err := os.Stat(f.B.Inbox().Sub(InboxCur)); err != nil || !fi.IsDir() || fi.Mode().Perm() != dirPerm {
					t.Errorf("inbox/cur not recreated 0700: %v, %v", fi, err)
				}
				b := findAgent(res, idB)
				if err := b.MarkDelivered([]string{idMsg1}); err != nil {
					t.Fatal(err)
				}
				assertExists(t, f.B.Inbox().Path(InboxCur, idMsg1))
			},
		},
		{
			name: "inbox cur is a file",
			damage: func(t *testing.T, f *fixture) {
				cur := f.B.Inbox().Sub(InboxCur)
				if err := os.Remove(cur); err != nil {
					t.Fatal(err)
				}
				writeFile(t, cur, []byte("not a directory"))
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(f.replayedA()),
					w(Finding{Kind: FindKeptOut, Path: f.B.Inbox().Sub(InboxCur), Agent: idB}, "not a directory"),
				}
			},
			live:  []string{idA},
			check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.B.Dir) },
		},
		{
			name: "missing inbox",
			damage: func(t *testing.T, f *fixture) {
				if err := os.RemoveAll(f.A.Inbox().Dir); err != nil {
					t.Fatal(err)
				}
			},
			want: func(f *fixture) []wantFinding {
				in := f.A.Inbox()
				return []wantFinding{
					w(f.replayedA()),
					w(Finding{Kind: FindMissingDir, Path: in.Sub(InboxCur), Agent: idA, Repaired: true}),
					w(Finding{Kind: FindMissingDir, Path: in.Sub(InboxNew), Agent: idA, Repaired: true}),
					w(Finding{Kind: FindMissingDir, Path: in.Sub(InboxTmp), Agent: idA, Repaired: true}),
				}
			},
			live: []string{idA, idB},
			check: func(t *testing.T, f *fixture, res *ScanResult) {
				for _, sub := range []string{InboxTmp, InboxNew, InboxCur} {
					assertExists(t, f.A.Inbox().Sub(sub))
				}
				if err := f.s.Send(&Message{From: User, To: idA, Kind: KindMessage, Text: "back"}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "orphan",
			damage: func(t *testing.T, f *fixture) {
				c, err := f.s.CreateAgent(&Session{ID: idC, Name: "gamma", ParentID: idGhost, Provider: "script"})
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
			},
			want: func(f *fixture) []wantFinding {
				return []wantFinding{
					w(f.replayedA()),
					w(Finding{Kind: FindOrphan, Path: f.l.AgentDir(idC), Agent: idC}, "parent "+idGhost+" is not a live agent"),
				}
			},
			live:  []string{idA, idB, idC},
			check: func(t *testing.T, f *fixture, res *ScanResult) { f.assertUntouched(t, f.home) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runDamageCase(t, tc)
		})
	}
}
