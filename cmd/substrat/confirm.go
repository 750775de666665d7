package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/term"
)

// confirmFlag is the --yes of a command that destroys something: without
// it, the command asks on a terminal and refuses elsewhere.
type confirmFlag struct {
	Yes bool `short:"y" help:"Do it without asking (needed when standard input is not a terminal, and with --json)."`
}

// confirm asks "CMD WHAT. Go on? [y/N]" on stderr when stdin is a
// terminal, and returns nil only on y or yes. Without a terminal (a
// script, a pipe) or under --json it refuses: a script says --yes.
func (c confirmFlag) confirm(g *Globals, cmd, what string) error {
	if c.Yes {
		return nil
	}
	if g.JSON || !term.IsTerminal(int(os.Stdin.Fd())) {
		return &exitError{code: 2, msg: fmt.Sprintf("%s %s: not confirmed, and there is no terminal to ask on", cmd, what),
			hint: "add --yes (-y) to confirm"}
	}
	fmt.Fprintf(os.Stderr, "%s %s. Go on? [y/N] ", cmd, what)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return &exitError{code: 1, msg: cmd + ": not confirmed; nothing was done"}
}

// terminateWhat is what agent terminate is about to do.
func terminateWhat(ref string, recursive bool) string {
	if recursive {
		return "ends " + ref + " and its whole subtree for good"
	}
	return "ends " + ref + " for good"
}
