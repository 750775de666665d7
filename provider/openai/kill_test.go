package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
)

// TestKillDuringCompaction: a process whose session is compacting is
// killed with SIGKILL at each step of the compaction (after the summary,
// after the new base's temp file is written, after it is renamed and
// before the journal is emptied); the conversation restored from its
// files is whole, the old one or the new one, and goes on.
func TestKillDuringCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, step := range []string{"summarized", "temp-written", "renamed"} {
		t.Run(step, func(t *testing.T) {
			f := newWindowFake(t, 3000)
			dir := t.TempDir()
			cfg := config(t)
			progress := filepath.Join(dir, "progress")
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "OPENAI_KILL_HELPER=1", "OPENAI_KILL_STEP="+step, "OPENAI_KILL_URL="+f.srv.URL+"/v1",
				"OPENAI_KILL_DIR="+dir, "OPENAI_KILL_AGENT="+cfg.AgentID, "OPENAI_KILL_PROGRESS="+progress)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			marker := progress + ".at-" + step
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Stat(marker); err == nil {
					break
				}
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("the child never reached %s:\n%s", step, out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("child: %v\n%s", err, out.String())
			}
			data, _ := os.ReadFile(progress)
			done, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatalf("progress %q", data)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "sessions", ".*")); step == "temp-written" && len(left) != 1 {
				t.Errorf("the base's temp file: %v", left)
			}
			p := windowProvider(f, dir)
			b, err := p.stateFiles(cfg).load()
			if err != nil {
				t.Fatal(err)
			}
			checkHistory(t, b, done)
			t.Logf("killed in turn %d %s: restored %d turns, %d of them summarized", done+1, step, b.Turns, b.Summarized)
			r, err := p.Restore(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			if left, _ := filepath.Glob(filepath.Join(dir, "sessions", ".*")); len(left) != 0 {
				t.Errorf("temp files left after Restore: %v", left)
			}
			for i := done + 1; i <= done+10; i++ {
				if _, err := r.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
					t.Fatalf("turn %d after the kill: %v", i, err)
				}
			}
			b, err = p.stateFiles(cfg).load()
			if err != nil {
				t.Fatal(err)
			}
			checkHistory(t, b, done+10)
		})
	}
}

// TestKillHelper is the child of TestKillDuringCompaction: it runs turns
// until the second compaction reaches OPENAI_KILL_STEP, then says so and
// waits to be killed.
func TestKillHelper(t *testing.T) {
	if os.Getenv("OPENAI_KILL_HELPER") == "" {
		t.Skip("the child of TestKillDuringCompaction")
	}
	progress := os.Getenv("OPENAI_KILL_PROGRESS")
	step := os.Getenv("OPENAI_KILL_STEP")
	seen := 0
	faultHook = func(s string) error {
		if s != step {
			return nil
		}
		if seen++; seen < 2 {
			return nil
		}
		if err := os.WriteFile(progress+".at-"+step, nil, 0o600); err != nil {
			return err
		}
		time.Sleep(time.Minute)
		return errors.New("not killed")
	}
	p := New(Options{BaseURL: os.Getenv("OPENAI_KILL_URL"), APIKey: "sk-test", Retry: fastRetry, StateDir: os.Getenv("OPENAI_KILL_DIR")})
	cfg := provider.Config{AgentID: os.Getenv("OPENAI_KILL_AGENT"), Model: "fake-model", Instructions: "You are a test agent."}
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if err := os.WriteFile(progress, []byte(fmt.Sprint(i)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("no second compaction in 100 turns")
}

// TestStaleBlobNewGeneration: a session restored from an old blob (the
// daemon's, older than the files) writes its base in a generation of its
// own, so that the journal of the newer files never passes for its, even
// when it is killed before the journal is emptied.
func TestStaleBlobNewGeneration(t *testing.T) {
	f := newWindowFake(t, 3000)
	dir := t.TempDir()
	p := windowProvider(f, dir)
	cfg := config(t)
	s, err := p.Create(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := s.Send(context.Background(), provider.Turn{Prompt: prompt(i)}); err != nil {
			t.Fatal(err)
		}
	}
	old, err := s.Suspend(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Restore(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One compaction (a base of the next generation), then two turns in
	// its journal.
	for i, more := 3, -1; more != 0; i++ {
		res, err := r.Send(context.Background(), provider.Turn{Prompt: prompt(i)})
		if err != nil {
			t.Fatal(err)
		}
		if more > 0 {
			more--
		} else if len(res.Compactions) > 0 {
			more = 2
		}
	}
	r.Stop()
	if g := p.stateFiles(cfg).journalGen(); g != 2 {
		t.Fatalf("journal of generation %d", g)
	}
	// The old blob again, and a crash after its base is renamed.
	faultHook = func(step string) error {
		if step == "renamed" {
			return errors.New("killed")
		}
		return nil
	}
	defer func() { faultHook = nil }()
	o, err := p.Restore(context.Background(), cfg, old)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Stop()
	if _, err := o.Send(context.Background(), provider.Turn{Prompt: prompt(3)}); err == nil {
		t.Fatal("the turn did not fail at the fault")
	}
	b, err := p.stateFiles(cfg).load()
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, b, 3)
}
