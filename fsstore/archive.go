package fsstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"
)

// ArchiveGrace is how long agents/<id> stays after its agent was archived
// to archive/<id>: a copy of the home (rsync) that listed agents/ before
// the archive and copies the directory later still finds it whole. While
// both exist, the agent is archived: neither the daemon nor fsck loads
// agents/<id>.
const ArchiveGrace = time.Hour

// Findings of an agent in both agents/ and archive/.
const (
	// FindArchivedCopy is an agents/<id> whose agent is archived whole
	// in archive/<id>: an archive within ArchiveGrace, or a copy of the
	// home taken during one. It is not loaded; repairing removes it once
	// the grace is over. Not a problem.
	FindArchivedCopy FindingKind = "archived_copy"
	// FindPartialCopy is one of agents/<id> and archive/<id> that is not
	// whole (no session.json or events.jsonl) while the other is: what a
	// copy of the home finds of an agent that moved during the copy. The
	// whole one is used; repairing removes the partial one.
	FindPartialCopy FindingKind = "partial_copy"
)

// ArchiveAgent archives agents/<id>: archive/<id> is built beside it
// under a temporary name, with a hard link to every file (the same inodes:
// nothing is copied), fsynced, and renamed into place without
// overwriting; archive/ is fsynced. agents/<id> stays until ArchiveGrace
// has passed (SweepArchived), so that at every instant a copy of the home
// finds the agent in one place or the other. The agent's log must be
// closed first.
func (s *Store) ArchiveAgent(id string) error {
	if !IsID(id) {
		return wrap("archive", id, invalidf("agent id %q", id), "")
	}
	src, dst := s.layout.AgentDir(id), s.layout.ArchivedAgentDir(id)
	if _, err := s.fs.Stat(src); err != nil {
		if errors.Is(err, errNotExist) {
			err = fmt.Errorf("%w: agent %s", ErrNotFound, id)
		}
		return wrap("archive", src, err, "")
	}
	if _, err := s.fs.Stat(dst); err == nil {
		return wrap("archive", src, fmt.Errorf("%w: %s", ErrExists, dst), "")
	}
	tmp := filepath.Join(s.layout.ArchiveDir(), TempPrefix+id)
	if err := s.fs.RemoveAll(tmp); err != nil {
		return wrap("archive", tmp, err, "")
	}
	if err := s.linkTree(src, tmp); err != nil {
		s.fs.RemoveAll(tmp)
		return wrap("archive", src, err, "")
	}
	if err := s.fs.RenameNoReplace(tmp, dst); err != nil {
		s.fs.RemoveAll(tmp)
		if errors.Is(err, errExist) {
			err = fmt.Errorf("%w: %s", ErrExists, dst)
		}
		return wrap("archive", src, err, "")
	}
	if err := s.fs.SyncDir(s.layout.ArchiveDir()); err != nil {
		return wrap("archive", dst, err, "")
	}
	// No copy of the home runs: nothing needs agents/<id> any more, and
	// without it 'mv archive/<id> agents/' undoes the archive at once.
	if s.noCopy != nil {
		if release, ok := s.noCopy(); ok {
			defer release()
			if err := s.removeAgentDir(id); err != nil {
				return nil // archived; the sweep removes the copy later
			}
		}
	}
	return nil
}

// linkTree makes dst a tree of directories like src's, holding hard links
// to src's files, each directory fsynced.
func (s *Store) linkTree(src, dst string) error {
	if err := s.fs.Mkdir(dst, dirPerm); err != nil {
		return err
	}
	entries, err := s.fs.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case e.IsDir():
			err = s.linkTree(from, to)
		case e.Type().IsRegular():
			err = s.fs.Link(from, to)
			if errors.Is(err, errNotExist) {
				err = nil // removed meanwhile (a swept inbox/new name)
			}
		}
		if err != nil {
			return err
		}
	}
	return s.fs.SyncDir(dst)
}

// SweepArchived removes every agents/<id> whose agent has been in
// archive/<id> for longer than ArchiveGrace (by the time archive/<id> was
// made), and returns their ids. The daemon calls it from time to time.
//
// With Options.NoCopy, while no copy of the home runs, it removes them
// all, whatever their age.
func (s *Store) SweepArchived(now time.Time) ([]string, error) {
	archived, err := s.archivedIDs()
	if err != nil {
		return nil, err
	}
	anyAge := false
	if s.noCopy != nil && len(archived) > 0 {
		if release, ok := s.noCopy(); ok {
			defer release()
			anyAge = true
		}
	}
	entries, err := s.fs.ReadDir(s.layout.AgentsDir())
	if err != nil {
		return nil, wrap("sweep archived", s.layout.AgentsDir(), err, "")
	}
	var removed []string
	for _, e := range entries {
		id := e.Name()
		if !archived[id] || !s.whole(s.layout.ArchivedAgentDir(id)) {
			continue
		}
		if since, ok := s.archivedSince(id); !anyAge && (!ok || now.Sub(since) < ArchiveGrace) {
			continue
		}
		if err := s.removeAgentDir(id); err != nil {
			return removed, err
		}
		removed = append(removed, id)
	}
	return removed, nil
}

// archivedIDs returns the ids of the directories in archive/.
func (s *Store) archivedIDs() (map[string]bool, error) {
	entries, err := s.fs.ReadDir(s.layout.ArchiveDir())
	if errors.Is(err, errNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap("scan", s.layout.ArchiveDir(), err, "")
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		if IsID(e.Name()) && e.IsDir() {
			out[e.Name()] = true
		}
	}
	return out, nil
}

// archivedSince returns when archive/<id> was made (its modification
// time, which a copy with rsync -a keeps).
func (s *Store) archivedSince(id string) (time.Time, bool) {
	fi, err := s.fs.Stat(s.layout.ArchivedAgentDir(id))
	if err != nil {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}

// whole reports whether an agent directory has its two files.
func (s *Store) whole(dir string) bool {
	for _, f := range []string{SessionName, EventsName} {
		fi, err := s.fs.Stat(filepath.Join(dir, f))
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// removeAgentDir removes agents/<id>: renamed to a temporary name first,
// so that a crash in the middle leaves a leftover, not half an agent, and
// agents/ fsynced.
func (s *Store) removeAgentDir(id string) error {
	dir, tmp := s.layout.AgentDir(id), s.layout.TempAgentDir(id)
	if err := s.fs.RemoveAll(tmp); err != nil {
		return wrap("remove", tmp, err, "")
	}
	if err := s.fs.Rename(dir, tmp); err != nil {
		return wrap("remove", dir, err, "")
	}
	if err := s.fs.SyncDir(s.layout.AgentsDir()); err != nil {
		return wrap("remove", dir, err, "")
	}
	return wrap("remove", tmp, s.fs.RemoveAll(tmp), "")
}

// archivedPair decides about agents/<id> when archive/<id> exists too. It
// returns load true when agents/<id> is the copy to load (archive/<id> is
// partial and agents/<id> whole), and the finding to report. With repair
// it removes the copy not needed: a partial one, or agents/<id> after
// ArchiveGrace.
func (s *Store) archivedPair(id string, now time.Time, repair bool) (load bool, f Finding) {
	live, arch := s.layout.AgentDir(id), s.layout.ArchivedAgentDir(id)
	liveWhole, archWhole := s.whole(live), s.whole(arch)
	switch {
	case !liveWhole && !archWhole:
		// Neither is whole: load agents/<id>, which reports its damage.
		return true, Finding{Kind: FindPartialCopy, Path: arch, Agent: id,
			Detail: "archive/" + id + " is partial, and so is agents/" + id + "; both left as they are"}
	case !archWhole:
		f = Finding{Kind: FindPartialCopy, Path: arch, Agent: id,
			Detail: "a partial copy of an agent that is whole in agents/ (a copy of the home taken while it moved); agents/" + id + " is kept"}
		if repair {
			err := s.fs.RemoveAll(arch)
			f.Repaired = err == nil
			f.Detail += removedOr(err, "the partial archive/"+id)
		}
		return true, f
	case !liveWhole:
		f = Finding{Kind: FindPartialCopy, Path: live, Agent: id,
			Detail: "a partial copy of an agent that is archived whole in archive/" + id}
		if repair {
			err := s.removeAgentDir(id)
			f.Repaired = err == nil
			f.Detail += removedOr(err, "the partial agents/"+id)
		}
		return false, f
	}
	since, _ := s.archivedSince(id)
	f = Finding{Kind: FindArchivedCopy, Path: live, Agent: id,
		Detail: "archived to archive/" + id + "; this copy is not loaded"}
	if !repair {
		return false, f
	}
	if left := ArchiveGrace - now.Sub(since); left > 0 {
		f.Detail += fmt.Sprintf(" and stays %s more for copies of the home in progress", left.Round(time.Second))
		return false, f
	}
	err := s.removeAgentDir(id)
	f.Repaired = err == nil
	f.Detail += removedOr(err, "it")
	return false, f
}

func removedOr(err error, what string) string {
	if err != nil {
		return "; removing " + what + " failed: " + err.Error()
	}
	return "; removed " + what
}

// ArchivedAgent is an agent in archive/, as its log replays.
type ArchivedAgent struct {
	Session    *Session  `json:"session"`
	Dir        string    `json:"dir"`
	ArchivedAt time.Time `json:"archived_at"` // when archive/<id> was made
}

// ReadArchived reads archive/<id>: its whole events.jsonl replayed (read
// only; nothing is changed or repaired).
func (s *Store) ReadArchived(id string) (*ArchivedAgent, error) {
	if !IsID(id) {
		return nil, wrap("read archived", id, invalidf("agent id %q", id), "")
	}
	files := AgentFiles{Dir: s.layout.ArchivedAgentDir(id)}
	if _, err := s.fs.Stat(files.Dir); err != nil {
		if errors.Is(err, errNotExist) {
			err = fmt.Errorf("%w: no archived agent %s", ErrNotFound, id)
		}
		return nil, wrap("read archived", files.Dir, err, "")
	}
	sess, _, err := s.replayLog(files, id)
	if err != nil {
		return nil, wrap("read archived", files.Events(), err, HintFsck)
	}
	since, _ := s.archivedSince(id)
	return &ArchivedAgent{Session: sess, Dir: files.Dir, ArchivedAt: since.UTC()}, nil
}

// ListArchived reads every agent in archive/, sorted by id; those that
// cannot be read are returned as findings.
func (s *Store) ListArchived() ([]*ArchivedAgent, []Finding, error) {
	ids, err := s.archivedIDs()
	if err != nil {
		return nil, nil, err
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	var out []*ArchivedAgent
	var bad []Finding
	for _, id := range sorted {
		a, err := s.ReadArchived(id)
		if err != nil {
			bad = append(bad, Finding{Kind: FindKeptOut, Path: s.layout.ArchivedAgentDir(id), Agent: id, Detail: err.Error()})
			continue
		}
		out = append(out, a)
	}
	return out, bad, nil
}

// RestoreAgent moves archive/<id> back to agents/<id>, for the daemon to
// adopt. The copy an archive leaves in agents/<id> for ArchiveGrace (the
// same files, hard-linked) is removed first. agents/ and archive/ are
// fsynced.
func (s *Store) RestoreAgent(id string) error {
	if !IsID(id) {
		return wrap("restore", id, invalidf("agent id %q", id), "")
	}
	src, dst := s.layout.ArchivedAgentDir(id), s.layout.AgentDir(id)
	if !s.whole(src) {
		return wrap("restore", src, fmt.Errorf("%w: archive/%s has no session.json or events.jsonl", ErrNotFound, id), "")
	}
	if _, err := s.fs.Stat(dst); err == nil {
		if err := s.removeAgentDir(id); err != nil {
			return err
		}
	}
	if err := s.fs.RenameNoReplace(src, dst); err != nil {
		if errors.Is(err, errExist) {
			err = fmt.Errorf("%w: %s", ErrExists, dst)
		}
		return wrap("restore", src, err, "")
	}
	if err := s.fs.SyncDir(s.layout.AgentsDir()); err != nil {
		return wrap("restore", dst, err, "")
	}
	return wrap("restore", src, s.fs.SyncDir(s.layout.ArchiveDir()), "")
}
