package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

// TestAgentQueryOverTheSocket: agent.query pages over the wire with its
// total and cursor, and a page of a big tree is small, while agent.list
// takes the same filters and answers every match as one array (in parts
// past the line limit).
func TestAgentQueryOverTheSocket(t *testing.T) {
	_, sock := startDaemon(t)
	ctx := context.Background()
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var lead api.AgentInfo
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "lead"}, &lead); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: fmt.Sprint("w", i), Parent: lead.ID}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "solo"}, nil); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	p := api.ListParams{Ref: "lead", Limit: 7}
	for pages := 0; ; pages++ {
		var page api.ListPage
		if err := callInto(ctx, c, api.AgentQuery, p, &page); err != nil {
			t.Fatal(err)
		}
		if page.Total != n+1 || len(page.Agents) > 7 {
			t.Fatalf("page %d: %d agents, total %d", pages, len(page.Agents), page.Total)
		}
		for _, a := range page.Agents {
			if seen[a.ID] || a.Path != "lead" && a.ParentID != lead.ID {
				t.Fatalf("page %d: %s twice or outside lead's subtree", pages, a.Path)
			}
			seen[a.ID] = true
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	if len(seen) != n+1 {
		t.Errorf("the pages held %d agents of %d", len(seen), n+1)
	}
	var list []api.AgentInfo
	if err := callInto(ctx, c, api.AgentList, api.ListParams{States: []string{"idle"}, Providers: []string{"script"}, Limit: 2}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != n+2 {
		t.Errorf("agent.list with filters gave %d agents, want every match (%d)", len(list), n+2)
	}
	var bad *api.Error
	if err := callInto(ctx, c, api.AgentQuery, api.ListParams{States: []string{"sleepy"}}, nil); !errors.As(err, &bad) || bad.Code != api.CodeInvalidParams {
		t.Errorf("an unknown state: %v", err)
	}
}
