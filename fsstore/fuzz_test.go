package fsstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Fuzz targets for the decoders of the on-disk format. Seeds are added
// here and committed under testdata/fuzz/<Name>/. Random bytes almost never
// carry a valid checksum, so each target also runs on its input with the
// checksums recomputed (withCRC), which lets the fuzzer explore the JSON
// behind the checksum.

// seedEvents returns a few valid event lines.
func seedEvents(t testing.TB) [][]byte {
	sess := &Session{Version: Version, ID: idA, Name: "alpha", Provider: "script", AgentState: AgentIdle,
		SessionState: SessionCreated, CreatedAt: epoch, UpdatedAt: epoch}
	created, err := json.Marshal(sess)
	if err != nil {
		t.Fatal(err)
	}
	evs := []Event{
		{Seq: 1, Time: epoch, Type: EvCreated, Data: created},
		{Seq: 2, Time: epoch.Add(123456789), Type: EvState, Data: []byte(`{"agent_state":"BUSY","session_state":"ACTIVE"}`)},
		{Seq: 3, Time: epoch.Add(time.Second), Type: EvTurn, Data: []byte(`{"turns":1,"input_tokens":10,"output_tokens":2,"cost_usd":0.5}`)},
		{Seq: 4, Time: epoch.Add(2 * time.Second), Type: EvSent, Data: []byte(`{"id":"` + idMsg1 + `","to":"USER"}`)},
		{Seq: 5, Time: epoch.Add(3 * time.Second), Type: "custom"},
		{Seq: 6, Time: epoch.Add(4 * time.Second), Type: EvMetadata, Data: []byte(`{"key":"k","value":"<a&b>\u00e9\n"}`)},
	}
	var out [][]byte
	for _, e := range evs {
		out = append(out, mustEncodeEvent(t, e))
	}
	return out
}

// withCRC returns data with the checksum of every line that looks like an
// event recomputed (or added, for a line ending in '}' without one).
func withCRC(data []byte) []byte {
	var out []byte
	for _, l := range lines(data) {
		nl := bytes.HasSuffix(l, []byte{'\n'})
		l = bytes.TrimSuffix(l, []byte{'\n'})
		var body []byte
		switch {
		case len(l) >= crcTrailerLen && bytes.HasPrefix(l[len(l)-crcTrailerLen:], []byte(crcPrefix)) && bytes.HasSuffix(l, []byte(`"}`)):
			body = l[:len(l)-crcTrailerLen]
		case bytes.HasSuffix(l, []byte{'}'}):
			body = l[:len(l)-1]
		default:
			out = append(out, l...)
			if nl {
				out = append(out, '\n')
			}
			continue
		}
		out = append(out, body...)
		out = append(out, crcPrefix...)
		out = hex.AppendEncode(out, binary.BigEndian.AppendUint32(nil, crc32.Checksum(body, castagnoli)))
		out = append(out, '"', '}')
		if nl {
			out = append(out, '\n')
		}
	}
	return out
}

func FuzzDecodeEvent(f *testing.F) {
	for _, l := range seedEvents(f) {
		f.Add(l)
		f.Add(l[:len(l)-1])
		f.Add(l[:len(l)/2])
	}
	f.Add([]byte(""))
	f.Add([]byte("\n"))
	f.Add(withCRC([]byte(`{"seq":1,"ts":"9999-12-31T23:59:59-01:00","type":"x"}`)))
	f.Add(withCRC([]byte(`{"seq":1,"ts":"2026-01-02T03:04:05+05:30","type":"x","data":{ "a" : [1, 2e3, "<"] }}`)))
	f.Add(withCRC([]byte(`{"seq":2,"seq":3,"ts":"2026-01-02T03:04:05Z","type":"x"}`)))
	f.Add(withCRC([]byte(`{"seq":1,"ts":"2026-01-02T03:04:05Z","Type":"x","data":null,"crc":"00000000"}`)))
	f.Fuzz(func(t *testing.T, line []byte) {
		checkDecodeEvent(t, line)
		checkDecodeEvent(t, withCRC(line))
	})
}

func checkDecodeEvent(t *testing.T, line []byte) {
	e, err := DecodeEvent(line)
	if err != nil {
		return
	}
	if e.Seq == 0 || e.Type == "" {
		t.Fatalf("DecodeEvent(%q) accepted seq %d type %q", line, e.Seq, e.Type)
	}
	enc, err := EncodeEvent(e)
	if err != nil {
		t.Fatalf("DecodeEvent(%q) = %+v, which EncodeEvent refuses: %v", line, e, err)
	}
	e2, err := DecodeEvent(enc)
	if err != nil {
		t.Fatalf("EncodeEvent(%+v) = %q, which DecodeEvent refuses: %v", e, enc, err)
	}
	if e2.Seq != e.Seq || e2.Type != e.Type || !e2.Time.Equal(e.Time) || !jsonEqual(e.Data, e2.Data) {
		t.Fatalf("round trip of %q:\n got %+v\nwant %+v", line, e2, e)
	}
	enc2, err := EncodeEvent(e2)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable: %q then %q (%v)", enc, enc2, err)
	}
	if s, err := checkLine(bytes.TrimSuffix(enc, []byte{'\n'})); err != nil || s != e.Seq {
		t.Fatalf("checkLine(%q) = %d, %v", enc, s, err)
	}
}

// jsonEqual reports whether two JSON texts (either may be empty) hold the
// same value.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	dec := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return err.Error()
		}
		return v
	}
	return reflect.DeepEqual(dec(a), dec(b))
}

func FuzzDecodeSession(f *testing.F) {
	full := &Session{Version: Version, ID: idB, Name: "beta", ParentID: idA, Provider: "claude", Model: "m",
		Instructions: "do <things> & \"more\"", Workspace: "proj/main", AgentState: AgentWaiting, SessionState: SessionSuspended,
		StateReason: "daemon stop", ProviderSessionID: "ps-1", StateBlob: []byte{0, 1, 2, 255}, SpawnKey: "toolu_1",
		Metadata: map[string]string{"team": "red", "": "empty key"}, Counters: Counters{Turns: 3, InputTokens: 100, OutputTokens: 50, CostUSD: 0.125},
		CreatedAt: epoch, UpdatedAt: epoch.Add(time.Hour), LastSeq: 9}
	minimal := &Session{Version: Version, ID: idA, Name: "a", Provider: "p", AgentState: AgentIdle, SessionState: SessionCreated}
	for _, s := range []*Session{full, minimal} {
		b, err := EncodeSession(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"id":"` + idA + `","name":"a","provider":"p","agent_state":"NAPPING","session_state":"CREATED"}`))
	f.Add([]byte(`{"version":1,"id":"` + idA + `","name":"a","provider":"p","agent_state":"IDLE","session_state":"CREATED","colour":"red"}`))
	f.Add([]byte(`{"version":1,"id":"` + idA + `","name":"a","provider":"p","agent_state":"IDLE","session_state":"CREATED","metadata":{},"state_blob":"","created_at":"2026-01-02T03:04:05+05:30"}`))
	f.Add([]byte(`{"version":1,"id":"` + idA + `","name":"a","provider":"p","agent_state":"IDLE","session_state":"CREATED"} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSession(data)
		if err != nil {
			if s != nil {
				t.Fatalf("DecodeSession returned a session and an error %v", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("DecodeSession(%q) accepted an invalid session: %v", data, err)
		}
		enc, err := EncodeSession(s)
		if err != nil {
			t.Fatalf("DecodeSession(%q) = %+v, which EncodeSession refuses: %v", data, s, err)
		}
		s2, err := DecodeSession(enc)
		if err != nil {
			t.Fatalf("EncodeSession(%+v) = %s, which DecodeSession refuses: %v", s, enc, err)
		}
		if !sessionsEqual(s, s2) {
			t.Fatalf("round trip of %q:\n got %+v\nwant %+v", data, s2, s)
		}
		enc2, err := EncodeSession(s2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\nthen\n%s (%v)", enc, enc2, err)
		}
	})
}

// sessionsEqual compares sessions as the format sees them: by their JSON.
// A field-by-field comparison would tell apart what JSON cannot (an empty
// map or list from a missing one, two *time.Location of the same offset)
// and which the store never relies on.
func sessionsEqual(a, b *Session) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		return false
	}
	jb, err := json.Marshal(b)
	return err == nil && bytes.Equal(ja, jb) && a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) &&
		a.ID == b.ID && a.LastSeq == b.LastSeq && a.AgentState == b.AgentState && a.SessionState == b.SessionState
}

func FuzzScanLog(f *testing.F) {
	evs := seedEvents(f)
	log := bytes.Join(evs, nil)
	f.Add(log)
	f.Add([]byte{})
	f.Add([]byte("\n"))
	f.Add(log[:len(log)-1])
	f.Add(log[:len(log)-20])
	f.Add(append(bytes.Clone(log), make([]byte, 4096)...))
	f.Add(bytes.Join([][]byte{evs[0], evs[1], []byte("garbage\n"), evs[2]}, nil))
	f.Add(bytes.Join([][]byte{evs[0], evs[2], evs[1]}, nil))
	f.Add(bytes.Join([][]byte{evs[0], evs[0]}, nil))
	f.Add(bytes.Join([][]byte{evs[0], []byte("x\n"), []byte("y\n"), evs[1][:10]}, nil))
	// A line longer than bufio's 64 KiB buffer.
	big := mustEncodeEvent(f, Event{Seq: 2, Time: epoch, Type: "pad", Data: []byte(`"` + strings.Repeat("p", 70<<10) + `"`)})
	f.Add(bytes.Join([][]byte{evs[0], big, evs[2]}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScanLog(t, data)
		checkScanLog(t, withCRC(data))
	})
}

func checkScanLog(t *testing.T, data []byte) {
	var pos int64
	var seqs []uint64
	info, err := scanLog(bytes.NewReader(data), "events.jsonl", func(seq uint64, line []byte) error {
		end := pos + int64(len(line))
		if end >= int64(len(data)) || !bytes.Equal(line, data[pos:end]) || data[end] != '\n' {
			t.Fatalf("visit got line %q at offset %d, which is not a whole line of the input", line, pos)
		}
		pos = end + 1
		seqs = append(seqs, seq)
		return nil
	})
	ref := refScanLog(data)
	if err != nil {
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("scanLog(%q) failed with %T %v, not a *CorruptError", data, err, err)
		}
		if ce.Path != "events.jsonl" || ce.Line < 1 || ce.Offset < 0 || ce.Offset >= int64(len(data)) ||
			(ce.Offset > 0 && data[ce.Offset-1] != '\n') {
			t.Fatalf("scanLog(%q): %+v does not point at the start of a line", data, ce)
		}
		if ref.errLine != ce.Line || ref.errOff != ce.Offset {
			t.Fatalf("scanLog(%q): corruption at line %d offset %d, reference says line %d offset %d",
				data, ce.Line, ce.Offset, ref.errLine, ref.errOff)
		}
		return
	}
	if ref.errLine != 0 {
		t.Fatalf("scanLog(%q) = %+v, reference says corruption at line %d", data, info, ref.errLine)
	}
	if info.Size+info.TornLen != int64(len(data)) {
		t.Fatalf("scanLog(%q): Size %d + TornLen %d != %d", data, info.Size, info.TornLen, len(data))
	}
	if info.Size != pos || (info.Size > 0 && data[info.Size-1] != '\n') {
		t.Fatalf("scanLog(%q): Size %d is not the end of the last visited line (%d)", data, info.Size, pos)
	}
	if info.Lines != len(seqs) || info.LastSeq != uint64(len(seqs)) {
		t.Fatalf("scanLog(%q): %+v after visiting %v", data, info, seqs)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("scanLog(%q) visited seqs %v", data, seqs)
		}
	}
	if (info.TornLen > 0) != (info.TornReason != "") {
		t.Fatalf("scanLog(%q): TornLen %d, TornReason %q", data, info.TornLen, info.TornReason)
	}
	if info.LastSeq != ref.lastSeq || info.Size != ref.size || info.TornLen != ref.torn {
		t.Fatalf("scanLog(%q) = %+v, reference says last seq %d size %d torn %d", data, info, ref.lastSeq, ref.size, ref.torn)
	}
	// The valid prefix is a clean log.
	again, err := scanLog(bytes.NewReader(data[:info.Size]), "events.jsonl", nil)
	if err != nil || again.LastSeq != info.LastSeq || again.TornLen != 0 || again.Size != info.Size {
		t.Fatalf("rescan of the valid prefix of %q: %+v, %v", data, again, err)
	}
}

type refResult struct {
	lastSeq    uint64
	size, torn int64
	errLine    int
	errOff     int64
}

// refScanLog is a plain reading of the rules in doc.go, over the whole
// input at once: a damaged line followed by a valid one, or a valid line
// with the wrong seq, is corruption; damage with nothing valid after it is
// a torn tail.
func refScanLog(data []byte) refResult {
	var (
		r       refResult
		off     int64
		badLine int
		badOff  int64
	)
	for n := 1; off < int64(len(data)); n++ {
		start := off
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			if badLine == 0 {
				badLine, badOff = n, start
			}
			off = int64(len(data))
			break
		}
		line := data[off : off+int64(i)]
		off += int64(i) + 1
		ok := i+1 <= MaxEventSize
		var seq uint64
		if ok {
			var err error
			seq, err = checkLine(line)
			ok = err == nil
		}
		if !ok {
			if badLine == 0 {
				badLine, badOff = n, start
			}
			continue
		}
		if badLine != 0 {
			r.errLine, r.errOff = badLine, badOff
			return r
		}
		if seq != r.lastSeq+1 {
			r.errLine, r.errOff = n, start
			return r
		}
		r.lastSeq, r.size = seq, off
	}
	if badLine != 0 {
		r.torn = off - r.size
	}
	return r
}
