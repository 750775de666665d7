// Package jsontext writes JSON that a person reads as it was typed: no
// HTML escaping ("a && b > c", not "a \u0026\u0026 b \u003e c"), and no
// float noise in sums ("0.3", not "0.30000000000000004").
//
// encoding/json escapes <, > and & by default, in json.Marshal and in an
// Encoder without SetEscapeHTML(false), and it keeps the escapes already
// inside a json.RawMessage. Marshal and MarshalIndent do not escape;
// Readable rewrites JSON that some other writer escaped.
package jsontext

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
)

// Marshal is json.Marshal without HTML escaping.
func Marshal(v any) ([]byte, error) { return marshal(v, "") }

// MarshalIndent is json.MarshalIndent(v, "", indent) without HTML
// escaping.
func MarshalIndent(v any, indent string) ([]byte, error) { return marshal(v, indent) }

func marshal(v any, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// Readable returns the JSON text in with, inside its strings, the escapes
// \u0026, \u003c and \u003e written as &, < and >, and each number with a
// fraction or an exponent rounded to 12 significant digits when that
// changes it (the noise of summed floats). Every other byte is kept: the
// layout, the other escapes (\n, \", \u2028...) and the integers. Input
// that is not JSON comes out unharmed but for those two rewrites. in is
// returned as it is when there is nothing to rewrite.
func Readable(in []byte) []byte {
	if bytes.IndexByte(in, '\\') < 0 && bytes.IndexByte(in, '.') < 0 &&
		bytes.IndexByte(in, 'e') < 0 && bytes.IndexByte(in, 'E') < 0 {
		return in
	}
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		switch c := in[i]; {
		case c == '"':
			i = readableString(&out, in, i)
		case c == '-' || '0' <= c && c <= '9':
			j := i + 1
			for j < len(in) && isNumberByte(in[j]) {
				j++
			}
			out = append(out, roundNumber(in[i:j])...)
			i = j
		default:
			out = append(out, c)
			i++
		}
	}
	return out
}

// readableString appends the string that starts at in[i] (a quote) to
// out, HTML escapes unescaped, and returns the index after it.
func readableString(out *[]byte, in []byte, i int) int {
	*out = append(*out, '"')
	for i++; i < len(in); {
		c := in[i]
		switch {
		case c == '"':
			*out = append(*out, c)
			return i + 1
		case c == '\\' && i+1 < len(in) && in[i+1] == 'u' && i+6 <= len(in):
			if r, ok := htmlRune(in[i+2 : i+6]); ok {
				*out = append(*out, r)
			} else {
				*out = append(*out, in[i:i+6]...)
			}
			i += 6
		case c == '\\' && i+1 < len(in):
			*out = append(*out, c, in[i+1])
			i += 2
		default:
			*out = append(*out, c)
			i++
		}
	}
	return i
}

// htmlRune returns the character of the 4 hex digits of a \u escape if it
// is one that HTML escaping writes.
func htmlRune(hex []byte) (byte, bool) {
	n, err := strconv.ParseUint(string(hex), 16, 16)
	if err != nil {
		return 0, false
	}
	switch n {
	case '&', '<', '>':
		return byte(n), true
	}
	return 0, false
}

func isNumberByte(c byte) bool {
	return '0' <= c && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// roundNumber returns a JSON number with a fraction or an exponent
// rounded to 12 significant digits, if that changes it.
func roundNumber(num []byte) []byte {
	if !bytes.ContainsAny(num, ".eE") {
		return num
	}
	x, err := strconv.ParseFloat(string(num), 64)
	if err != nil || math.IsInf(x, 0) {
		return num
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 12, 64), 64)
	if r == x {
		return num
	}
	return []byte(Float(r))
}

// Float formats a float the way JSON does (the shortest text that reads
// back the same), after rounding it to 12 significant digits: 0.3 for
// 0.1+0.2.
func Float(x float64) string {
	if x != 0 && !math.IsInf(x, 0) && !math.IsNaN(x) {
		x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', 12, 64), 64)
	}
	b, err := json.Marshal(x)
	if err != nil {
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return string(b)
}
