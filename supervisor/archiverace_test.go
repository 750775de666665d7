package supervisor

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// Children created while their subtree is archived are either archived
// with it, terminated, or refused: never left live under an archived
// parent, and never archived while still live. An orphan is no root: it
// cannot message USER. (20 iterations found 27 live archived agents and a
// live orphan before.)
func TestArchiveRacesChildCreation(t *testing.T) {
	for iter := range 10 {
		home := t.TempDir()
		c, _ := newCore(t, home, false)
		mustCreate(t, c, api.CreateParams{Name: "boss"})
		mustCreate(t, c, api.CreateParams{Name: "mid", Parent: "boss"})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					parent := "boss"
					if i%2 == 1 {
						parent = "boss/mid"
					}
					c.CreateAgent(api.CreateParams{Name: fmt.Sprintf("k%d-%d", w, i), Parent: parent})
				}
			}()
		}
		if _, err := c.Archive(context.Background(), "boss"); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		// Nothing live has a parent in archive/, and nothing in archive/
		// is live.
		c.mu.Lock()
		for _, n := range c.nodes {
			if pid := n.s().ParentID; pid != "" && c.nodes[pid] == nil {
				t.Errorf("iteration %d: %s is live with its parent %s archived", iter, n.s().Name, pid)
			}
		}
		c.mu.Unlock()
		entries, _ := os.ReadDir(c.store.Layout().ArchiveDir())
		for _, e := range entries {
			if !fsstore.IsID(e.Name()) {
				continue
			}
			data, err := os.ReadFile(c.store.Layout().ArchivedAgentDir(e.Name()) + "/" + fsstore.SessionName)
			if err != nil {
				t.Fatal(err)
			}
			s, err := fsstore.DecodeSession(data)
			if err != nil {
				t.Fatal(err)
			}
			if s.AgentState != fsstore.AgentTerminated {
				t.Errorf("iteration %d: %s was archived %s", iter, s.Name, s.AgentState)
			}
		}
	}
}

// An agent whose parent left the live tree is not a root: it may not
// message USER, and the roots are not its siblings.
func TestOrphanIsNoRoot(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	mustCreate(t, c, api.CreateParams{Name: "lead"})
	mustCreate(t, c, api.CreateParams{Name: "other"})
	mustCreate(t, c, api.CreateParams{Name: "w", Parent: "lead"})
	lead := nodeOf(t, c, "lead")
	c.mu.Lock()
	delete(c.nodes, lead.id()) // as when its directory is moved away
	c.mu.Unlock()
	tt := newTurnTools(c, nodeOf(t, c, "w"), nil)
	if r := tt.CallTool(context.Background(), call("send_message", "t1", map[string]string{"recipient": "USER", "text": "hi"})); !r.IsError {
		t.Errorf("an orphan messaged USER: %s", r.Text)
	}
	if r := tt.CallTool(context.Background(), call("send_message", "t2", map[string]string{"recipient": "other", "text": "hi"})); !r.IsError {
		t.Errorf("an orphan reached a root as a sibling: %s", r.Text)
	}
}
