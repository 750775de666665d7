package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/bwraptest"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/workspace"
)

// The escape of a link checked by name and bound by name, through the
// tools an agent is entitled to: an agent links a directory of its own
// workspace into a workspace of its scope, spawns a child there, and a
// process of the agent swaps the linked directory for a symlink to "/"
// and back as fast as it can. Every sandbox the child's provider would
// start (the daemon's real hook: workspace spec, provider needs, bwrap)
// sees the directory's own file at the link, or is refused; never the
// host's root.
func TestSandboxLinkRace(t *testing.T) {
	home := shortDir(t)
	c, h := newCore(t, home)
	if _, err := c.CreateWorkspace(api.WorkspaceParams{Name: "wa"}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "boss", Workspace: "wa"})
	root := fsstore.Layout{Home: home}.WorkspaceRoot(workspace.UserScope, "wa")
	shared, alt := filepath.Join(root, "shared"), filepath.Join(root, "alt")
	bwraptest.MkSwapPair(t, shared, alt, "inside")
	// The agent's turn calls the tools (the script provider runs each
	// "!tool {args}" line).
	_, outcome, cancel, err := c.SendAndAwait(api.SendParams{To: "boss", Text: `!create_workspace {"name":"mine"}
!link_dir {"workspace":"mine","source":"/workspace/shared","target":"/linked","mode":"rw"}
!spawn_agent {"name":"kid","instructions":"look","workspace":"mine"}`})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if err := c.RunTurn(context.Background(), mustResolve(t, c, "boss")); err != nil {
		t.Fatal(err)
	}
	if o := <-outcome; o.Failed != "" || strings.Contains(o.Text, "-> error") {
		t.Fatalf("the boss's tools: %+v", o)
	}
	hook := h.sandboxFor(sessionOf(c, "boss/kid"))
	if hook == nil {
		t.Fatal("the child has no sandbox")
	}

	stop := bwraptest.Swap(t, shared, alt) // the agent's swapping process
	defer stop()
	var bound, refused int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd, err := wrap(ctx, hook, exec.Command("/bin/ls", "-A", "/linked"), provider.SandboxNeeds{})
		var got string
		if err == nil {
			got, err = bwraptest.Run(cmd)
		}
		cancel()
		switch {
		case errors.Is(err, bwrap.ErrSymlink), errors.Is(err, workspace.ErrEscape), errors.Is(err, workspace.ErrNotFound),
			errors.Is(err, os.ErrNotExist), errors.Is(err, bwraptest.ErrRefused):
			refused++
		case err != nil:
			t.Fatal(err)
		case got != "inside":
			t.Fatalf("the child's sandbox shows %q at its link: an escape", got)
		default:
			bound++
		}
	}
	t.Logf("%d sandboxes bound the linked directory, %d were refused", bound, refused)
	if bound == 0 || refused == 0 {
		t.Fatalf("the race did not play out both ways (%d bound, %d refused)", bound, refused)
	}
}
