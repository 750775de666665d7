package script

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script/native"
)

// The test binary doubles as the model program of model-mode tests: run
// through a symlink named "fakemodel-<behaviour>", it plays that behaviour
// (see fakeModels) instead of running the tests.
func TestMain(m *testing.M) {
	if name, ok := strings.CutPrefix(filepath.Base(os.Args[0]), "fakemodel-"); ok {
		os.Exit(runFakeModel(name))
	}
	// A race-enabled binary sleeps a second at exit by default; the fake
	// models inherit this.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	os.Exit(m.Run())
}

// fakeModel returns the path of a model program that plays behaviour.
func fakeModel(t *testing.T, behaviour string) string {
	t.Helper()
	if _, ok := fakeModels[behaviour]; !ok {
		t.Fatalf("no fake model %q", behaviour)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fakemodel-"+behaviour)
	if err := os.Symlink(exe, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var agentSeq atomic.Int64

// newConfig returns the config of a new agent, in model mode if model is
// not "".
func newConfig(t *testing.T, model string) provider.Config {
	n := agentSeq.Add(1)
	return provider.Config{
		AgentID: fmt.Sprintf("0199aaaa-0000-7000-8000-%012d", n),
		Name:    fmt.Sprintf("agent%d", n),
		Model:   model,
		WorkDir: t.TempDir(),
	}
}

// fakeIO is the fake model's side of the protocol.
type fakeIO struct {
	in *bufio.Reader
}

func (f *fakeIO) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

func (f *fakeIO) read() map[string]any {
	line, err := f.in.ReadBytes('\n')
	if err != nil {
		fmt.Fprintf(os.Stderr, "fake model: reading stdin: %v\n", err)
		os.Exit(9)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		fmt.Fprintf(os.Stderr, "fake model: bad input line %q: %v\n", line, err)
		os.Exit(9)
	}
	return m
}

func (f *fakeIO) turn() map[string]any {
	m := f.read()
	if m["type"] != "turn" {
		fmt.Fprintf(os.Stderr, "fake model: first line is %v, not a turn\n", m)
		os.Exit(9)
	}
	return m
}

// call asks for a tool and returns the result line.
func (f *fakeIO) call(msg map[string]any) map[string]any {
	msg["type"] = "call"
	f.send(msg)
	return f.read()
}

// startSleep starts a grandchild that outlives nothing: `sleep 300`, with
// our stderr.
func startSleep() int {
	cmd := exec.Command("sleep", "300")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "fake model: %v\n", err)
		os.Exit(9)
	}
	return cmd.Process.Pid
}

var fakeModels = map[string]func(f *fakeIO) int{
	// native plays native mode through the protocol, giving no ids: the
	// native provider, in this process, its tools called through Substrat.
	"native": func(f *fakeIO) int {
		turn := f.turn()
		s, err := native.New(nil).Create(context.Background(), provider.Config{AgentID: "fake-model"})
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake model: %v\n", err)
			return 9
		}
		tools := provider.ToolHandlerFunc(func(_ context.Context, c provider.ToolCall) provider.ToolResult {
			res := f.call(map[string]any{"name": c.Name, "args": c.Args})
			return provider.ToolResult{Text: res["text"].(string), IsError: res["is_error"].(bool)}
		})
		text := func(c provider.Chunk) {
			if c.Kind == provider.ChunkText {
				f.send(map[string]any{"type": "text", "text": c.Text})
			}
		}
		res, err := s.Send(context.Background(), provider.Turn{Prompt: turn["prompt"].(string), Tools: tools, Output: text})
		if err != nil {
			fmt.Fprintf(os.Stderr, "fake model: %v\n", err)
			return 9
		}
		f.send(map[string]any{"type": "done", "text": res.Text})
		return 0
	},
	// echo-turn reports what it was given.
	"echo-turn": func(f *fakeIO) int {
		turn := f.turn()
		cwd, _ := os.Getwd()
		turn["cwd"] = cwd
		for _, k := range []string{"SUBSTRAT_AGENT_ID", "SUBSTRAT_AGENT_NAME", "SUBSTRAT_SESSION_ID"} {
			turn[k] = os.Getenv(k)
		}
		b, _ := json.Marshal(turn)
		f.send(map[string]any{"type": "done", "text": string(b),
			"usage": provider.Usage{InputTokens: 11, OutputTokens: 22, CostUSD: 0.5}})
		return 0
	},
	// ids calls with and without ids of its own, and streams the results
	// it gets back; its done line has no text.
	"ids": func(f *fakeIO) int {
		f.turn()
		for _, c := range []map[string]any{
			{"name": "t", "id": "mine-1"},
			{"name": "t"},
			{"name": "t", "args": map[string]any{"k": "v"}},
			{"name": "t", "args": []int{1}},
			{"name": "t", "args": nil},
		} {
			res := f.call(c)
			f.send(map[string]any{"type": "text", "text": fmt.Sprintf("%v %v %v\n", res["id"], res["is_error"], res["text"])})
		}
		f.send(map[string]any{"type": "done", "usage": nil})
		return 0
	},
	"garbage": func(f *fakeIO) int {
		fmt.Println(`{"type":"text","text":"fine so far"}`)
		fmt.Println("Traceback (most recent call last): this is not json")
		time.Sleep(time.Hour)
		return 0
	},
	"unknown-type": func(f *fakeIO) int {
		fmt.Println(`{"type":"thinking","text":"hmm"}`)
		time.Sleep(time.Hour)
		return 0
	},
	"no-type": func(f *fakeIO) int {
		fmt.Println(`{"text":"hmm"}`)
		time.Sleep(time.Hour)
		return 0
	},
	"nameless-call": func(f *fakeIO) int {
		fmt.Println(`{"type":"call","args":{}}`)
		time.Sleep(time.Hour)
		return 0
	},
	"long-line": func(f *fakeIO) int {
		os.Stdout.WriteString(`{"type":"text","text":"` + strings.Repeat("a", 2<<20))
		time.Sleep(time.Hour)
		return 0
	},
	// text-flood streams text until it is killed.
	"text-flood": func(f *fakeIO) int {
		f.turn()
		for {
			f.send(map[string]any{"type": "text", "text": strings.Repeat("t", 1000)})
		}
	},
	// big-line writes a line just under the limit.
	"big-line": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "done", "text": strings.Repeat("b", 1<<20-40)})
		return 0
	},
	"no-done": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "text", "text": "I forgot to say done"})
		return 0
	},
	"silent": func(f *fakeIO) int { return 0 },
	"exit3": func(f *fakeIO) int {
		f.turn()
		fmt.Fprintln(os.Stderr, "fatal: the model is on fire")
		return 3
	},
	"error": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "error", "message": "model overloaded"})
		return 0
	},
	"done-exit1": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "done", "text": "ok"})
		fmt.Fprintln(os.Stderr, "cleanup failed")
		return 1
	},
	// hang leaves a grandchild and never ends the turn.
	"hang": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "text", "text": fmt.Sprintf("pids %d %d", os.Getpid(), startSleep())})
		time.Sleep(time.Hour)
		return 0
	},
	// escape leaves a grandchild outside its process group that holds its
	// stdout, and never ends the turn.
	"escape": func(f *fakeIO) int {
		f.turn()
		cmd := exec.Command("sleep", "300")
		cmd.Stdout = os.Stdout
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "fake model: %v\n", err)
			return 9
		}
		f.send(map[string]any{"type": "text", "text": fmt.Sprintf("pids %d %d", os.Getpid(), cmd.Process.Pid)})
		time.Sleep(time.Hour)
		return 0
	},
	// straggler ends the turn and exits, leaving a grandchild behind.
	"straggler": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "text", "text": fmt.Sprintf("pids %d %d", os.Getpid(), startSleep())})
		f.send(map[string]any{"type": "done", "text": "bye"})
		return 0
	},
	// linger ends the turn but does not exit.
	"linger": func(f *fakeIO) int {
		f.turn()
		f.send(map[string]any{"type": "text", "text": fmt.Sprintf("pids %d", os.Getpid())})
		f.send(map[string]any{"type": "done", "text": "still here"})
		time.Sleep(time.Hour)
		return 0
	},
	// close-stdout closes its stdout without ending the turn and lingers.
	"close-stdout": func(f *fakeIO) int {
		f.turn()
		os.Stdout.Close()
		time.Sleep(time.Hour)
		return 0
	},
	// no-read never reads its stdin.
	"no-read": func(f *fakeIO) int {
		f.send(map[string]any{"type": "done", "text": "did not read"})
		return 0
	},
}

func runFakeModel(name string) int {
	play, ok := fakeModels[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "no fake model %q\n", name)
		return 9
	}
	return play(&fakeIO{in: bufio.NewReader(os.Stdin)})
}
