package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"golang.org/x/term"

	"github.com/substrat/substrat/cmd/substrat/internal/top"
	"github.com/substrat/substrat/fsstore"
)

// TopCmd is `substrat top`.
type TopCmd struct {
	Once  bool `help:"Print one snapshot of the tree and exit (the default when stdout is not a terminal)."`
	Width int  `help:"Width of a snapshot in columns (default: the terminal's, else 120)." default:"0"`
}

// Run shows the team full screen, or prints one snapshot.
func (c *TopCmd) Run(g *Globals) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cl, err := g.client(ctx) // a clear error now if no daemon runs
	if err != nil {
		return err
	}
	cl.Close()
	src := top.Daemon{Socket: fsstore.Layout{Home: g.Home}.Socket()}
	noColor := os.Getenv("NO_COLOR") != ""
	tty := term.IsTerminal(int(os.Stdout.Fd())) && term.IsTerminal(int(os.Stdin.Fd()))
	if c.Once || g.JSON || !tty {
		o, err := top.ReadOnce(ctx, src)
		if err != nil {
			return err
		}
		if g.JSON {
			return printJSON(o)
		}
		w := c.Width
		if w <= 0 {
			w = 120
			if tw, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && tw > 0 {
				w = tw
			}
		}
		fmt.Print(o.Text(w, noColor || !tty, time.Now()))
		return nil
	}
	m := top.New(ctx, src, top.Options{NoColor: noColor})
	_, err = tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(ctx)).Run()
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}
