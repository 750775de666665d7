package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"

	"github.com/alecthomas/kong"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor"
)

// AgentCmd groups the agent commands.
type AgentCmd struct {
	Create       AgentCreateCmd       `cmd:"" help:"Create a root agent, or a child with --parent."`
	List         AgentListCmd         `cmd:"" help:"Show the agent tree."`
	Inspect      AgentInspectCmd      `cmd:"" help:"Show one agent in detail."`
	Send         AgentSendCmd         `cmd:"" help:"Send a message from USER and show the turn it starts."`
	Attach       AgentAttachCmd       `cmd:"" help:"Follow an agent's activity live (to talk to it, agent chat)."`
	Chat         AgentChatCmd         `cmd:"" help:"Talk with an agent: each line typed (or piped) is a message from USER, and its turn streams back; Ctrl-D ends."`
	Shell        AgentShellCmd        `cmd:"" help:"Open an IDLE agent's own CLI session (claude --resume, codex resume, gemini --resume) in its sandbox, at this terminal; no turn starts meanwhile."`
	Terminate    AgentTerminateCmd    `cmd:"" help:"End an agent (and with --recursive its subtree)."`
	Archive      AgentArchiveCmd      `cmd:"" help:"End an agent's subtree and move its directories to archive/."`
	Restore      AgentRestoreCmd      `cmd:"" help:"Bring an archived agent and its archived subtree back into the live tree (undoes archive)."`
	Budget       AgentBudgetCmd       `cmd:"" help:"Set the token or cost budget of an agent's subtree (0 removes it)."`
	Permissions  AgentPermissionsCmd  `cmd:"" help:"Show or change what an agent may do: its permission mode and tool rules."`
	Limits       AgentLimitsCmd       `cmd:"" help:"Show or change an agent's resource limits: memory, processes, CPU weight."`
	Instructions AgentInstructionsCmd `cmd:"" help:"Show or change an agent's instructions (its next turn carries them, with any provider)."`
	Wake         AgentWakeCmd         `cmd:"" help:"End an agent's park (a provider's usage or rate limit) now: its next turn tries again."`
	Gate         AgentGateCmd         `cmd:"" help:"Stop an agent from starting turns until permitted or ungated."`
	Ungate       AgentUngateCmd       `cmd:"" help:"Let a gated agent run freely again."`
	Permit       AgentPermitCmd       `cmd:"" help:"Let a gated agent take one turn."`
}

// AgentCreateCmd creates an agent.
type AgentCreateCmd struct {
	Name         string   `arg:"" help:"The agent's name: no '/', no '..', no spaces, at most 64 bytes."`
	Provider     string   `help:"Provider: script, claude, codex, gemini, cursor-agent, openai (default: config.json's default_provider, else script)." predictor:"provider"`
	Model        string   `help:"Model; for the script provider, a path to a model script."`
	Instructions string   `help:"The agent's instructions (system prompt)."`
	Workspace    string   `help:"Workspace to run in: the agent works in its bwrap sandbox." predictor:"workspace"`
	Dir          string   `help:"Directory to work in when there is no workspace (default: the current directory); no sandbox." type:"path" predictor:"dir"`
	Mode         string   `name:"permission-mode" help:"Permission mode: default, acceptEdits, plan, dontAsk or bypassPermissions (default: bypassPermissions in a workspace's sandbox, default outside one)." predictor:"mode"`
	Allowed      []string `name:"allowed-tools" help:"Tool rules to allow, e.g. 'Bash(git *)' (repeat, or comma-separated)."`
	Disallowed   []string `name:"disallowed-tools" help:"Tool rules to deny (repeat, or comma-separated)."`
	Approver     string   `help:"Who answers what the permission mode would prompt for: parent (default; USER for a root), user, or deny." enum:"parent,user,deny," default:""`
	ApprovalWait string   `name:"approval-timeout" help:"How long an approval request waits before it is denied (default 10m)." placeholder:"DURATION"`
	Parent       string   `help:"Parent agent ref; without it the agent is a root." predictor:"agent"`
	Pool         string   `help:"Slot pool of the agent's session (default: the default pool)."`
	Executor     string   `help:"Where its processes are to run: ssh://HOST (an ssh destination: its provider's processes run there, in a copy of its workspace, which it needs) or k8s://CONTEXT/NAMESPACE (a context of the kubeconfig: they run in a pod there, with a copy of its workspace, which it needs); default: its parent's, else this machine." placeholder:"ssh://HOST|k8s://CONTEXT/NAMESPACE"`
	BudgetTokens int64    `help:"Token budget for the agent's subtree."`
	BudgetCost   float64  `help:"Cost budget (USD) for the agent's subtree."`
	Memory       string   `help:"Memory limit of its processes together: 512M, 2G, or none (default: its parent's, else config.json's)." placeholder:"SIZE"`
	Pids         string   `help:"How many processes it may run at once, or none (default: its parent's, else config.json's)." placeholder:"N"`
	CPUWeight    string   `name:"cpu-weight" help:"Its share of the CPU, 1 to 10000; 100 is an ordinary process's." placeholder:"W"`
}

// Run creates the agent.
func (c *AgentCreateCmd) Run(g *Globals) error {
	var info api.AgentInfo
	p := api.CreateParams{Name: c.Name, Provider: c.Provider, Model: c.Model,
		Instructions: c.Instructions, Workspace: c.Workspace, Parent: c.Parent, Pool: c.Pool, Executor: c.Executor}
	if c.Workspace == "" && c.Parent == "" {
		dir := c.Dir
		if dir == "" {
			dir = "."
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		p.WorkDir = abs
	} else if c.Dir != "" {
		abs, err := filepath.Abs(c.Dir)
		if err != nil {
			return err
		}
		p.WorkDir = abs
	}
	if c.Mode != "" || len(c.Allowed) > 0 || len(c.Disallowed) > 0 || c.Approver != "" || c.ApprovalWait != "" {
		p.Permissions = &fsstore.Permissions{Mode: c.Mode, AllowedTools: splitRules(c.Allowed), DisallowedTools: splitRules(c.Disallowed),
			Approver: c.Approver, ApprovalTimeout: c.ApprovalWait}
	}
	limits, err := createLimits(c.Memory, c.Pids, c.CPUWeight)
	if err != nil {
		return err
	}
	p.Limits = limits
	if c.BudgetTokens != 0 || c.BudgetCost != 0 {
		p.Budget = &fsstore.Budget{Tokens: c.BudgetTokens, CostUSD: c.BudgetCost}
	}
	if c.Model != "" && !filepath.IsAbs(c.Model) && (c.Provider == "script" || (c.Provider == "" && isFile(c.Model))) {
		// The daemon runs elsewhere: a model script path must be absolute.
		abs, err := filepath.Abs(c.Model)
		if err != nil {
			return err
		}
		p.Model = abs
	}
	info, err = call(g, api.AgentCreate, p)
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(info)
	}
	fmt.Printf("created %s (%s)\n  dir: %s\n", info.Path, info.ID, info.Dir)
	res, err := call(g, api.AgentInspect, api.RefParams{Ref: info.ID})
	if err == nil && res.Session != nil {
		fmt.Printf("  permissions: %s\n", supervisor.PermissionSummary(res.Session))
		if l := res.Session.Limits; l != nil {
			fmt.Printf("  limits: %s\n", l)
		}
		if e := res.Session.Executor; e != "" {
			fmt.Printf("  executor: %s\n", executorShown(e))
			if res.Session.Workspace == "" {
				fmt.Printf("  note: %s has no workspace, so its turns there fail with a provider that runs a process (the CLIs, a --model program): create it with --workspace\n", info.Path)
			}
		}
	}
	return nil
}

// splitRules splits comma-separated tool rules ("Bash(git *),Edit"),
// keeping commas inside parentheses.
func splitRules(in []string) []string {
	var out []string
	for _, s := range in {
		depth, start := 0, 0
		for i, r := range s {
			switch r {
			case '(':
				depth++
			case ')':
				depth--
			case ',':
				if depth == 0 {
					if t := strings.TrimSpace(s[start:i]); t != "" {
						out = append(out, t)
					}
					start = i + 1
				}
			}
		}
		if t := strings.TrimSpace(s[start:]); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// shownState is the state a person sees: PARKED (with its resume time)
// over the recorded state.
func shownState(a api.AgentInfo) string {
	if a.Parked != nil {
		return "PARKED until " + a.Parked.Until.Local().Format("15:04:05")
	}
	return string(a.AgentState)
}

// AgentWakeCmd ends an agent's park.
type AgentWakeCmd struct {
	Ref string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
}

// Run wakes the agent and says so.
func (c *AgentWakeCmd) Run(g *Globals) error {
	info, err := call(g, api.AgentWake, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(info)
	}
	fmt.Printf("woke %s: its next turn tries %s again\n", info.Path, info.Provider)
	return nil
}

// AgentInstructionsCmd shows or replaces an agent's instructions.
type AgentInstructionsCmd struct {
	Ref  string  `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Set  *string `help:"Replace the instructions with TEXT ('' clears them)." placeholder:"TEXT"`
	File string  `help:"Replace the instructions with the contents of FILE ('-': standard input)." type:"path" placeholder:"FILE" xor:"set"`
}

// Run sets the instructions if asked, then prints them as they are.
func (c *AgentInstructionsCmd) Run(g *Globals) error {
	text, set := "", false
	switch {
	case c.Set != nil:
		text, set = *c.Set, true
	case c.File == "-":
		data, err := io.ReadAll(io.LimitReader(os.Stdin, maxInstructions+1))
		if err != nil {
			return err
		}
		text, set = string(data), true
	case c.File != "":
		data, err := readCapped(c.File, maxInstructions)
		if err != nil {
			return err
		}
		text, set = string(data), true
	}
	if set {
		if len(text) > maxInstructions {
			return fail(fmt.Sprintf("the instructions are longer than %d bytes", maxInstructions), "")
		}
		if _, err := call(g, api.AgentInstructions, api.InstructionsParams{Ref: c.Ref, Instructions: text}); err != nil {
			return err
		}
	}
	res, err := call(g, api.AgentInspect, api.RefParams{Ref: c.Ref})
	if err != nil {
		if notFound(err) || notRunning(err) {
			// Not live: an archived agent, read from archive/.
			if found, aerr := inspectArchived(g, c.Ref); found {
				return aerr
			}
		}
		return err
	}
	if g.JSON {
		return printJSON(map[string]string{"agent": res.Agent.Path, "instructions": res.Session.Instructions})
	}
	fmt.Print(res.Session.Instructions)
	if res.Session.Instructions != "" && !strings.HasSuffix(res.Session.Instructions, "\n") {
		fmt.Println()
	}
	return nil
}

// maxInstructions bounds instructions read from a file.
const maxInstructions = 1 << 20

// readCapped reads a regular file of at most max bytes.
func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(data)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, err
}

// AgentPermissionsCmd changes what an agent may do.
type AgentPermissionsCmd struct {
	Ref        string   `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Mode       string   `name:"permission-mode" aliases:"mode" help:"Permission mode: default, acceptEdits, plan, dontAsk or bypassPermissions." predictor:"mode"`
	Allowed    []string `name:"allowed-tools" help:"Replace the allowed tool rules (comma-separated; '' clears)."`
	Disallowed []string `name:"disallowed-tools" help:"Replace the denied tool rules (comma-separated; '' clears)."`
	Approver   string   `help:"Who answers what the mode would prompt for: parent, user or deny." enum:"parent,user,deny," default:""`
	Wait       string   `name:"approval-timeout" help:"How long an approval request waits before it is denied." placeholder:"DURATION"`
}

// Run sets the permissions and prints the result; with no flag it prints
// the current ones.
func (c *AgentPermissionsCmd) Run(g *Globals, k *kong.Context) error {
	p := api.PermissionsParams{Ref: c.Ref, Mode: c.Mode, Approver: c.Approver, ApprovalTimeout: c.Wait}
	if flagSet(k, "allowed-tools") {
		p.AllowedTools = append([]string{}, splitRules(c.Allowed)...)
	}
	if flagSet(k, "disallowed-tools") {
		p.DisallowedTools = append([]string{}, splitRules(c.Disallowed)...)
	}
	if c.Mode != "" || p.AllowedTools != nil || p.DisallowedTools != nil || c.Approver != "" || c.Wait != "" {
		if _, err := call(g, api.AgentPermissions, p); err != nil {
			return err
		}
	}
	res, err := call(g, api.AgentInspect, api.RefParams{Ref: c.Ref})
	if err != nil {
		if notFound(err) {
			// Not live: an archived agent, read from archive/.
			if found, aerr := inspectArchived(g, c.Ref); found {
				return aerr
			}
		}
		return err
	}
	if g.JSON {
		return printJSON(res.Session.Permissions)
	}
	fmt.Printf("%s: %s\n", res.Agent.Path, supervisor.PermissionSummary(res.Session))
	return nil
}

// flagSet reports whether the flag was given on the command line.
func flagSet(k *kong.Context, name string) bool {
	for _, f := range k.Flags() {
		if f.Name == name {
			return f.Set
		}
	}
	return false
}

// AgentListCmd lists agents.
type AgentListCmd struct {
	listOptions      // list.go
	Archived    bool `help:"List the agents in archive/ instead (read from the files; no daemon needed)."`
}

// Run draws the tree.
func (c *AgentListCmd) Run(g *Globals) error {
	if c.Archived {
		return listArchived(g)
	}
	page, err := c.query(g) // list.go
	if err != nil {
		return err
	}
	list := listed(page.Agents)
	defer c.more(page)
	if g.JSON {
		return printJSON(list)
	}
	st, _ := call(g, api.DaemonStatus, struct{}{})
	if len(list) == 0 && len(st.KeptOut) == 0 {
		fmt.Println(c.none(st.Agents))
		return nil
	}
	if len(list) > 0 {
		fmt.Print(c.table(list))
	}
	printKeptOut(os.Stdout, st.KeptOut)
	return nil
}

// AgentSendCmd sends a message.
type AgentSendCmd struct {
	Ref     string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Message string `arg:"" help:"The message text; - reads it from standard input."`
	NoWait  bool   `help:"Return once the message is stored, without waiting for the turn."`
}

// Run sends the message and streams the turn that takes it.
func (c *AgentSendCmd) Run(g *Globals) error {
	if c.Message == "-" {
		data, err := io.ReadAll(io.LimitReader(os.Stdin, fsstore.MaxMessageSize+1))
		if err != nil {
			return err
		}
		c.Message = string(data)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cl, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	streamed, stored := false, ""
	res, err := rpc.StreamRaw(ctx, cl, api.AgentSend, api.SendMessageParams{Ref: c.Ref, Text: c.Message, Wait: !c.NoWait},
		func(raw json.RawMessage) error {
			if g.JSON {
				printJSONLine(raw)
				return nil
			}
			var e struct {
				Type      api.WatchType  `json:"type"`
				Data      provider.Chunk `json:"data"`
				Count     int            `json:"count"`
				MessageID string         `json:"message_id"`
			}
			if json.Unmarshal(raw, &e) == nil {
				switch e.Type {
				case api.WatchSent:
					stored = e.MessageID
				case api.WatchOutput:
					if e.Data.Kind == provider.ChunkDenied {
						fmt.Printf("[denied] %s: %s\n", termtext.Lines(e.Data.Tool), termtext.Lines(strings.TrimRight(e.Data.Text, "\n")))
					} else {
						fmt.Printf("[%s] %s\n", termtext.Lines(string(e.Data.Kind)), termtext.Lines(strings.TrimRight(e.Data.Text, "\n")))
					}
					streamed = true
				case api.WatchDropped:
					fmt.Printf("[... %d events dropped: this reader fell behind the daemon ...]\n", e.Count)
				}
			}
			return nil
		})
	if err != nil && ctx.Err() != nil && stored != "" {
		// Interrupted: the message is stored, and the daemon runs its turn.
		return &exitError{code: 130, msg: fmt.Sprintf("interrupted; message %s is stored, and its turn goes on in the daemon", stored),
			hint: "follow it with 'substrat agent attach " + c.Ref + "'"}
	}
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(res)
	}
	if res.Held != "" {
		fmt.Printf("message %s stored; no turn takes it now: %s\n", res.MessageID, termtext.Lines(res.Held))
		return nil
	}
	if res.Failed != "" {
		return fail("message "+res.MessageID+" was stored, but the turn failed: "+termtext.Lines(res.Failed), "the message stays in the inbox; send another message to retry")
	}
	if c.NoWait {
		fmt.Printf("message %s stored; it is delivered at %s's next turn\n", res.MessageID, c.Ref)
		return nil
	}
	if (!streamed || res.Dropped > 0) && res.Text != "" {
		fmt.Println(termtext.Lines(strings.TrimRight(res.Text, "\n")))
	}
	fmt.Printf("message %s delivered\n", res.MessageID)
	if res.Dropped > 0 {
		return fail(fmt.Sprintf("the turn's output was cut: %d events dropped while this reader fell behind (the reply above is whole)", res.Dropped),
			"see the whole turn with 'substrat daemon log "+c.Ref+"'")
	}
	return nil
}

// AgentAttachCmd follows one agent.
type AgentAttachCmd struct {
	Ref   string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Until string `help:"Exit after the first event of this type (e.g. turn_done)." placeholder:"TYPE"`
}

// Run streams the agent's events until interrupted.
func (c *AgentAttachCmd) Run(g *Globals) error {
	chatHint(c.Ref)
	return follow(g, api.AgentAttach, api.RefParams{Ref: c.Ref}, c.Until)
}

// AgentTerminateCmd ends agents.
type AgentTerminateCmd struct {
	Ref       string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Recursive bool   `short:"r" help:"Terminate the whole subtree, leaves first."`
	confirmFlag
}

// Run terminates.
func (c *AgentTerminateCmd) Run(g *Globals) error {
	if err := c.confirm(g, "agent terminate", terminateWhat(c.Ref, c.Recursive)); err != nil {
		return err
	}
	out, err := call(g, api.AgentTerminate, api.TerminateParams{Ref: c.Ref, Recursive: c.Recursive})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	if len(out) == 0 {
		fmt.Println("nothing to do: already terminated")
	}
	for _, a := range out {
		fmt.Printf("terminated %s (%s)\n", a.Path, a.ID)
	}
	return nil
}

// AgentArchiveCmd archives a subtree.
type AgentArchiveCmd struct {
	Ref string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	confirmFlag
}

// Run archives.
func (c *AgentArchiveCmd) Run(g *Globals) error {
	if err := c.confirm(g, "agent archive", "ends "+c.Ref+" and its whole subtree and moves them to archive/"); err != nil {
		return err
	}
	out, err := call(g, api.AgentArchive, api.RefParams{Ref: c.Ref})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	for _, a := range out {
		fmt.Printf("archived %s -> %s\n", a.Path, a.Dir)
	}
	return nil
}

// AgentBudgetCmd sets a budget.
type AgentBudgetCmd struct {
	Ref    string  `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Tokens int64   `help:"Token budget (input plus output) for the subtree; 0 for none."`
	Cost   float64 `help:"Cost budget in USD for the subtree; 0 for none."`
}

// Run sets the budget.
func (c *AgentBudgetCmd) Run(g *Globals) error {
	a, err := call(g, api.AgentBudget, api.BudgetParams{Ref: c.Ref, Tokens: c.Tokens, CostUSD: c.Cost})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(a)
	}
	fmt.Printf("budget of %s set; its subtree has used %d tokens, $%.4f\n", a.Path, a.Subtree.InputTokens+a.Subtree.OutputTokens, a.Subtree.CostUSD)
	return nil
}

type gateArgs struct {
	Ref       string `arg:"" predictor:"agent" help:"The agent: a name, a path or an id."`
	Recursive bool   `short:"r" help:"Apply to the whole subtree."`
}

func (c *gateArgs) run(g *Globals, op, verb string) error {
	out, err := call(g, api.AgentGate, api.GateParams{Ref: c.Ref, Op: op, Recursive: c.Recursive})
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(out)
	}
	for _, a := range out {
		fmt.Printf("%s %s\n", verb, a.Path)
	}
	return nil
}

// AgentGateCmd gates agents.
type AgentGateCmd struct{ gateArgs }

// Run gates.
func (c *AgentGateCmd) Run(g *Globals) error { return c.run(g, "gate", "gated") }

// AgentUngateCmd ungates agents.
type AgentUngateCmd struct{ gateArgs }

// Run ungates.
func (c *AgentUngateCmd) Run(g *Globals) error { return c.run(g, "ungate", "ungated") }

// AgentPermitCmd permits one turn.
type AgentPermitCmd struct{ gateArgs }

// Run permits.
func (c *AgentPermitCmd) Run(g *Globals) error { return c.run(g, "permit", "one turn permitted for") }

// isFile reports whether path names a regular file (a model script).
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// executorShown is an agent's executor as inspect shows it.
func executorShown(e string) string {
	if e == "" {
		return "local"
	}
	return e + " (its provider's processes run there)"
}
