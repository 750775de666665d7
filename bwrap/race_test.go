package bwrap_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/bwraptest"
	"github.com/substrat/substrat/bwrap/launch"
)

var raceFor = flag.Duration("bwrap.race", 10*time.Second, "how long TestBindRace swaps a bound directory")

// raceTree makes root/ (a sandbox root), and grant/link/ holding only
// "inside" with grant/alt, a symlink to "/", to swap it with.
func raceTree(t *testing.T) (root, link, alt string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root, link, alt = filepath.Join(base, "root"), filepath.Join(base, "grant", "link"), filepath.Join(base, "grant", "alt")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	bwraptest.MkSwapPair(t, link, alt, "inside")
	return root, link, alt
}

// TestBindRace is the escape of a link checked by name and bound by name:
// while a directory that a sandbox binds is swapped for a symlink to "/"
// and back, as fast as a process can, sandboxes binding it are built and
// run in a loop. Bound from descriptors, no sandbox ever sees anything but
// the directory's own file: each build either binds the real directory or
// is refused, by Open (a symlink where none may be) or by bwrap itself
// (what it mounted from the descriptor is not what the descriptor holds).
func TestBindRace(t *testing.T) {
	if _, err := launch.LookPath(); err != nil {
		t.Fatal(err)
	}
	root, link, alt := raceTree(t)
	specs := []bwrap.Spec{
		// A link: no symlink anywhere in it.
		{Root: bwrap.Source{Host: root}, Mounts: []bwrap.Mount{{Source: bwrap.Source{Host: link}, Target: "/linked"}}},
		// A view's subdir: beneath the source root, where a symlink may
		// not lead out.
		{Root: bwrap.Source{Host: link, Beneath: filepath.Dir(link)}},
	}
	stop := bwraptest.Swap(t, link, alt)
	defer stop()
	deadline := time.Now().Add(*raceFor)
	var bound, refused, bwrapRefused, runs int
	for time.Now().Before(deadline) {
		s := specs[runs%len(specs)]
		runs++
		dir := "/linked"
		if len(s.Mounts) == 0 {
			dir = bwrap.DefaultWorkdir
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := launch.Command(ctx, s, []string{"/bin/ls", "-A", dir})
		var got string
		if err == nil {
			got, err = bwraptest.Run(c)
		}
		cancel()
		switch {
		case errors.Is(err, bwrap.ErrSymlink), errors.Is(err, bwrap.ErrLeaves), errors.Is(err, os.ErrNotExist):
			refused++
		case errors.Is(err, bwraptest.ErrRefused):
			bwrapRefused++
		case err != nil:
			t.Fatalf("run %d: %v", runs, err)
		case got != "inside":
			t.Fatalf("run %d: the sandbox saw %q at its bind, not the granted directory: an escape", runs, got)
		default:
			bound++
		}
	}
	swaps := stop()
	t.Logf("%v: %d swaps, %d sandboxes built: %d bound the directory, %d refused by Open, %d by bwrap's own check",
		*raceFor, swaps, runs, bound, refused, bwrapRefused)
	if bound == 0 || refused+bwrapRefused == 0 {
		t.Fatalf("the race did not play out both ways (%d bound, %d refused); the test proves nothing", bound, refused+bwrapRefused)
	}
}

// The control: the same race against a bind made by name, as before,
// escapes.
func TestBindRaceByNameEscapes(t *testing.T) {
	bwrapPath, err := launch.LookPath()
	if err != nil {
		t.Fatal(err)
	}
	root, link, alt := raceTree(t)
	argv, err := bwrap.Argv(bwrapPath, bwrap.Spec{Root: bwrap.Source{Host: root}}, []string{"/bin/ls", "-A", "/linked"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(argv, "--remount-ro")
	byName := slices.Concat(argv[:i], []string{"--bind", link, "/linked"}, argv[i:])

	stop := bwraptest.Swap(t, link, alt)
	defer stop()
	deadline := time.Now().Add(*raceFor)
	for runs := 1; time.Now().Before(deadline); runs++ {
		rootFD, err := bwrap.Open(bwrap.Source{Host: root})
		if err != nil {
			t.Fatal(err)
		}
		c := exec.Command(byName[0], byName[1:]...)
		c.ExtraFiles = []*os.File{rootFD}
		out, _ := c.Output()
		rootFD.Close()
		if got := strings.Fields(string(out)); slices.Contains(got, "usr") && slices.Contains(got, "proc") {
			t.Logf("run %d: bound by name, the sandbox saw the host's root: %q", runs, got)
			return
		}
	}
	t.Fatal("binding by name never escaped; TestBindRace would prove nothing")
}
