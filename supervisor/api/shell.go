package api

import "github.com/substrat/substrat/bwrap"

// ShellParams name the agent whose provider session a person opens, and
// arguments added to the provider CLI's command line.
type ShellParams struct {
	Ref  string   `json:"ref"`
	Args []string `json:"args,omitempty"`
}

// ShellCommand is what the CLI runs, attached to the person's terminal:
// Argv inside the agent's sandbox (Sandbox, the spec the daemon's turns
// use; the CLI opens its binds itself, as the same user), or, for an
// agent without a workspace, Argv with Env in Dir on the host.
type ShellCommand struct {
	Agent     string      `json:"agent"`
	Provider  string      `json:"provider"`
	SessionID string      `json:"session_id"`
	Argv      []string    `json:"argv"`
	Env       []string    `json:"env,omitempty"`
	Dir       string      `json:"dir,omitempty"`
	Sandbox   *bwrap.Spec `json:"sandbox,omitempty"`
	// Executor is where the agent's turns run (ssh://HOST...), when not
	// here: the shell still runs here, on this machine's copy of its
	// files, which goes there with its next turn.
	Executor string `json:"executor,omitempty"`
	// Gated says the daemon gated the agent for the takeover: the CLI
	// asks for the ungate when it ends (agent.shell_end).
	Gated bool `json:"gated"`
}

// ShellEndParams end a takeover: Ungate if the daemon gated the agent.
type ShellEndParams struct {
	Ref    string `json:"ref"`
	Ungate bool   `json:"ungate"`
}

// ShellEndResult is agent.shell_end's.
type ShellEndResult struct {
	Ended bool `json:"ended"`
}
