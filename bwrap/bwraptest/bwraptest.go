// Package bwraptest helps tests attack and run sandboxes: a swapper that
// plays a sandboxed process racing the daemon, and a runner that tells a
// sandbox bwrap refused to build from one that ran.
package bwraptest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/bwrap/launch"
)

// Swap exchanges the names a and b (say a directory and a symlink to "/")
// with RENAME_EXCHANGE as fast as it can, as a process in a sibling
// sandbox that can write their parent would, until stop is called. stop
// returns how many swaps were made and leaves the names as they were.
func Swap(t testing.TB, a, b string) (stop func() int) {
	t.Helper()
	done := make(chan struct{})
	var n int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap %s and %s: %v", a, b, err)
				return
			}
			n++
		}
	}()
	var once sync.Once
	return func() int {
		once.Do(func() {
			close(done)
			wg.Wait()
			if n%2 == 1 {
				unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			}
		})
		return n
	}
}

// ErrRefused: bwrap found that what it mounted from a descriptor is not
// the descriptor's file (it checks device and inode after the mount) and
// died before it ran the command. It fails closed, like a refusal of
// bwrap.Open.
var ErrRefused = errors.New("bwrap refused: race condition binding a descriptor")

// Run starts c (made by bwrap.Command or Shell), closes its descriptors,
// waits, and returns its trimmed stdout. It returns ErrRefused when bwrap
// refused to build the sandbox because a bind changed under it.
func Run(c *exec.Cmd) (string, error) {
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	err := c.Start()
	launch.CloseFiles(c)
	if err == nil {
		err = c.Wait()
	}
	switch {
	case err != nil && strings.Contains(stderr.String(), "Race condition binding dirfd"):
		return "", ErrRefused
	case err != nil:
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// MkSwapPair makes dir (a directory holding an empty file named marker)
// and alt (a symlink to "/") for Swap.
func MkSwapPair(t testing.TB, dir, alt, marker string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/"+marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", alt); err != nil {
		t.Fatal(err)
	}
}
