package fsstore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// loader loads one agent directory, phase by phase: the listing, the
// snapshot, the log replayed from it, the inbox, then the repairs. A phase
// that finds the directory cannot be understood returns a *keptOut, and
// the agent is kept out of the live tree.
//
// Repairs (leftovers, a torn tail, missing inbox directories) wait until
// the directory is known to be a loadable agent: one that is kept out is
// left untouched on disk, its leftovers and torn tail only reported.
type loader struct {
	s     *Store
	id    string
	opts  ScanOptions
	files AgentFiles
	// sessionPath and eventsPath are built once.
	sessionPath, eventsPath string
	d                       agentDir

	found []Finding
	temps []string // atomic-replace leftovers in the agent directory
	torn  *Finding // the torn tail of the log, if any

	sess     *Session // the snapshot (or what was rebuilt of it)
	snapData []byte   // its bytes, for the hand-edit checksum; nil if rebuilt
	cur      *Session // the snapshot with the newer events applied
	replayed int
	info     logInfo
	// deliveredByLog are the message ids the replayed events deliver.
	deliveredByLog map[string]bool

	inbox                Inbox
	missing, unpublished []string
	bad                  []BadMessage
	pending              int      // undelivered messages in new/
	unfinished           []string // of those, the ones the log delivers
}

// keptOut is why a directory is kept out, and the path to report.
type keptOut struct {
	path string
	err  error
}

func (k *keptOut) Error() string { return k.err.Error() }

func out(path string, err error) *keptOut { return &keptOut{path, err} }

const tempWhat = "temporary file of an interrupted atomic replace"

// loadAgent loads one agent directory. It returns nil and a kept_out
// finding if the directory cannot be understood.
func (s *Store) loadAgent(id string, opts ScanOptions) (*Agent, []Finding) {
	files := s.layout.Agent(id)
	l := &loader{s: s, id: id, opts: opts, files: files, sessionPath: files.Session(), eventsPath: files.Events(), inbox: files.Inbox()}
	d, err := s.openAgentDir(files.Dir)
	if err != nil {
		return l.keptOut(out(files.Dir, err))
	}
	defer d.close()
	l.d = d
	bufp := snapBufs.Get().(*[]byte) // nothing decoded from it keeps a reference to it
	defer snapBufs.Put(bufp)
	if k := l.list(); k != nil {
		return l.keptOut(k)
	}
	if k := l.snapshot(bufp); k != nil {
		return l.keptOut(k)
	}
	k, identity := l.log()
	if k != nil {
		return l.keptOut(k)
	}
	if identity != nil {
		return l.rebuildIdentity(identity)
	}
	if k := l.logShorter(); k != nil {
		return l.keptOut(k)
	}
	if k := l.readInbox(); k != nil {
		return l.keptOut(k)
	}
	if k := l.repair(); k != nil {
		return l.keptOut(k)
	}
	a := newAgent(s, files, l.eventsPath, l.cur, l.info)
	a.pending = l.pending
	a.snapSeq = l.sess.LastSeq
	if l.snapData != nil {
		a.snapSum = sha256.Sum256(l.snapData)
	}
	return a, l.found
}

// keptOut reports the directory kept out, with what was found before.
func (l *loader) keptOut(k *keptOut) (*Agent, []Finding) {
	for _, p := range l.temps {
		l.found = append(l.found, l.s.removeLeftover(p, l.id, tempWhat, false))
	}
	if l.torn != nil {
		l.found = append(l.found, *l.torn)
	}
	f := Finding{Kind: FindKeptOut, Path: l.files.Dir, Agent: l.id, Detail: k.err.Error(), Hint: Hint(k.err)}
	var ce *CorruptError
	if errors.As(k.err, &ce) {
		f.Path, f.Line, f.Offset, f.Detail = ce.Path, ce.Line, ce.Offset, ce.Error()
		f.Hint = HintFsck
	} else if k.path != "" {
		f.Path = k.path
	}
	return nil, append(l.found, f)
}

// list notes the atomic-replace leftovers of the directory.
func (l *loader) list() *keptOut {
	entries, err := l.d.readDir("", l.files.Dir)
	if err != nil {
		return out(l.files.Dir, err)
	}
	for _, e := range entries {
		if isAtomicTemp(e.name) {
			l.temps = append(l.temps, filepath.Join(l.files.Dir, e.name))
		}
	}
	return nil
}

// snapshot reads session.json (into the pooled buffer *bufp), or rebuilds
// it from the log when repairing and it cannot be read.
func (l *loader) snapshot(bufp *[]byte) *keptOut {
	data, err := l.d.readFile(SessionName, l.sessionPath, *bufp)
	if cap(data) <= 1<<20 {
		*bufp = data[:0]
	}
	l.snapData = data
	if err == nil {
		l.sess, err = DecodeSession(data)
		if err == nil && l.sess.ID != l.id {
			err = invalidf("id %s does not match the directory name", l.sess.ID)
		}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, errNotExist) {
		err = fmt.Errorf("%w: session.json is missing", ErrNotFound)
	}
	hint := HintFsckRepair + " to rebuild session.json from events.jsonl"
	if errors.Is(err, ErrUnknownVersion) {
		hint = HintUpgrade
	}
	if !l.opts.Repair || !l.opts.RebuildSnapshots || errors.Is(err, ErrUnknownVersion) {
		return out(l.sessionPath, &Error{Op: "load snapshot", Path: l.sessionPath, Err: err, Hint: hint})
	}
	rebuilt, f, rerr := l.s.rebuildSnapshot(l.files, l.id, err)
	if rerr != nil {
		return out(l.sessionPath, rerr)
	}
	l.found = append(l.found, f)
	l.sess, l.snapData = rebuilt, nil
	return nil
}

// log replays events.jsonl from the snapshot on (from the start with
// Deep), and returns how the snapshot's identity differs from the created
// event's, if it does.
func (l *loader) log() (k *keptOut, identity error) {
	sess, deep := l.sess, l.opts.Deep
	l.cur = sess
	var delivered map[string]bool // ids the replayed events deliver
	visit := func(seq uint64, line []byte) error {
		if seq == 1 && l.snapData != nil {
			// The created event is the truth of who the agent is: an
			// identity field changed in session.json (by hand, with the
			// daemon stopped) is not trusted.
			if e, err := DecodeEvent(line); err == nil && e.Type == EvCreated {
				var c Session
				if e.Decode(&c) == nil {
					identity = identityDiff(sess, &c)
				}
			}
		}
		if seq <= sess.LastSeq && !deep {
			return nil
		}
		e, err := DecodeEvent(line)
		if err != nil {
			return err
		}
		if deep && seq <= sess.LastSeq {
			if e.Type == EvCreated {
				l.cur = nil
			}
			next, err := Apply(l.cur, e)
			if err != nil {
				return err
			}
			l.cur = next
			if seq == sess.LastSeq {
				l.cur = sess // the snapshot may carry adopted hand edits
			}
			return nil
		}
		next, err := Apply(l.cur, e)
		if err != nil {
			return err
		}
		l.cur = next
		l.replayed++
		if e.Type == EvDelivered {
			var d Delivered
			if err := e.Decode(&d); err != nil {
				return err
			}
			if delivered == nil {
				delivered = map[string]bool{}
			}
			for _, id := range d.IDs {
				delivered[id] = true
			}
		}
		return nil
	}
	r, err := l.d.open(EventsName, l.eventsPath)
	info, err := readOpenedLog(r, err, l.eventsPath, visit)
	if err != nil {
		if errors.Is(err, errNotExist) {
			err = &Error{Op: "load log", Path: l.eventsPath, Err: fmt.Errorf("%w: events.jsonl is missing", ErrNotFound), Hint: HintFsck}
		}
		return out(l.eventsPath, err), nil
	}
	l.info = info
	l.deliveredByLog = delivered
	return nil, identity
}

// rebuildIdentity rebuilds session.json from the log when repairing (its
// identity fields are not the created event's), and loads the result.
func (l *loader) rebuildIdentity(identity error) (*Agent, []Finding) {
	hint := HintFsckRepair + " to rebuild session.json from events.jsonl"
	if !l.opts.Repair || !l.opts.RebuildSnapshots {
		return l.keptOut(out(l.sessionPath, &Error{Op: "load snapshot", Path: l.sessionPath, Err: identity, Hint: hint}))
	}
	_, f, rerr := l.s.rebuildSnapshot(l.files, l.id, identity)
	if rerr != nil {
		return l.keptOut(out(l.sessionPath, rerr))
	}
	a, more := l.s.loadAgent(l.id, l.opts) // the rebuilt snapshot, loaded whole
	return a, append(append(l.found, f), more...)
}

// logShorter notes a torn tail and an empty log, and rebuilds the state
// from the log when the snapshot claims events the log does not hold.
func (l *loader) logShorter() *keptOut {
	info, sess := l.info, l.sess
	if info.TornLen > 0 {
		l.torn = &Finding{Kind: FindTornTail, Path: l.eventsPath, Agent: l.id, Offset: info.Size,
			Detail: fmt.Sprintf("%d bytes after the last valid event (seq %d): %s", info.TornLen, info.LastSeq, info.TornReason)}
	}
	if info.LastSeq == 0 {
		return out(l.eventsPath, &Error{Op: "load log", Path: l.eventsPath,
			Err: fmt.Errorf("%w: events.jsonl holds no valid event", ErrCorrupt), Hint: HintFsck})
	}
	if info.LastSeq >= sess.LastSeq {
		return nil
	}
	// The snapshot claims events the log does not hold: a copy taken
	// while the daemon wrote (rsync copies events.jsonl before
	// session.json), or events lost by the disk. The log is the truth:
	// the state is rebuilt from it, and the finding says so.
	rebuilt, _, err := l.s.replayLog(l.files, l.id)
	if err != nil {
		return out(l.eventsPath, &Error{Op: "load log", Path: l.eventsPath,
			Err: fmt.Errorf("%w: session.json reflects event %d but events.jsonl ends at event %d, and the log cannot be replayed: %v",
				ErrCorrupt, sess.LastSeq, info.LastSeq, err), Hint: HintFsck})
	}
	f := Finding{Kind: FindSnapshotAhead, Path: l.sessionPath, Agent: l.id,
		Detail: fmt.Sprintf("session.json reflects event %d but events.jsonl ends at event %d (a copy taken while the daemon wrote, or lost writes); the state is rebuilt from events.jsonl", sess.LastSeq, info.LastSeq)}
	if l.opts.Repair {
		data, err := l.s.replaceSnapshot(l.files, rebuilt)
		if err != nil {
			return out(l.sessionPath, err)
		}
		f.Repaired, l.snapData = true, data
		f.Detail += "; the old file is kept as session.json.N.broken"
	}
	l.found = append(l.found, f)
	l.sess, l.cur, l.replayed = rebuilt, rebuilt, 0
	return nil
}

// readInbox looks at inbox/tmp (leftovers), new (the pending messages)
// and cur (only that it is there).
func (l *loader) readInbox() *keptOut {
	for _, sub := range []string{InboxTmp, InboxNew, InboxCur} {
		dir, rel := l.inbox.Sub(sub), InboxDirName+string(filepath.Separator)+sub
		var err error
		switch sub {
		case InboxTmp:
			var entries []dirEntry
			entries, err = l.d.readDir(rel, dir)
			for _, e := range entries {
				l.unpublished = append(l.unpublished, filepath.Join(dir, e.name))
			}
		case InboxNew:
			// Counted here, so that recovery does not list it again. A
			// message that cannot be read is left for delivery to report.
			var entries []dirEntry
			if entries, err = l.d.readDir(rel, dir); err == nil {
				l.pending, l.unfinished, l.bad = scanNew(l.s.fs, l.inbox, dir, entries, l.deliveredByLog)
			}
		case InboxCur:
			// Only its presence matters, and it grows with every
			// delivered message: do not list it.
			var isDir bool
			if isDir, err = l.d.isDir(rel, dir); err == nil && !isDir {
				err = invalidf("not a directory")
			}
		}
		if errors.Is(err, errNotExist) {
			l.missing = append(l.missing, dir)
			continue
		}
		if err != nil {
			return out(dir, err)
		}
	}
	return nil
}

// repair fixes, when repairing, what the directory of a loadable agent
// needs, and reports all of it.
func (l *loader) repair() *keptOut {
	s, id, repair := l.s, l.id, l.opts.Repair
	if l.torn != nil {
		if repair && !planted(BugNoTornTailRepair) { // planted bug (faults.go); never set outside the sim's tests
			if err := cutTail(s.fs, l.eventsPath, l.info); err != nil {
				return out(l.eventsPath, err)
			}
			l.torn.Repaired = true
			l.torn.Detail += "; cut off, copy kept in " + filepath.Base(l.files.Broken(l.info.Size, 0)) + " (or a numbered sibling)"
		}
		l.found = append(l.found, *l.torn)
		l.torn = nil
	}
	if l.replayed > 0 {
		l.found = append(l.found, Finding{Kind: FindReplayed, Path: l.eventsPath, Agent: id,
			Detail: fmt.Sprintf("replayed %d events after last_seq %d", l.replayed, l.sess.LastSeq), Repaired: true})
	}
	for _, p := range l.temps {
		l.found = append(l.found, s.removeLeftover(p, id, tempWhat, repair))
	}
	l.temps = nil
	for _, dir := range l.missing {
		f := Finding{Kind: FindMissingDir, Path: dir, Agent: id, Detail: "inbox directory is missing"}
		if repair {
			if err := s.mkInboxDir(l.inbox, dir); err != nil {
				f.Detail += ": create failed: " + err.Error()
			} else {
				f.Repaired = true
			}
		}
		l.found = append(l.found, f)
	}
	for _, p := range l.unpublished {
		l.found = append(l.found, s.removeLeftover(p, id,
			"message never published (it was not acknowledged to its sender)", repair))
	}
	if len(l.unfinished) > 0 {
		f := Finding{Kind: FindUnfinishedDelivery, Path: l.inbox.Sub(InboxNew), Agent: id,
			Detail: fmt.Sprintf("messages recorded as delivered in events.jsonl are still only in inbox/new: %s",
				strings.Join(l.unfinished, ", "))}
		if repair {
			if err := MarkDelivered(s.fs, l.inbox, l.unfinished); err != nil {
				f.Detail += "; linking them into cur/ failed: " + err.Error()
			} else {
				f.Repaired = true
				f.Detail += "; linked into cur/, which finishes their delivery"
				l.pending -= len(l.unfinished)
			}
		}
		l.found = append(l.found, f)
	}
	for _, b := range l.bad {
		l.found = append(l.found, Finding{Kind: FindBadMessage, Path: b.Path, Agent: id,
			Detail: b.Reason + "; left in place, not delivered", Hint: "fix or remove the file by hand"})
	}
	return nil
}
