package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/substrat/substrat/supervisor/daemon"

	"github.com/substrat/substrat/fsstore"
)

// fsck --repair holds the home's lock for its whole run: a daemon started
// meanwhile refuses and says why (it used to scan and repair the same
// store at the same time), and a second repair refuses too.
func TestRepairHoldsTheLock(t *testing.T) {
	home := shortHome(t)
	layout := fsstore.Layout{Home: home}
	lock, err := daemon.TryLockAs(layout.Lock(), home, daemon.RoleRepair)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	for _, args := range [][]string{{"daemon", "start"}, {"daemon", "run"}, {"fsck", "--repair"}} {
		cmd := exec.Command("substrat", append([]string{"--home", home}, args...)...)
		cmd.Env = append(os.Environ(), "SUBSTRAT_HOME=")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "fsck --repair") || !strings.Contains(string(out), "is repairing") {
			t.Errorf("%s during a repair: %v\n%s", args, err, out)
		}
	}
	if held, _, role := daemon.HeldBy(layout.Lock()); !held || role != daemon.RoleRepair {
		t.Errorf("the lock: held %v as %q", held, role)
	}
}
