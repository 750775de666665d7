package fsstore

import (
	"path/filepath"
	"strings"
)

// CountPending counts the undelivered messages of an inbox (names in new/
// that are not also in cur/) without reading them: what recovery needs to
// know to queue an agent again. Unreadable files are counted too; the turn
// that reads them reports them.
//
// A scan counts them as it loads the agent (Agent.PendingAtLoad), so that
// recovery need not list the inbox again.
func CountPending(fsys FS, b Inbox) (int, error) {
	entries, err := fsys.ReadDir(b.Sub(InboxNew))
	if err != nil {
		return 0, wrap("read inbox", b.Sub(InboxNew), err, "")
	}
	n := 0
	for _, e := range entries {
		if _, _, delivered := pendingName(fsys, b, e.Name()); !delivered {
			n++
		}
	}
	return n, nil
}

// pendingName looks at one name in new/: id is its message id and valid
// says whether it is one (<uuidv7>.json); delivered says whether cur/
// holds it too.
func pendingName(fsys FS, b Inbox, name string) (id string, valid, delivered bool) {
	id, ok := strings.CutSuffix(name, MessageExt)
	if !ok || !IsID(id) {
		return id, false, false
	}
	_, err := fsys.Stat(b.Path(InboxCur, id))
	return id, true, err == nil
}

// scanNew looks at the listing of inbox/new (dir) for a scan, in one
// pass: it counts the pending messages as CountPending does, and reads them
// to report the files that are not valid messages, as ReadInbox does. A
// message that cannot be read is counted and not reported: the turn that
// reads it reports it.
//
// delivered holds the ids that events after the snapshot record as
// delivered (nil when there are none); those of them still pending are
// returned as unfinished: the delivery was logged but not done.
func scanNew(fsys FS, b Inbox, dir string, entries []dirEntry, delivered map[string]bool) (pending int, unfinished []string, bad []BadMessage) {
	for _, e := range entries {
		id, valid, done := pendingName(fsys, b, e.name)
		if !done {
			pending++
			if valid && delivered[id] {
				unfinished = append(unfinished, id)
			}
		}
		delivered := done
		path := filepath.Join(dir, e.name)
		if !valid {
			bad = append(bad, BadMessage{path, "not a message file name (<uuidv7>.json)"})
			continue
		}
		if !e.typ.IsRegular() {
			bad = append(bad, BadMessage{path, ErrNotRegular.Error() + ": " + typeName(e.typ)})
			continue
		}
		if delivered {
			continue // its new/ name waits for SweepDelivered
		}
		data, err := fsys.ReadFile(path)
		if err != nil {
			continue // gone meanwhile, or left for the turn to report
		}
		m, err := DecodeMessage(data)
		if err == nil && m.ID != id {
			err = invalidf("id %s does not match the file name", m.ID)
		}
		if err != nil {
			bad = append(bad, BadMessage{path, err.Error()})
		}
	}
	return pending, unfinished, bad
}
