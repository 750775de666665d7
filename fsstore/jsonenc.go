package fsstore

import (
	"bytes"
	"encoding/json"
)

// marshal is json.Marshal without HTML escaping, so that files read well
// with cat: "->" stays "->" instead of "-\u003e". indent selects the
// indented form used for session.json and messages. The result has no
// trailing newline.
func marshal(v any, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
