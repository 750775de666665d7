package fsstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
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
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(line), MaxEventSize)
	}
	return line, nil
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
