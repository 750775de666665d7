package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/daemon"
)

// BackupCmd copies the home to DEST the safe way while the daemon runs.
type BackupCmd struct {
	Dest  string   `arg:"" help:"Where the copy goes (a directory; made if missing). Remote rsync targets (host:path) are copied but not checked." type:"path"`
	Rsync []string `help:"Extra rsync arguments (e.g. --bwlimit=10m)." placeholder:"ARG"`
}

// BackupResult is backup's JSON output.
type BackupResult struct {
	Home     string            `json:"home"`
	Dest     string            `json:"dest"`
	Vanished bool              `json:"vanished"` // rsync exit 24: files vanished during the copy, as expected of a live home
	Checked  bool              `json:"checked"`
	Agents   int               `json:"agents"`
	Archived int               `json:"archived"`
	Findings []fsstore.Finding `json:"findings"`
	Problems int               `json:"problems"`
}

// Run copies with rsync -a, then checks (and repairs) the copy as fsck
// --repair would, and says what it holds.
func (c *BackupCmd) Run(g *Globals) error {
	rsync, err := exec.LookPath("rsync")
	if err != nil {
		return fail("rsync is not installed; substrat backup copies with it",
			"install it (sudo apt-get install rsync), or stop the daemon and copy the home with cp -a")
	}
	if _, err := os.Stat(g.Home); err != nil {
		return fail(fmt.Sprintf("no home at %s: %v", g.Home, err), "give --home")
	}
	dest, remote, err := c.dest(g.Home)
	if err != nil {
		return err
	}
	out := BackupResult{Home: g.Home, Dest: dest, Findings: []fsstore.Finding{}}
	if !g.JSON {
		fmt.Fprintf(os.Stderr, "copying %s to %s with rsync -a...\n", g.Home, dest)
	}
	if out.Vanished, err = copyHome(rsync, g.Home, dest, c.Rsync); err != nil {
		return err
	}
	if remote {
		if g.JSON {
			printJSON(out)
		} else {
			fmt.Printf("copied %s to %s (not checked: a remote copy; run 'substrat fsck --repair' there)\n", g.Home, dest)
		}
		return nil
	}
	if err := checkCopy(&out); err != nil {
		return err
	}
	printBackup(g, out)
	if out.Problems > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("the copy in %s has %d problem(s)", dest, out.Problems),
			hint: "see the findings above; the live home is untouched"}
	}
	return nil
}

// dest returns where the copy goes (made absolute unless remote, as
// rsync's HOST:PATH), refusing a destination inside the home or one that
// is neither empty nor an earlier copy of it (checkBackupDest).
func (c *BackupCmd) dest(home string) (dest string, remote bool, err error) {
	dest = c.Dest
	if strings.Contains(dest, ":") && !strings.HasPrefix(dest, "/") {
		return dest, true, nil
	}
	if abs, err := filepath.Abs(dest); err == nil {
		dest = abs
	}
	if dest == home || strings.HasPrefix(dest, strings.TrimSuffix(home, "/")+"/") {
		return "", false, fail(fmt.Sprintf("the copy %s would be inside the home %s", dest, home), "copy to a directory outside the home")
	}
	return dest, false, checkBackupDest(home, dest)
}

// copyHome copies home to dest with rsync -a and the extra options,
// holding the copy lock. vanished reports rsync's "files vanished"
// (exit 24), which a live home does while it is copied.
func copyHome(rsync, home, dest string, extra []string) (vanished bool, err error) {
	// daemon.sock and daemon.lock belong to the running daemon, not to a
	// copy; home.json is the home's identity, and backup.json marks the
	// copy as one of it (written before anything is copied, so that an
	// interrupted copy is still known for one); everything else is copied
	// as is.
	args := append([]string{"-a", "--exclude=/daemon.sock", "--exclude=/daemon.lock", "--exclude=/run/", "--exclude=/" + fsstore.CopyLockName,
		"--exclude=/" + fsstore.HomeName, "--exclude=/" + fsstore.BackupName}, extra...)
	args = append(args, strings.TrimSuffix(home, "/")+"/", strings.TrimSuffix(dest, "/")+"/")
	cmd := exec.Command(rsync, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// While it copies, the daemon keeps the agents/<id> that archives
	// leave for copies (see fsstore/home.go).
	release, err := fsstore.CopyLock(home)
	if err != nil {
		return false, err
	}
	err = cmd.Run()
	release()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 24:
		// "Partial transfer due to vanished source files": a live home
		// changes while it is copied (delivered messages swept, temporary
		// files renamed). What vanished was not needed: see fsstore/doc.go.
		return true, nil
	case err != nil:
		return false, fail(fmt.Sprintf("rsync failed: %v", err), "see rsync's message above")
	}
	return false, nil
}

// checkCopy opens the local copy as a store and repairs it as recovery
// would (a deep scan: leftovers removed, torn tails cut, snapshots
// rebuilt), filling out's counts and findings.
func checkCopy(out *BackupResult) error {
	store, err := fsstore.Open(out.Dest, fsstore.Options{})
	if err != nil {
		return err
	}
	res, err := store.Scan(context.Background(), fsstore.ScanOptions{Repair: true, Deep: true, RebuildSnapshots: true})
	if err != nil {
		return err
	}
	out.Checked, out.Agents = true, len(res.Agents)
	for _, a := range res.Agents {
		a.Close()
	}
	if entries, err := os.ReadDir(fsstore.Layout{Home: out.Dest}.ArchiveDir()); err == nil {
		for _, e := range entries {
			if fsstore.IsID(e.Name()) && e.IsDir() {
				out.Archived++
			}
		}
	}
	out.Findings = append(out.Findings, res.Findings...)
	for _, f := range res.Findings {
		if f.Problem() {
			out.Problems++
		}
	}
	return nil
}

func printBackup(g *Globals, out BackupResult) {
	if g.JSON {
		printJSON(out)
		return
	}
	for _, f := range out.Findings {
		if f.Kind != fsstore.FindReplayed {
			fmt.Printf("%-16s %s: %s%s\n", f.Kind, f.Path, f.Detail, repaired(f))
		}
	}
	note := ""
	if out.Vanished {
		note = " (rsync said files vanished during the copy: expected while the daemon runs)"
	}
	fmt.Printf("copied %s to %s%s\nthe copy holds %s and %s in archive/, %s\n",
		out.Home, out.Dest, note, plural(out.Agents, "live agent"), plural(out.Archived, "agent"), plural(out.Problems, "problem"))
}

// checkBackupDest refuses a destination that a copy would damage: a
// Substrat home in use (its daemon.lock is held), or a directory that is
// not empty and not an earlier copy of this same home (its backup.json
// names this home's id). It then makes dest if needed and marks it as a
// copy of home. Nothing outside dest is changed; home is given its
// identity (home.json) if it has none yet.
func checkBackupDest(home, dest string) error {
	l := fsstore.Layout{Home: dest}
	if held, pid, role := daemon.HeldBy(l.Lock()); held {
		return fail(fmt.Sprintf("%s is a Substrat home in use: %s (pid %d) holds its daemon.lock; a copy would merge into it", dest, role, pid),
			"copy to a new directory, or to an earlier copy of this home")
	}
	id, err := fsstore.EnsureHomeID(home)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(dest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dest, 0o700); err != nil {
			return err
		}
	case err != nil:
		return fail(fmt.Sprintf("cannot read %s: %v", dest, err), "")
	case len(entries) > 0:
		mark, merr := fsstore.ReadBackupMark(dest)
		switch {
		case merr != nil:
			return fail(merr.Error(), "copy to a new directory")
		case mark == nil:
			what := "is not empty and is not a copy of this home"
			if other, _ := fsstore.HomeID(dest); other != "" {
				what = fmt.Sprintf("is another Substrat home (id %s), not a copy of this one", other)
			} else if _, err := os.Stat(l.AgentsDir()); err == nil {
				what = "is another Substrat home, not a copy of this one"
			}
			return fail(fmt.Sprintf("%s %s; a copy would merge into what is there", dest, what),
				"copy to a new (or empty) directory; an earlier copy made by 'substrat backup' holds a backup.json naming this home")
		case mark.BackupOf != id:
			return fail(fmt.Sprintf("%s is a copy of another home (id %s; this home is %s); a copy would merge into it", dest, mark.BackupOf, id),
				"copy to a new (or empty) directory")
		}
	}
	return fsstore.WriteBackupMark(dest, fsstore.BackupMark{BackupOf: id, Source: home, CopiedAt: time.Now().UTC()})
}
