package fsstore

import "strings"

// CountPending counts the undelivered messages of an inbox (names in new/
// that are not also in cur/) without reading them: what recovery needs to
// know to queue an agent again. Unreadable files are counted too; the turn
// that reads them reports them.
func CountPending(fsys FS, b Inbox) (int, error) {
	entries, err := fsys.ReadDir(b.Sub(InboxNew))
	if err != nil {
		return 0, wrap("read inbox", b.Sub(InboxNew), err, "")
	}
	n := 0
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), MessageExt)
		if ok && IsID(id) {
			if _, err := fsys.Stat(b.Path(InboxCur, id)); err == nil {
				continue // delivered
			}
		}
		n++
	}
	return n, nil
}
