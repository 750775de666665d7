package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/substrat/substrat/fsstore"
)

// TestScenarios runs the scenarios in testdata/scenarios: actions written
// out (see ParseScenario), each crashed at every persist point and checked
// like a seed's. A directive of a file:
//
//	run [crash=all|N] [continue=N] [bug=NAME]
//	<the actions>
//	----
//	<each action's outcome in the run without a crash, the home at its
//	end, then "ok" or the first failure>
//
// Rewrite the expected outputs with -rewrite after a deliberate change.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "run" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			actions, err := ParseScenario(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			o := Options{Seed: 1, Actions: actions, Crash: -1, ContinueEvery: 1, Workers: 1}
			for _, arg := range d.CmdArgs {
				switch arg.Key {
				case "crash":
					var v string
					arg.Scan(t, 0, &v)
					if v != "all" {
						arg.Scan(t, 0, &o.Crash)
					}
				case "continue":
					arg.Scan(t, 0, &o.ContinueEvery)
				case "bug":
					var v string
					arg.Scan(t, 0, &v)
					o.Bug = bugNamed(t, v)
				default:
					d.Fatalf(t, "unknown argument %q", arg.Key)
				}
			}
			var out strings.Builder
			o.Log = func(format string, args ...any) {
				if strings.HasPrefix(format, "reference ") {
					fmt.Fprintf(&out, format[len("reference "):]+"\n", args...)
				}
			}
			defer fsstore.PlantBug(o.Bug)()
			res := Run(o)
			if res.End != nil {
				out.WriteString(res.End.Summary())
			}
			if f := res.Failure; f != nil {
				fmt.Fprintf(&out, "FAILED at persist point %d, during %s:\n", f.Crash, f.What)
				for _, p := range f.Problems {
					fmt.Fprintf(&out, "  - %s\n", p)
				}
				return out.String()
			}
			if o.Crash < 0 && res.Points < int(res.Ops) {
				t.Errorf("%d crash points checked of %d", res.Points, res.Ops)
			}
			out.WriteString("ok\n")
			return out.String()
		})
	})
}

// TestScenarioRoundTrip: the actions the generator draws come back whole
// from a scenario, so that any failing seed can be kept as one.
func TestScenarioRoundTrip(t *testing.T) {
	for seed := range uint64(20) {
		g := NewGen(seed)
		var tree []Agent
		var actions []Action
		for i := range 40 {
			a := g.Next(i, tree)
			if a.Kind == CreateRoot {
				tree = append(tree, Agent{Name: a.Name, Live: true})
			}
			actions = append(actions, a)
		}
		back, err := ParseScenario(FormatScenario(actions))
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, FormatScenario(actions))
		}
		if !reflect.DeepEqual(back, actions) {
			t.Fatalf("seed %d: the scenario gives back other actions:\n%s", seed, FormatScenario(back))
		}
	}
	for _, bad := range []string{"fly r1", "+x send r1", `send r1 "unterminated`, "terminate r1 sideways"} {
		if _, err := ParseScenario(bad); err == nil {
			t.Errorf("ParseScenario(%q) accepted it", bad)
		}
	}
}
