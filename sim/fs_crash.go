package sim

// The power-loss model of FS: Clone; Crash, which reverts every
// directory to its last synced entries and every file to its synced
// data, maybe with a torn unsynced tail; and syncfs, which makes all of
// it durable at once.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/substrat/substrat/fsstore"
)

// Clone returns an independent copy of the file system, volatile and
// durable states alike, without its hook or crash point.
func (f *FS) Clone() *FS {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[*inode]*inode{}
	var cp func(n *inode) *inode
	cp = func(n *inode) *inode {
		if c := seen[n]; c != nil {
			return c
		}
		c := &inode{dir: n.dir, mode: n.mode, ctime: n.ctime,
			data: n.data[:len(n.data):len(n.data)], synced: n.synced[:len(n.synced):len(n.synced)]}
		seen[n] = c
		if n.dir {
			c.entries = make(map[string]*inode, len(n.entries))
			c.durable = make(map[string]*inode, len(n.durable))
			for k, v := range n.entries {
				c.entries[k] = cp(v)
			}
			for k, v := range n.durable {
				c.durable[k] = cp(v)
			}
		}
		return c
	}
	return &FS{root: cp(f.root), now: f.now, ops: f.ops, limit: -1, crashed: f.crashed, tempSeq: f.tempSeq}
}

// Crash simulates a power loss and reboot: every volatile state is lost,
// and the machine runs again (the crash point is cleared). With a random
// source r, the crash is less tidy, as real ones are: some directories
// were written back before it (their volatile entries survive), and an
// unsynced append to a file may be partly kept: a prefix of it up to a
// sector boundary, the rest of the new length possibly zero-filled. A directory left with two durable names (a
// rename whose source directory was not fsynced) keeps one of them, chosen
// by r (the new one without r). Crash returns a description of the tears.
func (f *FS) Crash(r *rand.Rand) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r != nil {
		f.writeBackLocked(r)
	}
	tears := f.bootLocked(f.oneNamePerDirLocked(r), r)
	f.limit, f.crashed = -1, false
	return tears
}

// writeBackLocked is the kernel writing back dirty directories on its own
// schedule: some directories' volatile entries reached the disk before
// the crash. (Crash without r skips it: none did, the least that is
// promised.) Write-back is journaled, as on ext4: a rename reaches the
// disk whole, so write-back never drops the old name of a file or
// directory that is still linked elsewhere (only an fsync of its
// directory does).
func (f *FS) writeBackLocked(r *rand.Rand) {
	linked := map[*inode]bool{}
	var mark func(n *inode)
	mark = func(n *inode) {
		for _, c := range n.entries {
			if !linked[c] {
				linked[c] = true
				if c.dir {
					mark(c)
				}
			}
		}
	}
	mark(f.root)
	var flush func(n *inode)
	flush = func(n *inode) {
		for _, k := range slices.Sorted(mapKeys(n.entries)) {
			if c := n.entries[k]; c.dir {
				flush(c)
			}
		}
		if r.IntN(4) == 0 {
			d := copyEntries(n.entries)
			for k, c := range n.durable {
				if d[k] == nil && linked[c] {
					d[k] = c
				}
			}
			n.durable = d
		}
	}
	flush(f.root)
}

// dirRef is a name of a directory: its parent and the entry.
type dirRef struct {
	parent *inode
	name   string
}

// oneNamePerDirLocked returns the durable names to drop so that each
// directory keeps one: in a real file system a directory has one name,
// and a crash can find one reachable by two (a rename whose two sides
// reached the disk apart). Which stays is deterministic: with r, drawn;
// without, the volatile name if it is durable, else the first.
func (f *FS) oneNamePerDirLocked(r *rand.Rand) map[dirRef]bool {
	refs := map[*inode][]dirRef{}
	var order []*inode
	walked := map[*inode]bool{}
	var walk func(n *inode)
	walk = func(n *inode) {
		if walked[n] {
			return
		}
		walked[n] = true
		for _, k := range slices.Sorted(mapKeys(n.durable)) {
			c := n.durable[k]
			if !c.dir {
				continue
			}
			if len(refs[c]) == 0 {
				order = append(order, c)
			}
			refs[c] = append(refs[c], dirRef{n, k})
			walk(c)
		}
	}
	walk(f.root)
	drop := map[dirRef]bool{}
	for _, d := range order {
		rs := refs[d]
		if len(rs) < 2 {
			continue
		}
		keep := -1
		if r != nil {
			keep = r.IntN(len(rs))
		} else {
			for i, x := range rs { // the volatile name, if one is durable
				if x.parent.entries[x.name] == d {
					keep = i
				}
			}
			if keep < 0 {
				keep = 0
			}
		}
		for i, x := range rs {
			if i != keep {
				drop[x] = true
			}
		}
	}
	return drop
}

// bootLocked is the machine starting again: the tree of durable names
// (less drop), each file's data as a crash left it (tear), and returns
// how the unsynced writes tore.
func (f *FS) bootLocked(drop map[dirRef]bool, r *rand.Rand) []string {
	var tears []string
	seen := map[*inode]*inode{}
	var boot func(n *inode, path string) *inode
	boot = func(n *inode, path string) *inode {
		if c := seen[n]; c != nil {
			return c
		}
		c := &inode{dir: n.dir, mode: n.mode, ctime: n.ctime}
		seen[n] = c
		if n.dir {
			c.entries, c.durable = map[string]*inode{}, map[string]*inode{}
			for _, k := range slices.Sorted(mapKeys(n.durable)) {
				if drop[dirRef{n, k}] {
					continue
				}
				x := boot(n.durable[k], path+"/"+k)
				c.entries[k], c.durable[k] = x, x
			}
			return c
		}
		data, how := tear(n.synced, n.data, r)
		if how != "" {
			tears = append(tears, path+": "+how)
		}
		c.data, c.synced = data, data
		return c
	}
	f.root = boot(f.root, "")
	return tears
}

// tear returns what a crash leaves of a file whose durable content is
// synced and whose volatile content is data, and how it was torn ("" if it
// was not).
func tear(synced, data []byte, r *rand.Rand) ([]byte, string) {
	synced = synced[:len(synced):len(synced)]
	s, d := len(synced), len(data)
	if r == nil || d <= s || !bytes.Equal(data[:s], synced) || r.IntN(2) == 0 {
		return synced, ""
	}
	// Sector boundaries the write may have reached: where it starts, each
	// sector boundary inside it, and its end.
	cuts := []int{s}
	for b := (s/SectorSize + 1) * SectorSize; b < d; b += SectorSize {
		cuts = append(cuts, b)
	}
	cuts = append(cuts, d)
	b := cuts[r.IntN(len(cuts))]
	out := bytes.Clone(data[:b])
	how := fmt.Sprintf("kept %d of %d unsynced bytes", b-s, d-s)
	if b < d && r.IntN(2) == 0 {
		out = append(out, make([]byte, d-b)...) // the size was committed, the data was not
		how += fmt.Sprintf(", %d zero bytes after", d-b)
	}
	return out, how
}

// Tree lists every path of the volatile state with its kind and size, sorted:
// a debugging aid.
func (f *FS) Tree() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	var walk func(n *inode, path string)
	walk = func(n *inode, path string) {
		for k, c := range n.entries {
			p := path + "/" + k
			if c.dir {
				out = append(out, p+"/")
				walk(c, p)
			} else {
				out = append(out, fmt.Sprintf("%s (%d bytes, %d synced)", p, len(c.data), len(c.synced)))
			}
		}
	}
	walk(f.root, "")
	sort.Strings(out)
	return out
}

// OpenFSSync returns a handle whose Sync models syncfs(2) (see
// syncFS). name must exist: it names the file system.
func (f *FS) OpenFSSync(name string) (fsstore.FSSync, error) {
	if err := f.read("open", name); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	if _, err := f.lookupLocked(name); err != nil {
		return nil, pathErr("open", name, err)
	}
	return fsSync{f, name}, nil
}

type fsSync struct {
	f    *FS
	name string
}

func (s fsSync) Sync() error  { return s.f.syncFS(s.name) }
func (s fsSync) Close() error { return nil }

// syncFS models syncfs(2): every file and directory reachable from the
// root is made durable as it is now, as if each file were fsynced and
// then each directory. Entries that are gone from the volatile tree (an
// old name of a renamed file, a removed file) stop being durable with
// them.
func (f *FS) syncFS(name string) error {
	if err := f.enter("syncfs", name); err != nil {
		return err
	}
	defer f.mu.Unlock()
	seen := map[*inode]bool{}
	var walk func(n *inode)
	walk = func(n *inode) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.synced = n.data
			return
		}
		n.durable = copyEntries(n.entries)
		for _, c := range n.entries {
			walk(c)
		}
	}
	walk(f.root)
	return nil
}
