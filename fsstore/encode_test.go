package fsstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"hash/crc32"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// encodeEventJSON is EncodeEvent as it was first written, with
// json.Marshal of the Event: the reference the hand-written encoder must
// match byte for byte.
func encodeEventJSON(e Event) ([]byte, error) {
	e.Time = e.Time.UTC()
	body, err := marshal(e, false)
	if err != nil {
		return nil, err
	}
	body = body[:len(body)-1] // drop the closing brace
	line := make([]byte, 0, len(body)+crcTrailerLen+1)
	line = append(line, body...)
	line = append(line, crcPrefix...)
	line = hex.AppendEncode(line, binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli)))
	line = append(line, '"', '}', '\n')
	if len(line) > MaxEventSize {
		return nil, ErrTooLarge
	}
	return line, nil
}

func checkEncodeEvent(t *testing.T, e Event) {
	t.Helper()
	want, werr := encodeEventJSON(e)
	got, gerr := EncodeEvent(e)
	if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("EncodeEvent(%+v)\n got %q, %v\nwant %q, %v", e, got, gerr, want, werr)
	}
}

// TestEncodeEventMatchesJSON: the hand-written line is what json.Marshal
// of the Event wrote, for the awkward types, times and data too.
func TestEncodeEventMatchesJSON(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	times := []time.Time{
		epoch, time.Time{}, time.Unix(0, 0), time.Date(2026, 11, 22, 10, 0, 0, 123456789, cet),
		time.Date(2026, 11, 22, 10, 0, 0, 100, time.UTC), time.Date(2026, 11, 22, 10, 0, 0, 120000000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600)), time.Now(),
	}
	types := []string{EvState, EvSent, "x", "a\"b", `back\slash`, "<&>", "\x01\n\t\b\f", "\x7f", "é", "\u2028\u2029", "\xff\xfe", "日本"}
	datas := [][]byte{nil, {}, []byte(`{}`), []byte(`null`), []byte(` { "a" : [1, 2e3, "<&>"] } `), []byte(`"\u003c"`),
		[]byte(`{"a":`), []byte(`[1,]`), []byte(`"\xff"`), []byte("{\"a\":\"\u2028\"}")}
	for _, ts := range times {
		for _, typ := range types {
			for _, d := range datas {
				for _, seq := range []uint64{0, 1, 10, math.MaxUint64} {
					checkEncodeEvent(t, Event{Seq: seq, Time: ts, Type: typ, Data: d})
				}
			}
		}
	}
	pad := Event{Seq: 2, Time: epoch, Type: "pad"}
	base := len(mustEncodeEvent(t, pad))
	for _, n := range []int{MaxEventSize - base - 3, MaxEventSize - base - 2, MaxEventSize - base - 1} {
		pad.Data = []byte(strconv.Quote(string(bytes.Repeat([]byte{'p'}, n))))
		checkEncodeEvent(t, pad)
	}
}

func FuzzEncodeEvent(f *testing.F) {
	f.Add(uint64(1), int64(0), int64(0), "state", []byte(`{"agent_state":"BUSY"}`))
	f.Add(uint64(7), int64(1767225600), int64(123456789), "a\"<\u2028\xff", []byte(` [ 1 , "x" ] `))
	f.Add(uint64(2), int64(253402300800), int64(0), "x", []byte(nil))
	f.Fuzz(func(t *testing.T, seq uint64, sec, nsec int64, typ string, data []byte) {
		checkEncodeEvent(t, Event{Seq: seq, Time: time.Unix(sec, nsec), Type: typ, Data: data})
	})
}

// TestEncodeDataMatchesMarshal: the pooled encoder writes what marshal
// writes.
func TestEncodeDataMatchesMarshal(t *testing.T) {
	red := "<red>"
	for _, v := range []any{
		MessageRef{ID: idMsg1, To: User}, StateChange{AgentState: AgentBusy, Reason: "a & b \u2028 \xff"},
		Counters{Turns: 1, CostUSD: 0.1 + 0.2}, Counters{Turns: 1, ContextTokens: 2100, ContextWindow: 8192}, MetadataChange{Key: "k", Value: &red}, json.RawMessage(` { "a" : 1 } `),
		json.RawMessage(nil), "string", 42, nil, map[string]int{"b": 2, "a": 1}, ProviderChange{StateBlob: []byte{0, 1}},
	} {
		want, werr := marshal(v, false)
		eb := getEventBuf()
		got, gerr := eb.encodeData(v)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Errorf("encodeData(%#v) = %q, %v; marshal: %q, %v", v, got, gerr, want, werr)
		}
		eb.release()
	}
	eb := getEventBuf()
	defer eb.release()
	if _, err := eb.encodeData(math.NaN()); err == nil {
		t.Error("encodeData of NaN succeeded")
	}
}

// TestApplyTyped: applying an event's data as it was before marshalling
// gives what decoding it gives, invalid UTF-8 included.
func TestApplyTyped(t *testing.T) {
	base := &Session{Version: Version, ID: idA, Name: "a", Provider: "p", AgentState: AgentIdle,
		SessionState: SessionCreated, StateReason: "old", Counters: Counters{Turns: 2, CostUSD: 0.1}}
	for _, c := range []struct {
		typ  string
		data Payload
	}{
		{EvState, StateChange{AgentState: AgentBusy, SessionState: SessionActive, Reason: "turn"}},
		{EvState, StateChange{}},
		{EvState, StateChange{Reason: "bad \xff utf-8 \u2028"}},
		{EvState, StateChange{AgentState: "BUSY\xff"}},
		{EvState, StateChange{AgentState: "NAPPING"}},
		{EvState, Counters{Turns: 1}}, // the wrong type: decoded
		{EvTurn, Counters{Turns: 1, InputTokens: 3, OutputTokens: 4, CostUSD: 0.2}},
		{EvTurn, Counters{Turns: 1, InputTokens: 3, ContextTokens: 5, ContextWindow: 3000}},
		{EvTurn, Counters{CostUSD: math.SmallestNonzeroFloat64}},
		{EvTurn, Counters{Turns: -1}},
		{EvTurn, StateChange{Reason: "x"}},
	} {
		raw, err := marshal(c.data, false)
		if err != nil {
			t.Fatal(err)
		}
		e := Event{Seq: 2, Time: epoch, Type: c.typ, Data: raw}
		want, werr := Apply(base, e)
		got, gerr := apply(base, e, c.data)
		if (werr != nil) != (gerr != nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("%s %+v: typed %+v, %v; decoded %+v, %v", c.typ, c.data, got, gerr, want, werr)
		}
	}
}

// TestChangesSession: every payload type of the package (a type with an
// EventType method) names an event type of its own; those with an applyTo
// method are the Changes the registry decodes, and Commit skips Apply for
// all the others, which must leave the session as it is.
func TestChangesSession(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	consts := map[string]string{} // EvX -> its value
	typeOf := map[string]string{} // receiver -> the EvX its EventType returns
	changers := map[string]bool{} // receivers with an applyTo method
	for _, file := range files {
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					vs := s.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) && strings.HasPrefix(name.Name, "Ev") {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
								consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Recv == nil {
					continue
				}
				recv := fmt.Sprint(d.Recv.List[0].Type)
				switch d.Name.Name {
				case "EventType":
					ret := d.Body.List[0].(*ast.ReturnStmt).Results[0].(*ast.Ident).Name
					typeOf[recv] = ret
				case "applyTo":
					changers[recv] = true
				}
			}
		}
	}
	if len(typeOf) < 25 || len(changers) < 15 {
		t.Fatalf("found only %d payload types and %d changes", len(typeOf), len(changers))
	}
	base := &Session{Version: Version, ID: idA, Name: "a", Provider: "p", AgentState: AgentIdle, SessionState: SessionCreated,
		Metadata: map[string]string{"k": "v"}, WaitingFor: []string{idMsg1}}
	seen := map[string]string{}
	for recv, ev := range typeOf {
		typ, ok := consts[ev]
		if !ok {
			t.Errorf("%s.EventType returns %s, not an event type constant", recv, ev)
			continue
		}
		if other, dup := seen[typ]; dup {
			t.Errorf("%s and %s both name event type %q", recv, other, typ)
		}
		seen[typ] = recv
		if changesSession(typ) != changers[recv] {
			t.Errorf("changesSession(%s) = %v, but %s has applyTo: %v", ev, changesSession(typ), recv, changers[recv])
		}
		if changers[recv] {
			continue
		}
		got, err := Apply(base, Event{Seq: 9, Time: epoch, Type: typ, Data: []byte(`{"agent_state":"BUSY","turns":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		want := base.Clone()
		want.LastSeq, want.UpdatedAt = 9, epoch
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Apply of a %s event changed the session: %+v", typ, got)
		}
	}
	if len(changes) != len(changers) {
		t.Errorf("the registry decodes %d event types, but %d types have applyTo", len(changes), len(changers))
	}
	if changesSession("something_new") {
		t.Error("an unknown type changes the session")
	}
}

// FuzzAppendData: what appendData writes without reflection is what
// encoding/json writes, for every type it knows.
func FuzzAppendData(f *testing.F) {
	f.Add("019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6b01", "USER", "turn", int64(1), int64(1234), 0.0123, uint8(0))
	f.Add("", "", "", int64(-5), int64(0), 1e-7, uint8(3))
	f.Add("a\"b", "<&>", "\x7f", int64(math.MaxInt64), int64(math.MinInt64), 1e21, uint8(255))
	f.Add("é", "\u2028", "x\\y", int64(0), int64(7), math.Copysign(0, -1), uint8(7))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n1, n2 int64, x float64, nils uint8) {
		strs := func(bit uint8) []string {
			switch {
			case nils&bit != 0:
				return nil
			case nils&(bit<<1) != 0:
				return []string{}
			}
			return []string{s1, s2, s3}[:1+int(uint64(n1)%3)]
		}
		for _, v := range []any{
			MessageRef{ID: s1, To: s2},
			Delivered{IDs: strs(1)},
			Waiting{IDs: strs(4)},
			StateChange{AgentState: AgentState(s1), SessionState: SessionState(s2), Reason: s3},
			StateChange{Reason: s3},
			StateChange{SessionState: SessionState(s2)},
			Counters{Turns: n1, InputTokens: n2, OutputTokens: n1 ^ n2, CostUSD: x},
			Counters{Turns: n1, ContextTokens: n2, ContextWindow: n1 ^ n2},
			Counters{CostUSD: float64(float32(x)) * 1e-9},
			Spawned{ChildID: s1, Name: s2, SpawnKey: s3},
		} {
			got, ok := appendData(nil, v)
			want, err := marshal(v, false)
			if !ok {
				if err == nil && !needsEscape(v) {
					t.Errorf("appendData(%#v) gave up; encoding/json writes %s", v, want)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("appendData(%#v) = %s; encoding/json: %s, %v", v, got, want, err)
			}
		}
	})
}

// needsEscape reports whether v holds a string appendData leaves to
// encoding/json, or a number it refuses.
func needsEscape(v any) bool {
	data, _ := json.Marshal(v)
	var fields map[string]any
	if json.Unmarshal(data, &fields) != nil {
		return true
	}
	plain := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	rv := reflect.ValueOf(v)
	for i := range rv.NumField() {
		switch f := rv.Field(i); f.Kind() {
		case reflect.String:
			if !plain(f.String()) {
				return true
			}
		case reflect.Slice:
			for j := range f.Len() {
				if !plain(f.Index(j).String()) {
					return true
				}
			}
		case reflect.Float64:
			if math.IsNaN(f.Float()) || math.IsInf(f.Float(), 0) {
				return true
			}
		}
	}
	return false
}
