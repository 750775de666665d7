package script

import (
	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script/native"
)

// Name is the name the provider is registered under.
const Name = native.Name

// New returns the script provider: native mode (package native), and
// model mode, which runs the model program of each turn (model.go).
func New() provider.Provider { return native.New(runModel) }

// ToolUseID is the deterministic tool-use id of the index'th (0-based)
// command line of message messageID in a prompt to agent agentID.
func ToolUseID(agentID, messageID string, index int) string {
	return native.ToolUseID(agentID, messageID, index)
}
