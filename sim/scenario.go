package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A scenario is a run's actions written out, one per line, so that a
// failure the seeded search found once becomes a readable regression
// test (testdata/scenarios, run by TestScenarios):
//
//	+5s create-root r1
//	+1s send r1 "u1\n!spawn_agent {\"name\":\"c1\",\"instructions\":\"hello\"}"
//	drain
//	terminate r1 recursive
//
// A line is an optional clock advance (+DURATION; 1s if omitted), the
// action's kind, the agent's name if it has one, its text as a Go string
// literal if it has one, and "recursive" for a recursive terminate.
// Blank lines and lines starting with # are skipped.

// FormatScenario writes actions as a scenario.
func FormatScenario(actions []Action) string {
	var b strings.Builder
	for _, a := range actions {
		b.WriteString(a.Line())
		b.WriteByte('\n')
	}
	return b.String()
}

// Line is a written as one line of a scenario.
func (a Action) Line() string {
	parts := []string{"+" + a.Advance.String(), a.Kind.String()}
	if a.Name != "" {
		parts = append(parts, a.Name)
	}
	if a.Text != "" {
		parts = append(parts, strconv.Quote(a.Text))
	}
	if a.Recursive {
		parts = append(parts, "recursive")
	}
	return strings.Join(parts, " ")
}

// ParseScenario reads the actions of a scenario.
func ParseScenario(text string) ([]Action, error) {
	var out []Action
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		a, err := parseAction(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func parseAction(line string) (Action, error) {
	a := Action{Advance: time.Second}
	word := func() string {
		w, rest, _ := strings.Cut(line, " ")
		line = strings.TrimLeft(rest, " ")
		return w
	}
	w := word()
	if strings.HasPrefix(w, "+") {
		d, err := time.ParseDuration(w[1:])
		if err != nil || d < 0 {
			return a, fmt.Errorf("bad clock advance %q", w)
		}
		a.Advance, w = d, word()
	}
	kind := -1
	for k, name := range kindNames {
		if name == w {
			kind = k
		}
	}
	if kind < 0 {
		return a, fmt.Errorf("unknown action %q (want one of %s)", w, strings.Join(kindNames[:], ", "))
	}
	a.Kind = Kind(kind)
	if line != "" && line[0] != '"' && !strings.HasPrefix(line, "recursive") {
		a.Name = word()
	}
	if strings.HasPrefix(line, `"`) {
		q, err := strconv.QuotedPrefix(line)
		if err != nil {
			return a, fmt.Errorf("bad text %s: %v", line, err)
		}
		a.Text, _ = strconv.Unquote(q)
		line = strings.TrimLeft(line[len(q):], " ")
	}
	if line == "recursive" {
		a.Recursive, line = true, ""
	}
	if line != "" {
		return a, fmt.Errorf("unexpected %q", line)
	}
	return a, nil
}

// Scenario is the failing run's actions up to the one in progress at the
// failure, as a scenario.
func (f *Failure) Scenario() string {
	n := len(f.Actions)
	if f.Action >= 0 && f.Action < n {
		n = f.Action + 1
	}
	return FormatScenario(f.Actions[:n])
}

// Summary describes a home in a few stable lines: each agent (by name,
// with its parent's, and where it lives), how many events its log holds
// and how many messages its inbox, and the USER inbox's count.
func (f *Facts) Summary() string {
	names := map[string]string{}
	for id, a := range f.Agents {
		names[id] = a.Name
	}
	var lines []string
	for _, a := range f.Agents {
		where := "agents/"
		if a.Archived {
			where = "archive/"
		}
		parent := ""
		if a.ParentID != "" {
			parent = " (child of " + names[a.ParentID] + ")"
		}
		lines = append(lines, fmt.Sprintf("agent %s%s in %s: %d events, %d messages",
			a.Name, parent, where, bytes.Count(a.Log, []byte("\n")), len(a.Inbox)))
	}
	slices.Sort(lines)
	lines = append(lines, fmt.Sprintf("USER: %d messages", len(f.User)))
	return strings.Join(lines, "\n") + "\n"
}
