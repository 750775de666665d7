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
	remote := strings.Contains(c.Dest, ":") && !strings.HasPrefix(c.Dest, "/")
	dest := c.Dest
	if !remote {
		if abs, err := filepath.Abs(dest); err == nil {
			dest = abs
		}
		if dest == g.Home || strings.HasPrefix(dest, strings.TrimSuffix(g.Home, "/")+"/") {
			return fail(fmt.Sprintf("the copy %s would be inside the home %s", dest, g.Home), "copy to a directory outside the home")
		}
	}
	if !remote {
		if err := checkBackupDest(g.Home, dest); err != nil {
			return err
		}
	}
	// daemon.sock and daemon.lock belong to the running daemon, not to a
	// copy; home.json is the home's identity, and backup.json marks the
	// copy as one of it (written before anything is copied, so that an
	// interrupted copy is still known for one); everything else is copied
	// as is.
	args := append([]string{"-a", "--exclude=/daemon.sock", "--exclude=/daemon.lock", "--exclude=/run/", "--exclude=/" + fsstore.CopyLockName,
		"--exclude=/" + fsstore.HomeName, "--exclude=/" + fsstore.BackupName}, c.Rsync...)
	args = append(args, strings.TrimSuffix(g.Home, "/")+"/", strings.TrimSuffix(dest, "/")+"/")
	cmd := exec.Command(rsync, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	out := BackupResult{Home: g.Home, Dest: dest, Findings: []fsstore.Finding{}}
	if !g.JSON {
		fmt.Fprintf(os.Stderr, "copying %s to %s with rsync -a...\n", g.Home, dest)
	}
	// While it copies, the daemon keeps the agents/<id> that archives
	// leave for copies (see fsstore/home.go).
	release, err := fsstore.CopyLock(g.Home)
	if err != nil {
		return err
	}
	err = cmd.Run()
	release()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 24:
		// "Partial transfer due to vanished source files": a live home
		// changes while it is copied (delivered messages swept, temporary
		// files renamed). What vanished was not needed: see fsstore/doc.go.
		out.Vanished = true
	case err != nil:
		return fail(fmt.Sprintf("rsync failed: %v", err), "see rsync's message above")
	}
	if remote {
		if g.JSON {
			printJSON(out)
		} else {
			fmt.Printf("copied %s to %s (not checked: a remote copy; run 'substrat fsck --repair' there)\n", g.Home, dest)
		}
		return nil
	}
	store, err := fsstore.Open(dest, fsstore.Options{})
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
	if entries, err := os.ReadDir(fsstore.Layout{Home: dest}.ArchiveDir()); err == nil {
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
	if g.JSON {
		printJSON(out)
	} else {
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
			g.Home, dest, note, plural(out.Agents, "live agent"), plural(out.Archived, "agent"), plural(out.Problems, "problem"))
	}
	if out.Problems > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("the copy in %s has %d problem(s)", dest, out.Problems),
			hint: "see the findings above; the live home is untouched"}
	}
	return nil
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
