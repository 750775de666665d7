package fsstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	iofs "io/fs"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// FindingKind classifies what a scan found.
type FindingKind string

const (
	// FindLeftover is a temporary file or directory of an operation that
	// never committed: agents/.tmp-*, an atomic-replace temp file in an
	// agent directory, or a message in inbox/tmp. Removed when repairing.
	FindLeftover FindingKind = "leftover"
	// FindTornTail is damage at the end of events.jsonl with nothing valid
	// after it. Repairing cuts it off and keeps it in a .broken file.
	FindTornTail FindingKind = "torn_tail"
	// FindKeptOut is an agent directory that could not be understood. It
	// is left untouched on disk and kept out of the live tree.
	FindKeptOut FindingKind = "kept_out"
	// FindNotAgent is an entry of agents/ whose name is not a canonical
	// UUIDv7. It is ignored and left untouched.
	FindNotAgent FindingKind = "not_agent"
	// FindOrphan is an agent whose parent_id names no live agent.
	FindOrphan FindingKind = "orphan"
	// FindBadMessage is a file in an inbox that is not a valid message.
	// It is left in place and not delivered.
	FindBadMessage FindingKind = "bad_message"
	// FindReplayed reports events newer than session.json that were
	// replayed onto it.
	FindReplayed FindingKind = "replayed"
	// FindMissingDir is a missing inbox sub-directory. Repairing recreates it.
	FindMissingDir FindingKind = "missing_dir"
	// FindSnapshotAhead is a session.json that reflects more events than
	// events.jsonl holds. The state is rebuilt from the log; repairing
	// rewrites session.json and keeps the old one as session.json.N.broken.
	FindSnapshotAhead FindingKind = "snapshot_ahead"
	// FindUnfinishedDelivery is a message that an event after the snapshot
	// records as delivered but that is still in inbox/new only: the daemon
	// stopped between logging the delivery and linking the message into
	// cur/. Repairing links it, finishing the delivery.
	FindUnfinishedDelivery FindingKind = "unfinished_delivery"
	// FindSnapshotRebuilt is a session.json rebuilt from events.jsonl by
	// RebuildSnapshots; the old file is kept as session.json.N.broken.
	FindSnapshotRebuilt FindingKind = "snapshot_rebuilt"
	// FindDuplicateName is an agent whose session.json gives it the name
	// of a sibling (a hand edit the daemon refused, or one made while it
	// was stopped), when events.jsonl records another name. Repairing
	// goes back to the name in events.jsonl (the last good one): the
	// snapshot is rebuilt from the log and the edited file kept as
	// session.json.N.broken. Siblings whose logs give them the same name
	// (directories copied in by hand) are kept out but the oldest.
	FindDuplicateName FindingKind = "duplicate_name"
)

// Finding is one thing a scan found, and what it did about it.
type Finding struct {
	Kind     FindingKind `json:"kind"`
	Path     string      `json:"path"`
	Agent    string      `json:"agent,omitempty"`
	Detail   string      `json:"detail"`
	Line     int         `json:"line,omitempty"`
	Offset   int64       `json:"offset,omitempty"`
	Repaired bool        `json:"repaired"`
	Hint     string      `json:"hint,omitempty"`
}

// Problem reports whether f still needs someone's action: it is neither
// repaired nor one of the kinds that are only information (a replay, an
// orphan, a foreign entry, a rebuilt snapshot, the archived pair of an
// agent, or a leftover of what was never acknowledged, which the next
// start sweeps).
func (f Finding) Problem() bool {
	switch f.Kind {
	case FindReplayed, FindOrphan, FindNotAgent, FindSnapshotRebuilt, FindArchivedCopy, FindLeftover:
		return false
	}
	return !f.Repaired
}

// ScanOptions select how much a scan checks and changes.
type ScanOptions struct {
	// Repair removes leftovers, cuts torn tails and recreates missing
	// inbox directories. Without it the scan changes nothing on disk.
	Repair bool
	// Deep decodes every event line and replays the whole log from its
	// created event, instead of only checking checksums up to last_seq.
	Deep bool
	// RebuildSnapshots replaces an unreadable session.json by one rebuilt
	// from a valid events.jsonl (fsck --repair). Needs Repair.
	RebuildSnapshots bool
	// Workers bounds the directories loaded at once; 0 picks a default.
	Workers int
}

// ScanResult is what Scan found: the live agents, sorted by id, and the
// findings, sorted by path.
type ScanResult struct {
	Agents   []*Agent  `json:"-"`
	Findings []Finding `json:"findings"`
}

// Scan loads every agent directory in agents/ in parallel. It is the
// recovery procedure's steps 2 to 4: sweep leftovers and torn tails, load
// each snapshot and replay newer events, and find orphans. Directories that
// cannot be understood are reported and left out; Scan fails only if
// agents/ itself cannot be read or ctx is done.
func (s *Store) Scan(ctx context.Context, opts ScanOptions) (*ScanResult, error) {
	dir := s.layout.AgentsDir()
	entries, err := s.fs.ReadDir(dir)
	if err != nil {
		return nil, wrap("scan", dir, err, "")
	}
	var res ScanResult
	ids, removed := s.agentDirs(&res, dir, entries, opts.Repair)
	// USER's inbox/tmp: a message to USER that a crash cut before its
	// rename into new/ was never acknowledged.
	userTmp := s.layout.UserInbox().Sub(InboxTmp)
	if tmps, err := s.fs.ReadDir(userTmp); err == nil {
		for _, e := range tmps {
			res.Findings = append(res.Findings, s.removeLeftover(filepath.Join(userTmp, e.Name()), "", "message never published", opts.Repair))
		}
	}
	if ids, err = s.withoutArchived(&res, ids, opts.Repair); err != nil {
		return nil, err
	}
	if err := s.loadAgents(ctx, &res, ids, opts); err != nil {
		return nil, err
	}
	if removed {
		if err := s.fs.SyncDir(dir); err != nil {
			return nil, wrap("scan", dir, err, "")
		}
	}
	sort.Slice(res.Agents, func(i, j int) bool { return res.Agents[i].ID() < res.Agents[j].ID() })
	res.checkParents()
	s.duplicateNames(&res, opts)
	sort.SliceStable(res.Findings, func(i, j int) bool { return res.Findings[i].Path < res.Findings[j].Path })
	return &res, nil
}

// agentDirs sorts the entries of agents/ (dir): it returns the names of
// agent directories, reports every other entry, and removes (when
// repairing) the leftovers of agent directories that never committed,
// reporting whether it removed any, so that the caller syncs dir.
func (s *Store) agentDirs(res *ScanResult, dir string, entries []iofs.DirEntry, repair bool) (ids []string, removed bool) {
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, TempPrefix):
			f := Finding{Kind: FindLeftover, Path: filepath.Join(dir, name), Detail: "agent directory under construction that never committed"}
			if repair {
				if err := s.fs.RemoveAll(f.Path); err != nil {
					f.Detail += ": remove failed: " + err.Error()
				} else {
					f.Repaired, removed = true, true
				}
			}
			res.Findings = append(res.Findings, f)
		case IsID(name) && e.Type()&iofs.ModeSymlink != 0:
			res.Findings = append(res.Findings, Finding{Kind: FindNotAgent, Path: filepath.Join(dir, name),
				Detail: "a symlink, not an agent directory: agent directories must be real directories in agents/ " +
					"(move the directory itself back); left untouched"})
		case !IsID(name) || !e.IsDir():
			res.Findings = append(res.Findings, Finding{Kind: FindNotAgent, Path: filepath.Join(dir, name),
				Detail: "not an agent directory (the name is not a canonical lower-case UUIDv7 directory); left untouched"})
		default:
			ids = append(ids, name)
		}
	}
	return ids, removed
}

// withoutArchived returns ids without the agents that are in archive/
// too, which are archived (or were moving when a copy of the home was
// taken), but for those archivedPair says to load.
func (s *Store) withoutArchived(res *ScanResult, ids []string, repair bool) ([]string, error) {
	archived, err := s.archivedIDs()
	if err != nil || len(archived) == 0 {
		return ids, err
	}
	kept := ids[:0]
	for _, id := range ids {
		if archived[id] {
			load, f := s.archivedPair(id, s.now(), repair)
			res.Findings = append(res.Findings, f)
			if !load {
				continue
			}
		}
		kept = append(kept, id)
	}
	return kept, nil
}

// loadAgents loads the agent directories ids into res, its agents and
// their findings, with opts.Workers at a time. A fixed set of workers
// takes the directories in turn: a goroutine per agent would grow a new
// stack for each.
func (s *Store) loadAgents(ctx context.Context, res *ScanResult, ids []string, opts ScanOptions) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = 4 * runtime.GOMAXPROCS(0)
	}
	if len(ids) > 0 {
		res.Agents = make([]*Agent, 0, len(ids))
	}
	var (
		mu   sync.Mutex // guards res
		next atomic.Int64
	)
	g, gctx := errgroup.WithContext(ctx)
	for range min(workers, len(ids)) {
		g.Go(func() error {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				a, fs := s.loadAgent(ids[i], opts)
				mu.Lock()
				res.Findings = append(res.Findings, fs...)
				if a != nil {
					res.Agents = append(res.Agents, a)
				}
				mu.Unlock()
			}
		})
	}
	return g.Wait()
}

// checkParents reports the agents whose parent is not live (orphans, which
// stay) and keeps out, whole, any loop of parent_ids (which only edits
// that bypass the created events can make): no agent in it is a root.
func (res *ScanResult) checkParents() {
	live := make(map[string]bool, len(res.Agents))
	for _, a := range res.Agents {
		live[a.ID()] = true
	}
	parent := map[string]string{}
	for _, a := range res.Agents {
		parent[a.ID()] = a.sess.ParentID
		if p := a.sess.ParentID; p != "" && !live[p] {
			res.Findings = append(res.Findings, Finding{Kind: FindOrphan, Path: a.files.Dir, Agent: a.ID(),
				Detail: fmt.Sprintf("parent %s is not a live agent", p)})
		}
	}
	inCycle := cycles(parent)
	if len(inCycle) == 0 {
		return
	}
	kept := res.Agents[:0]
	for _, a := range res.Agents {
		if !inCycle[a.ID()] {
			kept = append(kept, a)
			continue
		}
		res.Findings = append(res.Findings, Finding{Kind: FindKeptOut, Path: a.files.Dir, Agent: a.ID(),
			Detail: fmt.Sprintf("its parent_id chain loops back to itself (parent %s): a tree cannot hold it", a.sess.ParentID),
			Hint:   "fix parent_id in session.json (the created event in events.jsonl holds the true one)"})
		a.Close()
	}
	res.Agents = kept
}

// cycles returns the agents whose parent chain (parent: id -> parent id)
// loops back on itself.
func cycles(parent map[string]string) map[string]bool {
	out := map[string]bool{}
	state := map[string]int{} // 0 unseen, 1 on the path, 2 done
	for id := range parent {
		var path []string
		cur := id
		for cur != "" && state[cur] == 0 {
			state[cur] = 1
			path = append(path, cur)
			cur = parent[cur]
		}
		if cur != "" && state[cur] == 1 { // a loop through cur
			loop := false
			for _, x := range path {
				loop = loop || x == cur
				if loop {
					out[x] = true
				}
			}
		}
		for _, x := range path {
			state[x] = 2
		}
	}
	return out
}

// identityDiff says how the identity of a snapshot differs from that of
// its created event, or nil.
func identityDiff(snap, created *Session) error {
	for _, f := range []struct{ name, snap, created string }{
		{"id", snap.ID, created.ID},
		{"parent_id", snap.ParentID, created.ParentID},
		{"provider", snap.Provider, created.Provider},
		{"spawn_key", snap.SpawnKey, created.SpawnKey},
		{"workspace", snap.Workspace, created.Workspace},
	} {
		if f.snap != f.created {
			return invalidf("session.json's %s %q is not the %q its created event records; identity fields cannot be changed", f.name, f.snap, f.created)
		}
	}
	if !snap.CreatedAt.Equal(created.CreatedAt) {
		return invalidf("session.json's created_at %s is not the %s its created event records", snap.CreatedAt.Format(time.RFC3339Nano), created.CreatedAt.Format(time.RFC3339Nano))
	}
	return nil
}

// mkInboxDir durably creates dir, a missing sub-directory of inbox, and
// inbox itself if it is missing too.
func (s *Store) mkInboxDir(inbox Inbox, dir string) error {
	if _, err := s.fs.Stat(inbox.Dir); errors.Is(err, errNotExist) {
		if err := s.fs.Mkdir(inbox.Dir, dirPerm); err != nil {
			return err
		}
		if err := s.fs.SyncDir(dirOf(inbox.Dir)); err != nil {
			return err
		}
	}
	if err := mkdirIfMissing(s.fs, dir); err != nil {
		return err
	}
	return s.fs.SyncDir(inbox.Dir)
}

func (s *Store) removeLeftover(path, id, what string, repair bool) Finding {
	f := Finding{Kind: FindLeftover, Path: path, Agent: id, Detail: what}
	if repair {
		if err := s.fs.RemoveAll(path); err != nil {
			f.Detail += ": remove failed: " + err.Error()
		} else if err := s.fs.SyncDir(filepath.Dir(path)); err == nil {
			f.Repaired = true
		}
	}
	return f
}

// replayLog replays the valid prefix of a log from its created event.
func (s *Store) replayLog(files AgentFiles, id string) (*Session, logInfo, error) {
	var cur *Session
	info, err := readLog(s.fs, files.Events(), func(seq uint64, line []byte) error {
		e, err := DecodeEvent(line)
		if err != nil {
			return err
		}
		cur, err = Apply(cur, e)
		return err
	})
	if err == nil && cur == nil {
		err = fmt.Errorf("%w: events.jsonl holds no event", ErrCorrupt)
	}
	if err == nil && cur.ID != id {
		err = fmt.Errorf("%w: events.jsonl belongs to agent %s", ErrCorrupt, cur.ID)
	}
	return cur, info, err
}

// replaceSnapshot writes sess as session.json, keeping the old file as
// session.json.N.broken. It returns the bytes written.
func (s *Store) replaceSnapshot(files AgentFiles, sess *Session) ([]byte, error) {
	if old, err := s.fs.ReadFile(files.Session()); err == nil {
		var keep string
		for n := 0; ; n++ {
			keep = files.BrokenSession(n)
			_, err := s.fs.Stat(keep)
			if errors.Is(err, errNotExist) {
				break
			}
			if err != nil {
				return nil, wrap("replace snapshot", keep, err, "")
			}
		}
		if err := writeFileDurable(s.fs, keep, old); err != nil {
			return nil, wrap("replace snapshot", keep, err, "")
		}
	}
	data, err := EncodeSession(sess)
	if err == nil {
		err = writeFileDurable(s.fs, files.Session(), data)
	}
	if err != nil {
		return nil, wrap("replace snapshot", files.Session(), err, "")
	}
	return data, nil
}

// rebuildSnapshot replays a whole valid log into a new session.json. The
// unreadable one is kept as session.json.N.broken.
func (s *Store) rebuildSnapshot(files AgentFiles, id string, cause error) (*Session, Finding, error) {
	cur, info, err := s.replayLog(files, id)
	if err == nil && info.TornLen > 0 {
		err = fmt.Errorf("%w: events.jsonl is empty or torn", ErrCorrupt)
	}
	if err != nil {
		return nil, Finding{}, &Error{Op: "rebuild snapshot", Path: files.Events(),
			Err: fmt.Errorf("session.json unreadable (%v) and cannot be rebuilt: %w", cause, err), Hint: HintFsck}
	}
	if _, err := s.replaceSnapshot(files, cur); err != nil {
		return nil, Finding{}, err
	}
	return cur, Finding{Kind: FindSnapshotRebuilt, Path: files.Session(), Agent: id, Repaired: true,
		Detail: fmt.Sprintf("session.json was unreadable (%v); rebuilt from %d events, old file kept as session.json.N.broken", cause, info.LastSeq)}, nil
}

// A scan reads two small files and lists three directories in each of
// thousands of agent directories, so the system calls it makes are most of
// its cost. On the real file system (OS) it makes them itself:
//
//   - it opens the agent directory once, lists it through that descriptor
//     and opens everything else in it relative to it, so that the kernel
//     does not walk the whole path from the root again for each file;
//   - it opens files with open, read and close alone: package os also makes
//     each descriptor non-blocking, offers it to the network poller (which
//     refuses regular files) and undoes both, and ReadFile adds an fstat;
//   - it lists a directory into a reused buffer, without the *os.File and
//     the entry objects of os.ReadDir.
//
// The errors are those package os returns, with the same full paths. Any
// other FS (the simulation's) is used through its methods.

// duplicateNames finds siblings (agents with the same parent_id) that
// share a name, which would make a path resolve to either. An agent whose
// session.json name differs from the one its log records goes back to
// the log's (when repairing: the snapshot rebuilt from the log, the old
// file kept as session.json.N.broken); siblings still sharing a name after
// that are kept out, all but the oldest.
func (s *Store) duplicateNames(res *ScanResult, opts ScanOptions) {
	type key struct{ parent, name string }
	groups := map[key][]*Agent{}
	var keys []key
	for _, a := range res.Agents {
		k := key{a.sess.ParentID, a.sess.Name}
		if len(groups[k]) == 1 {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], a)
	}
	if len(keys) == 0 {
		return
	}
	names := map[key]bool{}
	for k := range groups {
		names[k] = true
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].parent != keys[j].parent {
			return keys[i].parent < keys[j].parent
		}
		return keys[i].name < keys[j].name
	})
	out := map[string]bool{}
	for _, k := range keys {
		group := groups[k] // sorted by id: the oldest first
		var still []*Agent
		for _, a := range group {
			other := group[0]
			if other == a {
				other = group[1]
			}
			logged, _, err := s.replayLog(a.files, a.id)
			if err != nil || logged.Name == a.sess.Name || names[key{k.parent, logged.Name}] {
				still = append(still, a)
				continue
			}
			f := Finding{Kind: FindDuplicateName, Path: a.files.Session(), Agent: a.id,
				Detail: fmt.Sprintf("session.json names it %q, the name of its sibling %s; events.jsonl names it %q", a.sess.Name, other.id, logged.Name),
				Hint:   HintFsckRepair + " (or restart the daemon) to go back to " + strconv.Quote(logged.Name) + ", or give it a name no sibling has"}
			if opts.Repair {
				data, err := s.replaceSnapshot(a.files, logged)
				if err != nil {
					f.Detail += "; rebuilding session.json failed: " + err.Error()
					still = append(still, a)
					res.Findings = append(res.Findings, f)
					continue
				}
				f.Repaired = true
				f.Detail += fmt.Sprintf("; kept %q, rebuilt session.json from events.jsonl and kept the edited file as session.json.N.broken", logged.Name)
				a.sess, a.snapSeq, a.snapSum = logged, logged.LastSeq, sha256.Sum256(data)
				names[key{k.parent, logged.Name}] = true
			}
			// Without repair it is reported, and counted as renamed.
			res.Findings = append(res.Findings, f)
		}
		for _, a := range still[min(1, len(still)):] {
			res.Findings = append(res.Findings, Finding{Kind: FindKeptOut, Path: a.files.Dir, Agent: a.id,
				Detail: fmt.Sprintf("its name %q is also the name of its sibling %s, and events.jsonl records that name for both: a path could not tell them apart", k.name, still[0].id),
				Hint:   "give it a name no sibling has in session.json, then restart the daemon; or move its directory to archive/"})
			out[a.id] = true
			a.Close()
		}
	}
	if len(out) == 0 {
		return
	}
	kept := res.Agents[:0]
	for _, a := range res.Agents {
		if !out[a.id] {
			kept = append(kept, a)
		}
	}
	res.Agents = kept
}
