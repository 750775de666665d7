package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is the kind of a simulated action.
type Kind int

// The actions a run is made of. Each runs through the real supervisor.Core
// (or, for HandEdit, through the file system as a user would).
const (
	CreateRoot  Kind = iota // Core.CreateAgent of a root
	UserSend                // Core.Send from USER; its lines drive the script provider
	SendCollide             // a USER send whose id repeats an undelivered message's
	Turn                    // Core.RunTurn of one agent
	Drain                   // Core.RunTurn of every runnable agent, a few rounds
	Tick                    // Core.Tick after time passes: reminders fire
	Suspend                 // Core.Suspend
	Resume                  // Core.Resume (fills the slot pool: evictions)
	Terminate               // Core.Terminate
	HandEdit                // a user rewrites session.json's instructions
	Archive                 // Core.Archive
)

var kindNames = [...]string{"create-root", "send", "send-collide", "turn", "drain", "tick",
	"suspend", "resume", "terminate", "hand-edit", "archive"}

func (k Kind) String() string { return kindNames[k] }

// Action is one step of a run.
type Action struct {
	Kind      Kind
	Name      string        // the agent made or acted on (a unique name)
	Text      string        // the message of UserSend and SendCollide, the instructions of HandEdit
	Advance   time.Duration // how far the clock moves before the action
	Recursive bool          // Terminate
}

func (a Action) String() string {
	s := a.Kind.String()
	if a.Name != "" {
		s += " " + a.Name
	}
	if a.Recursive {
		s += " (recursive)"
	}
	if a.Text != "" {
		s += fmt.Sprintf(" %q", a.Text)
	}
	return s
}

// Agent is an agent as the generator sees the tree when it draws an
// action: its name, its parent's name ("" for a root), and whether it can
// still take messages.
type Agent struct {
	Name, Parent string
	Live         bool
}

// Gen draws the actions of a seed one at a time, looking at the tree as it
// is (Next's argument), so that most actions are aimed at agents that
// exist. The reference run draws them and records them; every other run of
// the seed replays the record.
type Gen struct {
	r       *rand.Rand
	counter int
	tree    []Agent
}

// NewGen returns the generator of seed.
func NewGen(seed uint64) *Gen {
	return &Gen{r: rand.New(rand.NewPCG(seed, 0x5eed))}
}

func (g *Gen) fresh(prefix string) string {
	g.counter++
	return fmt.Sprintf("%s%d", prefix, g.counter)
}

// pick names a target: mostly a live agent, sometimes any agent of the
// tree, rarely one that does not exist.
func (g *Gen) pick() string {
	var live []string
	for _, a := range g.tree {
		if a.Live {
			live = append(live, a.Name)
		}
	}
	switch k := g.r.IntN(20); {
	case k < 16 && len(live) > 0:
		return live[g.r.IntN(len(live))]
	case k < 19 && len(g.tree) > 0:
		return g.tree[g.r.IntN(len(g.tree))].Name
	}
	return g.fresh("ghost")
}

// Next draws the action after i others, given the tree as it is now.
func (g *Gen) Next(i int, tree []Agent) Action {
	g.tree = tree
	roots := 0
	for _, a := range tree {
		if a.Parent == "" && a.Live {
			roots++
		}
	}
	a := g.next(i, roots)
	if a.Advance == 0 {
		a.Advance = time.Duration(1+g.r.IntN(20)) * time.Second
	}
	return a
}

func (g *Gen) next(i, roots int) Action {
	if i == 0 || roots == 0 {
		return g.createRoot()
	}
	type choice struct {
		w int
		f func() Action
	}
	choices := []choice{
		{max(0, 6-2*roots), g.createRoot},
		{30, func() Action { name := g.pick(); return Action{Kind: UserSend, Name: name, Text: g.message(name)} }},
		{3, func() Action {
			return Action{Kind: SendCollide, Name: g.pick(), Text: g.fresh("collide") + " this message reuses an id"}
		}},
		{14, func() Action { return Action{Kind: Turn, Name: g.pick()} }},
		{14, func() Action { return Action{Kind: Drain} }},
		{6, func() Action {
			return Action{Kind: Tick, Advance: time.Duration(1+g.r.IntN(900)) * time.Second}
		}},
		{4, func() Action { return Action{Kind: Suspend, Name: g.pick()} }},
		{4, func() Action { return Action{Kind: Resume, Name: g.pick()} }},
		{2, func() Action { return Action{Kind: Terminate, Name: g.pick(), Recursive: g.r.IntN(2) == 0} }},
		{4, func() Action {
			return Action{Kind: HandEdit, Name: g.pick(), Text: "edited by hand: " + g.fresh("e")}
		}},
		{1, func() Action { return Action{Kind: Archive, Name: g.pick()} }},
	}
	total := 0
	for _, c := range choices {
		total += c.w
	}
	n := g.r.IntN(total)
	for _, c := range choices {
		if n < c.w {
			return c.f()
		}
		n -= c.w
	}
	panic("unreachable")
}

func (g *Gen) createRoot() Action {
	return Action{Kind: CreateRoot, Name: g.fresh("r")}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// neighbour picks a name agent to may message: its parent, a sibling or
// a child, USER, or the word "parent".
func (g *Gen) neighbour(to string) string {
	parent := "?"
	for _, a := range g.tree {
		if a.Name == to {
			parent = a.Parent
		}
	}
	var cands []string
	for _, a := range g.tree {
		if a.Name != to && (a.Parent == parent || a.Parent == to || a.Name == parent) {
			cands = append(cands, a.Name)
		}
	}
	cands = append(cands, "parent", "USER")
	return cands[g.r.IntN(len(cands))]
}

// message draws the text of a USER message to agent to: a unique first
// line, then one to three lines, most of them commands of the script
// provider.
func (g *Gen) message(to string) string {
	lines := []string{g.fresh("u")}
	for n := 1 + g.r.IntN(3); n > 0; n-- {
		lines = append(lines, g.command(to, true))
	}
	return strings.Join(lines, "\n")
}

// command draws one line an agent will run. Nested lines (the text of a
// message an agent sends on) are simpler.
func (g *Gen) command(to string, top bool) string {
	switch k := g.r.IntN(20); {
	case k < 5 && top:
		child := g.fresh("c")
		instr := []string{
			"hello " + child,
			`!send_message {"recipient":"parent","text":` + jsonString("hi from "+child) + `}`,
			`!complete {"result":` + jsonString(child+" done") + `}`,
			`!remind_me {"reason":"wake","timeout":` + fmt.Sprint(30+g.r.IntN(600)) + `}`,
			`!broadcast {"text":` + jsonString(child+" says hi") + `}`,
		}[g.r.IntN(5)]
		return `!spawn_agent {"name":"` + child + `","instructions":` + jsonString(instr) + `}`
	case k < 10:
		text := g.fresh("m")
		if top && g.r.IntN(2) == 0 {
			// The recipient sends something back: a ping-pong the hop
			// guard bounds.
			text = `!send_message {"recipient":"parent","text":` + jsonString("pong "+text) + `}`
		}
		return `!send_message {"recipient":` + jsonString(g.neighbour(to)) + `,"text":` + jsonString(text) + `}`
	case k < 11:
		return `!broadcast {"text":` + jsonString(g.fresh("b")) + `}`
	case k < 12:
		return `!complete {"result":` + jsonString(g.fresh("result")) + `}`
	case k < 14:
		every := ""
		if g.r.IntN(3) == 0 {
			every = `,"every":120`
		}
		return `!remind_me {"reason":` + jsonString(g.fresh("remind")) + `,"timeout":` + fmt.Sprint(1+g.r.IntN(600)) + every + `}`
	case k < 15:
		return `!check_inbox {}`
	case k < 16:
		return `!subscribe {"agent_name":` + jsonString(g.neighbour(to)) + `,"transition":"*->TERMINATED","once":true}`
	case k < 17:
		return `!set_agent_metadata {"agent_name":"self","key":"k","value":` + jsonString(g.fresh("v")) + `}`
	default:
		return "just text " + g.fresh("t")
	}
}
