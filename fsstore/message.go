package fsstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
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
		return nil, fmt.Errorf("%w: invalid JSON: %v", ErrInvalid, err)
	}
	if m.Version != Version {
		return nil, fmt.Errorf("%w: message version %d", ErrUnknownVersion, m.Version)
	}
	if !IsID(m.ID) || m.From == "" || m.To == "" {
		return nil, fmt.Errorf("%w: message lacks id, from or to", ErrInvalid)
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
func Publish(fsys FS, b Inbox, m *Message) error {
	if m.Version == 0 {
		m.Version = Version
	}
	if !IsID(m.ID) {
		return wrap("publish", b.Dir, fmt.Errorf("%w: message id %q", ErrInvalid, m.ID), "")
	}
	data, err := marshal(m, true)
	if err != nil {
		return wrap("publish", b.Dir, err, "")
	}
	data = append(data, '\n')
	if len(data) > MaxMessageSize {
		return wrap("publish", b.Dir, fmt.Errorf("%w: message is %d bytes, limit %d", ErrTooLarge, len(data), MaxMessageSize), "")
	}
	tmp, dst := b.Path(InboxTmp, m.ID), b.Path(InboxNew, m.ID)
	if err := createDurable(fsys, tmp, data); err != nil {
		fsys.Remove(tmp)
		return wrap("publish", tmp, err, "")
	}
	if err := fsys.RenameNoReplace(tmp, dst); err != nil {
		fsys.Remove(tmp)
		if errors.Is(err, errExist) {
			err = fmt.Errorf("%w: message %s", ErrExists, m.ID)
		}
		return wrap("publish", dst, err, "")
	}
	if err := fsys.SyncDir(b.Sub(InboxNew)); err != nil {
		return wrap("publish", dst, err, "")
	}
	return nil
}

// createDurable creates name exclusively, writes data and fsyncs it. The
// directory entry is not yet durable.
func createDurable(fsys FS, name string, data []byte) error {
	f, err := fsys.Create(name, filePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
		if !ok || !IsID(id) || !e.Type().IsRegular() {
			bad = append(bad, BadMessage{path, "not a message file name (<uuidv7>.json)"})
			continue
		}
		data, err := fsys.ReadFile(path)
		if errors.Is(err, errNotExist) {
			continue // delivered meanwhile
		}
		if err != nil {
			return nil, nil, wrap("read inbox", path, err, "")
		}
		m, err := DecodeMessage(data)
		if err == nil && m.ID != id {
			err = fmt.Errorf("%w: id %s does not match the file name", ErrInvalid, m.ID)
		}
		if err != nil {
			bad = append(bad, BadMessage{path, err.Error()})
			continue
		}
		msgs = append(msgs, m)
	}
	return msgs, bad, nil
}

// MarkDelivered moves messages from new/ to cur/ and fsyncs both. A message
// already gone from new/ is skipped.
func MarkDelivered(fsys FS, b Inbox, ids []string) error {
	for _, id := range ids {
		err := fsys.Rename(b.Path(InboxNew, id), b.Path(InboxCur, id))
		if err != nil && !errors.Is(err, errNotExist) {
			return wrap("deliver", b.Path(InboxNew, id), err, "")
		}
	}
	if err := fsys.SyncDir(b.Sub(InboxCur)); err != nil {
		return wrap("deliver", b.Sub(InboxCur), err, "")
	}
	if err := fsys.SyncDir(b.Sub(InboxNew)); err != nil {
		return wrap("deliver", b.Sub(InboxNew), err, "")
	}
	return nil
}
