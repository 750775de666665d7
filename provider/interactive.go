package provider

import "context"

// Interactive is a provider whose CLI can open an agent's own session for
// a person at a terminal (claude --resume ID), as the daemon's turns see
// it: the same HOME, working directory, model and permissions, inside
// the agent's sandbox (cfg.Sandbox) when it has one.
type Interactive interface {
	// Interactive returns the process that resumes session id, not yet
	// started; args are added to the CLI's command line. It fails if the
	// session cannot be resumed.
	Interactive(ctx context.Context, cfg Config, id string, args []string) (Process, error)
}
