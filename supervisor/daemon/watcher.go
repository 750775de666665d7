package daemon

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

// The supervisor watches agents/ and each agent directory. fsnotify
// events are hints: they only say which agent to look at again; what is on
// disk is the truth. A watch overflow means events were lost, so every
// agent is looked at again; a watch-limit error switches to polling.

// watchDebounce is how long the watcher lets a burst of events settle
// (an editor's save, an rsync) before it looks.
const watchDebounce = 15 * time.Millisecond

// pollEvery is the rescan period when watches are not to be had.
var pollEvery = 2 * time.Second

// addWatch adds a watch; a seam so tests can simulate the watch limit.
var addWatch = func(w *fsnotify.Watcher, path string) error { return w.Add(path) }

// Watcher reconciles the in-memory tree with the directories.
type Watcher struct {
	c      *supervisor.Core
	agents string // the agents directory
	log    *slog.Logger
	fsw    *fsnotify.Watcher

	mu      sync.Mutex // guards the fields below
	polling bool
	dirty   map[string]bool // agent ids to look at
	watched map[string]bool // directories with a watch
	all     bool            // look at everything
	kick    chan struct{}
	pause   chan struct{} // tests: closed to let the loop run (nil: running)
	parked  chan struct{} // tests: closed when the loop waits on pause

	overflows int // watch overflows seen, for tests and status
}

// NewWatcher sets up the watches on agents/ and on every agent directory
// there. Call it before Recover, so that nothing changed during the scan
// is missed, then run Run.
func NewWatcher(c *supervisor.Core, agents string, log *slog.Logger) (*Watcher, error) {
	w := &Watcher{c: c, agents: agents, log: log, dirty: map[string]bool{}, watched: map[string]bool{}, kick: make(chan struct{}, 1)}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("fsnotify unavailable; polling the agents directory", "err", err, "every", pollEvery)
		w.polling = true
		return w, nil
	}
	w.fsw = fsw
	dir := agents
	if err := w.add(dir); err != nil {
		return w, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && fsstore.IsID(e.Name()) {
			if w.add(filepath.Join(dir, e.Name())) != nil {
				break
			}
		}
	}
	return w, nil
}

// add watches path (once); on the watch limit it falls back to polling.
func (w *Watcher) add(path string) error {
	w.mu.Lock()
	polling, known := w.polling, w.watched[path]
	w.mu.Unlock()
	if polling || known {
		return nil
	}
	err := addWatch(w.fsw, path)
	if err == nil {
		w.mu.Lock()
		w.watched[path] = true
		w.mu.Unlock()
		return nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	w.log.Warn("cannot add a file watch; falling back to polling every "+pollEvery.String()+
		" (raise the limit: sysctl fs.inotify.max_user_watches=524288)", "path", path, "err", err)
	w.mu.Lock()
	w.polling = true
	w.mu.Unlock()
	return err
}

// forget drops the cached watch of a directory that went away (the kernel
// removed the watch with it).
func (w *Watcher) forget(path string) {
	w.mu.Lock()
	delete(w.watched, path)
	w.mu.Unlock()
}

// Polling reports whether the watcher has fallen back to polling.
func (w *Watcher) Polling() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polling
}

// mark notes that agent id (or, with id "", everything) needs a look.
func (w *Watcher) mark(id string) {
	w.mu.Lock()
	if id == "" {
		w.all = true
	} else {
		w.dirty[id] = true
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// agentOf maps an event path to the agent id it concerns, or "".
func (w *Watcher) agentOf(path string) string {
	rel, err := filepath.Rel(w.agents, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	id, _, _ := strings.Cut(rel, string(filepath.Separator))
	if !fsstore.IsID(id) {
		return ""
	}
	return id
}

// Run handles events until ctx is done, then closes the watches.
func (w *Watcher) Run(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w.fsw != nil {
		defer w.fsw.Close()
		events, errs = w.fsw.Events, w.fsw.Errors
	}
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	var debounce *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if id := w.agentOf(e.Name); id != "" {
				w.mark(id)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.mu.Lock()
				w.overflows++
				w.mu.Unlock()
				w.log.Warn("file watch overflow: events were lost; rescanning every agent (raise fs.inotify.max_queued_events if it recurs)")
			} else {
				w.log.Warn("file watch error; rescanning every agent", "err", err)
			}
			w.mark("")
		case <-poll.C:
			if w.Polling() {
				w.mark("")
			}
		case <-w.kick:
			if debounce == nil {
				debounce = time.NewTimer(watchDebounce)
			} else {
				debounce.Reset(watchDebounce)
			}
			fire = debounce.C
		case <-fire:
			fire = nil
			w.waitPause(ctx)
			w.flush(ctx)
		}
	}
}

// waitPause blocks while a test holds the loop.
func (w *Watcher) waitPause(ctx context.Context) {
	w.mu.Lock()
	p, parked := w.pause, w.parked
	w.mu.Unlock()
	if parked != nil {
		close(parked)
	}
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
		}
	}
}

// flush looks at everything marked.
func (w *Watcher) flush(ctx context.Context) {
	w.mu.Lock()
	all, ids := w.all, slices.Sorted(maps.Keys(w.dirty))
	w.all, w.dirty = false, map[string]bool{}
	w.mu.Unlock()
	if all {
		ids = w.allIDs()
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		w.c.Reconcile(ctx, id, w.add, w.forget)
	}
}

// allIDs lists the agents on disk and in memory.
func (w *Watcher) allIDs() []string {
	set := map[string]bool{}
	if entries, err := os.ReadDir(w.agents); err == nil {
		for _, e := range entries {
			if fsstore.IsID(e.Name()) {
				set[e.Name()] = true
			}
		}
	}
	for _, id := range w.c.IDs() {
		set[id] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// Rescan looks at every agent now, as after an overflow.
func (w *Watcher) Rescan(ctx context.Context) {
	w.mark("")
	w.flush(ctx)
}
