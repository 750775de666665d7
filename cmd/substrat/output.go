package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/itchyny/gojq"

	"github.com/substrat/substrat/internal/jsontext"
)

// jqFilter is the --jq expression, compiled by run; nil prints JSON as it
// is. Every JSON the CLI prints goes through printJSON or printJSONLine,
// and so through the filter.
var jqFilter *gojq.Code

// compileJQ compiles a --jq expression.
func compileJQ(expr string) (*gojq.Code, error) {
	q, err := gojq.Parse(expr)
	if err != nil {
		return nil, &exitError{code: 2, msg: "--jq: " + err.Error(), hint: "see the jq manual (gojq implements it)"}
	}
	code, err := gojq.Compile(q, gojq.WithEnvironLoader(os.Environ))
	if err != nil {
		return nil, &exitError{code: 2, msg: "--jq: " + err.Error(), hint: "see the jq manual (gojq implements it)"}
	}
	return code, nil
}

// printJSON prints v as indented JSON, as a person reads it
// (jsontext.Readable: "&&", not "\u0026\u0026"; 0.3, not
// 0.30000000000000004), or what --jq makes of it.
func printJSON(v any) error {
	b, err := jsontext.MarshalIndent(v, "  ")
	if err != nil {
		return err
	}
	if jqFilter != nil {
		return runJQ(os.Stdout, b)
	}
	_, err = os.Stdout.Write(append(jsontext.Readable(b), '\n'))
	return err
}

// printJSONLine prints one line of JSON from the daemon (an event of a
// stream) as printJSON would, on one line; --jq filters each line.
func printJSONLine(raw json.RawMessage) error {
	if jqFilter != nil {
		return runJQ(os.Stdout, raw)
	}
	_, err := os.Stdout.Write(append(jsontext.Readable(raw), '\n'))
	return err
}

// runJQ writes what jqFilter makes of the JSON in, one result a line:
// a string as it is (as jq -r does), anything else as compact JSON.
func runJQ(w io.Writer, in []byte) error {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	var out bytes.Buffer
	iter := jqFilter.Run(v)
	for {
		r, ok := iter.Next()
		if !ok {
			break
		}
		if err, ok := r.(error); ok {
			var halt *gojq.HaltError
			if errors.As(err, &halt) && halt.Value() == nil {
				break
			}
			w.Write(out.Bytes())
			return fail("--jq: "+err.Error(), "")
		}
		if s, ok := r.(string); ok {
			out.WriteString(s)
		} else {
			b, err := jsontext.Marshal(r)
			if err != nil {
				return err
			}
			out.Write(jsontext.Readable(b))
		}
		out.WriteByte('\n')
	}
	_, err := w.Write(out.Bytes())
	return err
}

// wantsJSON reports whether the command line asks for JSON (--json or
// --jq), for the errors of a line that did not parse.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--json", a == "--jq", strings.HasPrefix(a, "--jq="), strings.HasPrefix(a, "--json="):
			return a != "--json=false"
		}
	}
	return false
}

// errorJSON is how an error is printed under --json, on stderr.
type errorJSON struct {
	Error struct {
		// Code is the daemon's error code (not_found, ambiguous,
		// conflict...), or usage, no_daemon or failed.
		Code    string `json:"code"`
		Message string `json:"message"`
		Hint    string `json:"hint,omitempty"`
		// Exit is the exit status: 1 failure, 2 bad usage, 3 no daemon.
		Exit int `json:"exit"`
	} `json:"error"`
}

// printErrorJSON writes one line {"error":{...}} to stderr.
func printErrorJSON(code string, exit int, msg, hint string) {
	var e errorJSON
	if code == "" {
		switch exit {
		case 2:
			code = "usage"
		case 3:
			code = "no_daemon"
		default:
			code = "failed"
		}
	}
	e.Error.Code, e.Error.Message, e.Error.Hint, e.Error.Exit = code, msg, hint, exit
	b, err := jsontext.Marshal(e)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: "+msg)
		return
	}
	os.Stderr.Write(append(b, '\n'))
}
