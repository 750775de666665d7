package fsstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Sentinel senders and recipients that are not agents.
const (
	User   = "USER"
	System = "SYSTEM"
)

// Message kinds.
const (
	KindMessage = "message"
	KindReply   = "reply"
	KindSystem  = "system"
)

// MaxMessageSize bounds a message file.
const MaxMessageSize = 256 << 10

// Message is one file in an inbox.
type Message struct {
	Version  int       `json:"version"`
	ID       string    `json:"id"`
	From     string    `json:"from"` // an agent id, USER or SYSTEM
	FromName string    `json:"from_name,omitempty"`
	To       string    `json:"to"` // an agent id or USER
	Kind     string    `json:"kind"`
	ReplyTo  string    `json:"reply_to,omitempty"` // the id of the message this answers
	Text     string    `json:"text"`
	SentAt   time.Time `json:"sent_at"`
	// Hops counts agent-to-agent messages since the last one from USER
	// or a reminder: the daemon's guard against agents bouncing messages
	// forever.
	Hops int `json:"hops,omitempty"`
}

// DecodeMessage parses and validates a message file.
func DecodeMessage(data []byte) (*Message, error) {
	var m Message
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, invalidf("invalid JSON: %v", err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("%w: message version %d", ErrUnknownVersion, m.Version)
	}
	if !IsID(m.ID) || m.From == "" || m.To == "" {
		return nil, invalidf("message lacks id, from or to")
	}
	return &m, nil
}

func mkInbox(fsys FS, b Inbox) error {
	if err := mkdirIfMissing(fsys, b.Dir); err != nil {
		return err
	}
	for _, sub := range []string{InboxTmp, InboxNew, InboxCur} {
		if err := mkdirIfMissing(fsys, b.Sub(sub)); err != nil {
			return err
		}
	}
	return nil
}

func mkdirIfMissing(fsys FS, dir string) error {
	err := fsys.Mkdir(dir, dirPerm)
	if errors.Is(err, errExist) {
		return nil
	}
	return err
}

// Publish makes m durable in the inbox: it is written to tmp/ and fsynced,
// moved to new/ without overwriting anything, and new/ is fsynced. When
// Publish returns nil the message may be acknowledged to its sender.
// (Store.Send does the same in a batch of group commit.)
func Publish(fsys FS, b Inbox, m *Message) error {
	c := newCommitter(fsys, "") // batches of one
	p, err := preparePublish(fsys, c, b, m)
	if err != nil {
		return err
	}
	c.commit(p.op)
	return p.finish(fsys)
}

// publishOp is a message written to tmp/, waiting for its batch, which
// renames it into new/.
type publishOp struct {
	i     int
	op    *pendingOp
	inbox Inbox
	tmp   string
	dst   string
}

// preparePublish writes m to the inbox's tmp/, not yet durable, for a
// batch of c.
func preparePublish(fsys FS, c *committer, b Inbox, m *Message) (*publishOp, error) {
	if m.Version == 0 {
		m.Version = Version
	}
	if !IsID(m.ID) {
		return nil, wrap("publish", b.Dir, invalidf("message id %q", m.ID), "")
	}
	data, err := marshal(m, true)
	if err != nil {
		return nil, wrap("publish", b.Dir, err, "")
	}
	data = append(data, '\n')
	if len(data) > MaxMessageSize {
		return nil, wrap("publish", b.Dir, fmt.Errorf("%w: message is %d bytes, limit %d", ErrTooLarge, len(data), MaxMessageSize), "")
	}
	op, err := c.begin()
	if err != nil {
		return nil, wrap("publish", b.Dir, err, "")
	}
	p := &publishOp{op: op, inbox: b, tmp: b.Path(InboxTmp, m.ID), dst: b.Path(InboxNew, m.ID)}
	f, err := writeNew(fsys, p.tmp, data)
	if errors.Is(err, errExist) {
		// A leftover of this same message, from a send cut short by a
		// crash and made again with the same id (a turn run again): it
		// was never acknowledged. (Found by sim, effects_test.go: a
		// batch's syncfs makes tmp/'s entries durable too.)
		fsys.Remove(p.tmp)
		f, err = writeNew(fsys, p.tmp, data)
	}
	if err != nil {
		fsys.Remove(p.tmp)
		c.cancel(op)
		return nil, wrap("publish", p.tmp, err, "")
	}
	op.files, op.dir = []File{f}, b.Sub(InboxNew)
	op.publish = func() error {
		err := publishRename(fsys)(p.tmp, p.dst) // RenameNoReplace, unless a planted bug (faults.go)
		if errors.Is(err, errExist) {
			err = fmt.Errorf("%w: message %s", ErrExists, m.ID)
		}
		return err
	}
	return p, nil
}

// finish returns the outcome of p's batch, removing what is left in tmp/
// if it failed.
func (p *publishOp) finish(fsys FS) error {
	if p.op.err != nil {
		fsys.Remove(p.tmp) // nothing, if the rename was made
		return wrap("publish", p.dst, p.op.err, "")
	}
	return nil
}

// writeNew creates name exclusively and writes data, and returns the
// file, open. Neither the data nor the directory entry is durable yet.
func writeNew(fsys FS, name string, data []byte) (File, error) {
	f, err := fsys.Create(name, filePerm)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// BadMessage is a file in an inbox that could not be read as a message.
type BadMessage struct {
	Path   string
	Reason string
}

// ReadInbox returns the messages in sub (new/ or cur/), oldest first, and
// the files there that are not valid messages (left in place).
func ReadInbox(fsys FS, b Inbox, sub string) ([]*Message, []BadMessage, error) {
	entries, err := fsys.ReadDir(b.Sub(sub))
	if err != nil {
		return nil, nil, wrap("read inbox", b.Sub(sub), err, "")
	}
	var msgs []*Message
	var bad []BadMessage
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(b.Sub(sub), name)
		id, ok := strings.CutSuffix(name, MessageExt)
		if !ok || !IsID(id) {
			bad = append(bad, BadMessage{path, "not a message file name (<uuidv7>.json)"})
			continue
		}
		if !e.Type().IsRegular() {
			bad = append(bad, BadMessage{path, ErrNotRegular.Error() + ": " + typeName(e.Type())})
			continue
		}
		if sub == InboxNew {
			if _, err := fsys.Stat(b.Path(InboxCur, id)); err == nil {
				continue // delivered; its new/ name waits for SweepDelivered
			}
		}
		data, err := fsys.ReadFile(path)
		if errors.Is(err, errNotExist) {
			continue // delivered meanwhile
		}
		if errors.Is(err, ErrNotRegular) || errors.Is(err, ErrFileTooLarge) {
			bad = append(bad, BadMessage{path, err.Error()})
			continue
		}
		if err != nil {
			return nil, nil, wrap("read inbox", path, err, "")
		}
		m, err := DecodeMessage(data)
		if err == nil && m.ID != id {
			err = invalidf("id %s does not match the file name", m.ID)
		}
		if err != nil {
			bad = append(bad, BadMessage{path, err.Error()})
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs, bad, nil
}

// DeliveredGrace is how long a delivered message keeps its name in new/
// beside the one in cur/. A backup taken with rsync while the message is
// delivered lists cur/ before new/, so without it the copy could hold the
// message in neither; with it, the copy holds the message in new/ or cur/.
const DeliveredGrace = 10 * time.Minute

// MarkDelivered records messages as delivered: each is hard-linked from
// new/ into cur/ and cur/ is fsynced. The name in new/ stays for
// DeliveredGrace (readers of new/ skip messages that are in cur/), and
// SweepDelivered removes it later. A message already gone from new/ is
// skipped.
func MarkDelivered(fsys FS, b Inbox, ids []string) error {
	if err := linkDelivered(fsys, b, ids); err != nil {
		return err
	}
	if err := fsys.SyncDir(b.Sub(InboxCur)); err != nil {
		return wrap("deliver", b.Sub(InboxCur), err, "")
	}
	return nil
}

// linkDelivered is MarkDelivered without the fsync of cur/.
func linkDelivered(fsys FS, b Inbox, ids []string) error {
	for _, id := range ids {
		err := fsys.Link(b.Path(InboxNew, id), b.Path(InboxCur, id))
		if err != nil && !errors.Is(err, errNotExist) && !errors.Is(err, errExist) {
			return wrap("deliver", b.Path(InboxNew, id), err, "")
		}
	}
	return nil
}

// SweepDelivered removes the new/ names of messages delivered (linked into
// cur/) more than DeliveredGrace before now, and fsyncs new/ if it removed
// any. It removes no data: cur/ holds the same file.
func SweepDelivered(fsys FS, b Inbox, now time.Time) (int, error) {
	return sweepDelivered(fsys, b, now, func() error { return nil })
}

// sweepDelivered is SweepDelivered, calling first once before it removes
// the first name.
func sweepDelivered(fsys FS, b Inbox, now time.Time, first func() error) (int, error) {
	entries, err := fsys.ReadDir(b.Sub(InboxNew))
	if err != nil {
		return 0, wrap("sweep inbox", b.Sub(InboxNew), err, "")
	}
	removed := 0
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), MessageExt)
		if !ok || !IsID(id) {
			continue
		}
		fi, err := fsys.Stat(b.Path(InboxCur, id))
		if err != nil || now.Sub(changeTime(fi)) < DeliveredGrace {
			continue
		}
		if first != nil {
			if err := first(); err != nil {
				return 0, err
			}
			first = nil
		}
		if err := fsys.Remove(b.Path(InboxNew, id)); err == nil {
			removed++
		}
	}
	if removed > 0 {
		if err := fsys.SyncDir(b.Sub(InboxNew)); err != nil {
			return removed, wrap("sweep inbox", b.Sub(InboxNew), err, "")
		}
	}
	return removed, nil
}

// changeTime is the inode change time (when the link into cur/ was made),
// or the modification time where the file system gives none.
func changeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Unix())
	}
	return fi.ModTime()
}
