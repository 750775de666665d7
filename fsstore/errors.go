package fsstore

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is.
var (
	ErrNotFound       = errors.New("fsstore: not found")
	ErrExists         = errors.New("fsstore: already exists")
	ErrCorrupt        = errors.New("fsstore: corrupt")
	ErrUnknownVersion = errors.New("fsstore: unknown format version")
	ErrTooLarge       = errors.New("fsstore: event too large")
	ErrInvalid        = errors.New("fsstore: invalid")
	ErrClosed         = errors.New("fsstore: closed")
	ErrHandEdited     = errors.New("fsstore: session.json was changed on disk since it was last read")
	ErrNoExchange     = errors.New("fsstore: the file system cannot exchange two names atomically")
	ErrNotRegular     = errors.New("fsstore: not a regular file")
	ErrFileTooLarge   = errors.New("fsstore: file too large")
)

// Error describes a failed store operation on one path, with a hint naming
// what fixes it where one is known.
type Error struct {
	Op   string // what was being done: "open log", "append", "load snapshot"...
	Path string // the file or directory concerned
	Err  error  // the cause; often wraps one of the sentinels
	Hint string // optional: a command or action that fixes it
}

func (e *Error) Error() string {
	s := e.Op + " " + e.Path + ": " + e.Err.Error()
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// InvalidError is ErrInvalid with the reason why: a value the store
// refuses (a name, a state, an event's data). errors.Is(err, ErrInvalid)
// holds for it.
type InvalidError struct {
	Reason string // what is wrong, for a person: "name \"a/b\" holds a slash"
	cause  error  // what Reason wraps with %w, if anything
}

func (e *InvalidError) Error() string   { return ErrInvalid.Error() + ": " + e.Reason }
func (e *InvalidError) Is(t error) bool { return t == ErrInvalid }
func (e *InvalidError) Unwrap() error   { return e.cause }

// invalidf returns an *InvalidError whose reason is formatted as by
// fmt.Errorf (%w wraps).
func invalidf(format string, args ...any) error {
	e := fmt.Errorf(format, args...)
	return &InvalidError{Reason: e.Error(), cause: errors.Unwrap(e)}
}

// Reason returns why the store refused a value: the reason of the
// *InvalidError in err, without the store's framing, or else err's text.
func Reason(err error) string {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

// CorruptError reports a damaged line of an events.jsonl that is followed
// by valid lines, which is never repaired automatically.
type CorruptError struct {
	Path   string
	Line   int   // 1-based line number
	Offset int64 // byte offset of the start of the line
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s: line %d (offset %d): %s", e.Path, e.Line, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func wrap(op, path string, err error, hint string) error {
	if err == nil {
		return nil
	}
	return &Error{Op: op, Path: path, Err: err, Hint: hint}
}

// Hint returns the hint carried by err, if any.
func Hint(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	if errors.Is(err, ErrCorrupt) {
		return HintFsck
	}
	return ""
}

// Hints shared by several errors.
const (
	HintFsck       = "run 'substrat fsck' to see the damage; move the agent directory to archive/ to set it aside"
	HintFsckRepair = "run 'substrat fsck --repair' with the daemon stopped"
	HintUpgrade    = "this directory was written by a newer substrat; upgrade substrat"
)
