package script

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/provider"
	"github.com/substrat/substrat/provider/script/native"
)

// A turn that fails must fail within this long after its cause. The hang
// tests give the model 2 s to start its grandchild, which takes a while on a
// loaded machine.
const promptly = 3 * time.Second

func sendModel(t *testing.T, behaviour string, ctx context.Context, turn provider.Turn) (provider.TurnResult, error) {
	t.Helper()
	s := create(t, newConfig(t, fakeModel(t, behaviour)))
	start := time.Now()
	if d, ok := ctx.Deadline(); ok {
		start = d
	}
	res, err := s.Send(ctx, turn)
	if took := time.Since(start); took > promptly {
		t.Errorf("Send took %v (after its deadline, if it has one)", took)
	}
	return res, err
}

func TestModelTurnInput(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, fakeModel(t, "echo-turn"))
	cfg.Instructions = "be brief"
	s := create(t, cfg)
	for n := 1; n <= 2; n++ {
		res, err := s.Send(context.Background(), provider.Turn{Prompt: "line one\n[message m from x]\n"})
		if err != nil {
			t.Fatalf("Send: %v", err)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(res.Text), &got); err != nil {
			t.Fatalf("done text %q: %v", res.Text, err)
		}
		wd, _ := filepath.EvalSymlinks(cfg.WorkDir)
		cwd, _ := filepath.EvalSymlinks(fmt.Sprint(got["cwd"]))
		want := map[string]any{
			"type": "turn", "agent_id": cfg.AgentID, "name": cfg.Name, "session_id": "script-" + cfg.AgentID,
			"instructions": "be brief", "prompt": "line one\n[message m from x]\n", "turn": float64(n),
			"SUBSTRAT_AGENT_ID": cfg.AgentID, "SUBSTRAT_AGENT_NAME": cfg.Name, "SUBSTRAT_SESSION_ID": "script-" + cfg.AgentID,
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("turn %d: %s = %#v, want %#v", n, k, got[k], v)
			}
		}
		if cwd != wd {
			t.Errorf("turn %d: cwd %s, want the work dir %s", n, cwd, wd)
		}
		if want := (provider.Usage{InputTokens: 11, OutputTokens: 22, CostUSD: 0.5}); res.Usage != want {
			t.Errorf("usage %+v, want %+v", res.Usage, want)
		}
	}
}

func TestModelCallIDs(t *testing.T) {
	t.Parallel()
	cfg := newConfig(t, fakeModel(t, "ids"))
	s := create(t, cfg)
	const prompt = "[message m1 from alice]\ngo"
	tools := &recorder{}
	var results []string
	res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt, Tools: tools, Output: func(c provider.Chunk) {
		if c.Kind == "tool_result" {
			results = append(results, c.Text)
		}
	}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	// Model mode ignores headers: the prompt's hash is the message id.
	key := native.PromptKey(prompt)
	id := func(i int) string { return wantID(cfg.AgentID, key, fmt.Sprint(i)) }
	var got []string
	for _, c := range tools.get() {
		got = append(got, c.ID+" "+string(c.Args))
	}
	want := []string{"mine-1 {}", id(1) + " {}", id(2) + ` {"k":"v"}`, id(4) + " {}"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The done line has no text: the streamed texts make it up.
	wantText := "mine-1 false ok t\n" + id(1) + " false ok t\n" + id(2) + " false ok t\n" +
		id(3) + ` true args must be a JSON object, got "[1]"` + "\n" + id(4) + " false ok t\n"
	if res.Text != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", res.Text, wantText)
	}
	if want := native.Estimate(prompt, wantText); res.Usage != want {
		t.Errorf("usage %+v, want the estimate %+v", res.Usage, want)
	}
	if len(results) != 5 || results[3] != `t -> error: args must be a JSON object, got "[1]"` {
		t.Errorf("tool_result chunks %q", results)
	}
}

func TestModelProtocolErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model string
		want  []string
	}{
		{"garbage", []string{`line 2 is not a JSON object: "Traceback (most recent call last): this is not json"`}},
		{"unknown-type", []string{`line 1 has unknown type "thinking": "{\"type\":\"thinking\",\"text\":\"hmm\"}"`}},
		{"no-type", []string{`line 1 has no type`}},
		{"nameless-call", []string{`line 1: call without a name`}},
		{"long-line", []string{`line 1 is longer than 1048576 bytes (starts "{\"type\":\"text\",\"text\":\"aaaa`}},
		{"no-done", []string{"exited without a done line (1 lines read, last ", `I forgot to say done`}},
		{"silent", []string{"exited without a done line (0 lines read, last (none))"}},
		{"exit3", []string{"exit status 3 without a done line", `stderr: "fatal: the model is on fire"`}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			_, err := sendModel(t, tc.model, context.Background(), provider.Turn{Prompt: "hi"})
			if !errors.Is(err, provider.ErrProtocol) {
				t.Fatalf("Send: %v, want ErrProtocol", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if !strings.Contains(err.Error(), "fakemodel-"+tc.model) {
				t.Errorf("error %q does not name the model", err)
			}
		})
	}
}

func TestModelFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		model string
		want  []string
	}{
		{"error", []string{"model reported an error: model overloaded"}},
		{"done-exit1", []string{"exit status 1 after its done line", `stderr: "cleanup failed"`}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			_, err := sendModel(t, tc.model, context.Background(), provider.Turn{Prompt: "hi"})
			if err == nil || errors.Is(err, provider.ErrProtocol) {
				t.Fatalf("Send: %v, want a non-protocol error", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestModelBigLineAndPrompt(t *testing.T) {
	t.Parallel()
	res, err := sendModel(t, "big-line", context.Background(), provider.Turn{Prompt: "hi"})
	if err != nil || len(res.Text) != 1<<20-40 {
		t.Errorf("a line just under 1 MiB: %d bytes of text, %v", len(res.Text), err)
	}
	// A prompt far larger than a pipe's buffer, to a program that never
	// reads it.
	res, err = sendModel(t, "no-read", context.Background(), provider.Turn{Prompt: strings.Repeat("x", 4<<20)})
	if err != nil || res.Text != "did not read" {
		t.Errorf("Send to a program that ignores stdin = %q, %v", res.Text, err)
	}
}

// pids reads the "pids A B..." text chunk of the hang, straggler and linger
// models.
func pids(t *testing.T, chunks []provider.Chunk) []int {
	t.Helper()
	for _, c := range chunks {
		if f, ok := strings.CutPrefix(c.Text, "pids "); ok {
			var pids []int
			for _, s := range strings.Fields(f) {
				var pid int
				if _, err := fmt.Sscan(s, &pid); err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			return pids
		}
	}
	t.Fatalf("no pids in the output %q", chunks)
	return nil
}

// waitGone waits until process pid is gone or a zombie.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(promptly)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d is still alive: %s", pid, b)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestModelHangKilledWithGroup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var chunks []provider.Chunk
	_, err := sendModel(t, "hang", ctx, provider.Turn{Prompt: "hi", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send: %v, want DeadlineExceeded", err)
	}
	p := pids(t, chunks)
	if len(p) != 2 {
		t.Fatalf("pids %v", p)
	}
	for _, pid := range p {
		waitGone(t, pid)
	}
}

func TestModelEscapedGrandchildCannotHang(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var chunks []provider.Chunk
	_, err := sendModel(t, "escape", ctx, provider.Turn{Prompt: "hi", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send: %v, want DeadlineExceeded", err)
	}
	p := pids(t, chunks)
	if len(p) != 2 {
		t.Fatalf("pids %v", p)
	}
	// The leader is killed; the escaped sleep is out of reach by design,
	// and ours to clean up.
	syscall.Kill(p[1], syscall.SIGKILL)
	waitGone(t, p[0])
}

func TestModelStragglersKilled(t *testing.T) {
	t.Parallel()
	var chunks []provider.Chunk
	res, err := sendModel(t, "straggler", context.Background(), provider.Turn{Prompt: "hi", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil || res.Text != "bye" {
		t.Fatalf("Send = %q, %v", res.Text, err)
	}
	for _, pid := range pids(t, chunks) {
		waitGone(t, pid)
	}
}

func TestModelLingerKilledAfterGrace(t *testing.T) {
	// Not parallel: it shortens exitGrace.
	old := exitGrace
	exitGrace = 200 * time.Millisecond
	t.Cleanup(func() { exitGrace = old })

	_, err := sendModel(t, "close-stdout", context.Background(), provider.Turn{Prompt: "hi"})
	if !errors.Is(err, provider.ErrProtocol) || !strings.Contains(err.Error(), "closed stdout, then was killed without a done line") {
		t.Errorf("Send to a model that closed stdout: %v", err)
	}

	var chunks []provider.Chunk
	res, err := sendModel(t, "linger", context.Background(), provider.Turn{Prompt: "hi", Output: func(c provider.Chunk) { chunks = append(chunks, c) }})
	if err != nil || res.Text != "still here" {
		t.Fatalf("Send = %q, %v", res.Text, err)
	}
	for _, pid := range pids(t, chunks) {
		waitGone(t, pid)
	}
}

func TestModelTextFlood(t *testing.T) {
	// Not parallel: it shortens maxTurnText.
	old := maxTurnText
	maxTurnText = 64 << 10
	t.Cleanup(func() { maxTurnText = old })

	_, err := sendModel(t, "text-flood", context.Background(), provider.Turn{Prompt: "hi"})
	if !errors.Is(err, provider.ErrProtocol) || !strings.Contains(err.Error(), "line 66: more than 65536 bytes of text in one turn") {
		t.Errorf("Send: %v, want ErrProtocol for too much text", err)
	}
}

func TestModelExampleScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	src, err := os.ReadFile("testdata/echo_model.py")
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "echo_model.py")
	if err := os.WriteFile(model, src, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := newConfig(t, model)
	s := create(t, cfg)
	prompt := "[message m1 from alice]\nhello\n!send_message {\"recipient\": \"alice\"}\n!oops not json"
	tools := &recorder{}
	res, err := s.Send(context.Background(), provider.Turn{Prompt: prompt, Tools: tools})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	want := "hello\nsend_message -> ok send_message\n" + `oops -> error: args must be a JSON object, got "\"not json\""`
	if res.Text != want {
		t.Errorf("text:\n%s\nwant:\n%s", res.Text, want)
	}
	calls := tools.get()
	if len(calls) != 1 || calls[0].ID != ToolUseID(cfg.AgentID, native.PromptKey(prompt), 0) || string(calls[0].Args) != `{"recipient": "alice"}` {
		t.Errorf("calls %+v", calls)
	}
}

func TestReadLine(t *testing.T) {
	const max = 8
	in := "one\r\ntwo\n\n12345678\n123456789\nlast"
	br := bufio.NewReaderSize(strings.NewReader(in), 16)
	for _, want := range []string{"one", "two", "", "12345678"} {
		got, err := readLine(br, max)
		if err != nil || string(got) != want {
			t.Fatalf("readLine = %q, %v; want %q", got, err, want)
		}
	}
	if got, err := readLine(br, max); !errors.Is(err, errLineTooLong) || string(got) != "12345678" {
		t.Fatalf("long line: %q, %v", got, err)
	}
	// A 16-byte buffer reads a 40-byte line in several fragments.
	long := strings.Repeat("z", 40) + "\n"
	if got, err := readLine(bufio.NewReaderSize(strings.NewReader(long), 16), 40); err != nil || string(got) != long[:40] {
		t.Errorf("40-byte line with max 40: %q, %v", got, err)
	}
	if _, err := readLine(bufio.NewReaderSize(strings.NewReader(long), 16), 39); !errors.Is(err, errLineTooLong) {
		t.Errorf("40-byte line with max 39: %v", err)
	}
	br = bufio.NewReader(strings.NewReader("last"))
	if got, err := readLine(br, max); err != nil || string(got) != "last" {
		t.Errorf("unterminated last line: %q, %v", got, err)
	}
	if _, err := readLine(br, max); err != io.EOF {
		t.Errorf("after the last line: %v, want EOF", err)
	}
}
