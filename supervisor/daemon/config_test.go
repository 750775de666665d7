package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/config"
	"github.com/substrat/substrat/supervisor/rpc"
)

// TestConfigAdoptedLive: the daemon starts with config.json, adopts a
// valid edit while it runs (the next agent gets the new default model, a
// pool grows), and refuses an invalid one with its line, keeping what it
// had; fixing the file is adopted again.
func TestConfigAdoptedLive(t *testing.T) {
	home := shortDir(t)
	write := func(s string) {
		t.Helper()
		tmp := filepath.Join(home, "config.json.tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, fsstore.Layout{Home: home}.Config()); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"version": 1, "default_model": "first", "pools": {"big": 1}}`)
	sock := startDaemonAt(t, home)
	ctx := context.Background()
	modelOf := func(name string) string {
		t.Helper()
		var a api.AgentInfo
		if err := callAt(ctx, sock, api.AgentCreate, api.CreateParams{Name: name}, &a); err != nil {
			t.Fatal(err)
		}
		return a.Model
	}
	show := func() config.Effective {
		var eff config.Effective
		if err := callAt(ctx, sock, api.ConfigShow, struct{}{}, &eff.ConfigReport); err != nil {
			t.Fatal(err)
		}
		return eff
	}
	if m := modelOf("a1"); m != "first" {
		t.Fatalf("the first agent's model %q, want the file's", m)
	}

	write(`{"version": 1, "default_model": "second", "pools": {"big": 3}}`)
	eventually(t, "the edit adopted", func() bool { return valueOf(show(), "default_model") == "second" })
	if m := modelOf("a2"); m != "second" {
		t.Fatalf("after the edit the model is %q", m)
	}
	var st api.StatusResult
	callAt(ctx, sock, api.DaemonStatus, struct{}{}, &st)
	if !hasPool(st, "big", 3) {
		t.Errorf("pools after the edit: %+v", st.Pools)
	}

	write("{\n  \"version\": 1,\n  \"default_model\": \"third\",\n  \"turn_timeout\": \"soon\"\n}")
	eventually(t, "the refusal", func() bool { return show().FileError != "" })
	if e := show().FileError; !strings.Contains(e, "line 4, column 3: turn_timeout") {
		t.Errorf("the refusal says %q", e)
	}
	if m := modelOf("a3"); m != "second" {
		t.Fatalf("after a refused edit the model is %q, want the last good one", m)
	}

	write(`{"version": 1, "default_model": "fixed"}`)
	eventually(t, "the fix adopted", func() bool { e := show(); return e.FileError == "" && valueOf(e, "default_model") == "fixed" })
	if m := modelOf("a4"); m != "fixed" {
		t.Fatalf("after the fix the model is %q", m)
	}
}

func valueOf(eff config.Effective, key string) any {
	for _, v := range eff.Values {
		if v.Key == key {
			return v.Value
		}
	}
	return nil
}

func hasPool(st api.StatusResult, name string, size int) bool {
	for _, p := range st.Pools {
		if p.Name == name && p.Size == size {
			return true
		}
	}
	return false
}

// TestNotifyCommand: notify_command runs for each message to USER, with
// the text on stdin and the sender in the environment.
func TestNotifyCommand(t *testing.T) {
	home := shortDir(t)
	out := filepath.Join(home, "notified")
	cfg := `{"version": 1, "notify_command": ["sh", "-c", "{ echo \"$SUBSTRAT_FROM $SUBSTRAT_KIND\"; cat; } > ` + out + `"]}`
	if err := os.WriteFile(fsstore.Layout{Home: home}.Config(), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := startDaemonAt(t, home)
	ctx := context.Background()
	c, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := callInto(ctx, c, api.AgentCreate, api.CreateParams{Name: "r"}, nil); err != nil {
		t.Fatal(err)
	}
	var res api.SendResult
	if err := streamInto(ctx, c, api.AgentSend, api.SendMessageParams{Ref: "r", Wait: true, Text: `!send_message {"recipient":"USER","text":"all done"}`}, &res); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the notification", func() bool {
		b, err := os.ReadFile(out)
		env, js, _ := strings.Cut(string(b), "\n")
		var n api.Notification
		return err == nil && env == "r message" && strings.HasSuffix(js, "}\n") && json.Unmarshal([]byte(js), &n) == nil &&
			n.Text == "all done" && n.Kind == api.NotifyMessage && n.AgentName == "r" && n.AgentPath == "r" && n.Version == 1
	})
}
