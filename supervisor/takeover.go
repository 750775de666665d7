package supervisor

import (
	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/supervisor/api"
)

// shellHold is the heldBy of an agent a person has taken over.
const shellHold = "USER:agent shell"

// TakeOverReason is the gate reason of an agent taken over.
const TakeOverReason = "while the user works in its provider session (agent shell)"

// Takeover is an agent held for a person who works in its provider's own
// session: what its provider needs to open that session.
type Takeover struct {
	Session  *fsstore.Session
	Provider provider.Interactive
	Config   provider.Config
	// Gated says the takeover gated the agent (EndTakeOver ungates it).
	Gated bool
}

// TakeOver holds agent ref for a person who opens its provider's own
// session (agent shell). It is refused while a turn runs (BUSY), and for
// a provider that cannot open its session interactively. The agent is
// gated by a durable event (unless it already was), so that no turn
// starts while the person works, even after a crash of the daemon, and
// held in memory against a turn already on its way; EndTakeOver undoes
// both.
func (c *Core) TakeOver(ref string) (*Takeover, error) {
	c.mu.Lock()
	n, err := c.resolveLocked(ref)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	sess := n.s()
	switch {
	case n.terminated():
		err = api.Errorf(api.CodeConflict, "%s is terminated", sess.Name)
	case n.busy || sess.AgentState == fsstore.AgentBusy:
		err = api.Errorf(api.CodeConflict, "%s is BUSY: a turn runs; open its session once it is IDLE ('substrat daemon log %s -f' shows when)", sess.Name, sess.Name)
	case n.heldBy == shellHold:
		err = api.Errorf(api.CodeConflict, "%s is already taken over (agent shell)", sess.Name)
	case n.heldBy != "":
		err = api.Errorf(api.CodeConflict, "%s was just spawned and its parent's turn runs; try again when it ends", sess.Name)
	case sess.Gated && sess.Permits > 0:
		err = api.Errorf(api.CodeConflict, "%s is permitted a turn that has not run yet; try again when it has", sess.Name)
	case sess.ProviderSessionID == "":
		err = api.Errorf(api.CodeConflict, "%s has no %s session yet: send it a message first", sess.Name, sess.Provider)
	}
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	p, perr := c.providers.Get(sess.Provider)
	ip, ok := p.(provider.Interactive)
	if perr != nil || !ok {
		c.mu.Unlock()
		return nil, api.Errorf(api.CodeInvalidParams, "provider %s cannot open an agent's session for a person (claude, codex and gemini can)", sess.Provider)
	}
	n.heldBy = shellHold
	c.mu.Unlock()
	t := &Takeover{Session: sess, Provider: ip}
	if !sess.Gated {
		if err := c.gateOp(n, "gate", TakeOverReason); err != nil {
			c.EndTakeOver(sess.ID, false)
			return nil, err
		}
		t.Gated = true
	}
	workDir, err := c.workDirFor(sess)
	if err != nil {
		c.EndTakeOver(sess.ID, t.Gated)
		return nil, err
	}
	t.Config = c.providerConfig(sess, workDir)
	return t, nil
}

// EndTakeOver lets agent id run again after a takeover: it ungates it if
// the takeover gated it (ungate), and releases the hold. It is safe to
// call more than once, and in a daemon that did not make the takeover (it
// restarted meanwhile: the gate is on disk). A daemon that is stopping
// leaves the gate.
func (c *Core) EndTakeOver(id string, ungate bool) error {
	c.mu.Lock()
	n, err := c.resolveLocked(id)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if n.heldBy == shellHold {
		n.heldBy = ""
	}
	// A daemon that stops keeps the gate: the person may still be in the
	// session, and their agent.shell_end to the next daemon ungates it.
	gated := n.s().Gated && !c.down
	c.mu.Unlock()
	if ungate && gated {
		if err := c.gateOp(n, "ungate", "after agent shell"); err != nil {
			return err
		}
	}
	c.signal()
	return nil
}
