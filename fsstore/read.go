package fsstore

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
