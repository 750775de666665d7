package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor"
)

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		{"syntax", "{\n  \"version\": 1,\n  \"default_model\": \"x\"\n  \"pools\": {}\n}", "line 4, column 3"},
		{"unknown field", "{\n  \"version\": 1,\n  \"defualt_model\": \"x\"\n}", `line 3, column 3: unknown field "defualt_model"`},
		{"wrong type", "{\"version\": 1,\n\"max_slots\": \"four\"}", "line 2, column 20: max_slots: want int, not string"},
		{"version", `{"version": 2}`, "version 2 is not 1"},
		{"no version", `{"default_model": "x"}`, "version 0 is not 1"},
		{"duration", "{\"version\": 1,\n \"turn_timeout\": \"ten minutes\"}", `line 2, column 2: turn_timeout: "ten minutes" is not a positive duration`},
		{"negative duration", `{"version": 1, "retry": {"base": "-1s"}}`, "retry.base"},
		{"pool", `{"version": 1, "pools": {"big": 0}}`, `pool "big" needs a name and at least one slot`},
		{"notify", `{"version": 1, "notify_command": [""]}`, "the program is empty"},
		{"context window", `{"version": 1, "context_windows": {"openai": {"qwen": 0}}}`, `context_windows: "openai" "qwen" needs`},
		{"compact_at", `{"version": 1, "compact_at": 1.5}`, "compact_at must be a share of the window between 0.2 and 1"},
		{"truncated", "{\"version\": 1,", "ends before its JSON does"},
		{"memory", "{\"version\": 1,\n \"limits\": {\"memory\": \"lots\"}}", `line 2, column 2: limits: "lots" is not a size`},
		{"pids", `{"version": 1, "limits": {"pids": 2}}`, "process limit 2 is below 8"},
		{"cpu weight", `{"version": 1, "limits": {"cpu_weight": 20000}}`, "cpu weight 20000"},
		{"two values", `{"version": 1} {}`, "more than one JSON value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse: %v, want %q", err, c.want)
			}
		})
	}
}

func TestResolvePrecedence(t *testing.T) {
	f, err := Parse([]byte(`{"version": 1, "default_provider": "claude", "default_model": "file-model", "max_slots": 6,
		"pools": {"big": 2}, "turn_timeout": "5m", "retry": {"limit": 3}, "notify_command": ["true"],
		"context_windows": {"openai": {"qwen": 32768, "*": 8192}}, "compact_at": 0.7}`))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SUBSTRAT_MODEL": "env-model", "SUBSTRAT_TURN_TIMEOUT": "7m"}
	eff, err := Resolve(f, func(k string) string { return env[k] }, map[string]string{"turn_timeout": "9m"})
	if err != nil {
		t.Fatal(err)
	}
	s := eff.Settings
	if s.DefaultProvider != "claude" || s.DefaultModel != "env-model" || s.TurnTimeout != 9*time.Minute ||
		s.Pools["big"] != 2 || s.Pools[supervisor.DefaultPool] != 6 || eff.MaxSlots != 6 || s.RetryLimit != 3 ||
		s.RetryWindow != time.Minute || len(s.Notify) != 1 || s.ApprovalTimeout != 10*time.Minute ||
		s.ContextWindows["openai"]["qwen"] != 32768 || s.ContextWindows["openai"]["*"] != 8192 || s.CompactAt != 0.7 {
		t.Errorf("settings %+v, max slots %d", s, eff.MaxSlots)
	}
	want := map[string]string{"default_provider": FromFile, "default_model": FromEnv, "turn_timeout": FromFlag,
		"max_slots": FromFile, "pools": FromFile, "retry": FromFile, "approval_timeout": FromDefault, "permission_mode": FromDefault,
		"context_windows": FromFile, "compact_at": FromFile}
	for _, v := range eff.Values {
		if w, ok := want[v.Key]; ok && v.Source != w {
			t.Errorf("%s from %s, want %s", v.Key, v.Source, w)
		}
	}
	// No file: the defaults.
	eff, err = Resolve(nil, func(string) string { return "" }, nil)
	if err != nil || eff.Settings.DefaultProvider != "script" || eff.MaxSlots != 4 {
		t.Errorf("defaults: %+v %v", eff.Settings, err)
	}
}

func TestResolveRefuses(t *testing.T) {
	for _, c := range []struct {
		file  string
		env   map[string]string
		flags map[string]string
		want  string
	}{
		{`{"version": 1, "permission_mode": "bypassPermissions"}`, nil, nil, "would give every new agent full tool permission"},
		{`{"version": 1, "permission_mode": "yolo"}`, nil, nil, `permission_mode "yolo"`},
		{`{"version": 1}`, map[string]string{"SUBSTRAT_MAX_SLOTS": "many"}, nil, "max_slots (from the environment)"},
		{`{"version": 1}`, nil, map[string]string{"turn_timeout": "0s"}, "turn_timeout (from the flag)"},
	} {
		f, err := Parse([]byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Resolve(f, func(k string) string { return c.env[k] }, c.flags)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v %v: %v, want %q", c.file, c.env, c.flags, err, c.want)
		}
	}
}

// Load refuses, at once and naming the file, a config.json that is not a
// regular file within the cap: a FIFO (which used to block the daemon's
// start and, replaced while it ran, its stop), a symlink to /dev/zero
// (which it used to read without end), a directory, or a file over
// fsstore.MaxJSONSize (valid JSON padded with blanks).
func TestLoadRefusesSpecialFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(p string) error
		want string
		is   error
	}{
		{"a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o600) }, "not a regular file: a FIFO", fsstore.ErrNotRegular},
		{"a symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "not a regular file: a symlink", fsstore.ErrNotRegular},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }, "not a regular file: a directory", fsstore.ErrNotRegular},
		{"oversized", func(p string) error {
			return os.WriteFile(p, append([]byte(`{"version": 1}`), bytes.Repeat([]byte(" "), fsstore.MaxJSONSize)...), 0o600)
		}, "file too large", fsstore.ErrFileTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.json")
			if err := c.make(p); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := Load(p)
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
					t.Fatalf("Load: %v, want an error naming %s and saying %q", err, p, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Load blocked")
			}
		})
	}
	// A regular file at the cap is read.
	p := filepath.Join(t.TempDir(), "config.json")
	big := append([]byte(`{"version": 1}`), bytes.Repeat([]byte(" "), fsstore.MaxJSONSize-len(`{"version": 1}`))...)
	if err := os.WriteFile(p, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := Load(p); err != nil || f == nil {
		t.Fatalf("Load of a file at the cap: %v", err)
	}
}

func TestResolveLimits(t *testing.T) {
	f, err := Parse([]byte(`{"version": 1, "limits": {"memory": "2G", "pids": 512, "cpu_weight": 50}}`))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Resolve(f, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := eff.Settings.Limits; l != (fsstore.Limits{MemoryBytes: 2 << 30, Pids: 512, CPUWeight: 50}) {
		t.Fatalf("limits %+v", l)
	}
	for _, v := range eff.Values {
		if v.Key == "limits" && (v.Source != FromFile || v.Value.(map[string]any)["memory"] != "2G") {
			t.Fatalf("shown as %+v", v)
		}
	}
}

// TestResolvePoolLimits: pool_limits are read per pool, and a bad one is
// refused with the pool's name.
func TestResolvePoolLimits(t *testing.T) {
	f, err := Parse([]byte(`{"version": 1, "pools": {"big": 4}, "pool_limits": {"big": {"memory": "4G", "pids": 1000}}}`))
	if err != nil {
		t.Fatal(err)
	}
	eff, err := Resolve(f, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := eff.Settings.PoolLimits["big"]; l != (fsstore.Limits{MemoryBytes: 4 << 30, Pids: 1000}) {
		t.Fatalf("pool limits %+v", eff.Settings.PoolLimits)
	}
	f, err = Parse([]byte(`{"version": 1, "pool_limits": {"big": {"memory": "lots"}}}`))
	if err == nil {
		_, err = Resolve(f, func(string) string { return "" }, nil)
	}
	if err == nil || !strings.Contains(err.Error(), `"big"`) {
		t.Fatalf("a bad pool limit: %v", err)
	}
}
