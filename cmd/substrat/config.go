package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/config"
	"github.com/substrat/substrat/supervisor/rpc"
)

// ConfigCmd groups the commands of HOME/config.json.
type ConfigCmd struct {
	Show ConfigShowCmd `cmd:"" default:"withargs" help:"Print the settings in force and where each comes from (flag, environment, file, default)."`
}

// ConfigShowCmd prints the effective settings.
type ConfigShowCmd struct{}

// Run asks the daemon for the settings it runs with; without a daemon it
// works them out from the environment and the file, as a start would.
func (ConfigShowCmd) Run(g *Globals) error {
	var eff config.Effective
	running := true
	cl, err := g.client(context.Background())
	if err == nil {
		defer cl.Close()
		eff.ConfigReport, err = rpc.Call(context.Background(), cl, api.ConfigShow, struct{}{})
	} else {
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 3 {
			return err
		}
		running = false
		path := fsstore.Layout{Home: g.Home}.Config()
		f, ferr := config.Load(path)
		eff, err = config.Resolve(f, os.Getenv, nil)
		if ferr != nil || err != nil {
			eff, _ = config.Resolve(nil, os.Getenv, nil)
			if ferr == nil {
				ferr = err
			}
			eff.FileError = ferr.Error()
		}
		eff.Path, err = path, nil
		_, serr := os.Stat(path)
		eff.Present = serr == nil
	}
	if err != nil {
		return err
	}
	if g.JSON {
		return printJSON(map[string]any{"daemon_running": running, "path": eff.Path, "present": eff.Present,
			"file_error": eff.FileError, "values": eff.Values})
	}
	switch {
	case !running:
		fmt.Printf("the daemon is not running on %s; a start would use:\n", g.Home)
	default:
		fmt.Printf("the daemon on %s runs with:\n", g.Home)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tFROM")
	for _, v := range eff.Values {
		from := v.Source
		if v.Source == config.FromEnv {
			from += " (" + v.Env + ")"
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\n", v.Key, show(v.Value), from)
	}
	tw.Flush()
	switch {
	case eff.FileError != "":
		fmt.Printf("\n%s is refused: %s\n", eff.Path, eff.FileError)
		if running {
			fmt.Println("the daemon keeps the settings above until the file is fixed (it reads it again when it changes)")
		}
		return &exitError{code: 1, msg: "config.json is refused", hint: "fix the line above; see the README's Configuration section"}
	case !eff.Present:
		fmt.Printf("\nno %s (every value above is a default, an environment variable or a flag)\n", eff.Path)
	default:
		fmt.Printf("\nfile: %s\n", eff.Path)
	}
	return nil
}

// show writes a value for the table: a string as it is, anything else as
// compact JSON; nothing as "-".
func show(v any) string {
	if s, ok := v.(string); ok {
		return cmp.Or(s, "-")
	}
	b, err := jsontext.Marshal(v)
	if err != nil || string(b) == "null" || string(b) == "[]" || string(b) == "{}" {
		return "-"
	}
	return string(b)
}
