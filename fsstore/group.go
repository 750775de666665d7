package fsstore

import "sync"

// Group commit: concurrent creates and sends share their fsyncs.
//
// An operation first writes its files under a temporary name, without
// fsyncing them (a new agent's directory under agents/.tmp-<id>/, a
// message in inbox/tmp/). Then it joins the committer's queue. The first
// to arrive while no batch is being flushed leads at once: it takes the
// queue as its batch, and while it flushes, the operations that arrive
// queue up for the next batch, whose first one leads it when this batch
// is done. There is no timer: a lone operation is a batch of one and
// never waits for company.
//
// A batch is flushed in three steps:
//
//  1. The barrier: one syncfs(2) of the home's file system makes every
//     temporary file and directory of the batch durable, as an fsync of
//     each would.
//  2. Each operation's publish: the rename of its temporary name to its
//     final one, which never overwrites (RenameNoReplace). One may fail
//     alone (the name exists); the others go on.
//  3. One fsync of each distinct directory that a rename went into
//     (agents/ once for all the creates, each inbox/new/ once), in
//     parallel; then every operation of the batch is answered.
//
// No operation is acknowledged before its final name is durable. A crash
// at any point leaves each operation of the batch either whole under its
// final name, or whole under its temporary name (which the next scan
// removes: it was never acknowledged), or not there at all: a batch is
// found whole or as a clean prefix. A failed barrier fails every
// operation of the batch and publishes none; a failed directory fsync
// fails the operations renamed into that directory.
//
// Why syncfs and not an fsync of each file and directory: on the 2-core
// ext4 machine of the bench, 64 agents created with one syncfs as the
// barrier ran at 1,200 to 1,700 a second, with 4 fsyncs per agent issued
// in parallel at 530 to 700, and the same in sequence at 160 to 300
// (each ext4 fsync of a new file waits for its own journal commit, which
// parallel fsyncs only partly share). For a batch of one, syncfs and
// parallel fsyncs cost the same. The price of syncfs is that it also
// writes back whatever else is dirty on the file system, other programs'
// writes included: a batch waits for them. fsync has the same cost in a
// milder form, since ext4's journal commit carries every metadata change
// made before it.

// committer flushes batches of pending operations: one per Store.
type committer struct {
	fs   FS
	root string // a directory of the file system to syncfs (the home)

	mu    sync.Mutex // guards the fields below
	queue []*pendingOp
	busy  bool // a batch is being flushed
}

// pendingOp is an operation whose files are written and wait for the
// barrier.
type pendingOp struct {
	// publish moves the operation's files to their final name, after the
	// barrier; nil if there is nothing to move.
	publish func() error
	// dir is the directory publish renamed into, fsynced once per batch
	// after every publish; "" for none.
	dir string

	err  error
	wake chan bool // true: lead the next batch; false: done, err is set
}

func newCommitter(fsys FS, root string) *committer {
	return &committer{fs: fsys, root: root}
}

// commit makes p's files durable, publishes them and makes the publish
// durable, in a batch with whatever operations are waiting, and returns
// p's error. It returns only once p is durable, or has failed.
func (c *committer) commit(publish func() error, dir string) error {
	p := &pendingOp{publish: publish, dir: dir, wake: make(chan bool, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if !lead && !<-p.wake {
		return p.err
	}
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()

	c.flush(batch)

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].wake <- true // it leads the next batch
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	for _, q := range batch {
		if q != p {
			q.wake <- false
		}
	}
	return p.err
}

// flush runs the three steps of a batch (see the comment at the top),
// setting each operation's err.
func (c *committer) flush(batch []*pendingOp) {
	if err := barrier(c.fs, c.root); err != nil { // syncfs, unless a planted bug (faults.go)
		for _, p := range batch {
			p.err = err
		}
		return
	}
	dirs := map[string][]*pendingOp{}
	var order []string
	for _, p := range batch {
		if p.publish != nil {
			p.err = p.publish()
		}
		if p.err != nil || p.dir == "" {
			continue
		}
		if dirs[p.dir] == nil {
			order = append(order, p.dir)
		}
		dirs[p.dir] = append(dirs[p.dir], p)
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, d := range order {
		if i == len(order)-1 {
			errs[i] = c.fs.SyncDir(d) // the last one here: a batch of one starts no goroutine
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.fs.SyncDir(d)
		}()
	}
	wg.Wait()
	for i, d := range order {
		if errs[i] != nil {
			for _, p := range dirs[d] {
				p.err = errs[i]
			}
		}
	}
}
