package supervisor

import (
	"fmt"

	"github.com/substrat/substrat/fsstore"
)

var agentTransitions = map[fsstore.AgentState][]fsstore.AgentState{
	fsstore.AgentIdle:    {fsstore.AgentBusy, fsstore.AgentTerminated},
	fsstore.AgentBusy:    {fsstore.AgentIdle, fsstore.AgentWaiting, fsstore.AgentTerminated},
	fsstore.AgentWaiting: {fsstore.AgentBusy, fsstore.AgentIdle, fsstore.AgentTerminated},
}

var sessionTransitions = map[fsstore.SessionState][]fsstore.SessionState{
	fsstore.SessionCreated:   {fsstore.SessionActive, fsstore.SessionTerminated},
	fsstore.SessionActive:    {fsstore.SessionSuspended, fsstore.SessionCreated, fsstore.SessionTerminated},
	fsstore.SessionSuspended: {fsstore.SessionActive, fsstore.SessionCreated, fsstore.SessionTerminated},
}

// checkTransition reports an error unless both changes (either may be
// empty for "unchanged") are allowed from s.
func checkTransition(s *fsstore.Session, ch fsstore.StateChange) error {
	if ch.AgentState != "" && ch.AgentState != s.AgentState && !allowed(agentTransitions[s.AgentState], ch.AgentState) {
		return fmt.Errorf("invalid agent transition %s -> %s for %s", s.AgentState, ch.AgentState, s.Name)
	}
	if ch.SessionState != "" && ch.SessionState != s.SessionState && !allowed(sessionTransitions[s.SessionState], ch.SessionState) {
		return fmt.Errorf("invalid session transition %s -> %s for %s", s.SessionState, ch.SessionState, s.Name)
	}
	return nil
}

func allowed[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
