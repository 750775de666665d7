package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/substrat/substrat/internal/termtext"
	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
)

// RecoverCmd prints recovery.json.
type RecoverCmd struct{}

// Run reads the report straight from the home; no daemon needed.
func (RecoverCmd) Run(g *Globals) error {
	path := fsstore.Layout{Home: g.Home}.Recovery()
	data, err := fsstore.ReadRegular(path, fsstore.MaxJSONSize)
	if errors.Is(err, os.ErrNotExist) {
		return fail("no recovery report in "+g.Home, "the daemon writes one each time it starts: substrat daemon start")
	}
	if err != nil {
		return err
	}
	var rep api.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fail(fmt.Sprintf("%s is not a valid recovery report: %v", path, err), "")
	}
	if g.JSON {
		return printJSON(rep)
	}
	printReport(&rep)
	return nil
}

func printReport(rep *api.Report) {
	kind := "clean"
	if rep.Unclean {
		kind = "after an unclean stop"
	}
	fmt.Printf("recovery at %s (%s), %d ms: %s\n", rep.StartedAt.Local().Format("2006-01-02 15:04:05"), kind, rep.DurationMS, plural(rep.Agents, "live agent"))
	replayed := 0
	for _, f := range rep.Findings {
		if f.Kind == fsstore.FindReplayed {
			replayed++
			continue
		}
		fmt.Printf("  %-16s %s: %s%s\n", f.Kind, f.Path, f.Detail, repaired(f))
	}
	if replayed > 0 {
		fmt.Printf("  replayed         events newer than session.json onto %d agent(s)\n", replayed)
	}
	for _, f := range rep.KeptOut {
		fmt.Printf("  KEPT OUT         %s: %s\n", f.Path, f.Detail)
		if f.Hint != "" {
			fmt.Printf("                   hint: %s\n", f.Hint)
		}
	}
	for _, a := range rep.Suspended {
		fmt.Printf("  suspended        %s (%s)\n", a.Path, a.Detail)
	}
	for _, a := range rep.Redelivered {
		fmt.Printf("  redelivered      %s: %d message(s)\n", a.Path, a.Messages)
	}
	for _, a := range rep.Resumed {
		fmt.Printf("  resumed          %s: %s\n", a.Path, a.Detail)
	}
	for _, a := range rep.Parked {
		fmt.Printf("  parked           %s: %s\n", a.Path, termtext.Lines(a.Detail))
	}
	for _, a := range rep.Limited {
		fmt.Printf("  limited          %s: %s\n", a.Path, a.Detail)
	}
}

func repaired(f fsstore.Finding) string {
	if f.Repaired && f.Kind != fsstore.FindReplayed {
		return " [repaired]"
	}
	return ""
}
