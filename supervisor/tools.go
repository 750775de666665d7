package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/provider"
)

type toolFunc func(t *turnTools, ctx context.Context, call provider.ToolCall) (string, error)

// newTool makes the tool name, whose arguments decode strictly into an A
// and whose input schema is generated from A: a property per json tag,
// required unless omitempty, described by its jsonschema tag.
func newTool[A any](name, desc string, run func(t *turnTools, ctx context.Context, call provider.ToolCall, a A) (string, error)) tool {
	s, err := jsonschema.For[A](&jsonschema.ForOptions{TypeSchemas: argTypeSchemas})
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", name, err))
	}
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", name, err))
	}
	return tool{api.ToolSpec{Name: name, Description: desc, InputSchema: raw}, func(t *turnTools, ctx context.Context, call provider.ToolCall) (string, error) {
		var a A
		if err := args(call, &a); err != nil {
			return "", err
		}
		return run(t, ctx, call, a)
	}}
}

// argTypeSchemas are the schemas of argument types that are not plain Go.
var argTypeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[delay]():    {Types: []string{"string", "number"}},
	reflect.TypeFor[linkMode](): {Type: "string", Enum: []any{"ro", "rw"}},
}

// noArgs are the arguments of a tool that takes none.
type noArgs struct{}

type tool struct {
	spec api.ToolSpec
	run  toolFunc
}

var tools = map[string]tool{}

func init() {
	for _, t := range []tool{
		newTool("spawn_agent", "Create a child agent with a name and instructions. Its session starts after your turn ends; messages you send it now are kept.", (*turnTools).spawnAgent),
		newTool("send_message", "Send a message to your parent, a child or a sibling (by name), or to USER if you are a root agent.", (*turnTools).sendMessage),
		newTool("check_inbox", "Read messages that arrived during this turn, optionally only from one sender or of one kind.", (*turnTools).checkInbox),
		newTool("complete", "Report your result to your parent and end: your agent terminates after this turn.", (*turnTools).complete),
		newTool("list_children", "List your children with their states.", (*turnTools).listChildren),
		newTool("inspect_agent", "Show an agent one hop away (parent, child, sibling) or yourself.", (*turnTools).inspectAgent),
		newTool("broadcast", "Send a message to all your live siblings.", (*turnTools).broadcast),
		newTool("poke", "Wake an agent one hop away with a nudge to check its inbox.", (*turnTools).poke),
		newTool("remind_me", "Get a SYSTEM message after timeout (\"90s\", \"5m\" or seconds), optionally repeating every interval.", (*turnTools).remindMe),
		newTool("cancel_reminder", "Cancel one of your reminders by id.", (*turnTools).cancelReminder),
		newTool("set_agent_metadata", "Set (or, without value, remove) a metadata key on yourself or an agent one hop away.", (*turnTools).setMetadata),
		newTool("subscribe", "Be told when an agent one hop away changes state, e.g. transition \"BUSY->IDLE\" or \"*->TERMINATED\".", (*turnTools).subscribe),
		newTool("unsubscribe", "End one of your subscriptions by id.", (*turnTools).unsubscribe),
		newTool("gate", "Stop an agent one hop away from starting turns until you permit or ungate it.", gateTool("gate")),
		newTool("ungate", "Let a gated agent run freely again.", gateTool("ungate")),
		newTool("permit_turn", "Let a gated agent take one turn.", gateTool("permit")),
	} {
		tools[t.spec.Name] = t
	}
	for _, t := range slices.Concat(workspaceTools(), approvalTools()) {
		tools[t.spec.Name] = t
	}
}

// Tools returns the specs of every agent tool, sorted by name.
func Tools() []api.ToolSpec {
	out := make([]api.ToolSpec, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.spec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// turnTools runs agent tools for one agent during one turn.
type turnTools struct {
	c        *Core
	n        *node
	msgs     []*fsstore.Message // the turn's prompt
	inTurn   map[string]bool    // message ids in the turn's prompt
	lastFrom map[string]string  // sender id -> newest message from it in the prompt
	hops     int                // the most hops of a message in the prompt
	done     <-chan struct{}    // closed when the turn ends (nil outside a turn)
	turnKey  string             // the first message of the prompt: names the turn (effect journal, approval requests)
	clock    *turnCtx           // the turn's timeout, stopped while approvals wait (nil outside a turn)

	askMu         sync.Mutex // one approval request made at a time (approvalcall.go)
	waitMu        sync.Mutex // guards the fields below
	waits         int        // approval requests the turn waits for
	markedWaiting bool       // the agent was made WAITING for them
	ended         bool       // the provider's turn returned

	mu       sync.Mutex // guards the fields below
	spawned  []*node
	requests []string        // messages sent to agents that await a reply
	checked  map[string]bool // messages check_inbox handed over this turn
	repeats  map[string]int  // journaled calls so far, by tool and arguments
}

func newTurnTools(c *Core, n *node, msgs []*fsstore.Message) *turnTools {
	t := &turnTools{c: c, n: n, msgs: msgs, inTurn: map[string]bool{}, lastFrom: map[string]string{}}
	if len(msgs) > 0 {
		t.turnKey = msgs[0].ID
	}
	for _, m := range msgs {
		t.inTurn[m.ID] = true
		t.lastFrom[m.From] = m.ID
		t.hops = max(t.hops, m.Hops)
	}
	return t
}

// prompt returns the messages of the turn's prompt.
func (t *turnTools) prompt() []*fsstore.Message { return t.msgs }

// checkedIDs returns the messages check_inbox handed over this turn, in
// id order. They are delivered when the turn ends, with the prompt's.
func (t *turnTools) checkedIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Sorted(maps.Keys(t.checked))
}

func (t *turnTools) requestsSent() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.requests)
}

// message builds a message from the turn's agent, one hop further than
// the messages that started the turn. It fails once the ping-pong guard's
// limit is reached.
func (t *turnTools) message(ctx context.Context, kind, text string) (*fsstore.Message, error) {
	if t.hops+1 > t.c.maxHops {
		return nil, fmt.Errorf("ping-pong guard: this exchange has bounced %d times between agents without a message from USER or a reminder; stop and report to your parent", t.hops)
	}
	id := t.newID(ctx)
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return &fsstore.Message{ID: id, From: t.n.id(), FromName: t.n.s().Name, Kind: kind, Text: text, Hops: t.hops + 1}, nil
}

// send puts m in the inbox of an agent (to) or, with to nil, USER's, once: a
// call run again (its effect journaled, not finished) first looks for
// m's id in the recipient's inbox.
func (t *turnTools) send(ctx context.Context, m *fsstore.Message, to *node) error {
	if again(ctx) && t.c.hasMessage(to, m.ID) {
		return nil
	}
	if to == nil {
		return t.c.sendUser(m)
	}
	_, err := t.c.send(m, to)
	return err
}

// CallTool runs one tool call. Every failure is a result with IsError set.
func (t *turnTools) CallTool(ctx context.Context, call provider.ToolCall) provider.ToolResult {
	tl, ok := tools[call.Name]
	if !ok {
		tl, ok = workTools[call.Name]
	}
	if !ok {
		return provider.ToolResult{IsError: true, Text: fmt.Sprintf("unknown tool %q; the tools are: %s (and the work tools %s)", call.Name, toolNames(), workToolNames())}
	}
	var text string
	var err error
	if journaled[call.Name] && t.turnKey != "" {
		text, err = t.runJournaled(ctx, tl, call)
	} else {
		text, err = tl.run(t, ctx, call)
	}
	t.c.mu.Lock()
	t.c.publishLocked(api.WatchEvent{Agent: t.n.id(), Name: t.n.s().Name, Type: api.WatchTool, Time: t.c.clock.Now().UTC(),
		Data: map[string]any{"tool": call.Name, "ok": err == nil}})
	t.c.mu.Unlock()
	if err != nil {
		return provider.ToolResult{IsError: true, Text: call.Name + ": " + err.Error()}
	}
	return provider.ToolResult{Text: text}
}

func toolNames() string {
	var names []string
	for _, s := range Tools() {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}

// args decodes a tool's arguments strictly.
func args(call provider.ToolCall, v any) error {
	raw := call.Args
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad arguments: %v", err)
	}
	return nil
}

// releaseSpawned lets the children spawned during the turn start.
func (t *turnTools) releaseSpawned() {
	t.mu.Lock()
	spawned := t.spawned
	t.spawned = nil
	t.mu.Unlock()
	t.c.mu.Lock()
	for _, ch := range spawned {
		ch.heldBy = ""
	}
	t.c.mu.Unlock()
	t.c.signal()
}

func (t *turnTools) spawnAgent(ctx context.Context, call provider.ToolCall, a spawnAgentArgs) (string, error) {
	if strings.TrimSpace(a.Instructions) == "" {
		return "", fmt.Errorf("instructions are empty")
	}
	t.c.mu.Lock()
	parent := t.n.s()
	t.c.mu.Unlock()
	// A child without a workspace inherits its parent's, and with it the
	// sandbox; one it names must be the parent's own or of its scope.
	ws := parent.Workspace
	switch {
	case a.Worktree && a.Workspace != "":
		return "", fmt.Errorf("give a workspace or worktree, not both")
	case a.Worktree:
		if err := fsstore.CheckNewName(a.Name); err != nil {
			return "", err
		}
		var err error
		if ws, err = t.childWorktree(a.Name, a.Branch, true); err != nil {
			return "", err
		}
	case a.Branch != "":
		return "", fmt.Errorf("branch is for a worktree (worktree: true)")
	case a.Workspace != "":
		var err error
		if ws, err = t.c.resolveAgentWorkspace(t.n, a.Workspace); err != nil {
			return "", err
		}
	}
	// A call run again after a crash must not make a twin of a child that
	// has since left the live tree (archived): its spawned event says so
	// (found by sim, seed 3).
	if id := t.c.spawnedBy(t.n, call.ID); id != "" {
		if _, err := t.c.Resolve(id); err != nil {
			return "", fmt.Errorf("this call already spawned %s (%s), which has left the live tree; it is not spawned again", a.Name, id)
		}
	}
	// Without a workspace, the child works where its parent does.
	workDir := ""
	if ws == "" {
		workDir = parent.WorkDir
	}
	child, existed, err := t.c.createAgent(api.CreateParams{
		Name: a.Name, Provider: parent.Provider, Model: parent.Model, Instructions: a.Instructions,
		Workspace: ws, WorkDir: workDir, Metadata: a.Metadata, SpawnKey: call.ID, Pool: parent.Pool,
	}, t.n)
	if err != nil {
		return "", err
	}
	if !existed {
		t.c.mu.Lock()
		child.heldBy = t.n.id()
		t.c.mu.Unlock()
		t.mu.Lock()
		t.spawned = append(t.spawned, child)
		t.mu.Unlock()
		if err := t.c.commit(t.n, fsstore.Spawned{ChildID: child.id(), Name: a.Name, SpawnKey: call.ID}); err != nil {
			return "", err
		}
	}
	// The instructions are the child's first message. Its id is the
	// child's id, so a spawn re-executed after a crash sends it once.
	if !t.c.hasMessage(child, child.id()) {
		m := &fsstore.Message{ID: child.id(), From: t.n.id(), FromName: parent.Name, Kind: fsstore.KindMessage, Text: a.Instructions}
		if _, err := t.c.send(m, child); err != nil {
			return "", err
		}
	}
	if existed {
		return fmt.Sprintf("agent %s already exists (%s); it was spawned by this same call", a.Name, child.id()), nil
	}
	return fmt.Sprintf("spawned %s (%s); it starts when your turn ends", a.Name, child.id()), nil
}

// spawnedBy returns the id of the child that n's spawn with this key
// made, from its spawned events, or "". The log is read once (the spawned
// lines only are decoded); commits keep the index after that.
func (c *Core) spawnedBy(n *node, key string) string {
	c.mu.Lock()
	keys := n.spawnKeys
	c.mu.Unlock()
	if keys == nil {
		keys, _ = n.agent.SpawnKeys() // an unreadable log: what was read
		c.mu.Lock()
		if n.spawnKeys == nil {
			n.spawnKeys = keys
		}
		keys = n.spawnKeys
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return keys[key]
}

func (t *turnTools) sendMessage(ctx context.Context, call provider.ToolCall, a sendMessageArgs) (string, error) {
	if strings.TrimSpace(a.Text) == "" {
		return "", fmt.Errorf("message text is empty")
	}
	m, err := t.message(ctx, fsstore.KindMessage, a.Text)
	if err != nil {
		return "", err
	}
	if a.Recipient == fsstore.User {
		if t.n.s().ParentID != "" {
			// An agent whose parent left the live tree is no root.
			return "", fmt.Errorf("only root agents may message USER; send to your parent instead")
		}
		if err := t.send(ctx, m, nil); err != nil {
			return "", err
		}
		return fmt.Sprintf("sent to USER (message %s)", m.ID), nil
	}
	t.c.mu.Lock()
	to, err := t.c.neighbourLocked(t.n, a.Recipient)
	t.c.mu.Unlock()
	if err != nil {
		return "", err
	}
	// A message to an agent whose message started this turn answers it.
	if last := t.lastFrom[to.id()]; last != "" {
		m.Kind, m.ReplyTo = fsstore.KindReply, last
	}
	if err := t.send(ctx, m, to); err != nil {
		return "", err
	}
	if m.ReplyTo != "" {
		return fmt.Sprintf("replied to %s (message %s, in reply to %s)", to.s().Name, m.ID, m.ReplyTo), nil
	}
	t.mu.Lock()
	t.requests = append(t.requests, m.ID)
	t.mu.Unlock()
	return fmt.Sprintf("sent to %s (message %s); you will be woken by the reply", to.s().Name, m.ID), nil
}

func (t *turnTools) broadcast(ctx context.Context, call provider.ToolCall, a broadcastArgs) (string, error) {
	if strings.TrimSpace(a.Text) == "" {
		return "", fmt.Errorf("message text is empty")
	}
	t.c.mu.Lock()
	var sibs []*node
	for _, s := range t.c.siblingsLocked(t.n) {
		if !s.terminated() {
			sibs = append(sibs, s)
		}
	}
	t.c.mu.Unlock()
	if len(sibs) == 0 {
		return "", fmt.Errorf("you have no live siblings")
	}
	var names []string
	for _, s := range sibs {
		m, err := t.message(ctx, fsstore.KindMessage, a.Text)
		if err != nil {
			return "", err
		}
		if err := t.send(ctx, m, s); err != nil {
			return "", fmt.Errorf("after sending to %s: %w", strings.Join(names, ", "), err)
		}
		names = append(names, s.s().Name)
	}
	return fmt.Sprintf("sent to %d siblings: %s", len(names), strings.Join(names, ", ")), nil
}

// neighbour resolves a one-hop name, or the agent itself.
func (t *turnTools) neighbour(name string) (*node, error) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if name == t.n.s().Name || name == "self" {
		return t.n, nil
	}
	return t.c.neighbourLocked(t.n, name)
}

func (t *turnTools) poke(ctx context.Context, call provider.ToolCall, a pokeArgs) (string, error) {
	to, err := t.neighbour(a.AgentName)
	if err != nil {
		return "", err
	}
	if to == t.n {
		return "", fmt.Errorf("you cannot poke yourself; use remind_me")
	}
	m, err := t.message(ctx, fsstore.KindSystem, fmt.Sprintf("%s poked you: check your inbox and carry on.", t.n.s().Name))
	if err != nil {
		return "", err
	}
	if err := t.send(ctx, m, to); err != nil {
		return "", err
	}
	return "poked " + to.s().Name, nil
}

// agentNameArgs name an agent one hop away.
type agentNameArgs struct {
	AgentName string `json:"agent_name"`
}

func gateTool(op string) func(t *turnTools, ctx context.Context, call provider.ToolCall, a agentNameArgs) (string, error) {
	return func(t *turnTools, ctx context.Context, call provider.ToolCall, a agentNameArgs) (string, error) {
		to, err := t.neighbour(a.AgentName)
		if err != nil {
			return "", err
		}
		if to == t.n {
			return "", fmt.Errorf("you cannot %s yourself", op)
		}
		if err := t.c.gateOp(to, op, "by "+t.n.s().Name); err != nil {
			return "", err
		}
		t.c.signal()
		return fmt.Sprintf("%s: done for %s", op, to.s().Name), nil
	}
}

func (t *turnTools) checkInbox(ctx context.Context, call provider.ToolCall, a checkInboxArgs) (string, error) {
	msgs, _, err := t.n.agent.Pending()
	if err != nil {
		return "", storeErr(err)
	}
	// The messages picked are delivered when the turn ends, with the
	// prompt's: a turn cut short (a crash, a failure) leaves them in the
	// inbox for the next one, as it leaves its prompt's.
	var picked []*fsstore.Message
	t.mu.Lock()
	if t.checked == nil {
		t.checked = map[string]bool{}
	}
	for _, m := range msgs {
		if t.inTurn[m.ID] || t.checked[m.ID] || (a.Sender != "" && m.FromName != a.Sender && m.From != a.Sender) || (a.Kind != "" && m.Kind != a.Kind) {
			continue
		}
		picked = append(picked, m)
		t.checked[m.ID] = true
	}
	t.mu.Unlock()
	if len(picked) == 0 {
		return "no new messages", nil
	}
	return RenderPrompt(t.c.promptTag(), picked), nil
}

func (t *turnTools) complete(ctx context.Context, call provider.ToolCall, a completeArgs) (string, error) {
	t.c.mu.Lock()
	me := t.n.s()
	parent := t.c.nodes[me.ParentID]
	t.c.mu.Unlock()
	const done = "result sent; this agent ends when the turn does"
	if me.AgentState == fsstore.AgentTerminated {
		if again(ctx) {
			return done, nil
		}
		return "", fmt.Errorf("already completed")
	}
	t.c.publishBranch(me)
	text := fmt.Sprintf("%s completed: %s", me.Name, a.Result)
	m := &fsstore.Message{ID: t.newID(ctx), From: me.ID, FromName: me.Name, Kind: fsstore.KindReply, Text: text}
	if parent == nil || parent.terminated() {
		parent = nil // to USER
	}
	var err error
	if parent == nil && !(again(ctx) && t.c.hasMessage(nil, m.ID)) {
		err = t.c.sendUserAs(m, api.NotifyCompleted, nil) // a root's result
	} else if parent != nil {
		err = t.send(ctx, m, parent)
	}
	if err != nil {
		return "", err
	}
	if err := t.c.commit(t.n, fsstore.StateChange{AgentState: fsstore.AgentTerminated,
		SessionState: fsstore.SessionTerminated, Reason: "completed: " + a.Result}); err != nil {
		return "", err
	}
	return done, nil
}

func (t *turnTools) listChildren(ctx context.Context, call provider.ToolCall, a noArgs) (string, error) {
	t.c.mu.Lock()
	var out []api.AgentInfo
	for _, id := range t.n.children {
		if ch := t.c.nodes[id]; ch != nil {
			out = append(out, t.c.infoLocked(ch))
		}
	}
	t.c.mu.Unlock()
	if len(out) == 0 {
		return "no children", nil
	}
	return toolJSON(out)
}

func (t *turnTools) inspectAgent(ctx context.Context, call provider.ToolCall, a inspectAgentArgs) (string, error) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	target := t.n
	if a.Name != t.n.s().Name && a.Name != "self" {
		var err error
		if target, err = t.c.neighbourLocked(t.n, a.Name); err != nil {
			return "", err
		}
	}
	return toolJSON(t.c.infoLocked(target))
}

func toolJSON(v any) (string, error) {
	b, err := jsontext.MarshalIndent(v, "  ") // read by a model and a person: "&&", not "\u0026\u0026"
	return string(b), err
}
