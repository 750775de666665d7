package supervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
	home := t.TempDir()
	c, _ := newCore(t, home, false)
	if _, err := c.CreateWorkspace(api.WorkspaceParams{Name: "wa"}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, api.CreateParams{Name: "boss", Workspace: "wa"})
	root := c.store.Layout().WorkspaceRoot(workspace.UserScope, "wa")
	shared, alt := filepath.Join(root, "shared"), filepath.Join(root, "alt")
	bwraptest.MkSwapPair(t, shared, alt, "inside")
	tt := newTurnTools(c, nodeOf(t, c, "boss"), nil)
	for i, cl := range []provider.ToolCall{
		call("create_workspace", "t1", map[string]any{"name": "mine"}),
		call("link_dir", "t2", map[string]any{"workspace": "mine", "source": "/workspace/shared", "target": "/linked", "mode": "rw"}),
		call("spawn_agent", "t3", map[string]any{"name": "kid", "instructions": "look", "workspace": "mine"}),
	} {
		if r := tt.CallTool(context.Background(), cl); r.IsError {
			t.Fatalf("tool %d: %s", i, r.Text)
		}
	}
	hook := c.sandboxFor(nodeOf(t, c, "kid").s())
	if hook == nil {
		t.Fatal("the child has no sandbox")
	}

	stop := bwraptest.Swap(t, shared, alt) // the agent's swapping process
	defer stop()
	var bound, refused int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd, err := hook(ctx, exec.Command("/bin/ls", "-A", "/linked"), provider.SandboxNeeds{})
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
