package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"
)

// A daemon whose descriptor limit is low keeps working past the limit:
// the logs of idle agents are closed and reopened when needed. At
// RLIMIT_NOFILE 1024 the 1,007th spawn-and-complete used to fail with
// "too many open files", and the next failed accept stopped the daemon.
func TestLowDescriptorLimit(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("prlimit (util-linux) is missing")
	}
	bin := lookPath(t, "substrat")
	home := shortHome(t)
	const limit = 128
	d := &e2eDaemon{t: t, home: home, env: append(os.Environ(), "SUBSTRAT_HOME=")}
	log, err := os.Create(filepath.Join(t.TempDir(), "daemon.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	d.cmd = exec.Command(prlimit, fmt.Sprintf("--nofile=%d:%d", limit, limit), bin, "daemon", "run", "--home", home)
	d.cmd.Env, d.cmd.Stdout, d.cmd.Stderr = d.env, log, log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(d.kill)
	deadline := time.Now().Add(30 * time.Second)
	for e2eCall(d, api.DaemonStatus, struct{}{}, nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var st api.StatusResult
	mustCall(d, api.DaemonStatus, struct{}{}, &st)
	const agents = 2 * limit
	for i := range agents {
		var a api.AgentInfo
		mustCall(d, api.AgentCreate, api.CreateParams{Name: fmt.Sprintf("r%d", i)}, &a)
		res := d.send(a.ID, `!spawn_agent {"name":"kid","instructions":"!complete {\"result\":\"done\"}"}`)
		if strings.Contains(res.Text, "error") {
			t.Fatalf("agent %d: %s", i, res.Text)
		}
	}
	// Every child completed, and the daemon still answers.
	time.Sleep(500 * time.Millisecond)
	done := 0
	for _, a := range d.agents() {
		if a.Name == "kid" && a.AgentState == "TERMINATED" {
			done++
		}
	}
	if done < agents-5 {
		t.Errorf("%d of %d children completed", done, agents)
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", st.Pid))
	t.Logf("%d agents created and %d children completed under RLIMIT_NOFILE %d; the daemon holds %d descriptors", 2*agents, done, limit, len(fds))
	if len(fds) >= limit {
		t.Errorf("the daemon holds %d descriptors, its limit is %d", len(fds), limit)
	}
}
