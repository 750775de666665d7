package fsstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAppendRefusedAfterUncutTail: a scan without Repair leaves a torn tail
// in place; appending after it would turn it into corruption, so the append
// is refused until a repair has cut it.
func TestAppendRefusedAfterUncutTail(t *testing.T) {
	f := newFixture(t)
	appendFile(t, f.A.Events(), f.line5[:10])
	damaged := readFile(t, f.A.Events())

	res := mustScan(t, f.s, ScanOptions{})
	_, err := findAgent(res, idA).Commit(Counters{Turns: 1})
	if !errors.Is(err, ErrCorrupt) || Hint(err) != HintFsckRepair {
		t.Fatalf("Commit after an uncut torn tail: %v (hint %q), want ErrCorrupt with the repair hint", err, Hint(err))
	}
	var e *Error
	if !errors.As(err, &e) || e.Path != f.A.Events() {
		t.Errorf("error %#v does not name the log", err)
	}
	closeAgents(res)
	assertFile(t, f.A.Events(), damaged)

	res = mustScan(t, f.s, ScanOptions{Repair: true})
	defer closeAgents(res)
	s, err := findAgent(res, idA).Commit(Counters{Turns: 1})
	if err != nil || s.LastSeq != 5 {
		t.Fatalf("Commit after repair: %v, %v", s, err)
	}
	got := readFile(t, f.A.Events())
	if !bytes.HasPrefix(got, f.logA) || len(lines(got)) != 5 {
		t.Errorf("log after repair and append:\n%s", got)
	}
}

// padEvent returns an event whose line is exactly size bytes long.
func padEvent(t *testing.T, seq uint64, size int) Event {
	t.Helper()
	e := Event{Seq: seq, Time: epoch, Type: "pad", Data: []byte(`""`)}
	base := len(mustEncodeEvent(t, e))
	if size < base {
		t.Fatalf("size %d below the minimum %d", size, base)
	}
	e.Data = []byte(`"` + strings.Repeat("p", size-base) + `"`)
	return e
}

// forgeLine builds a line with a valid checksum for any body (which must
// lack its closing brace), bypassing EncodeEvent's size limit.
func forgeLine(body []byte) []byte {
	line := append([]byte(nil), body...)
	line = append(line, crcPrefix...)
	line = hex.AppendEncode(line, binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli)))
	return append(line, '"', '}', '\n')
}

func TestMaxEventSize(t *testing.T) {
	small := func(seq uint64) []byte {
		return mustEncodeEvent(t, Event{Seq: seq, Time: epoch, Type: "x"})
	}
	max := mustEncodeEvent(t, padEvent(t, 2, MaxEventSize))
	if len(max) != MaxEventSize {
		t.Fatalf("padded line is %d bytes", len(max))
	}
	over := padEvent(t, 2, MaxEventSize)
	over.Data = append([]byte(`"p`), over.Data[1:]...)
	if _, err := EncodeEvent(over); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("EncodeEvent of %d bytes: %v, want ErrTooLarge", MaxEventSize+1, err)
	}
	// A line one byte over the limit, with a valid checksum.
	body := bytes.Clone(max[:len(max)-crcTrailerLen-1]) // ..."data":"ppp"
	body = append(body[:len(body)-1], 'p', '"')
	long := forgeLine(body)
	if len(long) != MaxEventSize+1 {
		t.Fatalf("forged line is %d bytes", len(long))
	}
	if _, err := checkLine(long[:len(long)-1]); err != nil {
		t.Fatalf("forged line does not check: %v", err)
	}

	cases := []struct {
		name    string
		log     [][]byte
		lastSeq uint64
		torn    int64
		errLine int
		reason  string
	}{
		{name: "max-size line in the middle", log: [][]byte{small(1), max, small(3)}, lastSeq: 3},
		{name: "max-size line at the end", log: [][]byte{small(1), max}, lastSeq: 2},
		{name: "oversized line in the middle", log: [][]byte{small(1), long, small(2)}, errLine: 2, reason: "longer than the maximum event size"},
		{name: "oversized line at the end", log: [][]byte{small(1), long}, lastSeq: 1, torn: int64(len(long)), reason: "longer than the maximum event size"},
		{name: "oversized unterminated line", log: [][]byte{small(1), long[:len(long)-1], []byte("xx")}, lastSeq: 1, torn: int64(len(long) + 1), reason: "longer than the maximum event size"},
		{name: "max-size line unterminated", log: [][]byte{small(1), max[:len(max)-1]}, lastSeq: 1, torn: int64(len(max) - 1), reason: "unterminated last line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := bytes.Join(tc.log, nil)
			info, err := scanLog(bytes.NewReader(data), "log", nil)
			if tc.errLine > 0 {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Line != tc.errLine || ce.Offset != int64(len(tc.log[0])) || !strings.Contains(ce.Reason, tc.reason) {
					t.Fatalf("scanLog: %v, want corruption at line %d", err, tc.errLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if info.LastSeq != tc.lastSeq || info.TornLen != tc.torn || info.Size+info.TornLen != int64(len(data)) {
				t.Errorf("info = %+v, want last seq %d, torn %d", info, tc.lastSeq, tc.torn)
			}
			if !strings.Contains(info.TornReason, tc.reason) {
				t.Errorf("torn reason %q lacks %q", info.TornReason, tc.reason)
			}
		})
	}
}

func TestAppendTooLarge(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "big", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	before := readFile(t, a.Files().Events())
	if _, err := a.Log().Append("pad", strings.Repeat("x", MaxEventSize)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append of more than MaxEventSize: %v", err)
	}
	if _, err := a.Commit(Work{Result: strings.Repeat("x", MaxEventSize)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Commit of more than MaxEventSize: %v", err)
	}
	assertFile(t, a.Files().Events(), before)
	e, err := a.Log().Append("pad", strings.Repeat("x", 100<<10))
	if err != nil || e.Seq != 2 {
		t.Fatalf("Append after a refused one: %+v, %v", e, err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(Counters{Turns: 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(Counters{Turns: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Commit after Close: %v", err)
	}
	if a.Session().LastSeq != 2 {
		t.Errorf("a refused commit changed the session: %+v", a.Session())
	}
}

// TestCommitRefusesInvalidEvent: an event that would make the session
// invalid is refused before anything is written.
func TestCommitRefusesInvalidEvent(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	before := readFile(t, a.Files().Events())
	if _, err := a.Commit(StateChange{AgentState: "NAPPING"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Commit of agent_state NAPPING: %v", err)
	}
	if _, err := a.Commit(Counters{Turns: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Commit of a negative counter: %v", err)
	}
	assertFile(t, a.Files().Events(), before)
}

// TestDeepScan: a scan checks only the checksums of the events a snapshot
// already reflects; a deep scan also decodes and replays them.
func TestDeepScan(t *testing.T) {
	f := newFixture(t)
	ls := lines(f.logA)
	e, err := DecodeEvent(ls[1])
	if err != nil {
		t.Fatal(err)
	}
	e.Data = []byte(`{"agent_state":"NAPPING"}`)
	ls[1] = mustEncodeEvent(t, e)
	writeFile(t, f.A.Events(), bytes.Join(ls, nil))

	res := mustScan(t, f.s, ScanOptions{})
	closeAgents(res)
	assertLive(t, "shallow", res, []string{idA, idB})

	res = mustScan(t, f.s, ScanOptions{Deep: true, Repair: true})
	closeAgents(res)
	assertLive(t, "deep", res, []string{idB})
	assertFindings(t, "deep", res, []wantFinding{
		w(Finding{Kind: FindKeptOut, Path: f.A.Events(), Agent: idA, Line: 2, Offset: int64(len(ls[0]))}, "NAPPING"),
		w(f.orphanB()),
	})
}

func TestCreateAgentTwice(t *testing.T) {
	s := mustOpen(t, t.TempDir(), Options{})
	a, err := s.CreateAgent(&Session{ID: idA, Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	before := hashTree(t, s.Layout().Home)
	if _, err := s.CreateAgent(&Session{ID: idA, Name: "b", Provider: "script"}); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateAgent with the same id: %v", err)
	}
	if d := before.diff(hashTree(t, s.Layout().Home), ""); len(d) > 0 {
		t.Errorf("a refused CreateAgent changed the home:\n%s", strings.Join(d, "\n"))
	}
	for _, bad := range []*Session{
		{Name: "", Provider: "script"},
		{Name: "a/b", Provider: "script"},
		{Name: "a", Provider: ""},
		{Name: "a", Provider: "script", ParentID: strings.ToUpper(idB)},
		{ID: idV4, Name: "a", Provider: "script"},
	} {
		if _, err := s.CreateAgent(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("CreateAgent(%+v): %v, want ErrInvalid", bad, err)
		}
	}
	if d := before.diff(hashTree(t, s.Layout().Home), ""); len(d) > 0 {
		t.Errorf("refused CreateAgents changed the home:\n%s", strings.Join(d, "\n"))
	}
}

func TestSend(t *testing.T) {
	f := newFixture(t)
	in := f.B.Inbox()
	err := f.s.Send(&Message{ID: idMsg1, From: User, To: idB, Kind: KindMessage, Text: "again"})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("Send of an existing message id: %v", err)
	}
	m, err := DecodeMessage(readFile(t, in.Path(InboxNew, idMsg1)))
	if err != nil || m.Text != "hello" {
		t.Fatalf("the first message was overwritten: %+v, %v", m, err)
	}
	if ents, _ := os.ReadDir(in.Sub(InboxTmp)); len(ents) != 0 {
		t.Errorf("inbox/tmp holds %d files after a refused send", len(ents))
	}
	if err := f.s.Send(&Message{From: User, To: idGhost, Kind: KindMessage}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Send to a missing agent: %v", err)
	}
	if err := f.s.Send(&Message{From: User, To: "../x", Kind: KindMessage}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Send to a bad id: %v", err)
	}
	up := &Message{From: idA, To: User, Kind: KindReply, Text: "done"}
	if err := f.s.Send(up); err != nil {
		t.Fatal(err)
	}
	msgs, bad, err := ReadInbox(OS{}, f.l.UserInbox(), InboxNew)
	if err != nil || len(bad) != 0 || len(msgs) != 1 || msgs[0].ID != up.ID || msgs[0].Text != "done" || msgs[0].Version != Version {
		t.Fatalf("user inbox: %+v, %v, %v", msgs, bad, err)
	}
	res := mustScan(t, f.s, ScanOptions{})
	defer closeAgents(res)
	b := findAgent(res, idB)
	if err := b.MarkDelivered([]string{idMsg1, idMsg2}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := b.Pending(); len(p) != 0 {
		t.Errorf("pending after delivery: %+v", p)
	}
	cur, _, err := ReadInbox(OS{}, in, InboxCur)
	if err != nil || len(cur) != 1 || cur[0].ID != idMsg1 {
		t.Errorf("inbox/cur: %+v, %v", cur, err)
	}
}

func TestArchiveAgent(t *testing.T) {
	f := newFixture(t)
	before := hashTree(t, f.B.Dir)
	if err := f.s.ArchiveAgent(idB); err != nil {
		t.Fatal(err)
	}
	if d := before.diff(hashTree(t, f.l.ArchivedAgentDir(idB)), ""); len(d) > 0 {
		t.Errorf("archived directory differs:\n%s", strings.Join(d, "\n"))
	}
	// agents/<id> stays for ArchiveGrace, the same files (hard links),
	// for copies of the home in progress; the agent is archived.
	if d := before.diff(hashTree(t, f.B.Dir), ""); len(d) > 0 {
		t.Errorf("agents/ copy changed:\n%s", strings.Join(d, "\n"))
	}
	a1, _ := os.Stat(f.B.Events())
	a2, _ := os.Stat(filepath.Join(f.l.ArchivedAgentDir(idB), EventsName))
	if !os.SameFile(a1, a2) {
		t.Error("the archived log is not a hard link of the live one")
	}
	if err := f.s.ArchiveAgent(idB); !errors.Is(err, ErrExists) {
		t.Errorf("second ArchiveAgent: %v", err)
	}
	if err := f.s.ArchiveAgent("notes"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ArchiveAgent(notes): %v", err)
	}
	res := mustScan(t, f.s, ScanOptions{Repair: true})
	closeAgents(res)
	assertLive(t, "after archive", res, []string{idA})
	if !hasFinding(res, FindArchivedCopy, f.B.Dir) || !exists(f.B.Dir) {
		t.Errorf("within the grace: findings %+v, agents/ copy exists %v", res.Findings, exists(f.B.Dir))
	}
	if a, fs := f.s.Load(idB, false); a != nil || len(fs) != 1 || fs[0].Kind != FindArchivedCopy {
		t.Errorf("Load of an archived agent's copy: %v, %+v", a, fs)
	}
	// After the grace, the sweep (and a repairing scan) removes it.
	removed, err := f.s.SweepArchived(time.Now().Add(ArchiveGrace + time.Minute))
	if err != nil || len(removed) != 1 || removed[0] != idB || exists(f.B.Dir) {
		t.Fatalf("SweepArchived: %v, %v; agents/ copy exists %v", removed, err, exists(f.B.Dir))
	}
	if d := before.diff(hashTree(t, f.l.ArchivedAgentDir(idB)), ""); len(d) > 0 {
		t.Errorf("archived directory changed by the sweep:\n%s", strings.Join(d, "\n"))
	}
	if err := f.s.ArchiveAgent(idB); !errors.Is(err, ErrNotFound) {
		t.Errorf("ArchiveAgent after the sweep: %v", err)
	}
}

func hasFinding(res *ScanResult, kind FindingKind, path string) bool {
	for _, f := range res.Findings {
		if f.Kind == kind && f.Path == path {
			return true
		}
	}
	return false
}

func TestIsID(t *testing.T) {
	v7 := NewID()
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{idA, true},
		{v7, true},
		{strings.ToUpper(idA), false},
		{"{" + idA + "}", false},
		{"urn:uuid:" + idA, false},
		{strings.ReplaceAll(idA, "-", ""), false},
		{idV4, false},
		{"00000000-0000-0000-0000-000000000000", false},
		{"", false},
		{"notes", false},
		{TempPrefix + idA, false},
	} {
		if got := IsID(tc.s); got != tc.ok {
			t.Errorf("IsID(%q) = %v, want %v", tc.s, got, tc.ok)
		}
	}
}

func TestIsAtomicTemp(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{".session.json12345", true},
		{".transcript.txt1", true},
		{".mcp.json99", true},
		{".events.jsonl.812.broken4", true},
		{".session.json.0.broken77", false}, // not a name renameio makes for us
		{".session.json", false},
		{"session.json123", false},
		{".events.jsonl123", false},
		{".notes123", false},
		{"events.jsonl.812.broken", false},
	} {
		if got := isAtomicTemp(tc.name); got != tc.ok {
			t.Errorf("isAtomicTemp(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestLayout(t *testing.T) {
	l := Layout{Home: "/h"}
	a := l.Agent(idA)
	got := []string{
		l.AgentsDir(), l.ArchiveDir(), l.WorkspacesDir(), l.Socket(), l.Lock(), l.Pid(), l.Log(), l.Recovery(),
		a.Dir, l.TempAgentDir(idA), l.ArchivedAgentDir(idA),
		a.Session(), a.Events(), a.Transcript(), a.MCPConfig(), a.Broken(812, 0), a.Broken(812, 2), a.BrokenSession(0),
		a.Inbox().Sub(InboxNew), a.Inbox().Path(InboxCur, idMsg1), l.UserInbox().Path(InboxTmp, idMsg1),
	}
	d := "/h/agents/" + idA
	want := []string{
		"/h/agents", "/h/archive", "/h/workspaces", "/h/daemon.sock", "/h/daemon.lock", "/h/daemon.pid", "/h/daemon.log", "/h/recovery.json",
		d, "/h/agents/.tmp-" + idA, "/h/archive/" + idA,
		d + "/session.json", d + "/events.jsonl", d + "/transcript.txt", d + "/mcp.json", d + "/events.jsonl.812.broken", d + "/events.jsonl.812-2.broken", d + "/session.json.0.broken",
		d + "/inbox/new", d + "/inbox/cur/" + idMsg1 + ".json", "/h/inbox/tmp/" + idMsg1 + ".json",
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("path %d = %s, want %s", i, got[i], want[i])
		}
	}
}

func TestErrors(t *testing.T) {
	ce := &CorruptError{Path: "p", Line: 3, Offset: 81, Reason: "checksum mismatch"}
	if ce.Error() != "p: line 3 (offset 81): checksum mismatch" || !errors.Is(ce, ErrCorrupt) || Hint(ce) != HintFsck {
		t.Errorf("CorruptError: %q, hint %q", ce.Error(), Hint(ce))
	}
	e := wrap("append", "p", fmt.Errorf("%w: x", ErrTooLarge), "h")
	if e.Error() != "append p: fsstore: event too large: x" || !errors.Is(e, ErrTooLarge) || Hint(e) != "h" {
		t.Errorf("Error: %q, hint %q", e.Error(), Hint(e))
	}
	if wrap("op", "p", nil, "") != nil || Hint(errors.New("plain")) != "" {
		t.Error("wrap(nil) or Hint(plain)")
	}
}

// A torn tail far longer than its .broken copy keeps (a sparse zero tail
// after a power loss, say) is cut without reading the log into memory,
// and the copy keeps its first and last MiB and says what it left out.
func TestCutLongTail(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAgent(&Session{Name: "a", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	events := a.Files().Events()
	valid, err := os.Stat(events)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	const tail = 64 << 20 // sparse: a hole, then a marker
	f, err := os.OpenFile(events, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("END"), valid.Size()+tail-3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	res, err := s.Scan(context.Background(), ScanOptions{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Agents) != 1 {
		t.Fatalf("findings %+v", res.Findings)
	}
	if fi, _ := os.Stat(events); fi.Size() != valid.Size() {
		t.Fatalf("log is %d bytes after the cut, want %d", fi.Size(), valid.Size())
	}
	broken, err := os.ReadFile(a.Files().Broken(valid.Size(), 0))
	if err != nil {
		t.Fatal(err)
	}
	note := fmt.Sprintf("\n[substrat: %d bytes of the torn tail left out here]\n", tail-2*brokenKeep)
	if len(broken) != 2*brokenKeep+len(note) || !bytes.Contains(broken, []byte(note)) || !bytes.HasSuffix(broken, []byte("END")) {
		t.Fatalf("the .broken copy is %d bytes, ends %q", len(broken), broken[len(broken)-8:])
	}
}

// A store keeps at most MaxOpenLogs logs open: appending to more closes
// the least recently used, which reopen at their next append, and the
// process's descriptors do not grow with the number of agents.
func TestOpenLogsBounded(t *testing.T) {
	s, err := Open(t.TempDir(), Options{MaxOpenLogs: 4})
	if err != nil {
		t.Fatal(err)
	}
	fds := func() int {
		entries, _ := os.ReadDir("/proc/self/fd")
		return len(entries)
	}
	var agents []*Agent
	for range 12 {
		a, err := s.CreateAgent(&Session{Name: "a" + strconv.Itoa(len(agents)), Provider: "script"})
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	before := fds()
	for round := range 3 {
		for i, a := range agents {
			if _, err := a.Commit(Counters{Turns: 1}); err != nil {
				t.Fatalf("round %d, agent %d: %v", round, i, err)
			}
			if n := s.OpenLogs(); n > 4 {
				t.Fatalf("%d logs open, want at most 4", n)
			}
		}
	}
	if d := fds() - before; d > 4 {
		t.Fatalf("%d more descriptors after appending to 12 agents, want at most 4", d)
	}
	for _, a := range agents {
		if got := a.Session().Counters.Turns; got != 3 {
			t.Fatalf("turns %d, want 3", got)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.OpenLogs(); n != 0 {
		t.Fatalf("%d logs open after Close", n)
	}
	// Every append reached the disk, in order.
	res, err := s.Scan(context.Background(), ScanOptions{Deep: true})
	if err != nil || len(res.Agents) != 12 {
		t.Fatalf("scan: %d agents, %v, %+v", len(res.Agents), err, res.Findings)
	}
}

// What a copy of the home finds of an agent that moved during the copy:
// one whole copy and one partial one. The whole one is used, and
// repairing removes the partial one, saying so.
func TestArchivedPairs(t *testing.T) {
	for _, c := range []struct {
		name        string
		partial     string // "live" or "archive"
		wantLive    bool
		wantRemoved func(l Layout) string
	}{
		{"partial agents/ copy", "live", false, func(l Layout) string { return l.AgentDir(idB) }},
		{"partial archive/ copy", "archive", true, func(l Layout) string { return l.ArchivedAgentDir(idB) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			if err := f.s.ArchiveAgent(idB); err != nil {
				t.Fatal(err)
			}
			partial := f.B.Dir
			if c.partial == "archive" {
				partial = f.l.ArchivedAgentDir(idB)
			}
			// What rsync leaves of a directory whose files vanished: the
			// directories, not the files.
			for _, name := range []string{SessionName, EventsName} {
				if err := os.Remove(filepath.Join(partial, name)); err != nil {
					t.Fatal(err)
				}
			}
			res := mustScan(t, f.s, ScanOptions{})
			closeAgents(res)
			want := []string{idA}
			if c.wantLive {
				want = []string{idA, idB}
			}
			assertLive(t, "before repair", res, want)
			if !hasFinding(res, FindPartialCopy, partial) {
				t.Fatalf("findings %+v", res.Findings)
			}
			res = mustScan(t, f.s, ScanOptions{Repair: true})
			closeAgents(res)
			assertLive(t, "after repair", res, want)
			if exists(c.wantRemoved(f.l)) {
				t.Fatalf("the partial copy %s was not removed", c.wantRemoved(f.l))
			}
			for _, x := range res.Findings {
				if x.Kind == FindPartialCopy && !x.Repaired {
					t.Fatalf("unrepaired: %+v", x)
				}
			}
			res = mustScan(t, f.s, ScanOptions{})
			closeAgents(res)
			for _, x := range res.Findings {
				if x.Kind == FindPartialCopy {
					t.Fatalf("after repair, still %+v", x)
				}
			}
		})
	}
}
