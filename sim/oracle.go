package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

// Facts is what a home holds that the daemon promises to keep: each
// agent's directory and log, and every message in an inbox. The oracle
// takes Facts of the file system as the program saw it when an operation
// was acknowledged, and compares them with what a crash and a recovery
// left.
type Facts struct {
	Agents map[string]*AgentFacts // by id, live and archived
	User   map[string][]byte      // USER's inbox: message id -> file content (new/ and cur/)
}

func (f *Facts) agent(id string) *AgentFacts {
	if f == nil {
		return nil
	}
	return f.Agents[id]
}

// AgentFacts describes one agent directory.
type AgentFacts struct {
	ID, Name, ParentID string
	Archived           bool              // in archive/, not agents/
	Log                []byte            // events.jsonl up to its last newline
	Tail               int               // bytes after the last newline
	Inbox              map[string][]byte // message id -> file content, from new/ and cur/
	TmpFiles           []string          // inbox/tmp entries
	Counters           fsstore.Counters  // the turn events' sum (kept by the ledger only)
}

// ReadFacts reads the facts of the home on fsys, as the volatile state
// shows them.
func ReadFacts(fsys fsstore.FS, home string) (*Facts, error) {
	l := fsstore.Layout{Home: home}
	f := &Facts{Agents: map[string]*AgentFacts{}}
	for _, where := range []string{l.AgentsDir(), l.ArchiveDir()} {
		entries, err := fsys.ReadDir(where)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !fsstore.IsID(e.Name()) || !e.IsDir() {
				continue
			}
			a, err := readAgent(fsys, filepath.Join(where, e.Name()), e.Name())
			if err != nil {
				return nil, err
			}
			a.Archived = where == l.ArchiveDir()
			if prev := f.Agents[a.ID]; prev != nil {
				// An archive keeps agents/<id> (hard links of the same
				// files) for fsstore.ArchiveGrace: the agent is archived,
				// and both copies hold the same.
				if !a.Archived || !bytes.Equal(prev.Log, a.Log) {
					return nil, fmt.Errorf("agent %s is both in agents/ and archive/, and the two differ", a.ID)
				}
			}
			f.Agents[a.ID] = a
		}
	}
	user, err := readInbox(fsys, l.UserInbox())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	f.User = user
	return f, nil
}

func readAgent(fsys fsstore.FS, dir, id string) (*AgentFacts, error) {
	files := fsstore.AgentFiles{Dir: dir}
	a := &AgentFacts{ID: id}
	log, err := fsys.ReadFile(files.Events())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	cut := bytes.LastIndexByte(log, '\n') + 1
	a.Log, a.Tail = log[:cut], len(log)-cut
	if line, _, ok := bytes.Cut(a.Log, []byte("\n")); ok {
		if e, err := fsstore.DecodeEvent(line); err == nil && e.Type == fsstore.EvCreated {
			var s fsstore.Session
			if e.Decode(&s) == nil {
				a.Name, a.ParentID = s.Name, s.ParentID
			}
		}
	}
	a.Inbox, err = readInbox(fsys, files.Inbox())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if tmp, err := fsys.ReadDir(files.Inbox().Sub(fsstore.InboxTmp)); err == nil {
		for _, e := range tmp {
			a.TmpFiles = append(a.TmpFiles, e.Name())
		}
	}
	return a, nil
}

// readInbox returns the message files of new/ and cur/ (the same message
// in both is one file, hard-linked).
func readInbox(fsys fsstore.FS, b fsstore.Inbox) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, sub := range []string{fsstore.InboxNew, fsstore.InboxCur} {
		entries, err := fsys.ReadDir(b.Sub(sub))
		if err != nil {
			return out, err
		}
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), fsstore.MessageExt)
			if !ok {
				continue
			}
			data, err := fsys.ReadFile(filepath.Join(b.Sub(sub), e.Name()))
			if err != nil {
				return out, err
			}
			if old, dup := out[id]; dup && !bytes.Equal(old, data) {
				return out, fmt.Errorf("%s: message %s differs between new/ and cur/", b.Dir, id)
			}
			out[id] = data
		}
	}
	return out, nil
}

// addCounters adds the counters of the turn events in log to c.
func addCounters(c fsstore.Counters, log []byte) (fsstore.Counters, error) {
	for line := range bytes.Lines(log) {
		if !bytes.Contains(line, []byte(`"type":"turn"`)) {
			continue
		}
		e, err := fsstore.DecodeEvent(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			return c, err
		}
		var d fsstore.Counters
		if err := e.Decode(&d); err != nil {
			return c, err
		}
		c = c.Add(d)
	}
	return c, nil
}

// firstDiff describes where b stops extending a.
func firstDiff(a, b []byte) string {
	al, bl := bytes.SplitAfter(a, []byte("\n")), bytes.SplitAfter(b, []byte("\n"))
	for i := range al {
		if i >= len(bl) || !bytes.Equal(al[i], bl[i]) {
			got := "nothing"
			if i < len(bl) {
				got = fmt.Sprintf("%.200q", bl[i])
			}
			return fmt.Sprintf("line %d: want %.200q, got %s", i+1, al[i], got)
		}
	}
	return "no difference"
}

// problems collects what the oracle found wrong.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// ledger accumulates what was acknowledged: each acknowledgement adds
// the facts of the moment, which must extend, never rewrite, those
// acknowledged before (logs only grow, messages never change, archived
// agents stay archived).
type ledger struct {
	acked *Facts
}

// add merges f and returns the merged facts (never modified afterwards)
// and whatever f rewrote.
func (l *ledger) add(f *Facts) (*Facts, problems) {
	var p problems
	next := &Facts{Agents: map[string]*AgentFacts{}, User: map[string][]byte{}}
	old := l.acked
	if old == nil {
		old = &Facts{Agents: map[string]*AgentFacts{}, User: map[string][]byte{}}
	}
	for id, a := range old.Agents {
		next.Agents[id] = a
	}
	for id, n := range f.Agents {
		a := &AgentFacts{ID: id, Name: n.Name, ParentID: n.ParentID, Archived: n.Archived, Log: n.Log, Inbox: map[string][]byte{}}
		var seen []byte // the part of the log whose counters are known
		if o := old.Agents[id]; o != nil {
			if !bytes.HasPrefix(n.Log, o.Log) {
				p.add("without a crash, acknowledged events of %s (%s) were rewritten: %s", o.Name, id, firstDiff(o.Log, n.Log))
			} else {
				seen, a.Counters = o.Log, o.Counters
			}
			if o.Archived && !n.Archived {
				p.add("without a crash, archived agent %s (%s) came back to agents/", o.Name, id)
			}
			a.Archived = a.Archived || o.Archived
			for mid, data := range o.Inbox {
				a.Inbox[mid] = data
			}
		}
		var err error
		if a.Counters, err = addCounters(a.Counters, n.Log[len(seen):]); err != nil {
			p.add("without a crash, the log of %s (%s) holds an unreadable turn event: %v", a.Name, id, err)
		}
		for mid, data := range n.Inbox {
			if od, ok := a.Inbox[mid]; ok && !bytes.Equal(od, data) {
				p.add("without a crash, acknowledged message %s to %s (%s) was replaced:\nacknowledged %.300q\nnow          %.300q", mid, a.Name, id, od, data)
				continue
			}
			a.Inbox[mid] = data
		}
		next.Agents[id] = a
	}
	for id, o := range old.Agents {
		if f.Agents[id] == nil {
			p.add("without a crash, acknowledged agent %s (%s) disappeared", o.Name, id)
		}
	}
	for mid, data := range old.User {
		next.User[mid] = data
	}
	for mid, data := range f.User {
		if od, ok := next.User[mid]; ok && !bytes.Equal(od, data) {
			p.add("without a crash, acknowledged message %s to USER was replaced: %.200q -> %.200q", mid, od, data)
			continue
		}
		next.User[mid] = data
	}
	l.acked = next
	return next, p
}

// checkWritten checks a crashed file system against what the program had
// written before the crash: every log there is a prefix of the log as
// written (a torn tail aside), every agent and message there was written,
// and a message is never a part of one.
func checkWritten(p *problems, written, crashed *Facts) {
	for id, c := range crashed.Agents {
		w := written.Agents[id]
		if w == nil {
			p.add("after the crash, agent %s exists but was never written", id)
			continue
		}
		if !bytes.HasPrefix(w.Log, c.Log) {
			p.add("after the crash, the log of %s (%s) is not a prefix of what was written: %s", c.Name, id, firstDiff(c.Log, w.Log))
		}
		for mid, data := range c.Inbox {
			if wd, ok := w.Inbox[mid]; ok && !bytes.Equal(wd, data) {
				p.add("after the crash, message %s to %s is not what was written: %.200q", mid, c.Name, data)
			}
		}
	}
}

// checkAcked checks that everything acknowledged is in got.
func checkAcked(p *problems, when string, acked, got *Facts) {
	for id, a := range acked.Agents {
		g := got.Agents[id]
		switch {
		case g == nil:
			p.add("%s, acknowledged agent %s (%s) is gone", when, a.Name, id)
			continue
		case a.Archived && !g.Archived:
			p.add("%s, agent %s (%s) was archived (acknowledged) but is back in agents/", when, a.Name, id)
		}
		if !bytes.HasPrefix(g.Log, a.Log) {
			p.add("%s, acknowledged events of %s (%s) are lost: %s", when, a.Name, id, firstDiff(a.Log, g.Log))
		}
		for mid, data := range a.Inbox {
			gd, ok := g.Inbox[mid]
			switch {
			case !ok:
				p.add("%s, acknowledged message %s to %s (%s) is in neither inbox/new nor inbox/cur: %.200q", when, mid, a.Name, id, data)
			case !bytes.Equal(gd, data):
				p.add("%s, acknowledged message %s to %s (%s) was replaced:\nacknowledged %.300q\nnow          %.300q", when, mid, a.Name, id, data, gd)
			}
		}
	}
	for mid, data := range acked.User {
		gd, ok := got.User[mid]
		switch {
		case !ok:
			p.add("%s, acknowledged message %s to USER is gone: %.200q", when, mid, data)
		case !bytes.Equal(gd, data):
			p.add("%s, acknowledged message %s to USER was replaced: %.200q -> %.200q", when, mid, data, gd)
		}
	}
}

// checkRecovered checks a recovered home: nothing half-made, nothing that
// was never written, no ACTIVE session, a consistent tree, a clean deep
// scan, and the core agreeing with the disk.
func checkRecovered(p *problems, written, rec *Facts, w *world, acked *Facts) {
	for id, r := range rec.Agents {
		wa := written.Agents[id]
		if wa == nil {
			p.add("after recovery, agent %s exists but was never written", id)
			continue
		}
		if r.Tail != 0 && !r.Archived {
			p.add("after recovery, the log of %s (%s) ends with %d bytes of a torn line", r.Name, id, r.Tail)
		}
		if len(r.TmpFiles) > 0 && !r.Archived {
			p.add("after recovery, inbox/tmp of %s (%s) still holds %v", r.Name, id, r.TmpFiles)
		}
		for mid, data := range r.Inbox {
			if wd, ok := wa.Inbox[mid]; ok {
				if !bytes.Equal(wd, data) {
					p.add("after recovery, message %s to %s is not what was written (half-made?): %.200q", mid, r.Name, data)
				}
				continue
			}
			m, err := fsstore.DecodeMessage(data)
			if err != nil || m.From != fsstore.System || m.Text != supervisor.RecoveryPrompt {
				p.add("after recovery, message %s to %s was never written: %.200q", mid, r.Name, data)
			} else if s := beforeRecovery(r.Log); s == nil || !supervisor.CutShort(s) || s.ParentID != "" {
				p.add("after recovery, %s got the recovery prompt %s, though it is not a root whose turn was cut short", r.Name, mid)
			}
		}
	}
	for mid, data := range rec.User {
		if wd, ok := written.User[mid]; !ok || !bytes.Equal(wd, data) {
			p.add("after recovery, message %s to USER was never written as it is: %.200q", mid, data)
		}
	}
	if entries, err := w.fs.ReadDir(w.store.Layout().AgentsDir()); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), fsstore.TempPrefix) {
				p.add("after recovery, a half-made agent directory is left: agents/%s", e.Name())
			}
		}
	}
	checkHealthy(p, "after recovery", w, true, acked)
}

// beforeRecovery replays log up to the first event a recovery committed
// (a state event with supervisor.RecoveredReason): the session as the
// stop left it. It returns nil if the log cannot be replayed.
func beforeRecovery(log []byte) *fsstore.Session {
	var s *fsstore.Session
	for line := range bytes.Lines(log) {
		e, err := fsstore.DecodeEvent(line)
		if err != nil {
			return nil
		}
		if e.Type == fsstore.EvState {
			var d fsstore.StateChange
			if e.Decode(&d) == nil && strings.HasPrefix(d.Reason, supervisor.RecoveredReason) {
				break
			}
		}
		if s, err = fsstore.Apply(s, e); err != nil {
			return nil
		}
	}
	return s
}

// checkHealthy scans the home deeply (without repairing) and checks the
// core's tree against it. With recovered, no session may be ACTIVE and no
// agent BUSY. The counters of acknowledged agents (acked may be nil) must
// not have gone backwards.
func checkHealthy(p *problems, when string, w *world, recovered bool, acked *Facts) {
	res, err := w.store.Scan(context.Background(), fsstore.ScanOptions{Deep: true, Workers: 1})
	if err != nil {
		p.add("%s, scan failed: %v", when, err)
		return
	}
	for _, f := range res.Findings {
		// An archive keeps agents/<id> for a grace: not damage.
		if f.Kind != fsstore.FindReplayed && f.Kind != fsstore.FindArchivedCopy {
			p.add("%s, the scan found %s at %s: %s", when, f.Kind, f.Path, f.Detail)
		}
	}
	disk := map[string]*fsstore.Session{}
	for _, a := range res.Agents {
		disk[a.ID()] = a.Session()
		a.Close()
	}
	for id, s := range disk {
		if a := acked.agent(id); a != nil {
			if c := s.Counters; c.Turns < a.Counters.Turns || c.InputTokens < a.Counters.InputTokens || c.OutputTokens < a.Counters.OutputTokens {
				p.add("%s, the counters of %s (%s) went backwards: %+v acknowledged, %+v now", when, s.Name, id, a.Counters, c)
			}
		}
		if recovered && s.SessionState == fsstore.SessionActive {
			p.add("%s, the session of %s (%s) is ACTIVE on disk", when, s.Name, id)
		}
		if recovered && s.AgentState == fsstore.AgentBusy {
			p.add("%s, agent %s (%s) is BUSY on disk", when, s.Name, id)
		}
		if s.ParentID != "" && disk[s.ParentID] == nil {
			p.add("%s, agent %s (%s) has a parent %s that is not live", when, s.Name, id, s.ParentID)
		}
	}
	seen := map[string]bool{}
	for _, a := range w.core.List() {
		seen[a.ID] = true
		d := disk[a.ID]
		switch {
		case d == nil:
			p.add("%s, the core has agent %s (%s) that the disk does not", when, a.Name, a.ID)
			continue
		case recovered && a.SessionState == fsstore.SessionActive:
			p.add("%s, the core has the session of %s ACTIVE", when, a.Name)
		case a.SessionState != d.SessionState || a.AgentState != d.AgentState || a.ParentID != d.ParentID:
			p.add("%s, the core and the disk disagree on %s: %s/%s parent %q vs %s/%s parent %q", when, a.Name,
				a.AgentState, a.SessionState, a.ParentID, d.AgentState, d.SessionState, d.ParentID)
		}
	}
	for id, s := range disk {
		if !seen[id] {
			p.add("%s, the disk has agent %s (%s) that the core does not", when, s.Name, id)
		}
	}
}

// checkDual compares a crashed run, recovered and run to the end, with the
// run of the same seed without a crash (ref, at its end). Up to the crash
// both made the same calls with the same ids, so everything acknowledged
// before the crash must be in the reference too, and the agents made
// before it must stand in the same place in both trees. After the crash
// the runs drift apart in time (a lost, unacknowledged turn is run again
// later, so a user action meant for an agent may find it missing, or still
// alive), so what they did afterwards is compared only for twins: no path
// may name two agents.
func checkDual(p *problems, acked, end, ref *Facts) {
	for id, a := range acked.Agents {
		r := ref.Agents[id]
		if r == nil {
			p.add("agent %s (%s), acknowledged before the crash, is not in the run without a crash", a.Name, id)
			continue
		}
		if !bytes.HasPrefix(r.Log, a.Log) {
			p.add("the events of %s acknowledged before the crash are not those of the run without a crash: %s", a.Name, firstDiff(a.Log, r.Log))
		}
		for mid, data := range a.Inbox {
			if !bytes.Equal(r.Inbox[mid], data) {
				p.add("message %s to %s, acknowledged before the crash, is not in the run without a crash: %.200q", mid, a.Name, data)
			}
		}
	}
	for mid, data := range acked.User {
		if !bytes.Equal(ref.User[mid], data) {
			p.add("message %s to USER, acknowledged before the crash, is not in the run without a crash: %.200q", mid, data)
		}
	}
	for id, e := range end.Agents {
		if r := ref.Agents[id]; r != nil && (r.Name != e.Name || r.ParentID != e.ParentID) {
			p.add("agent %s is %s under %q after the crash but %s under %q without one", id, e.Name, e.ParentID, r.Name, r.ParentID)
		}
	}
	checkTwins(p, "after the crash", end)
	checkTwins(p, "without a crash", ref)
}

// checkTwins fails if two agents have the same path (names are unique in
// the simulation, so a twin is a spawn or create that ran twice).
func checkTwins(p *problems, when string, f *Facts) {
	byPath := map[string]string{}
	for _, id := range slices.Sorted(mapKeysAgents(f.Agents)) {
		path := agentPath(f, id)
		if other, ok := byPath[path]; ok {
			p.add("%s, agents %s and %s are both %s", when, other, id, path)
		}
		byPath[path] = id
	}
}

// agentPath names an agent by its ancestors' names: root/child/....
func agentPath(f *Facts, id string) string {
	var parts []string
	seen := map[string]bool{}
	for a := f.Agents[id]; ; a = f.Agents[a.ParentID] {
		if a == nil {
			parts = append(parts, "?")
			break
		}
		if seen[a.ID] {
			parts = append(parts, "<cycle>")
			break
		}
		seen[a.ID] = true
		parts = append(parts, a.Name)
		if a.ParentID == "" {
			break
		}
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/")
}

func mapKeysAgents(m map[string]*AgentFacts) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
