package main

import (
	"io"
	"os"

	"github.com/substrat/substrat/executor/relay"
)

// ToolRelayCmd is `substrat tool-relay --listen PATH`, which the daemon
// runs in an agent's pod (executor/relay): it listens on the Unix socket
// PATH there, which the agent's MCP server dials as its tool socket, and
// carries each connection over stdin and stdout to the daemon, which
// dials the agent's tool socket on its own machine. It ends when stdin
// does, and removes the socket.
type ToolRelayCmd struct {
	Listen string `required:"" help:"Unix socket to listen on." type:"path" placeholder:"PATH"`
}

// Run relays until stdin ends.
func (c *ToolRelayCmd) Run(g *Globals) error {
	stream := relay.Stream{Reader: os.Stdin, Writer: os.Stdout, Closers: []io.Closer{os.Stdin, os.Stdout}}
	if err := relay.Listen(c.Listen, stream); err != nil {
		return fail(err.Error(), "")
	}
	return nil
}
