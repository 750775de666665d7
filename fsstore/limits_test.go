package fsstore

import (
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512M", 512 << 20, true},
		{"512m", 512 << 20, true},
		{"1G", 1 << 30, true},
		{"1GiB", 1 << 30, true},
		{"2gb", 2 << 30, true},
		{"1536K", 1536 << 10, true},
		{"4096", 4096, true},
		{"none", NoLimit, true},
		{"max", NoLimit, true},
		{"", 0, false},
		{"0", 0, false},
		{"-5M", 0, false},
		{"lots", 0, false},
		{"1.5G", 0, false},
		{"99999999999T", 0, false},
	} {
		got, err := ParseBytes(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
		if c.ok {
			back, err := ParseBytes(FormatBytes(got))
			if err != nil || back != got {
				t.Errorf("FormatBytes(%d) = %q does not read back (%d, %v)", got, FormatBytes(got), back, err)
			}
		}
	}
	if s := FormatBytes(512 << 20); s != "512M" {
		t.Errorf("FormatBytes(512M) = %q", s)
	}
}

func TestLimits(t *testing.T) {
	l := Limits{MemoryBytes: 512 << 20, Pids: NoLimit}
	d := Limits{MemoryBytes: 1 << 30, Pids: 100, CPUWeight: 50}
	if got := l.Over(d); got != (Limits{MemoryBytes: 512 << 20, Pids: NoLimit, CPUWeight: 50}) {
		t.Errorf("Over: %+v", got)
	}
	if got := l.Over(d).Enforced(); got != (Limits{MemoryBytes: 512 << 20, CPUWeight: 50}) {
		t.Errorf("Enforced: %+v", got)
	}
	if s := l.String(); s != "memory 512M, pids none, cpu weight default" {
		t.Errorf("String: %q", s)
	}
	for _, bad := range []Limits{{MemoryBytes: 1 << 10}, {Pids: 2}, {CPUWeight: 10001}, {MemoryBytes: -2}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestApplyLimits: a "limits" event sets the whole setting; an empty one
// clears it; a bad one is refused.
func TestApplyLimits(t *testing.T) {
	base := &Session{Version: Version, ID: idA, Name: "a", Provider: "p", AgentState: AgentIdle, SessionState: SessionCreated}
	s, err := Apply(base, Event{Seq: 2, Time: epoch, Type: EvLimits, Data: []byte(`{"memory_bytes":536870912,"pids":64}`)})
	if err != nil || s.Limits == nil || *s.Limits != (Limits{MemoryBytes: 512 << 20, Pids: 64}) {
		t.Fatalf("applied: %+v, %v", s.Limits, err)
	}
	c := s.Clone()
	c.Limits.Pids = 1
	if s.Limits.Pids != 64 {
		t.Fatal("Clone shares the limits")
	}
	s, err = Apply(s, Event{Seq: 3, Time: epoch, Type: EvLimits, Data: []byte(`{}`)})
	if err != nil || s.Limits != nil {
		t.Fatalf("cleared: %+v, %v", s.Limits, err)
	}
	if _, err := Apply(base, Event{Seq: 2, Time: epoch, Type: EvLimits, Data: []byte(`{"pids":3}`)}); err == nil {
		t.Fatal("a process limit of 3 was applied")
	}
	if !changesSession(EvLimits) {
		t.Fatal("limits events do not change the session")
	}
}
