package supervisor

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
)

// names returns the paths of a page's agents.
func names(p api.ListPage) []string {
	var out []string
	for _, a := range p.Agents {
		out = append(out, a.Path)
	}
	return out
}

// TestQueryFiltersAndPages: agent.query filters in the daemon (subtree,
// state, provider, ids), pages in tree order with a cursor, and counts
// every match.
func TestQueryFiltersAndPages(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	lead := mustCreate(t, c, api.CreateParams{Name: "lead"})
	w1 := mustCreate(t, c, api.CreateParams{Name: "w1", Parent: lead.ID})
	mustCreate(t, c, api.CreateParams{Name: "h", Parent: w1.ID})
	w2 := mustCreate(t, c, api.CreateParams{Name: "w2", Parent: lead.ID})
	mustCreate(t, c, api.CreateParams{Name: "other"})
	if _, err := c.Gate(api.GateParams{Ref: w2.ID, Op: "gate"}); err != nil {
		t.Fatal(err)
	}
	all := []string{"lead", "lead/w1", "lead/w1/h", "lead/w2", "other"}

	q := func(p api.ListParams) api.ListPage {
		t.Helper()
		page, err := c.Query(p)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		return page
	}
	if p := q(api.ListParams{}); !slices.Equal(names(p), all) || p.Total != 5 || p.Next != "" {
		t.Errorf("everything: %v total %d next %q", names(p), p.Total, p.Next)
	}
	if got := names(q(api.ListParams{Ref: "lead/w1"})); !slices.Equal(got, []string{"lead/w1", "lead/w1/h"}) {
		t.Errorf("subtree lead/w1: %v", got)
	}
	p := q(api.ListParams{States: []string{"gated"}})
	if !slices.Equal(names(p), []string{"lead/w2"}) || p.Total != 1 || p.Agents[0].State != api.StateGated {
		t.Errorf("--state gated: %v total %d", names(p), p.Total)
	}
	if p := q(api.ListParams{States: []string{"IDLE"}, Ref: "lead"}); !slices.Equal(names(p), []string{"lead", "lead/w1", "lead/w1/h"}) {
		t.Errorf("idle in lead: %v", names(p))
	}
	if p := q(api.ListParams{Providers: []string{"nobody"}}); len(p.Agents) != 0 || p.Total != 0 {
		t.Errorf("provider nobody: %v", names(p))
	}
	if p := q(api.ListParams{IDs: []string{w2.ID, lead.ID, "no-such-id"}}); !slices.Equal(names(p), []string{"lead", "lead/w2"}) {
		t.Errorf("ids: %v", names(p))
	}

	// Every page size walks the same order, each page counting all.
	for limit := 1; limit <= 6; limit++ {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatalf("limit %d: no end of the pages", limit)
			}
			p := q(api.ListParams{Limit: limit, After: after})
			if p.Total != 5 || len(p.Agents) > limit {
				t.Fatalf("limit %d: a page of %d, total %d", limit, len(p.Agents), p.Total)
			}
			got = append(got, names(p)...)
			if p.Next == "" {
				break
			}
			after = p.Next
		}
		if !slices.Equal(got, all) {
			t.Errorf("limit %d: pages gave %v", limit, got)
		}
	}
	if p := q(api.ListParams{Ref: "lead", Limit: 2}); !slices.Equal(names(p), []string{"lead", "lead/w1"}) || p.Total != 4 || p.Next != w1.ID {
		t.Errorf("lead, limit 2: %v total %d next %q", names(p), p.Total, p.Next)
	}

	var ae *api.Error
	for _, bad := range []api.ListParams{{States: []string{"sleepy"}}, {After: "0190f0a0-0000-7000-8000-000000000000"}, {Limit: -1}, {Ref: "nobody"}} {
		if _, err := c.Query(bad); !errors.As(err, &ae) {
			t.Errorf("%+v: %v, want an api error", bad, err)
		}
	}
}

// TestListStateMatchesInspect: the state word and budget a listing gives
// are those of one agent's inspection.
func TestListStateMatchesInspect(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	lead := mustCreate(t, c, api.CreateParams{Name: "lead"})
	for i := range 3 {
		mustCreate(t, c, api.CreateParams{Name: fmt.Sprint("w", i), Parent: lead.ID})
	}
	for _, a := range c.List() {
		res, err := c.Inspect(a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", res.Agent) != fmt.Sprintf("%+v", a) {
			t.Errorf("list and inspect differ:\n%+v\n%+v", a, res.Agent)
		}
	}
}

// TestQueryByIDsAsTheWalk: a query by ids (answered without walking the
// tree) gives what the whole listing gives for those agents, in the same
// order, with each filter.
func TestQueryByIDsAsTheWalk(t *testing.T) {
	c, _ := newCore(t, t.TempDir(), false)
	var all []api.AgentInfo
	for i := range 30 {
		p := api.CreateParams{Name: fmt.Sprint("a", i)}
		if i >= 3 {
			p.Parent = all[(i-3)/3].ID
		}
		all = append(all, mustCreate(t, c, p))
	}
	if _, err := c.Gate(api.GateParams{Ref: all[4].ID, Op: "gate"}); err != nil {
		t.Fatal(err)
	}
	whole, err := c.Query(api.ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	for seed := range 20 {
		var ids []string
		for i, a := range all {
			if (i*7+seed*13)%5 < 2 {
				ids = append(ids, a.ID)
			}
		}
		for _, p := range []api.ListParams{{IDs: ids}, {IDs: ids, Ref: all[1].ID}, {IDs: ids, States: []string{"GATED"}}} {
			got, err := c.Query(p)
			if err != nil {
				t.Fatal(err)
			}
			sub, _ := c.Query(api.ListParams{Ref: p.Ref, States: p.States})
			var want []api.AgentInfo
			for _, a := range sub.Agents {
				if slices.Contains(ids, a.ID) {
					want = append(want, a)
				}
			}
			if fmt.Sprintf("%+v", got.Agents) != fmt.Sprintf("%+v", want) || got.Total != len(want) {
				t.Fatalf("seed %d, %+v: by ids %v, the walk %v", seed, p, names(got), names(api.ListPage{Agents: want}))
			}
		}
	}
	if len(whole.Agents) != 30 {
		t.Fatalf("%d agents", len(whole.Agents))
	}
}
