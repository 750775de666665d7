package fsstore

import (
	"container/list"
	"sync"
)

// DefaultMaxOpenLogs is how many events.jsonl files a Store keeps open for
// appending when Options.MaxOpenLogs is zero.
const DefaultMaxOpenLogs = 256

// openLogs keeps at most max logs' files open: the least recently
// appended-to are closed first, and reopen at their next append. A daemon
// with thousands of agents, most of them idle or terminated, would
// otherwise hold a descriptor for every log it ever appended to, until the
// process runs out and stops accepting clients.
//
// Lock order: a Log's mutex is never held while mu is taken to evict; the
// Log being touched holds its own mutex only to register, and evictions
// happen after, taking one victim's mutex at a time.
type openLogs struct {
	max int

	mu    sync.Mutex // guards the fields below
	order *list.List // of *Log, most recent at the front
	elems map[*Log]*list.Element
}

func newOpenLogs(max int) *openLogs {
	if max <= 0 {
		max = DefaultMaxOpenLogs
	}
	return &openLogs{max: max, order: list.New(), elems: map[*Log]*list.Element{}}
}

// touch records that l's file is open and was just used, and returns the
// logs to close to stay within max (the caller closes them, holding no
// log's mutex).
func (o *openLogs) touch(l *Log) []*Log {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.elems[l]; ok {
		o.order.MoveToFront(e)
		return nil
	}
	o.elems[l] = o.order.PushFront(l)
	var victims []*Log
	for o.order.Len() > o.max {
		e := o.order.Back()
		v := e.Value.(*Log)
		o.order.Remove(e)
		delete(o.elems, v)
		victims = append(victims, v)
	}
	return victims
}

// forget drops l, whose file was closed.
func (o *openLogs) forget(l *Log) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.elems[l]; ok {
		o.order.Remove(e)
		delete(o.elems, l)
	}
}

// open returns how many files are open.
func (o *openLogs) open() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.order.Len()
}
