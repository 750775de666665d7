package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/workspace"
)

// WorkspaceCmd groups the workspace commands. A workspace ref is NAME (a
// USER workspace) or SCOPE/NAME, SCOPE being USER or an agent ref.
type WorkspaceCmd struct {
	Create  WorkspaceCreateCmd  `cmd:"" help:"Create an empty workspace, or (--git REPO) a git clone of REPO (in the home; REPO stays read-only to agents) on a new branch."`
	List    WorkspaceListCmd    `cmd:"" help:"List workspaces."`
	Inspect WorkspaceInspectCmd `cmd:"" help:"Show a workspace, its links and its users."`
	Delete  WorkspaceDeleteCmd  `cmd:"" help:"Delete a workspace no live agent uses."`
	Link    WorkspaceLinkCmd    `cmd:"" help:"Bind a host directory into a workspace."`
	Unlink  WorkspaceUnlinkCmd  `cmd:"" help:"Remove a link from a workspace."`
	View    WorkspaceViewCmd    `cmd:"" help:"Create a workspace whose root is another's (or a directory of it)."`
	Exec    WorkspaceExecCmd    `cmd:"" help:"Run a command inside a workspace's sandbox, as an agent would."`
	Diff    WorkspaceDiffCmd    `cmd:"" help:"Show what a git workspace's branch changed since its base, committed and not."`
	Publish WorkspacePublishCmd `cmd:"" help:"Set a git workspace's branch in your repository to its clone's (the daemon does it after every turn)."`

	Reattach WorkspaceReattachCmd `cmd:"" help:"Make a git workspace copied from another home (a backup) this home's: its branch in the repository becomes this home's."`
}

// WorkspaceReattachCmd re-attaches a copied git workspace.
type WorkspaceReattachCmd struct {
	Ref string `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME."`
}

// Run re-attaches it.
func (c *WorkspaceReattachCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceReattach, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(w)
	}
	fmt.Printf("workspace %s is this home's now; its branch %s in %s is published from here\n", c.Ref, w.Git.Branch, w.Git.Repo)
	return nil
}

// WorkspaceCreateCmd creates a workspace.
type WorkspaceCreateCmd struct {
	Name    string `arg:"" help:"The workspace's name."`
	Scope   string `help:"USER (default) or the agent whose scope it is in."`
	Network bool   `help:"Give processes in the workspace network access."`
	Git     string `help:"Make the root a git clone of the repository REPO, on a new branch." type:"path" placeholder:"REPO" predictor:"dir"`
	Branch  string `help:"The new branch (default substrat/NAME), published to REPO after each turn." placeholder:"B"`
	Base    string `help:"Where the branch starts (default REPO's HEAD)." placeholder:"REF"`
}

// Run creates it.
func (c *WorkspaceCreateCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceCreate, api.WorkspaceParams{Name: c.Name, Scope: c.Scope, Network: c.Network,
		Git: c.Git, Branch: c.Branch, Base: c.Base})
	if err != nil {
		return err
	}
	if err := printWorkspace(g, w, "created"); err != nil {
		return err
	}
	if w.Note != "" && !g.JSON {
		fmt.Printf("  note: %s\n", w.Note)
	}
	return nil
}

// WorkspaceDiffCmd shows a git workspace's changes.
type WorkspaceDiffCmd struct {
	Ref  string `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME."`
	Stat bool   `help:"A summary: files and lines changed."`
}

// Run prints the diff.
func (c *WorkspaceDiffCmd) Run(g *Globals) error {
	res, err := call(g, api.WorkspaceDiff, api.WorkspaceDiffParams{Ref: c.Ref, Stat: c.Stat})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	fmt.Print(termtext.Lines(res.Diff))
	return nil
}

// WorkspacePublishCmd publishes a git workspace's branch.
type WorkspacePublishCmd struct {
	Ref string `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME."`
}

// Run publishes and prints the commit.
func (c *WorkspacePublishCmd) Run(g *Globals) error {
	res, err := call(g, api.WorkspacePublish, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	fmt.Println(res.Commit)
	return nil
}

func printWorkspace(g *Globals, w api.WorkspaceInfo, verb string) error {
	if g.JSON {
		return printJSON(w)
	}
	net := "no network"
	if w.NetworkAccess {
		net = "network"
	}
	fmt.Printf("%s workspace %s (%s)\n  root: %s\n", verb, w.Ref, net, w.Root)
	if gw := w.Git; gw != nil {
		fmt.Printf("  git clone of %s on branch %s, from %.12s\n", gw.Repo, gw.Branch, gw.Base)
	}
	if w.View != nil {
		fmt.Printf("  view of %s/%s:%s (%s)\n", w.View.SourceScope, w.View.SourceName, w.View.Subdir, w.View.Mode)
	}
	for _, l := range w.Links {
		fmt.Printf("  link: %s -> %s (%s)\n", l.HostPath, l.MountPath, l.Mode)
	}
	if len(w.Users) > 0 {
		fmt.Printf("  used by: %s\n", strings.Join(w.Users, ", "))
	}
	return nil
}

// WorkspaceListCmd lists workspaces.
type WorkspaceListCmd struct{}

// Run lists.
func (WorkspaceListCmd) Run(g *Globals) error {
	ws, err := call(g, api.WorkspaceList, struct{}{})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(ws)
	}
	if len(ws) == 0 {
		fmt.Println("no workspaces; create one with 'substrat workspace create NAME'")
	}
	for _, w := range ws {
		fmt.Printf("%-50s links %d  network %-5v  users %s\n", w.Ref, len(w.Links), w.NetworkAccess, strings.Join(w.Users, ","))
	}
	return nil
}

// WorkspaceDeleteCmd deletes a workspace.
type WorkspaceDeleteCmd struct {
	Ref          string `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME."`
	Force        bool   `help:"A git workspace: delete it even with uncommitted or unmerged work."`
	DeleteBranch bool   `help:"A git workspace: delete its branch in the repository too (kept by default)."`
}

// Run deletes it; it is refused while live agents use it.
func (c *WorkspaceDeleteCmd) Run(g *Globals) error {
	if _, err := call(g, api.WorkspaceDelete, api.WorkspaceDeleteParams{Ref: c.Ref, Force: c.Force, DeleteBranch: c.DeleteBranch}); err != nil {
		return err
	}
	if g.JSON {
		return printJSON(map[string]any{"deleted": c.Ref})
	}
	fmt.Println("deleted workspace", c.Ref)
	return nil
}

// WorkspaceInspectCmd shows a workspace.
type WorkspaceInspectCmd struct {
	Ref string `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME."`
}

// Run shows it.
func (c *WorkspaceInspectCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceInspect, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	return printWorkspace(g, w, "")
}

// WorkspaceLinkCmd links a host directory.
type WorkspaceLinkCmd struct {
	Ref    string `arg:"" name:"ws" predictor:"workspace" help:"The workspace."`
	Source string `required:"" help:"Host directory to bind."`
	Target string `required:"" help:"Where it appears inside the sandbox: absolute, or relative to /workspace (data means /workspace/data)."`
	Mode   string `enum:"ro,rw" default:"ro" help:"ro or rw."`
}

// Run links.
func (c *WorkspaceLinkCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceLink, api.LinkParams{Workspace: c.Ref, Source: absPath(c.Source), Target: c.Target, Mode: c.Mode})
	if err != nil {
		return err
	}
	return printWorkspace(g, w, "linked into")
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// WorkspaceUnlinkCmd removes a link.
type WorkspaceUnlinkCmd struct {
	Ref    string `arg:"" name:"ws" predictor:"workspace" help:"The workspace."`
	Target string `required:"" help:"The mount path to remove (absolute, or relative to /workspace)."`
}

// Run unlinks.
func (c *WorkspaceUnlinkCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceUnlink, api.UnlinkParams{Workspace: c.Ref, Target: c.Target})
	if err != nil {
		return err
	}
	return printWorkspace(g, w, "unlinked from")
}

// WorkspaceViewCmd makes a view.
type WorkspaceViewCmd struct {
	Source string `arg:"" name:"src" help:"The workspace to view." predictor:"workspace"`
	Name   string `required:"" help:"Name of the new view workspace."`
	Scope  string `help:"USER (default) or an agent ref."`
	Subdir string `help:"Directory of the source's root to show instead of all of it."`
	Mode   string `enum:"ro,rw" default:"ro" help:"ro or rw."`
}

// Run creates the view.
func (c *WorkspaceViewCmd) Run(g *Globals) error {
	w, err := call(g, api.WorkspaceView, api.ViewParams{Source: c.Source, Name: c.Name, Scope: c.Scope, Subdir: c.Subdir, Mode: c.Mode})
	if err != nil {
		return err
	}
	return printWorkspace(g, w, "created view")
}

// WorkspaceExecCmd runs a command in a workspace's sandbox. It needs no
// daemon: it reads workspace.json and runs bwrap here, with this terminal.
type WorkspaceExecCmd struct {
	Ref string   `arg:"" name:"ws" predictor:"workspace" help:"The workspace: NAME or SCOPE/NAME (SCOPE: USER or an agent id)."`
	Cmd []string `arg:"" passthrough:"" help:"The command and its arguments (after --)."`
}

// Run runs the command through /bin/sh in the sandbox; the shell's cwd and
// exported variables persist between runs.
func (c *WorkspaceExecCmd) Run(g *Globals) error {
	layout := fsstore.Layout{Home: g.Home}
	scope, name, ok := strings.Cut(c.Ref, "/")
	if !ok {
		scope, name = workspace.UserScope, c.Ref
	}
	w, err := workspace.NewStore(layout, fsstore.OS{}).Get(scope, name)
	if err != nil {
		return fail(err.Error(), "list them with 'substrat workspace list'")
	}
	spec, err := w.Spec(layout)
	if err != nil {
		return err
	}
	args := c.Cmd
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return &exitError{code: 2, msg: "no command given", hint: "substrat workspace exec WS -- CMD ARGS..."}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cmd, err := launch.Shell(ctx, spec, w.ShellState(layout), shellQuote(args))
	if errors.Is(err, bwrap.ErrNotInstalled) {
		return fail(err.Error(), bwrap.InstallHint)
	}
	if err != nil {
		return err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Start()
	launch.CloseFiles(cmd) // the sandbox holds what it bound
	if err == nil {
		err = cmd.Wait()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitError{code: ee.ExitCode(), msg: fmt.Sprintf("the command exited with status %d", ee.ExitCode())}
	}
	return err
}

// shellQuote joins args into one sh command line, each argument quoted,
// except that a single argument is taken as a shell command as is.
func shellQuote(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
