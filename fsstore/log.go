package fsstore

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"syscall"
	"time"
)

// logInfo describes an events.jsonl as read from disk.
type logInfo struct {
	LastSeq uint64 // seq of the last valid line; 0 if none
	Size    int64  // length of the valid prefix in bytes
	Lines   int    // number of valid lines
	// TornLen is the number of bytes after the valid prefix: an unfinished
	// last line, or damaged lines not followed by a valid one. Zero if the
	// log ends cleanly.
	TornLen    int64
	TornReason string
}

// scanLog reads an events.jsonl, calling visit for each valid line in order
// (line excludes the newline and is only valid during the call). It returns
// a *CorruptError if a damaged line is followed by a valid one, or a valid
// line does not carry the next seq. Damage with nothing valid after it is a
// torn tail, described in the returned logInfo and left for the caller.
func scanLog(r io.Reader, path string, visit func(seq uint64, line []byte) error) (logInfo, error) {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() {
		br.Reset(nil)
		readerPool.Put(br)
	}()
	var (
		info   logInfo
		off    int64
		lineNo int
		buf    []byte
		bad    *CorruptError // first damaged line not yet followed by a valid one
	)
	for {
		line, n, complete, err := readLine(br, &buf, MaxEventSize)
		if err != nil && err != io.EOF {
			return info, err
		}
		if n == 0 && err == io.EOF {
			break
		}
		lineNo++
		start := off
		off += n
		if !complete {
			// Unterminated: the write of the last line did not finish.
			if bad == nil {
				bad = &CorruptError{Path: path, Line: lineNo, Offset: start, Reason: "unterminated last line"}
				if line == nil {
					bad.Reason = "line longer than the maximum event size"
				}
			}
			break
		}
		var seq uint64
		var cerr error
		if line == nil {
			cerr = fmt.Errorf("line longer than the maximum event size (%d bytes)", MaxEventSize)
		} else {
			seq, cerr = checkLine(line)
		}
		if cerr != nil {
			if bad == nil {
				bad = &CorruptError{Path: path, Line: lineNo, Offset: start, Reason: cerr.Error()}
			}
			continue
		}
		if bad != nil {
			return info, bad
		}
		if seq != info.LastSeq+1 {
			return info, &CorruptError{Path: path, Line: lineNo, Offset: start,
				Reason: fmt.Sprintf("seq %d where %d was expected", seq, info.LastSeq+1)}
		}
		if visit != nil {
			if err := visit(seq, line); err != nil {
				return info, &CorruptError{Path: path, Line: lineNo, Offset: start, Reason: err.Error()}
			}
		}
		info.LastSeq = seq
		info.Size = off
		info.Lines++
	}
	if bad != nil {
		info.TornLen = off - info.Size
		info.TornReason = fmt.Sprintf("line %d (offset %d): %s", bad.Line, bad.Offset, bad.Reason)
	}
	return info, nil
}

// readerPool holds the 64 KiB readers of scanLog: a scan of many agents
// would otherwise allocate one per log.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// readLine reads one line of at most max bytes including the newline. It
// returns the line without the newline (nil if it was too long), the number
// of bytes consumed, and whether a newline ended it.
func readLine(br *bufio.Reader, buf *[]byte, max int) (line []byte, n int64, complete bool, err error) {
	*buf = (*buf)[:0]
	tooLong := false
	for first := true; ; first = false {
		frag, ferr := br.ReadSlice('\n')
		n += int64(len(frag))
		if first && ferr == nil && len(frag) <= max {
			// The common case: the whole line is in br's buffer. It is
			// valid until the next read, as the caller is told.
			return frag[:len(frag)-1], n, true, nil
		}
		if !tooLong {
			if len(*buf)+len(frag) > max {
				tooLong = true
				*buf = (*buf)[:0]
			} else {
				*buf = append(*buf, frag...)
			}
		}
		switch {
		case ferr == nil:
			if tooLong {
				return nil, n, true, nil
			}
			b := *buf
			return b[:len(b)-1], n, true, nil
		case errors.Is(ferr, bufio.ErrBufferFull):
			continue
		default:
			if tooLong {
				return nil, n, false, ferr
			}
			return *buf, n, false, ferr
		}
	}
}

// Log is an open events.jsonl, appended to by one owner. It is safe for
// concurrent use.
type Log struct {
	fs   FS
	path string
	now  func() time.Time
	open *openLogs // nil: no bound

	mu      sync.Mutex // guards the fields below
	f       File       // nil until the first append, and after a failure
	ino     uint64     // the inode f was opened on (0: unknown)
	lastSeq uint64
	size    int64
	failed  error // set when a write or fsync failed; the next append re-reads the log
	closed  bool
}

func newLog(fsys FS, path string, info logInfo, now func() time.Time, open *openLogs) *Log {
	return &Log{fs: fsys, path: path, now: now, open: open, lastSeq: info.LastSeq, size: info.Size}
}

// Path returns the path of the log file.
func (l *Log) Path() string { return l.path }

// LastSeq returns the seq of the last durable event.
func (l *Log) LastSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSeq
}

// Append writes one event in a single write and fsyncs it. It returns once
// the event is durable. data is marshalled to JSON (nil for none).
//
// A failed write is cut back off the file. After a failed fsync the state
// of the file is unknown, so the log is closed and the next Append re-reads
// it from disk first; an fsync is never retried.
func (l *Log) Append(typ string, data any) (Event, error) {
	eb := getEventBuf()
	defer eb.release()
	var raw []byte
	if data != nil {
		b, err := eb.encodeData(data)
		if err != nil {
			return Event{}, wrap("append", l.path, invalidf("event data: %v", err), "")
		}
		raw = b
	}
	seq, ts, err := l.appendData(typ, raw, eb)
	if err != nil {
		return Event{}, err
	}
	l.touched()
	var d json.RawMessage
	if raw != nil {
		d = bytes.Clone(raw) // raw is eb's, which goes back to the pool
	}
	return Event{Seq: seq, Time: ts, Type: typ, Data: d}, nil
}

// appendData is Append of data already marshalled (compact JSON, nil for
// none), building the line in eb. It returns the seq and time of the event.
func (l *Log) appendData(typ string, data []byte, eb *eventBuf) (uint64, time.Time, error) {
	return l.appendRecords([]record{{typ, data}}, eb)
}

// record is an event to append: its type and its data, marshalled.
type record struct {
	typ  string
	data []byte
}

// appendRecords appends the events rs in one write and makes them durable
// with one fsync, building the lines in eb. It returns the seq of the last
// one and their time. A crash may keep a prefix of them, as it may keep a
// prefix of separate appends.
func (l *Log) appendRecords(rs []record, eb *eventBuf) (uint64, time.Time, error) {
	for _, r := range rs {
		if r.typ == "" {
			// DecodeEvent refuses such a line: it would be corruption.
			return 0, time.Time{}, wrap("append", l.path, invalidf("event without a type"), "")
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, time.Time{}, wrap("append", l.path, ErrClosed, "")
	}
	if err := l.reopenLocked(); err != nil {
		return 0, time.Time{}, err
	}
	seq, ts := l.lastSeq, l.now().UTC()
	line := eb.line[:0]
	for _, r := range rs {
		seq++
		var err error
		if line, err = appendEventLine(line, seq, ts, r.typ, r.data); err != nil {
			return 0, time.Time{}, wrap("append", l.path, err, "")
		}
	}
	eb.line = line
	if _, err := l.f.Write(line); err != nil {
		// Cut off whatever part of the lines reached the file, so that a
		// later append does not follow garbage.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.failLocked(err)
		}
		return 0, time.Time{}, wrap("append", l.path, err, "")
	}
	if err := syncLog(l.f); err != nil { // l.f.Sync(), unless a planted bug (faults.go) skips it
		l.failLocked(err)
		return 0, time.Time{}, wrap("append", l.path, err, "")
	}
	l.lastSeq = seq
	l.size += int64(len(line))
	return seq, ts, nil
}

// touched tells the bound on open logs that l's file is open and in use,
// and closes the files of the logs it evicts. It holds no log's mutex but
// one victim's at a time.
func (l *Log) touched() {
	if l.open == nil {
		return
	}
	for _, v := range l.open.touch(l) {
		v.closeIdle()
	}
}

// closeIdle closes l's file until its next append reopens it.
func (l *Log) closeIdle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

func (l *Log) failLocked(err error) {
	l.failed = err
	if l.open != nil {
		l.open.forget(l)
	}
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// reopenLocked opens the file for appending, re-reading it first if an
// earlier write failed.
func (l *Log) reopenLocked() error {
	if l.f != nil {
		return nil
	}
	if l.failed != nil {
		info, err := openLog(l.fs, l.path, true)
		if err != nil {
			return err
		}
		l.lastSeq, l.size, l.failed = info.LastSeq, info.Size, nil
	}
	f, err := l.fs.OpenAppend(l.path)
	if err != nil {
		return wrap("open log", l.path, err, "")
	}
	// Appending after bytes that are not part of the valid prefix (a torn
	// tail left in place by a scan without Repair, or another writer)
	// would turn a repairable tail into corruption.
	fi, err := l.fs.Stat(l.path)
	if err == nil {
		l.ino = inode(fi)
	}
	if err == nil && fi.Size() != l.size {
		err = fmt.Errorf("%w: the file is %d bytes long but its valid events end at byte %d", ErrCorrupt, fi.Size(), l.size)
	}
	if err != nil {
		f.Close()
		return wrap("open log", l.path, err, HintFsckRepair)
	}
	l.f = f
	return nil
}

// Replaced reports whether the file at the log's path is no longer the
// one open for appending: someone replaced (or removed) events.jsonl by
// hand, and appends would go to a file nobody reads.
func (l *Log) Replaced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil || l.ino == 0 {
		return false // reopening compares the file with what was read
	}
	fi, err := l.fs.Stat(l.path)
	return err != nil || inode(fi) != l.ino
}

// inode returns the inode of fi, or 0 where the file system does not say.
func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// Close closes the file. Appends after Close fail with ErrClosed.
func (l *Log) Close() error {
	if l.open != nil {
		l.open.forget(l)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// openLog scans a log and, if repair is set, cuts off a torn tail.
func openLog(fsys FS, path string, repair bool) (logInfo, error) {
	info, err := readLog(fsys, path, nil)
	if err != nil {
		return info, err
	}
	if info.TornLen > 0 && repair {
		if err := cutTail(fsys, path, info); err != nil {
			return info, err
		}
	}
	return info, nil
}

func readLog(fsys FS, path string, visit func(uint64, []byte) error) (logInfo, error) {
	r, err := scanOpen(fsys, path)
	return readOpenedLog(r, err, path, visit)
}

// readOpenedLog is readLog of a log already opened (or not: err) and
// closes it.
func readOpenedLog(r io.ReadCloser, err error, path string, visit func(uint64, []byte) error) (logInfo, error) {
	if err != nil {
		return logInfo{}, wrap("open log", path, err, "")
	}
	defer r.Close()
	info, err := scanLog(r, path, visit)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			return info, err
		}
		return info, wrap("read log", path, err, "")
	}
	return info, nil
}

// brokenKeep is how much of each end of a torn tail the .broken copy
// keeps: a tail of garbage can be as long as the disk (a sparse zero tail
// after a power loss), and the copy is for reading, not for recovery.
const brokenKeep = 1 << 20

// cutTail keeps a copy of the torn tail in events.jsonl.<offset>.broken,
// then truncates the log to its valid prefix and fsyncs it. The tail is
// read from where the valid prefix ends, never the whole log; a tail
// longer than two MiB keeps its first and last MiB, with a line between
// them saying how many bytes were left out.
func cutTail(fsys FS, path string, info logInfo) error {
	tail, err := readTail(fsys, path, info.Size)
	if err != nil {
		return wrap("repair log", path, err, "")
	}
	files := AgentFiles{Dir: dirOf(path)}
	var broken string
	for n := 0; ; n++ {
		broken = files.Broken(info.Size, n)
		_, err := fsys.Stat(broken)
		if errors.Is(err, errNotExist) {
			break
		}
		if err != nil {
			return wrap("repair log", broken, err, "")
		}
	}
	if err := writeFileDurable(fsys, broken, tail); err != nil {
		return wrap("repair log", broken, err, "")
	}
	f, err := fsys.OpenAppend(path)
	if err != nil {
		return wrap("repair log", path, err, "")
	}
	if err := f.Truncate(info.Size); err != nil {
		f.Close()
		return wrap("repair log", path, err, "")
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return wrap("repair log", path, err, "")
	}
	return f.Close()
}

// readTail returns what of the file follows byte off: all of it up to
// 2*brokenKeep bytes, else the first and the last brokenKeep bytes with a
// line between them that says how much was left out. It seeks past off
// where the file can, and reads through it where it cannot.
func readTail(fsys FS, path string, off int64) ([]byte, error) {
	r, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if sk, ok := r.(io.Seeker); ok {
		if _, err := sk.Seek(off, io.SeekStart); err != nil {
			return nil, err
		}
	} else if n, err := io.CopyN(io.Discard, r, off); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("file shrank while being repaired (%d bytes, its valid events end at %d)", n, off)
		}
		return nil, err
	}
	head := make([]byte, 2*brokenKeep)
	n, err := io.ReadFull(r, head)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return head[:n], nil
	}
	if err != nil {
		return nil, err
	}
	// Longer than 2 MiB: keep a ring of the last brokenKeep bytes.
	ring := make([]byte, brokenKeep)
	copy(ring, head[brokenKeep:])
	pos, skipped := 0, int64(0)
	buf := make([]byte, 64<<10)
	for {
		m, err := r.Read(buf)
		for _, b := range [][]byte{buf[:m]} {
			for len(b) > 0 {
				k := copy(ring[pos:], b)
				pos, b, skipped = (pos+k)%brokenKeep, b[k:], skipped+int64(k)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	out := append(head[:brokenKeep:brokenKeep], fmt.Sprintf("\n[substrat: %d bytes of the torn tail left out here]\n", skipped)...)
	out = append(out, ring[pos:]...)
	return append(out, ring[:pos]...), nil
}

// writeFileDurable replaces name atomically and fsyncs its directory, so the
// new content is durable when it returns.
func writeFileDurable(fsys FS, name string, data []byte) error {
	if err := fsys.WriteFileAtomic(name, data, filePerm); err != nil {
		return err
	}
	return fsys.SyncDir(dirOf(name))
}
