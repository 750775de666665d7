package fsstore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a Store. The zero value uses the real file system and
// the wall clock.
type Options struct {
	FS  FS               // default OS{}
	Now func() time.Time // default time.Now
	// NewID makes the ids of new agents, messages and the daemon's
	// reminders and subscriptions; default NewID (random UUIDv7). The
	// simulation passes a seeded one, so that a run can be replayed.
	NewID func() string
	// MaxOpenLogs bounds the events.jsonl files kept open for appending
	// (the least recently used are closed, and reopened when appended
	// to again); default DefaultMaxOpenLogs. A daemon sizes it by its
	// descriptor limit.
	MaxOpenLogs int
	// NoCopy, if set, reports whether no copy of the home is running
	// (CopyLock): then it holds that off until release is called, and
	// an archive removes the agents/<id> it leaves for copies at once,
	// instead of after ArchiveGrace. The daemon sets it; without it the
	// grace always applies.
	NoCopy func() (release func(), ok bool)
}

// Store is a home directory of agents.
type Store struct {
	fs     FS
	layout Layout
	now    func() time.Time
	newID  func() string
	logs   *openLogs
	noCopy func() (release func(), ok bool)
	group  *committer // group commit of creates and sends (group.go)
}

// Open prepares the home directory (creating it 0700 and its agents/,
// archive/ and user inbox if missing) and returns a Store. It does not scan;
// see Scan.
func Open(home string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NewID == nil {
		opts.NewID = NewID
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return nil, wrap("open", home, err, "")
	}
	s := &Store{fs: opts.FS, layout: Layout{Home: home}, now: opts.Now, newID: opts.NewID, logs: newOpenLogs(opts.MaxOpenLogs), noCopy: opts.NoCopy,
		group: newCommitter(opts.FS, home)}
	if err := s.mkdirAll(home); err != nil {
		return nil, wrap("open", home, err, "")
	}
	for _, dir := range []string{s.layout.AgentsDir(), s.layout.ArchiveDir()} {
		if err := mkdirIfMissing(s.fs, dir); err != nil {
			return nil, wrap("open", dir, err, "")
		}
	}
	if err := mkInbox(s.fs, s.layout.UserInbox()); err != nil {
		return nil, wrap("open", s.layout.UserInbox().Dir, err, "")
	}
	// inbox/'s own entries (tmp, new, cur), or an acknowledged message to
	// USER could vanish with new/ (found by sim, seed 1).
	if err := s.fs.SyncDir(s.layout.UserInbox().Dir); err != nil {
		return nil, wrap("open", s.layout.UserInbox().Dir, err, "")
	}
	if err := s.fs.SyncDir(home); err != nil {
		return nil, wrap("open", home, err, "")
	}
	if !s.oneFileSystem() {
		s.group = newCommitter(s.fs, "") // syncfs of the home would not cover them all
	}
	return s, nil
}

// oneFileSystem reports whether the home, agents/ and USER's inbox are on
// one file system (agents/ could be a symlink or a mount point), so that
// one syncfs makes all of them durable. Where the FS does not say, it
// assumes so.
func (s *Store) oneFileSystem() bool {
	var dev uint64
	for i, dir := range []string{s.layout.Home, s.layout.AgentsDir(), s.layout.UserInbox().Dir} {
		fi, err := s.fs.Stat(dir)
		if err != nil {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return true
		}
		if i > 0 && uint64(st.Dev) != dev {
			return false
		}
		dev = uint64(st.Dev)
	}
	return true
}

func (s *Store) mkdirAll(dir string) error {
	if fi, err := s.fs.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("not a directory")
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := s.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := mkdirIfMissing(s.fs, dir); err != nil {
		return err
	}
	return s.fs.SyncDir(filepath.Dir(dir)) // a new home survives a crash (found by sim, seed 1)
}

// EnsureDir makes the directory dir, inside the home, and any missing
// parent up to the home, each fsynced into its parent.
func (s *Store) EnsureDir(dir string) error {
	rel, err := filepath.Rel(s.layout.Home, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return wrap("mkdir", dir, invalidf("not inside the home"), "")
	}
	cur := s.layout.Home
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, c)
		if _, err := s.fs.Stat(next); errors.Is(err, errNotExist) {
			if err := mkdirIfMissing(s.fs, next); err != nil {
				return wrap("mkdir", next, err, "")
			}
			if err := s.fs.SyncDir(cur); err != nil {
				return wrap("mkdir", next, err, "")
			}
		}
		cur = next
	}
	return nil
}

// OpenLogs returns how many events.jsonl files are open for appending.
func (s *Store) OpenLogs() int { return s.logs.open() }

// NewID returns a new id from the store's generator.
func (s *Store) NewID() string { return s.newID() }

// Layout returns the paths of the store.
func (s *Store) Layout() Layout { return s.layout }

// FS returns the file system seam the store uses.
func (s *Store) FS() FS { return s.fs }

// CreateAgent makes a new agent directory atomically: it is built under a
// temporary name with its session.json, its first event and its inbox,
// made durable, renamed to its id, and agents/ is fsynced. A crash leaves
// either no agent or a whole one. Concurrent creates and sends share the
// fsyncs (group commit, group.go).
//
// Empty fields of sess get defaults: a new ID, Version, CREATED and IDLE.
func (s *Store) CreateAgent(sess *Session) (*Agent, error) {
	as, errs := s.CreateAgents([]*Session{sess})
	return as[0], errs[0]
}

// CreateAgents creates agents as CreateAgent does, all in one batch of
// group commit (a team made at once): for each session, the agent or
// the error. Each agent is whole or absent after a crash, and they
// share one barrier and one fsync of agents/.
func (s *Store) CreateAgents(sessions []*Session) ([]*Agent, []error) {
	agents, errs := make([]*Agent, len(sessions)), make([]error, len(sessions))
	var news []*newAgentOp
	var ops []*pendingOp
	for i, sess := range sessions {
		n, err := s.prepareAgent(sess)
		if err != nil {
			errs[i] = err
			continue
		}
		n.i = i
		news, ops = append(news, n), append(ops, n.op)
	}
	if len(ops) > 0 {
		s.group.commit(ops...)
	}
	for _, n := range news {
		if err := n.op.err; err != nil {
			s.fs.RemoveAll(n.tmp) // nothing, if the rename was made
			errs[n.i] = wrap("create agent", n.final.Dir, err, "")
			continue
		}
		a := newAgent(s, n.final, n.final.Events(), n.sess, logInfo{LastSeq: 1, Size: int64(len(n.line)), Lines: 1})
		a.snapSeq, a.snapSum = 1, sha256.Sum256(n.snap)
		agents[n.i] = a
	}
	return agents, errs
}

// newAgentOp is an agent directory written under its temporary name,
// waiting for its batch.
type newAgentOp struct {
	i          int
	op         *pendingOp
	sess       *Session
	tmp        string
	final      AgentFiles
	line, snap []byte // the first event and session.json
}

// prepareAgent fills in sess's defaults, validates it and writes its
// directory under agents/.tmp-<id>, not yet durable.
func (s *Store) prepareAgent(sess *Session) (*newAgentOp, error) {
	sess = sess.Clone()
	now := s.now().UTC()
	if sess.ID == "" {
		sess.ID = s.newID()
	}
	sess.Version = Version
	if sess.AgentState == "" {
		sess.AgentState = AgentIdle
	}
	if sess.SessionState == "" {
		sess.SessionState = SessionCreated
	}
	sess.CreatedAt, sess.UpdatedAt, sess.LastSeq = now, now, 0
	if err := sess.Validate(); err != nil {
		return nil, wrap("create agent", s.layout.AgentDir(sess.ID), err, "")
	}
	data, err := marshal(sess, false)
	if err != nil {
		return nil, err
	}
	line, err := EncodeEvent(Event{Seq: 1, Time: now, Type: EvCreated, Data: data})
	if err != nil {
		return nil, wrap("create agent", s.layout.AgentDir(sess.ID), err, "")
	}
	sess.LastSeq = 1
	snap, err := EncodeSession(sess)
	if err != nil {
		return nil, err
	}
	n := &newAgentOp{sess: sess, tmp: s.layout.TempAgentDir(sess.ID), final: s.layout.Agent(sess.ID), line: line, snap: snap}
	n.op, err = s.buildAgentDir(AgentFiles{Dir: n.tmp}, line, snap)
	if err != nil {
		s.fs.RemoveAll(n.tmp)
		return nil, wrap("create agent", n.final.Dir, err, "")
	}
	n.op.publish = func() error {
		err := s.fs.RenameNoReplace(n.tmp, n.final.Dir)
		if errors.Is(err, errExist) {
			err = fmt.Errorf("%w: agent %s", ErrExists, sess.ID)
		}
		return err
	}
	n.op.dir = s.agentsDirSync()
	return n, nil
}

// buildAgentDir writes a new agent's directory, not yet durable: the
// barrier of its batch makes it so. The returned op holds the files, open.
func (s *Store) buildAgentDir(a AgentFiles, eventLine, snapshot []byte) (_ *pendingOp, err error) {
	op, err := s.group.begin()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.group.cancel(op)
		}
	}()
	if err := s.fs.Mkdir(a.Dir, dirPerm); err != nil {
		return nil, err
	}
	if err := mkInbox(s.fs, a.Inbox()); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{a.Events(), eventLine}, {a.Session(), snapshot}} {
		file, err := writeNew(s.fs, f.path, f.data)
		if err != nil {
			return nil, err
		}
		op.files = append(op.files, file)
	}
	op.dirs = []string{a.Inbox().Dir, a.Dir}
	return op, nil
}

// agentsDirSync is the directory a create's batch fsyncs after the
// rename: agents/, or none with BugNoDirSyncAfterRename planted.
func (s *Store) agentsDirSync() string {
	if planted(BugNoDirSyncAfterRename) { // planted bug (faults.go); never set outside the sim's tests
		return ""
	}
	return s.layout.AgentsDir()
}

// Send publishes m in its recipient's inbox (m.To is an agent id or User)
// and returns once it is durable. m.ID and m.SentAt are set if empty.
// Concurrent sends and creates share the fsyncs (group commit, group.go).
func (s *Store) Send(m *Message) error { return s.SendAll([]*Message{m})[0] }

// SendAll sends messages as Send does, all in one batch of group commit
// (a broadcast): for each message, nil once it is durable, or the error.
func (s *Store) SendAll(msgs []*Message) []error {
	errs := make([]error, len(msgs))
	var pubs []*publishOp
	var ops []*pendingOp
	for i, m := range msgs {
		inbox, err := s.inboxOf(m)
		var p *publishOp
		if err == nil {
			p, err = preparePublish(s.fs, s.group, inbox, m)
		}
		if err != nil {
			errs[i] = noInbox(err, inbox, m)
			continue
		}
		p.i = i
		pubs, ops = append(pubs, p), append(ops, p.op)
	}
	if len(ops) > 0 {
		s.group.commit(ops...)
	}
	for _, p := range pubs {
		errs[p.i] = noInbox(p.finish(s.fs), p.inbox, msgs[p.i])
	}
	return errs
}

// inboxOf sets m's ID and SentAt if empty, and returns its recipient's
// inbox.
func (s *Store) inboxOf(m *Message) (Inbox, error) {
	if m.ID == "" {
		m.ID = s.newID()
	}
	if m.SentAt.IsZero() {
		m.SentAt = s.now().UTC()
	}
	if m.To == User {
		return s.layout.UserInbox(), nil
	}
	if !IsID(m.To) {
		return Inbox{}, wrap("send", m.To, invalidf("recipient %q", m.To), "")
	}
	return s.layout.Agent(m.To).Inbox(), nil
}

// noInbox says that a send failed for want of the recipient's inbox.
func noInbox(err error, inbox Inbox, m *Message) error {
	if errors.Is(err, errNotExist) {
		return wrap("send", inbox.Dir, fmt.Errorf("%w: recipient %s has no inbox", ErrNotFound, m.To), "")
	}
	return err
}

// Load loads one agent directory, as Scan does for each: the daemon uses it
// to adopt a directory moved or copied into agents/ while it runs. With
// repair, leftovers are removed and a torn tail is cut. It returns nil and
// the findings (a kept_out one says why) if the directory cannot be loaded.
func (s *Store) Load(id string, repair bool) (*Agent, []Finding) {
	if !IsID(id) {
		return nil, []Finding{{Kind: FindNotAgent, Path: s.layout.AgentDir(id),
			Detail: "not an agent directory (the name is not a canonical lower-case UUIDv7)"}}
	}
	if _, err := s.fs.Stat(s.layout.ArchivedAgentDir(id)); err == nil {
		load, f := s.archivedPair(id, s.now(), repair)
		if !load {
			return nil, []Finding{f}
		}
		a, fs := s.loadAgent(id, ScanOptions{Repair: repair})
		return a, append([]Finding{f}, fs...)
	}
	return s.loadAgent(id, ScanOptions{Repair: repair})
}

// Agent is a live agent: its directory, its open log and its current
// session (the snapshot with every event applied). It is safe for
// concurrent use.
type Agent struct {
	store *Store
	files AgentFiles
	log   *Log
	id    string // never changes
	// pending is the number of undelivered messages the load found in
	// inbox/new; set before the Agent is returned, never changed.
	pending int

	mu      sync.Mutex // guards the fields below
	sess    *Session
	snapSeq uint64            // last_seq of the session.json on disk
	snapSum [sha256.Size]byte // hash of the session.json last written or read
	// curUnsynced: MarkDelivered linked messages into inbox/cur that no
	// fsync of cur/ has made durable yet (syncDeliveredLocked).
	curUnsynced bool
}

// newAgent makes the Agent of a loaded or created directory; events is
// files.Events(), which the caller has at hand.
func newAgent(s *Store, files AgentFiles, events string, sess *Session, info logInfo) *Agent {
	return &Agent{store: s, files: files, id: sess.ID, sess: sess, log: newLog(s.fs, events, info, s.now, s.logs)}
}

// ID returns the agent's id.
func (a *Agent) ID() string { return a.id }

// Files returns the paths of the agent's files.
func (a *Agent) Files() AgentFiles { return a.files }

// Log returns the agent's event log.
func (a *Agent) Log() *Log { return a.log }

// Session returns a copy of the agent's current session.
func (a *Agent) Session() *Session {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sess.Clone()
}

// Commit appends the events ps make to the log, in one write, and applies
// them to the session in order. It returns the new session once they are
// durable (one fsync for all of them). An event that would make the
// session invalid is refused before anything is written. A crash keeps a
// prefix of them, as it would of separate commits: give several events to
// one Commit only where each prefix is a state recovery handles.
func (a *Agent) Commit(ps ...Payload) (*Session, error) {
	if len(ps) == 0 {
		return nil, wrap("commit", a.files.Events(), invalidf("no event"), "")
	}
	eb := getEventBuf()
	defer eb.release()
	recs := make([]record, len(ps))
	for i, p := range ps {
		raw, err := eb.encodeData(p)
		if err != nil {
			return nil, wrap("commit", a.files.Events(), invalidf("%v", err), "")
		}
		if i < len(ps)-1 {
			raw = bytes.Clone(raw) // eb's, until its next use
		}
		recs[i] = record{p.EventType(), raw}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// A history event leaves the session as it is but for last_seq and
	// updated_at: there is nothing to apply or validate.
	next := a.sess
	seq, now := a.log.LastSeq(), a.store.now()
	for i, p := range ps {
		seq++
		if !changesSession(recs[i].typ) {
			continue
		}
		n, err := apply(next, Event{Seq: seq, Time: now, Type: recs[i].typ, Data: recs[i].data}, p)
		if err != nil {
			return nil, wrap("commit", a.files.Events(), err, "")
		}
		next = n
	}
	seq, ts, err := a.log.appendRecords(recs, eb)
	if err != nil {
		return nil, err
	}
	a.log.touched()
	// a.sess is this Agent's own (every reader gets a copy), so a
	// history event updates it in place.
	next.LastSeq, next.UpdatedAt = seq, ts
	a.sess = next
	return next.Clone(), nil
}

// Snapshot replaces session.json with the current session if it is behind,
// by atomic rename, after the links into inbox/cur that MarkDelivered made
// are durable.
//
// The rename itself is not fsynced: the log is the record, and a crash
// that loses the rename leaves the older session.json, from which the
// load replays the log. (The links must be durable first because the load
// finishes only the deliveries of the events after the snapshot.)
//
// It never overwrites a session.json that changed on disk since this Agent
// last wrote or read it (a hand edit not yet adopted): it returns
// ErrHandEdited instead, and the caller adopts or refuses the edit first.
func (a *Agent) Snapshot() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.syncDeliveredLocked(); err != nil {
		return err
	}
	if a.snapSeq == a.sess.LastSeq {
		return nil
	}
	data, err := EncodeSession(a.sess)
	if err != nil {
		return err
	}
	path := a.files.Session()
	if err := replaceSnapshot(a.store.fs, path, data, a.snapSum); err != nil {
		return wrap("snapshot", path, err, "")
	}
	a.snapSeq, a.snapSum = a.sess.LastSeq, sha256.Sum256(data)
	return nil
}

// DiskSession reads session.json. changed is false when it holds what this
// Agent last wrote or accepted; otherwise sess is the decoded file, or err
// says why it cannot be used (missing, invalid JSON, failed validation).
// sum identifies the bytes read, for AcceptDisk.
func (a *Agent) DiskSession() (sess *Session, changed bool, sum [sha256.Size]byte, err error) {
	// The read and the comparison are one step with respect to Snapshot
	// (which holds a.mu while it replaces the file): bytes read before a
	// snapshot and compared after it would be the old file, taken for a
	// hand edit, and adopting it would undo what the snapshot wrote. The
	// read never blocks (ReadFile refuses a FIFO).
	a.mu.Lock()
	data, rerr := a.store.fs.ReadFile(a.files.Session())
	if rerr == nil {
		sum = sha256.Sum256(data)
	}
	same := rerr == nil && sum == a.snapSum
	a.mu.Unlock()
	if rerr != nil {
		return nil, true, sum, rerr
	}
	if same {
		return nil, false, sum, nil
	}
	sess, err = DecodeSession(data)
	if err == nil && sess.ID != a.id {
		err = invalidf("id %s does not match the directory name", sess.ID)
	}
	return sess, true, sum, err
}

// AcceptDisk records that the session.json whose bytes hash to sum (from
// DiskSession) has been adopted: the next Snapshot may replace it, and
// rewrites it. If the file changed again since, Snapshot still refuses.
func (a *Agent) AcceptDisk(sum [sha256.Size]byte) {
	a.mu.Lock()
	a.snapSum = sum
	a.snapSeq = 0 // rewrite it at the next Snapshot
	a.mu.Unlock()
}

// SnapshotSeq returns the last_seq of the session.json this Agent wrote or
// loaded.
func (a *Agent) SnapshotSeq() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapSeq
}

// PendingAtLoad returns the number of undelivered messages (names in
// inbox/new not also in inbox/cur, counted as CountPending counts them)
// that the Scan or Load that loaded this Agent found; 0 for one made by
// CreateAgent. Recovery uses it to queue agents again without listing
// their inboxes a second time. It is a count as of the load: a message
// that arrives later is the daemon's to notice (its own sends mark the
// recipient, and the watcher looks at inboxes it is told of).
func (a *Agent) PendingAtLoad() int { return a.pending }

// Close closes the agent's log.
func (a *Agent) Close() error { return a.log.Close() }
