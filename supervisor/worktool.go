package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// The work tools: what an agent whose provider brings no tools of its own
// (openai, script) uses to read, write and run things where it works. The
// daemon runs them (package worktools), inside the agent's sandbox or
// directory, and records each call and its result as a "work" event.
var workTools = map[string]tool{}

func init() {
	for _, t := range []tool{
		newTool("shell", "Run a command with /bin/sh where you work (your workspace in its sandbox, or your directory). "+
			"The working directory and exported variables carry over between calls. Output is capped; a command past its timeout is killed.", (*turnTools).shellTool),
		newTool("read_file", "Read a text file (a path as you see it; relative to where you work), optionally lines from..to (1-based).", (*turnTools).readFileTool),
		newTool("write_file", "Create or replace a file with the content given (missing directories are made).", (*turnTools).writeFileTool),
		newTool("edit_file", "Replace the one occurrence of old_string in a file with new_string (it must match exactly, once).", (*turnTools).editFileTool),
	} {
		workTools[t.spec.Name] = t
	}
}

// workToolsFor returns the work tools agent n may call, sorted by name,
// and why it may not call the others. None when its provider has tools of
// its own. The mode decides (bypassPermissions: all; acceptEdits: all but
// shell; the others: read_file), then allowed_tools adds and
// disallowed_tools removes names.
func (c *Core) workToolsFor(s *fsstore.Session) (allowed []string, why string) {
	p, err := c.providers.Get(s.Provider)
	if err != nil {
		return nil, err.Error()
	}
	if provider.HasOwnTools(p) {
		return nil, "your provider's model has tools of its own; use those"
	}
	perm := effectivePermissions(s)
	set := map[string]bool{"read_file": true}
	switch perm.Mode {
	case fsstore.ModeFull:
		set["shell"], set["write_file"], set["edit_file"] = true, true, true
	case fsstore.ModeAcceptEdits:
		set["write_file"], set["edit_file"] = true, true
	}
	for _, name := range perm.AllowedTools {
		if _, ok := workTools[name]; ok {
			set[name] = true
		}
	}
	for _, name := range perm.DisallowedTools {
		delete(set, name)
	}
	for name := range set {
		allowed = append(allowed, name)
	}
	sort.Strings(allowed)
	return allowed, fmt.Sprintf("your permission mode is %s", perm.Mode)
}

// toolList is what agent n may call this turn: the agent tools and its
// work tools.
func (c *Core) toolList(s *fsstore.Session) []provider.ToolInfo {
	var out []provider.ToolInfo
	for _, t := range Tools() {
		out = append(out, provider.ToolInfo{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	allowed, _ := c.workToolsFor(s)
	for _, name := range allowed {
		t := workTools[name].spec
		out = append(out, provider.ToolInfo{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return out
}

// place returns where agent s works, for the work tools.
func (c *Core) place(s *fsstore.Session) (Workplace, error) {
	l := c.store.Layout()
	pl := Workplace{ShellState: bwrap.Source{Host: l.ShellState(s.ID), Anchor: l.Home}}
	spec, _, ok, err := c.agentSpec(s)
	if err != nil {
		return pl, err
	}
	if s.Executor != "" {
		// Its shell runs where its provider's processes do (a host, a
		// pod), in its place there (copied there and back around it);
		// the file tools here, on the workspace's root (see the daemon's
		// work tools for a root whose copy is in use).
		pl.Sandbox = &spec
		pl.RemoteSandbox, pl.RemoteStart = c.host.Sandbox(s), c.host.Start(s, c.limitsOf(s))
		switch {
		case !ok:
			return Workplace{}, fmt.Errorf("%s runs on %s, which needs a workspace (substrat agent create --workspace)", s.Name, s.Executor)
		case pl.RemoteSandbox == nil || pl.RemoteStart == nil:
			return Workplace{}, fmt.Errorf("%s runs on %s, and nothing here runs processes there", s.Name, s.Executor)
		}
		return pl, nil
	}
	pl.Limit = c.host.Limit(s.ID, c.limitsOf(s))
	if ok {
		pl.Sandbox = &spec
		return pl, nil
	}
	if pl.Dir, err = c.workDirFor(s); err != nil {
		return pl, err
	}
	home, _ := os.UserHomeDir()
	pl.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TERM=dumb", "LANG=" + os.Getenv("LANG"), "USER=" + os.Getenv("USER")}
	return pl, nil
}

// runWork runs a work tool for t's agent if it may, and records the call
// and its result as a work event.
func (t *turnTools) runWork(name string, call provider.ToolCall, run func(w WorkTools, pl Workplace) (string, error)) (string, error) {
	t.c.mu.Lock()
	s := t.n.s()
	t.c.mu.Unlock()
	allowed, why := t.c.workToolsFor(s)
	if !contains(allowed, name) {
		return "", fmt.Errorf("not allowed: %s (the user can change it: substrat agent permissions)", why)
	}
	work := t.c.host.Work()
	if work == nil {
		return "", fmt.Errorf("the work tools need the daemon (no host runs them here)")
	}
	pl, err := t.c.place(s)
	var text string
	if err == nil {
		text, err = run(work, pl)
	}
	w := fsstore.Work{Tool: name, Args: cut(string(call.Args), 2<<10), Result: cut(text, 4<<10)}
	if err != nil {
		w.Result, w.IsError = cut(strings.TrimPrefix(err.Error(), "worktools: "), 4<<10), true
	}
	if cerr := t.c.commit(t.n, w); cerr != nil {
		return "", cerr
	}
	if err != nil {
		return "", errors.New(strings.TrimPrefix(err.Error(), "worktools: "))
	}
	return text, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// cut returns s cut to n bytes (at a rune boundary), saying how much was
// left out.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	k := n
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	return s[:k] + fmt.Sprintf("... [%d bytes more]", len(s)-k)
}

func (t *turnTools) shellTool(ctx context.Context, call provider.ToolCall, a shellArgs) (string, error) {
	return t.runWork("shell", call, func(w WorkTools, pl Workplace) (string, error) {
		return w.Shell(ctx, pl, a.Command, time.Duration(a.TimeoutSeconds*float64(time.Second)))
	})
}

func (t *turnTools) readFileTool(ctx context.Context, call provider.ToolCall, a readFileArgs) (string, error) {
	return t.runWork("read_file", call, func(w WorkTools, pl Workplace) (string, error) { return w.ReadFile(pl, a.Path, a.From, a.To) })
}

func (t *turnTools) writeFileTool(ctx context.Context, call provider.ToolCall, a writeFileArgs) (string, error) {
	return t.runWork("write_file", call, func(w WorkTools, pl Workplace) (string, error) { return w.WriteFile(pl, a.Path, a.Content) })
}

func (t *turnTools) editFileTool(ctx context.Context, call provider.ToolCall, a editFileArgs) (string, error) {
	return t.runWork("edit_file", call, func(w WorkTools, pl Workplace) (string, error) {
		return w.EditFile(pl, a.Path, a.OldString, a.NewString)
	})
}

// workToolNames lists the work tools, for messages.
func workToolNames() string {
	var names []string
	for name := range workTools {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// shellArgs are the arguments of shell.
type shellArgs struct {
	Command        string  `json:"command"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"default 120, at most 600"`
}

// readFileArgs are the arguments of read_file.
type readFileArgs struct {
	Path string `json:"path"`
	From int    `json:"from,omitempty"`
	To   int    `json:"to,omitempty"`
}

// writeFileArgs are the arguments of write_file.
type writeFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// editFileArgs are the arguments of edit_file.
type editFileArgs struct {
	Path      string `json:"path"`
	OldString string `json:"old_string"`
	NewString string `json:"new_string"`
}
