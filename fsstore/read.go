package fsstore

import (
	"bytes"
	"strconv"
)

// ReadEvents calls fn for every valid event of an events.jsonl, in order.
// It does not repair anything: a torn tail is not reported, and corruption
// is returned as a *CorruptError after the events before it.
func ReadEvents(fsys FS, path string, fn func(Event) error) error {
	_, err := readLog(fsys, path, func(seq uint64, line []byte) error {
		e, err := DecodeEvent(line)
		if err != nil {
			return err
		}
		return fn(e)
	})
	return err
}

// ReadEventsOfType is ReadEvents for the events of one type: the other
// lines are checked (checksum, seq) but not decoded, so that looking for
// a few events in a long log costs little more than reading it.
func ReadEventsOfType(fsys FS, path, typ string, fn func(Event) error) error {
	needle := []byte(`"type":` + strconv.Quote(typ))
	_, err := readLog(fsys, path, func(seq uint64, line []byte) error {
		if !bytes.Contains(line, needle) {
			return nil
		}
		e, err := DecodeEvent(line)
		if err != nil {
			return err
		}
		if e.Type != typ {
			return nil
		}
		return fn(e)
	})
	return err
}
