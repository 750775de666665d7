package fsstore

import (
	"slices"
	"time"
)

// The operations on an agent's files other than its log and snapshot:
// the daemon asks the store for them instead of building paths itself.

// HasMessage reports whether message id is in the inbox of to (an agent
// id, or User), waiting or delivered.
func (s *Store) HasMessage(to, id string) bool {
	box := s.layout.UserInbox()
	if to != User {
		if !IsID(to) {
			return false
		}
		box = s.layout.Agent(to).Inbox()
	}
	for _, sub := range []string{InboxNew, InboxCur} {
		if _, err := s.fs.Stat(box.Path(sub, id)); err == nil {
			return true
		}
	}
	return false
}

// SweepDelivered removes from the agent's inbox/new the messages already
// delivered (see the package function), and returns how many.
func (a *Agent) SweepDelivered(now time.Time) (int, error) {
	// No name leaves new/ before its link in cur/ is durable.
	return sweepDelivered(a.store.fs, a.files.Inbox(), now, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.syncDeliveredLocked()
	})
}

// AppendTranscript adds text to the agent's transcript.txt, the readable
// record of its turns, creating it if need be. The transcript is for
// people: it is not fsynced, and the log stays the record.
func (a *Agent) AppendTranscript(text string) error {
	path := a.files.Transcript()
	f, err := a.store.fs.OpenAppend(path)
	if err != nil {
		// Not there yet, or made between the two calls by another writer.
		f, err = a.store.fs.Create(path, filePerm)
		if err != nil {
			f, err = a.store.fs.OpenAppend(path)
		}
	}
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(text))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SpawnKeys returns the spawn keys of the agent's spawned events (the
// tool-use ids of its spawn calls) and the children they made. It reads
// the log, decoding the spawned lines only.
func (a *Agent) SpawnKeys() (map[string]string, error) {
	keys := map[string]string{}
	err := ReadEventsOfType(a.store.fs, a.files.Events(), EvSpawned, func(e Event) error {
		var s Spawned
		if e.Decode(&s) == nil && s.SpawnKey != "" {
			keys[s.SpawnKey] = s.ChildID
		}
		return nil
	})
	return keys, err
}

// UserInbox reads USER's inbox: sub is InboxNew (unread) or InboxCur
// (read). See ReadInbox.
func (s *Store) UserInbox(sub string) ([]*Message, []BadMessage, error) {
	return ReadInbox(s.fs, s.layout.UserInbox(), sub)
}

// MarkUserRead marks USER's messages ids read (moved from new/ to cur/,
// durably) and returns how many were unread. An id that is not a
// message id is refused before anything moves.
func (s *Store) MarkUserRead(ids []string) (int, error) {
	box := s.layout.UserInbox()
	var unread []string
	for _, id := range ids {
		if !IsID(id) {
			return 0, wrap("mark read", box.Dir, invalidf("message id %q", id), "")
		}
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
		if _, err := s.fs.Stat(box.Path(InboxNew, id)); err == nil {
			unread = append(unread, id)
		}
	}
	if len(unread) == 0 {
		return 0, nil
	}
	return len(unread), MarkDelivered(s.fs, box, unread)
}

// Pending returns the undelivered messages in inbox/new, oldest first, and
// the files there that are not valid messages.
func (a *Agent) Pending() ([]*Message, []BadMessage, error) {
	return ReadInbox(a.store.fs, a.files.Inbox(), InboxNew)
}

// MarkDelivered links messages from inbox/new into inbox/cur, after the
// caller committed their message_delivered event. The links are not
// fsynced here: the event made the delivery durable, and until the next
// snapshot the load replays that event and finishes a delivery whose link
// a crash lost (FindUnfinishedDelivery). So Snapshot, and SweepDelivered
// before it removes a name from new/, fsync cur/ first.
func (a *Agent) MarkDelivered(ids []string) error {
	if err := linkDelivered(a.store.fs, a.files.Inbox(), ids); err != nil {
		return err
	}
	a.mu.Lock()
	a.curUnsynced = true
	a.mu.Unlock()
	return nil
}

// syncDeliveredLocked makes the links MarkDelivered made durable.
func (a *Agent) syncDeliveredLocked() error {
	if !a.curUnsynced || planted(BugSnapshotBeforeCurSync) { // planted bug (faults.go)
		return nil
	}
	cur := a.files.Inbox().Sub(InboxCur)
	if err := a.store.fs.SyncDir(cur); err != nil {
		return wrap("deliver", cur, err, "")
	}
	a.curUnsynced = false
	return nil
}
