package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	wire "github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon/limits"

	"github.com/substrat/substrat/fsstore"
)

// readTurn reads the turn a script-provider model program is given.
func readTurn() bool {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	var turn struct {
		Type string `json:"type"`
	}
	return in.Scan() && json.Unmarshal(in.Bytes(), &turn) == nil && turn.Type == "turn"
}

// hogModel is a script-provider model program (hog-model in TestMain)
// that allocates and touches 1 GiB, 64 MiB at a time, then says it
// survived.
func hogModel() int {
	if !readTurn() {
		return 1
	}
	var keep [][]byte
	for range 16 {
		b := make([]byte, 64<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"type": "done", "text": fmt.Sprintf("survived with %d MiB", 64*len(keep))})
	return 0
}

// forkBombModel is a script-provider model program (forkbomb-model in
// TestMain) that starts processes that sleep, up to 300 of them and for
// at most 10 s in all, and fails at the first that cannot start. Each
// child sleeps 20 s at most, so that the bomb is bounded even if no limit
// stops it (the turn's end kills them sooner).
func forkBombModel() int {
	if !readTurn() {
		return 1
	}
	deadline := time.Now().Add(10 * time.Second)
	var started []*exec.Cmd
	defer func() {
		for _, c := range started {
			c.Process.Kill()
			c.Wait()
		}
	}()
	for i := range 300 {
		if time.Now().After(deadline) {
			break
		}
		c := exec.Command("sleep", "20")
		if err := c.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "fork %d failed: %v\n", i+1, err)
			return 1
		}
		started = append(started, c)
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"type": "done", "text": fmt.Sprintf("started %d processes", len(started))})
	return 0
}

// TestLimitsE2E: under a real daemon with cgroups, a model that allocates
// 1 GiB under --memory 256M and one that fork-bombs under --pids 64 both
// fail with the limit as the reason, are retried and gated like any
// failed turn, leave no process behind, and the daemon keeps serving.
func TestLimitsE2E(t *testing.T) {
	hog := lookPath(t, "hog-model")
	bomb := lookPath(t, "forkbomb-model")
	ok := lookPath(t, "approver-model")
	d := &e2eDaemon{t: t, home: shortHome(t), env: append(os.Environ(), "SUBSTRAT_HOME=")}
	// Failed turns are retried fast and gated at the third failure.
	cfg := `{"version": 1, "retry": {"limit": 3, "window": "1m", "base": "200ms"}}`
	if err := os.WriteFile(filepath.Join(d.home, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.start()
	t.Cleanup(d.kill)
	var st wire.StatusResult
	mustCall(d, wire.DaemonStatus, struct{}{}, &st)
	if st.Limits == nil {
		t.Fatal("daemon.status says nothing of limits")
	}
	t.Logf("limits: %s (%s)", st.Limits.Mechanism, st.Limits.Detail)
	if st.Limits.Mechanism == limits.Rlimit {
		t.Skipf("no cgroup to use here: %s", st.Limits.Detail)
	}
	dir := t.TempDir()
	mem256 := int64(256 << 20)
	var h, b, calm wire.AgentInfo
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "hog", Model: hog, WorkDir: dir, Limits: &fsstore.Limits{MemoryBytes: mem256}}, &h)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "bomb", Model: bomb, WorkDir: dir, Limits: &fsstore.Limits{Pids: 64}}, &b)
	mustCall(d, wire.AgentCreate, wire.CreateParams{Name: "calm", Model: ok, WorkDir: dir, Limits: &fsstore.Limits{MemoryBytes: mem256, Pids: 64}}, &calm)

	// The limit is recorded on each, as the created event's session.
	var info wire.InspectResult
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "bomb"}, &info)
	if l := info.Session.Limits; l == nil || l.Pids != 64 {
		t.Fatalf("bomb's limits: %+v", l)
	}

	for _, c := range []struct{ ref, want string }{
		{"hog", "memory limit 256M reached"},
		{"bomb", "process limit 64 reached"},
	} {
		var res wire.SendResult
		mustStream(d, wire.AgentSend, wire.SendMessageParams{Ref: c.ref, Text: "go", Wait: true}, &res)
		if !strings.Contains(res.Failed, c.want) {
			t.Fatalf("the turn of %s: failed %q, text %q; want the reason %q", c.ref, res.Failed, res.Text, c.want)
		}
		t.Logf("%s: %s", c.ref, res.Failed)
		// The daemon keeps serving: another agent's turn runs.
		if r := d.send("calm", "anything to approve?"); r.Text != "approved 0" {
			t.Fatalf("calm's turn: %q", r.Text)
		}
	}

	// Retried and gated like any failed turn, with the reason.
	for _, ref := range []string{"hog", "bomb"} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			mustCall(d, wire.AgentInspect, wire.RefParams{Ref: ref}, &info)
			if info.Session.Gated {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s was not gated: %s", ref, info.Session.StateReason)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(info.Session.StateReason, "limit") || !strings.Contains(info.Session.StateReason, "reached") {
			t.Fatalf("%s gated with reason %q", ref, info.Session.StateReason)
		}
	}

	// Nothing is left in the agents' groups between turns.
	hash := limits.HomeHash(d.home)
	for _, id := range []string{h.ID, b.ID} {
		for _, ctl := range []string{"memory", "pids"} {
			procs := filepath.Join("/sys/fs/cgroup", ctl, "substrat", hash, id, "cgroup.procs")
			if st.Limits.Mechanism == limits.CgroupV2 {
				continue
			}
			// The last retry's processes may still be on their way out
			// (killed, not yet reaped): wait for them, bounded.
			var data []byte
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var err error
				if data, err = os.ReadFile(procs); err != nil {
					t.Fatalf("the agent's group: %v", err)
				}
				if strings.TrimSpace(string(data)) == "" || time.Now().After(deadline) {
					break
				}
			}
			if strings.TrimSpace(string(data)) != "" {
				t.Fatalf("processes left in %s: %s", procs, data)
			}
		}
	}

	// Limits change with agent.limits (a "limits" event), and the group
	// goes when the agent ends.
	none := int64(fsstore.NoLimit)
	mustCall(d, wire.AgentLimits, wire.LimitsParams{Ref: "calm", Pids: &none}, nil)
	mustCall(d, wire.AgentInspect, wire.RefParams{Ref: "calm"}, &info)
	if l := info.Session.Limits; l == nil || l.Pids != fsstore.NoLimit || l.MemoryBytes != mem256 {
		t.Fatalf("calm's limits after agent.limits: %+v", l)
	}
	mustCall(d, wire.AgentTerminate, wire.TerminateParams{Ref: "hog"}, nil)
	if st.Limits.Mechanism == limits.CgroupV1 {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory/substrat", hash, h.ID)); !os.IsNotExist(err) {
			t.Fatalf("the terminated agent's group is still there: %v", err)
		}
	}

	// A daemon killed with -9 leaves its groups behind; the next start
	// reaps them.
	bombGroup := filepath.Join("/sys/fs/cgroup/pids/substrat", hash, b.ID)
	d.kill()
	if st.Limits.Mechanism == limits.CgroupV1 {
		if _, err := os.Stat(bombGroup); err != nil {
			t.Fatalf("the group of bomb after kill -9: %v", err)
		}
	}
	d.start()
	// What matters is that nothing the killed daemon's bomb started
	// survives the start; its group's directory may stay, empty, for
	// the agent that still lives (gated), or go.
	procsFile := filepath.Join(bombGroup, "cgroup.procs")
	var left []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left, _ = os.ReadFile(procsFile)
		if strings.TrimSpace(string(left)) == "" || time.Now().After(deadline) {
			break
		}
	}
	if strings.TrimSpace(string(left)) != "" {
		rep := &wire.Report{}
		e2eCall(d, wire.DaemonRecovery, struct{}{}, &rep)
		log, _ := os.ReadFile(filepath.Join(d.home, "daemon.log"))
		t.Fatalf("processes of bomb outlived the kill -9 and the start: %s; reaped %q; log:\n%s", left, rep.Reaped, log)
	}
	if r := d.send("calm", "still there?"); r.Text != "approved 0" {
		t.Fatalf("calm's turn after the restart: %q", r.Text)
	}
	mustCall(d, wire.DaemonStatus, struct{}{}, &st)

	// A clean stop removes every group of the home.
	mustCall(d, wire.DaemonStop, struct{}{}, nil)
	select {
	case <-d.done:
		d.cmd = nil
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	if st.Limits.Mechanism == limits.CgroupV1 {
		for _, ctl := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctl, "substrat", hash)); !os.IsNotExist(err) {
				t.Fatalf("the home's groups are still there after the stop: %v", err)
			}
		}
	}
}
