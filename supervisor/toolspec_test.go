package supervisor

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/substrat/substrat/supervisor/api"
)

var updateTools = flag.Bool("update-tools", false, "rewrite testdata/tools.json from the tools' argument structs")

// TestToolSpecs: the schemas generated from the tools' argument structs
// say what the hand-written ones of testdata/tools.json said: the same
// properties with the same types, enums and descriptions, the same
// required ones, and no other properties allowed.
func TestToolSpecs(t *testing.T) {
	if *updateTools {
		data, _ := json.MarshalIndent(Tools(), "", "  ")
		if err := os.WriteFile("testdata/tools.json", append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile("testdata/tools.json")
	if err != nil {
		t.Fatal(err)
	}
	var want []api.ToolSpec
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	got := map[string]api.ToolSpec{}
	for _, s := range Tools() {
		got[s.Name] = s
	}
	if len(got) != len(want) {
		t.Errorf("%d tools, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := got[w.Name]
		if !ok {
			t.Errorf("no tool %s", w.Name)
			continue
		}
		if g.Description != w.Description {
			t.Errorf("%s: description %q, want %q", w.Name, g.Description, w.Description)
		}
		if gs, ws := normSchema(t, g.InputSchema), normSchema(t, w.InputSchema); gs != ws {
			t.Errorf("%s: schema\n%s\nwant\n%s", w.Name, gs, ws)
		}
	}
}

// normSchema writes what a schema says, in a canonical form.
func normSchema(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s struct {
		Type                 string                     `json:"type"`
		Properties           map[string]json.RawMessage `json:"properties"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	slices.Sort(s.Required)
	out := fmt.Sprintf("type %s, required %v, additionalProperties %v\n", s.Type, s.Required, s.AdditionalProperties != nil && !*s.AdditionalProperties)
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		var p struct {
			Type        any    `json:"type"`
			Types       any    `json:"types"`
			Enum        []any  `json:"enum"`
			Description string `json:"description"`
			AddProps    any    `json:"additionalProperties"`
		}
		json.Unmarshal(s.Properties[n], &p)
		var types []string
		switch v := p.Type.(type) {
		case string:
			types = []string{v}
		case []any:
			for _, x := range v {
				types = append(types, fmt.Sprint(x))
			}
		}
		slices.Sort(types)
		out += fmt.Sprintf("  %s: %v enum %v %q\n", n, types, p.Enum, p.Description)
	}
	return out
}
