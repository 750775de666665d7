package jsontext

import (
	"encoding/json"
	"testing"
)

func TestReadable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a":"x \u0026\u0026 y \u003e z \u003cw\u003e"}`, `{"a":"x && y > z <w>"}`},
		{`"\u003E\u003C"`, `"><"`},
		{`"\\u0026"`, `"\\u0026"`},                   // an escaped backslash, then text
		{`"\n\"\u2028\u00e9"`, `"\n\"\u2028\u00e9"`}, // other escapes kept
		{`{"cost_usd": 0.30000000000000004, "n": 12, "t": "0.30000000000000004"}`, `{"cost_usd": 0.3, "n": 12, "t": "0.30000000000000004"}`},
		{`[0.0024000000000000002,1e-7,2.5E+3,-0.1,0.000001]`, `[0.0024,1e-7,2.5E+3,-0.1,0.000001]`},
		{`[12345678901234567890, 0.1234567890123]`, `[12345678901234567890, 0.123456789012]`},
		{"plain", "plain"},
		{`"unterminated \u00`, `"unterminated \u00`},
	} {
		if got := string(Readable([]byte(tc.in))); got != tc.want {
			t.Errorf("Readable(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestMarshal(t *testing.T) {
	b, err := Marshal(map[string]any{"a": "x && y > z", "raw": json.RawMessage(`"<b>"`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"x && y > z","raw":"<b>"}`; string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	b, _ = MarshalIndent([]string{"&"}, "  ")
	if want := "[\n  \"&\"\n]"; string(b) != want {
		t.Errorf("MarshalIndent = %q, want %q", b, want)
	}
}

func TestFloat(t *testing.T) {
	for x, want := range map[float64]string{0.1 + 0.2: "0.3", 0.0012 * 2: "0.0024", 0: "0", 1e-7: "1e-7", 42: "42", 0.000003: "0.000003"} {
		if got := Float(x); got != want {
			t.Errorf("Float(%v) = %s, want %s", x, got, want)
		}
	}
}
