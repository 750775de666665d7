package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// ToolSpec describes an agent tool: its name, what it does, and a JSON
// Schema of its arguments. Providers that speak MCP expose these.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type toolFunc func(t *turnTools, ctx context.Context, call provider.ToolCall) (string, error)

type tool struct {
	spec ToolSpec
	run  toolFunc
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	if required == nil {
		req = []byte("[]")
	}
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `,"additionalProperties":false}`)
}

var tools = map[string]tool{}

func init() {
	for _, t := range []tool{
		{ToolSpec{"spawn_agent", "Create a child agent with a name and instructions. Its session starts after your turn ends; messages you send it now are kept.",
			schema(`"name":{"type":"string"},"instructions":{"type":"string"},"workspace":{"type":"string"},"metadata":{"type":"object","additionalProperties":{"type":"string"}}`, "name", "instructions")}, (*turnTools).spawnAgent},
		{ToolSpec{"send_message", "Send a message to your parent, a child or a sibling (by name), or to USER if you are a root agent.",
			schema(`"recipient":{"type":"string"},"text":{"type":"string"}`, "recipient", "text")}, (*turnTools).sendMessage},
		{ToolSpec{"check_inbox", "Read messages that arrived during this turn, optionally only from one sender or of one kind.",
			schema(`"sender":{"type":"string"},"kind":{"type":"string"}`)}, (*turnTools).checkInbox},
		{ToolSpec{"complete", "Report your result to your parent and end: your agent terminates after this turn.",
			schema(`"result":{"type":"string"}`, "result")}, (*turnTools).complete},
		{ToolSpec{"list_children", "List your children with their states.", schema(``)}, (*turnTools).listChildren},
		{ToolSpec{"inspect_agent", "Show an agent one hop away (parent, child, sibling) or yourself.",
			schema(`"name":{"type":"string"}`, "name")}, (*turnTools).inspectAgent},
	} {
		tools[t.spec.Name] = t
	}
}

// Tools returns the specs of every agent tool, sorted by name.
func Tools() []ToolSpec {
	out := make([]ToolSpec, 0, len(tools))
	for _, t := range tools {
		out = append(out, t.spec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// turnTools runs agent tools for one agent during one turn.
type turnTools struct {
	c      *Core
	n      *node
	inTurn map[string]bool // message ids in the turn's prompt

	mu      sync.Mutex // guards spawned
	spawned []*node
}

// CallTool runs one tool call. Every failure is a result with IsError set.
func (t *turnTools) CallTool(ctx context.Context, call provider.ToolCall) provider.ToolResult {
	tl, ok := tools[call.Name]
	if !ok {
		return provider.ToolResult{IsError: true, Text: fmt.Sprintf("unknown tool %q; the tools are: %s", call.Name, toolNames())}
	}
	text, err := tl.run(t, ctx, call)
	t.c.mu.Lock()
	t.c.publishLocked(WatchEvent{Agent: t.n.id(), Name: t.n.sess.Name, Type: "tool", Time: t.c.clock.Now().UTC(),
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

func (t *turnTools) spawnAgent(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		Name         string            `json:"name"`
		Instructions string            `json:"instructions"`
		Workspace    string            `json:"workspace"`
		Metadata     map[string]string `json:"metadata"`
	}
	if err := args(call, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Instructions) == "" {
		return "", fmt.Errorf("instructions are empty")
	}
	t.c.mu.Lock()
	parent := t.n.sess
	t.c.mu.Unlock()
	child, existed, err := t.c.createAgent(CreateParams{
		Name: a.Name, Provider: parent.Provider, Model: parent.Model, Instructions: a.Instructions,
		Workspace: a.Workspace, Metadata: a.Metadata, SpawnKey: call.ID,
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
		if err := t.c.commit(t.n, fsstore.EvSpawned, fsstore.Spawned{ChildID: child.id(), Name: a.Name, SpawnKey: call.ID}); err != nil {
			return "", err
		}
	}
	// The instructions are the child's first message. Its id is the
	// child's id, so a spawn re-executed after a crash sends it once.
	inbox := child.agent.Files().Inbox()
	fsys := t.c.store.FS()
	_, errNew := fsys.Stat(inbox.Path(fsstore.InboxNew, child.id()))
	_, errCur := fsys.Stat(inbox.Path(fsstore.InboxCur, child.id()))
	if errNew != nil && errCur != nil {
		m := &fsstore.Message{ID: child.id(), From: t.n.id(), FromName: parent.Name, Kind: fsstore.KindMessage, Text: a.Instructions}
		if _, err := t.c.deliver(m, child); err != nil {
			return "", err
		}
	}
	if existed {
		return fmt.Sprintf("agent %s already exists (%s); it was spawned by this same call", a.Name, child.id()), nil
	}
	return fmt.Sprintf("spawned %s (%s); it starts when your turn ends", a.Name, child.id()), nil
}

func (t *turnTools) sendMessage(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		Recipient string `json:"recipient"`
		Text      string `json:"text"`
	}
	if err := args(call, &a); err != nil {
		return "", err
	}
	t.c.mu.Lock()
	from := t.n.sess
	isRoot := t.c.nodes[from.ParentID] == nil
	var to *node
	var err error
	if a.Recipient != fsstore.User {
		to, err = t.c.neighbourLocked(t.n, a.Recipient)
	}
	t.c.mu.Unlock()
	m := &fsstore.Message{From: from.ID, FromName: from.Name, Kind: fsstore.KindMessage, Text: a.Text}
	if a.Recipient == fsstore.User {
		if !isRoot {
			return "", fmt.Errorf("only root agents may message USER; send to your parent instead")
		}
		if strings.TrimSpace(a.Text) == "" {
			return "", fmt.Errorf("message text is empty")
		}
		if err := t.c.sendUser(m); err != nil {
			return "", err
		}
		return fmt.Sprintf("sent to USER (message %s)", m.ID), nil
	}
	if err != nil {
		return "", err
	}
	if _, err := t.c.deliver(m, to); err != nil {
		return "", err
	}
	return fmt.Sprintf("sent to %s (message %s)", to.sess.Name, m.ID), nil
}

func (t *turnTools) checkInbox(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		Sender string `json:"sender"`
		Kind   string `json:"kind"`
	}
	if err := args(call, &a); err != nil {
		return "", err
	}
	msgs, _, err := t.n.agent.Pending()
	if err != nil {
		return "", storeErr(err)
	}
	var picked []*fsstore.Message
	var ids []string
	for _, m := range msgs {
		if t.inTurn[m.ID] || (a.Sender != "" && m.FromName != a.Sender && m.From != a.Sender) || (a.Kind != "" && m.Kind != a.Kind) {
			continue
		}
		picked = append(picked, m)
		ids = append(ids, m.ID)
	}
	if len(picked) == 0 {
		return "no new messages", nil
	}
	if err := t.n.agent.MarkDelivered(ids); err != nil {
		return "", storeErr(err)
	}
	if err := t.c.commit(t.n, fsstore.EvDelivered, fsstore.Delivered{IDs: ids}); err != nil {
		return "", err
	}
	return RenderPrompt(picked), nil
}

func (t *turnTools) complete(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		Result string `json:"result"`
	}
	if err := args(call, &a); err != nil {
		return "", err
	}
	t.c.mu.Lock()
	me := t.n.sess
	parent := t.c.nodes[me.ParentID]
	t.c.mu.Unlock()
	if me.AgentState == fsstore.AgentTerminated {
		return "", fmt.Errorf("already completed")
	}
	text := fmt.Sprintf("%s completed: %s", me.Name, a.Result)
	m := &fsstore.Message{From: me.ID, FromName: me.Name, Kind: fsstore.KindReply, Text: text}
	if parent != nil && !parent.terminated() {
		if _, err := t.c.deliver(m, parent); err != nil {
			return "", err
		}
	} else if err := t.c.sendUser(m); err != nil {
		return "", err
	}
	if err := t.c.commit(t.n, fsstore.EvState, fsstore.StateChange{AgentState: fsstore.AgentTerminated,
		SessionState: fsstore.SessionTerminated, Reason: "completed: " + a.Result}); err != nil {
		return "", err
	}
	return "result sent; this agent ends when the turn does", nil
}

func (t *turnTools) listChildren(ctx context.Context, call provider.ToolCall) (string, error) {
	if err := args(call, &struct{}{}); err != nil {
		return "", err
	}
	t.c.mu.Lock()
	var out []AgentInfo
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

func (t *turnTools) inspectAgent(ctx context.Context, call provider.ToolCall) (string, error) {
	var a struct {
		Name string `json:"name"`
	}
	if err := args(call, &a); err != nil {
		return "", err
	}
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	target := t.n
	if a.Name != t.n.sess.Name && a.Name != "self" {
		var err error
		if target, err = t.c.neighbourLocked(t.n, a.Name); err != nil {
			return "", err
		}
	}
	return toolJSON(t.c.infoLocked(target))
}

func toolJSON(v any) (string, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return string(b), err
}
