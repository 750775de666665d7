package api

import (
	"github.com/substrat/substrat/fsstore"
)

// The states agent list shows, in the order of what needs a person
// first: an agent is in the first that holds (StateOf).
const (
	StateTerminated = "TERMINATED"  // ended; archive it to remove it
	StateOverBudget = "OVER-BUDGET" // its subtree, or an ancestor's, spent past a budget
	StateGated      = "GATED"       // no turn starts until permitted or ungated
	StateParked     = "PARKED"      // waits for its provider's usage or rate limit to reset
	StateFailed     = "FAILED"      // its last turn failed; retried with backoff
	StateBusy       = "BUSY"        // a turn runs
	StateWaiting    = "WAITING"     // for a reply, or for an approval
	StateIdle       = "IDLE"
)

// States lists every state word.
var States = []string{StateIdle, StateBusy, StateWaiting, StateParked, StateGated, StateOverBudget, StateFailed, StateTerminated}

// StateOf is a's state word: the first of the order above that holds.
// OverBudget must be set (the daemon sets it).
func StateOf(a *AgentInfo) string {
	switch {
	case a.AgentState == fsstore.AgentTerminated:
		return StateTerminated
	case a.OverBudget != nil:
		return StateOverBudget
	case a.Gated:
		return StateGated
	case a.Parked != nil:
		return StateParked
	case a.Failing > 0:
		return StateFailed
	case a.AgentState == fsstore.AgentBusy:
		return StateBusy
	case a.AgentState == fsstore.AgentWaiting:
		return StateWaiting
	}
	return StateIdle
}

// OverBudget names the agent, the one listed or its closest ancestor,
// whose budget its subtree's spending is over.
type OverBudget struct {
	ID      string           `json:"id"`
	Path    string           `json:"path"`
	Budget  fsstore.Budget   `json:"budget"`
	Subtree fsstore.Counters `json:"subtree_counters"`
}

// ListParams select the agents of agent.query (and agent.list). Every
// filter is applied by the daemon; the zero value selects every agent.
type ListParams struct {
	// Ref keeps only this agent and its subtree.
	Ref string `json:"ref,omitempty"`
	// States keeps the agents in one of these states (State* words).
	States []string `json:"states,omitempty"`
	// Providers keeps the agents of one of these providers.
	Providers []string `json:"providers,omitempty"`
	// IDs keeps only these agents (top reads the rows that changed).
	IDs []string `json:"ids,omitempty"`
	// After starts the page after this agent (a Next of an earlier
	// page), in tree order.
	After string `json:"after,omitempty"`
	// Limit is the most agents a page holds; 0 is no limit.
	Limit int `json:"limit,omitempty"`
}

// ListPage is agent.query's result: agents in tree order (parents before
// children, siblings in creation order).
type ListPage struct {
	Agents []AgentInfo `json:"agents"`
	// Total counts the agents that match, in all pages.
	Total int `json:"total"`
	// Next is the After of the next page; empty on the last one.
	Next string `json:"next,omitempty"`
}
