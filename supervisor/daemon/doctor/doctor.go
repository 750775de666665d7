// Package doctor checks, before the first turn fails, what the daemon
// needs from its environment: each provider's CLI on its PATH and its key
// in its environment, bubblewrap, git, the resource-limit mechanism, a
// home where write, fsync and rename work, a systemd user unit that
// hands the daemon PATH and the keys, each host named by live agents'
// ssh executors (executor/ssh.Check), and each cluster named by their
// Kubernetes executors (executor/k8s.Check). `substrat doctor` runs the checks
// in the daemon's process (daemon.doctor) when it runs, so that they see
// its PATH and environment, and in its own process otherwise.
//
// A check never shows a key's value, only the names of the variables.
package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
)

// Input is what the checks need to know beyond the process's own
// environment.
type Input struct {
	Home  string
	Where string // "daemon" or "cli": DoctorCheck.Where
	// Used counts the live (not TERMINATED) agents by provider: a
	// provider in use must work, one unused only should.
	Used map[string]int
	// Sandboxed counts the live agents in a workspace (bwrap runs them).
	Sandboxed int
	// Limits is the limit mechanism in force; nil when no daemon runs.
	Limits *api.LimitsStatus
	// Unit is the systemd user unit's path; "" for the usual place.
	Unit string
	// SSH counts the live agents by the host of their ssh executor
	// (ssh://HOST): each host in use is checked.
	SSH map[string]int
	// K8s counts the live agents by their Kubernetes executor
	// (k8s://CONTEXT/NAMESPACE): each one in use is checked.
	K8s map[string]int
}

// CountExecutor counts a live agent's executor ("" this machine).
func (in *Input) CountExecutor(executor string) {
	if k := fsstore.ExecutorKubernetes(executor); k != "" {
		if in.K8s == nil {
			in.K8s = map[string]int{}
		}
		in.K8s[k]++
		return
	}
	host := fsstore.ExecutorHost(executor)
	if host == "" {
		return
	}
	if in.SSH == nil {
		in.SSH = map[string]int{}
	}
	in.SSH[host]++
}

// Count counts a live agent of provider, in a workspace or not.
func (in *Input) Count(provider, workspace string) {
	if in.Used == nil {
		in.Used = map[string]int{}
	}
	in.Used[provider]++
	if workspace != "" {
		in.Sandboxed++
	}
}

// Provider is what a provider needs from the daemon's environment.
type Provider struct {
	Name    string   // the registry name agents are created with
	Command string   // the CLI on PATH; "" for an API provider
	Keys    []string // any one of these variables will do
	KeyHint string
}

// Providers are the providers doctor knows the needs of.
var Providers = []Provider{
	{"claude", "claude", []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"},
		"export ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN from 'claude setup-token') where the daemon starts: agents run claude with a HOME of their own, so a 'claude login' in yours is not seen"},
	{"codex", "codex", []string{"OPENAI_API_KEY"}, "export OPENAI_API_KEY where the daemon starts (a 'codex login' is not used)"},
	{"gemini", "gemini", []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, "export GEMINI_API_KEY where the daemon starts"},
	{"cursor-agent", "cursor-agent", []string{"CURSOR_API_KEY"}, "export CURSOR_API_KEY where the daemon starts (a 'cursor-agent login' is not used)"},
	{"openai", "", []string{"OPENAI_API_KEY"}, "export OPENAI_API_KEY where the daemon starts, unless the server at OPENAI_BASE_URL needs none"},
}

// probeTimeout bounds one probe (a CLI's --version, a trivial sandbox):
// generous, as a node CLI on a loaded machine is slow to start.
const probeTimeout = 60 * time.Second

// Run runs every check, in a fixed order.
func Run(ctx context.Context, in Input) []api.DoctorCheck {
	out := []api.DoctorCheck{{Check: "PATH", Status: api.DoctorOK, Detail: os.Getenv("PATH")}}
	if out[0].Detail == "" {
		out[0].Status, out[0].Detail, out[0].Hint = api.DoctorFail, "PATH is empty", "start the daemon with a PATH (the systemd unit's EnvironmentFile)"
	}
	for _, p := range Providers {
		out = append(out, checkProvider(ctx, p, in.Used[p.Name])...)
	}
	out = append(out, checkBwrap(ctx, in.Sandboxed), checkGit(ctx), checkLimits(in.Limits), checkHome(in.Home))
	out = append(out, checkUnit(unitPath(in.Unit), in.Used)...)
	for _, host := range slices.Sorted(maps.Keys(in.SSH)) {
		out = append(out, checkSSH(ctx, host, in.SSH[host]))
	}
	for _, k := range slices.Sorted(maps.Keys(in.K8s)) {
		out = append(out, checkK8s(ctx, k, in.K8s[k]))
	}
	for i := range out {
		out[i].Where = in.Where
	}
	return out
}

// checkProvider checks p's CLI and key. A provider no agent uses gets
// warnings at worst; one in use, failures.
func checkProvider(ctx context.Context, p Provider, used int) []api.DoctorCheck {
	bad := api.DoctorWarn
	note := " (no agent uses it)"
	if used > 0 {
		bad, note = api.DoctorFail, fmt.Sprintf(" (%d agent(s) use it)", used)
	}
	var out []api.DoctorCheck
	cliFound := true
	if p.Command != "" {
		c := api.DoctorCheck{Check: p.Name + " CLI"}
		path, err := exec.LookPath(p.Command)
		switch {
		case err != nil:
			cliFound = false
			c.Status, c.Detail = bad, p.Command+" is not on PATH"+note
			c.Hint = "install it, or add its directory to the PATH the daemon starts with"
		default:
			v, err := version(ctx, path)
			if err != nil {
				c.Status, c.Detail, c.Hint = bad, path+" --version failed: "+err.Error()+note, "run '"+path+" --version' by hand"
			} else {
				c.Status, c.Detail = api.DoctorOK, path+" ("+v+")"
			}
		}
		out = append(out, c)
	}
	if !cliFound && used == 0 {
		return out // the key of a provider nobody can use is moot
	}
	c := api.DoctorCheck{Check: p.Name + " key"}
	if set := setVars(p.Keys); len(set) > 0 {
		c.Status, c.Detail = api.DoctorOK, strings.Join(set, ", ")+" set"
	} else if p.Command == "" && used == 0 {
		return out
	} else {
		what := p.Keys[0] + " is not set"
		if len(p.Keys) > 1 {
			what = "none of " + strings.Join(p.Keys, ", ") + " is set"
		}
		c.Status, c.Detail, c.Hint = bad, what+note, p.KeyHint
		if p.Command == "" {
			c.Status = api.DoctorWarn // an API server may need no key
		}
	}
	return append(out, c)
}

// setVars returns the names of those of vars that are set and not empty.
func setVars(vars []string) []string {
	var set []string
	for _, v := range vars {
		if os.Getenv(v) != "" {
			set = append(set, v)
		}
	}
	return set
}

// version runs path --version and returns the first line of its output.
func version(ctx context.Context, path string) (string, error) {
	out, err := probe(ctx, path, "--version")
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if line == "" {
		return "no version printed", nil
	}
	return cut(line, 80), nil
}

// probe runs a command with probeTimeout and returns its output.
func probe(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && out.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, cut(strings.TrimSpace(out.String()), 200))
		}
		return "", err
	}
	return out.String(), nil
}

// checkBwrap runs a trivial sandbox.
func checkBwrap(ctx context.Context, sandboxed int) api.DoctorCheck {
	c := api.DoctorCheck{Check: "bwrap"}
	bad := api.DoctorWarn
	note := " (no agent runs in a workspace yet)"
	if sandboxed > 0 {
		bad, note = api.DoctorFail, fmt.Sprintf(" (%d agent(s) run in a workspace)", sandboxed)
	}
	path, err := launch.LookPath()
	if err != nil {
		c.Status, c.Detail, c.Hint = bad, "bwrap is not on PATH"+note, bwrap.InstallHint
		return c
	}
	dir, err := os.MkdirTemp("", "substrat-doctor-")
	if err != nil {
		c.Status, c.Detail = bad, "no temporary directory for a sandbox: "+err.Error()
		return c
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd, err := launch.Command(ctx, bwrap.Spec{Root: bwrap.Source{Host: dir}}, []string{"/bin/sh", "-c", "echo sandboxed"})
	if err != nil {
		c.Status, c.Detail = bad, "building a sandbox: "+err.Error()+note
		return c
	}
	out, err := cmd.CombinedOutput()
	launch.CloseFiles(cmd)
	if err != nil || strings.TrimSpace(string(out)) != "sandboxed" {
		c.Status, c.Detail = bad, fmt.Sprintf("%s cannot run a sandbox: %v: %s%s", path, err, cut(strings.TrimSpace(string(out)), 200), note)
		c.Hint = "bwrap needs unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1 (and, on Ubuntu 24.04, kernel.apparmor_restrict_unprivileged_userns=0)"
		return c
	}
	c.Status, c.Detail = api.DoctorOK, path+" runs a sandbox"
	return c
}

// checkGit checks git, which git workspaces need.
func checkGit(ctx context.Context) api.DoctorCheck {
	c := api.DoctorCheck{Check: "git"}
	path, err := exec.LookPath("git")
	if err != nil {
		c.Status, c.Detail, c.Hint = api.DoctorWarn, "git is not on PATH: git workspaces (workspace create --git) cannot work", "sudo apt-get install git"
		return c
	}
	v, err := version(ctx, path)
	if err != nil {
		c.Status, c.Detail = api.DoctorWarn, path+" --version failed: "+err.Error()
		return c
	}
	c.Status, c.Detail = api.DoctorOK, path+" ("+v+")"
	return c
}

// cut shortens s to n bytes at most, dropping a rune cut in two, and
// marks the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// checkSSH checks a host that agents' ssh executor names, as
// executor/ssh.Check does: reachable with the system ssh client (through
// $SUBSTRAT_SSH_CONFIG when set), bwrap makes a sandbox there, rsync is
// there. Agents use it, so a problem is a failure.
func checkSSH(ctx context.Context, host string, used int) api.DoctorCheck {
	c := api.DoctorCheck{Check: "ssh " + host}
	note := fmt.Sprintf(" (%d agent(s) name ssh://%s)", used, host)
	e, err := ssh.New(host, ssh.Options{})
	if err != nil {
		c.Status, c.Detail = api.DoctorFail, err.Error()+note
		return c
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := e.Check(ctx); err != nil {
		c.Status, c.Detail = api.DoctorFail, cut(err.Error(), 300)+note
		c.Hint = "'ssh " + host + " true' must work for the daemon's user, without a prompt (an ssh agent or a key, and the host in ~/.ssh/config or $" + ssh.ConfigEnv + "); the host needs bwrap and rsync 3.4 or newer (so does this machine)"
		return c
	}
	c.Status, c.Detail = api.DoctorOK, host+" is reachable and can run agents: bwrap, rsync 3.4 or newer"+note
	return c
}
