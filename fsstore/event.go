package fsstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MaxEventSize is the largest events.jsonl line, newline included. An
// append of a larger event fails with ErrTooLarge; a longer line on disk is
// damage.
const MaxEventSize = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Event is one line of events.jsonl.
type Event struct {
	Seq  uint64          `json:"seq"`
	Time time.Time       `json:"ts"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Decode unmarshals the event's data into v.
func (e Event) Decode(v any) error {
	if len(e.Data) == 0 {
		return nil
	}
	return json.Unmarshal(e.Data, v)
}

const (
	seqPrefix = `{"seq":`
	crcPrefix = `,"crc":"`
	// crcTrailerLen is len(`,"crc":"` + 8 hex digits + `"}`).
	crcTrailerLen = len(crcPrefix) + 8 + 2
)

// EncodeEvent returns e as one events.jsonl line, newline included. The
// line is e's JSON with a last field "crc": the CRC-32C of every byte of the
// line before `,"crc":`, as 8 lower-case hex digits.
func EncodeEvent(e Event) ([]byte, error) {
	data := []byte(e.Data)
	if len(data) > 0 {
		// What json.Marshal does with a json.RawMessage: check it and
		// make it compact (without escaping HTML).
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return nil, fmt.Errorf("event data: %w", err)
		}
		data = buf.Bytes()
	}
	return appendEventLine(nil, e.Seq, e.Time, e.Type, data)
}

// appendEventLine appends to dst the events.jsonl line of an event whose
// data is the compact JSON data (nil for none), newline included. It writes
// the bytes json.Marshal of an Event writes (seq, ts in UTC as RFC 3339
// with nanoseconds, type, data), by hand and without allocating beyond dst,
// then the crc field.
func appendEventLine(dst []byte, seq uint64, ts time.Time, typ string, data []byte) ([]byte, error) {
	start := len(dst)
	b := append(dst, seqPrefix...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"ts":"`...)
	b, ok := appendTime(b, ts)
	if !ok { // as time.Time.MarshalJSON refuses
		return dst, fmt.Errorf("event time %v: year outside of range [0,9999]", ts)
	}
	b = append(b, `","type":`...)
	b = appendJSONString(b, typ)
	if len(data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, data...)
	}
	sum := crc32.Checksum(b[start:], castagnoli)
	b = append(b, crcPrefix...)
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[sum>>shift&0xf])
	}
	b = append(b, '"', '}', '\n')
	if n := len(b) - start; n > MaxEventSize {
		return dst, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, MaxEventSize)
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendTime appends t in UTC as RFC 3339 with nanoseconds, trailing zeros
// trimmed (time.RFC3339Nano, what time.Time.MarshalJSON writes). ok is
// false for a year outside 0 to 9999, which that refuses.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	t = t.UTC()
	unix := t.Unix()
	if c := lastSecond.Load(); c != nil && c.unix == unix {
		b = append(b, c.text[:]...)
	} else {
		year, month, day := t.Date()
		if year < 0 || year > 9999 {
			return b, false
		}
		hour, min, sec := t.Clock()
		start := len(b)
		b = appendDigits(b, year, 4)
		b = append(b, '-')
		b = appendDigits(b, int(month), 2)
		b = append(b, '-')
		b = appendDigits(b, day, 2)
		b = append(b, 'T')
		b = appendDigits(b, hour, 2)
		b = append(b, ':')
		b = appendDigits(b, min, 2)
		b = append(b, ':')
		b = appendDigits(b, sec, 2)
		c := &formattedSecond{unix: unix}
		copy(c.text[:], b[start:])
		lastSecond.Store(c)
	}
	if ns := t.Nanosecond(); ns != 0 {
		b = append(b, '.')
		n := 9
		for ns%10 == 0 {
			ns /= 10
			n--
		}
		b = appendDigits(b, ns, n)
	}
	return append(b, 'Z'), true
}

// formattedSecond is a second since the epoch as appendTime writes it, up
// to the seconds: events come many to a second, and the date and clock
// are the costly part.
type formattedSecond struct {
	unix int64
	text [len("2006-01-02T15:04:05")]byte
}

var lastSecond atomic.Pointer[formattedSecond]

// appendDigits appends v (not negative) as exactly n (at most 9) decimal
// digits.
func appendDigits(b []byte, v, n int) []byte {
	start := len(b)
	b = append(b, "000000000"[:n]...)
	for i := len(b) - 1; i >= start; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// eventBuf is scratch space for one append: the event's data as JSON and
// its line. Appends take one from a pool, so that the commit path does not
// allocate them each time.
type eventBuf struct {
	data bytes.Buffer
	enc  *json.Encoder // writes to data, without HTML escaping, as marshal does
	fast []byte        // the data, when appendData could write it
	line []byte
}

var eventBufs = sync.Pool{New: func() any {
	b := new(eventBuf)
	b.enc = json.NewEncoder(&b.data)
	b.enc.SetEscapeHTML(false)
	return b
}}

// maxPooledEventBuf bounds the buffers kept for reuse: the rare large event
// does not pin its memory in the pool.
const maxPooledEventBuf = 64 << 10

func getEventBuf() *eventBuf { return eventBufs.Get().(*eventBuf) }

// release returns b to the pool. Nothing it returned may be used after.
func (b *eventBuf) release() {
	if b.data.Cap() > maxPooledEventBuf || cap(b.line) > maxPooledEventBuf || cap(b.fast) > maxPooledEventBuf {
		return
	}
	b.data.Reset()
	b.fast, b.line = b.fast[:0], b.line[:0]
	eventBufs.Put(b)
}

// encodeData returns v as JSON, the bytes marshal(v, false) returns. They
// are valid until the next use of b.
func (b *eventBuf) encodeData(v any) ([]byte, error) {
	if out, ok := appendData(b.fast[:0], v); ok {
		b.fast = out
		return out, nil
	}
	b.data.Reset()
	if err := b.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.data.Bytes(), []byte{'\n'}), nil
}

// appendData appends v as JSON without reflection, for the data of the
// events of every turn and message. It writes what marshal(v, false)
// writes (field order, omitempty, numbers), which the tests check against
// encoding/json; ok is false for any other type, and for strings that need
// escaping, which go through encoding/json.
func appendData(b []byte, v any) (out []byte, ok bool) {
	w := jsonWriter{b: b, ok: true}
	switch d := v.(type) {
	case MessageRef:
		w.raw(`{"id":`)
		w.str(d.ID)
		w.raw(`,"to":`)
		w.str(d.To)
	case Delivered:
		w.raw(`{"ids":`)
		w.strs(d.IDs)
	case Waiting:
		w.raw(`{"ids":`)
		w.strs(d.IDs)
	case StateChange:
		w.raw(`{`)
		sep := w.omitEmpty("agent_state", string(d.AgentState), "")
		sep = w.omitEmpty("session_state", string(d.SessionState), sep)
		w.omitEmpty("reason", d.Reason, sep)
	case Counters:
		w.raw(`{"turns":`)
		w.b = strconv.AppendInt(w.b, d.Turns, 10)
		w.raw(`,"input_tokens":`)
		w.b = strconv.AppendInt(w.b, d.InputTokens, 10)
		w.raw(`,"output_tokens":`)
		w.b = strconv.AppendInt(w.b, d.OutputTokens, 10)
		w.raw(`,"cost_usd":`)
		w.float(d.CostUSD)
		if d.ContextTokens != 0 {
			w.raw(`,"context_tokens":`)
			w.b = strconv.AppendInt(w.b, d.ContextTokens, 10)
		}
		if d.ContextWindow != 0 {
			w.raw(`,"context_window":`)
			w.b = strconv.AppendInt(w.b, d.ContextWindow, 10)
		}
	case Spawned:
		w.raw(`{"child_id":`)
		w.str(d.ChildID)
		w.raw(`,"name":`)
		w.str(d.Name)
		w.omitEmpty("spawn_key", d.SpawnKey, ",")
	default:
		return b, false
	}
	w.raw(`}`)
	return w.b, w.ok
}

// jsonWriter appends JSON to b; ok turns false at the first value it
// cannot write as encoding/json would.
type jsonWriter struct {
	b  []byte
	ok bool
}

func (w *jsonWriter) raw(s string) { w.b = append(w.b, s...) }

// str writes a string that needs no escaping: printable ASCII without '"'
// or '\'. Anything else is left to encoding/json.
func (w *jsonWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
			w.ok = false
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

// strs writes a []string; nil is null, as encoding/json writes it.
func (w *jsonWriter) strs(ss []string) {
	if ss == nil {
		w.raw("null")
		return
	}
	w.raw("[")
	for i, s := range ss {
		if i > 0 {
			w.raw(",")
		}
		w.str(s)
	}
	w.raw("]")
}

// omitEmpty writes the field name: s preceded by sep, unless s is empty
// (omitempty). It returns the separator of the next field.
func (w *jsonWriter) omitEmpty(name, s, sep string) string {
	if s == "" {
		return sep
	}
	w.raw(sep)
	w.b = append(w.b, '"')
	w.raw(name)
	w.raw(`":`)
	w.str(s)
	return ","
}

// float writes a float64 as encoding/json does: like ES6, %f unless the
// magnitude is below 1e-6 or from 1e21 on, then %e with a short exponent.
// NaN and infinities, which encoding/json refuses, are left to it.
func (w *jsonWriter) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.ok = false
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.b = strconv.AppendFloat(w.b, f, format, -1, 64)
	if format == 'e' {
		// e-09 -> e-9
		if n := len(w.b); n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

// appendJSONString appends s as a JSON string, as encoding/json writes it
// without HTML escaping. Plain printable ASCII, which every event type in
// practice is, is copied as it is; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7f || c == '"' || c == '\\' {
			q, err := marshal(s, false)
			if err != nil { // a string always marshals
				panic(err)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// checkLine verifies a line (without its newline) cheaply: the checksum and
// the leading seq field. It does not decode the rest of the JSON.
func checkLine(line []byte) (uint64, error) {
	if len(line) < len(seqPrefix)+crcTrailerLen+1 {
		return 0, fmt.Errorf("line too short (%d bytes)", len(line))
	}
	trailer := line[len(line)-crcTrailerLen:]
	if !bytes.HasPrefix(trailer, []byte(crcPrefix)) || !bytes.HasSuffix(trailer, []byte(`"}`)) {
		return 0, fmt.Errorf("no crc field at the end of the line")
	}
	var want [4]byte
	if _, err := hex.Decode(want[:], trailer[len(crcPrefix):len(crcPrefix)+8]); err != nil {
		return 0, fmt.Errorf("crc is not hex")
	}
	body := line[:len(line)-crcTrailerLen]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(want[:]) {
		return 0, fmt.Errorf("checksum mismatch")
	}
	if !bytes.HasPrefix(body, []byte(seqPrefix)) {
		return 0, fmt.Errorf("line does not start with %s", seqPrefix)
	}
	digits := body[len(seqPrefix):]
	if i := bytes.IndexByte(digits, ','); i > 0 {
		digits = digits[:i]
	}
	seq, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("bad seq %q", digits)
	}
	return seq, nil
}

// DecodeEvent verifies and decodes one events.jsonl line, with or without
// its trailing newline.
func DecodeEvent(line []byte) (Event, error) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	seq, err := checkLine(line)
	if err != nil {
		return Event{}, err
	}
	var e struct {
		Event
		CRC string `json:"crc"`
	}
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("invalid JSON: %v", err)
	}
	if e.Seq != seq || e.Type == "" {
		return Event{}, fmt.Errorf("malformed event")
	}
	// ts is written in UTC; refuse a time EncodeEvent could not write back.
	if y := e.Time.UTC().Year(); y < 0 || y > 9999 {
		return Event{}, fmt.Errorf("ts is outside the years 0000 to 9999 in UTC")
	}
	return e.Event, nil
}
