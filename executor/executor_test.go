package executor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/substrat/substrat/bwrap"
	"github.com/substrat/substrat/bwrap/launch"
)

// TestLocalSandboxed: the daemon's bwrap command (argv, environment,
// bind descriptors) runs through Local as it would on its own: input,
// output, the sandbox's view, the exit status.
func TestLocalSandboxed(t *testing.T) {
	if _, err := launch.LookPath(); err != nil {
		t.Skip(err)
	}
	root := t.TempDir()
	if err := os.WriteFile(root+"/f", []byte("in the place\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb, err := launch.Command(context.Background(), bwrap.Spec{Root: bwrap.Source{Host: root}, Env: map[string]string{"V": "v"}},
		[]string{"/bin/sh", "-c", `cat f; cat; echo "V=$V"; ls /home 2>&1; exit 7`})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p, err := Local{}.Start(context.Background(), &Cmd{Agent: "a", Incarnation: "1",
		Argv: sb.Args, Env: sb.Env, ExtraFiles: sb.ExtraFiles, Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &out})
	launch.CloseFiles(sb)
	if err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != 7 {
		t.Fatalf("Wait: %v, want status 7; output %s", err, out.String())
	}
	want := "in the place\nfrom stdin\nV=v\nls: cannot access '/home': No such file or directory\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}

// TestLocalKill: Kill kills the process and what it started (its group).
func TestLocalKill(t *testing.T) {
	var out syncBuffer
	out.lines = make(chan string, 1)
	p, err := Local{}.Start(context.Background(), &Cmd{Agent: "a", Incarnation: "1",
		Argv: []string{"/bin/sh", "-c", `sleep 1000 & echo $!; wait`}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	child := strings.TrimSpace(<-out.lines)
	if _, err := os.Stat("/proc/" + child); err != nil {
		t.Fatalf("the child %q is not running: %v", child, err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := p.Wait(); !errors.As(err, &ee) || ee.Code != -1 {
		t.Fatalf("Wait: %v, want killed", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the child %s outlived Kill", child)
		}
		time.Sleep(20 * time.Millisecond) // its reaping by init
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill of an ended process: %v", err)
	}
}

// alive reports whether pid runs (a zombie does not).
func alive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.Contains(s[strings.LastIndexByte(s, ')'):], ") Z ")
}

// syncBuffer sends each write to lines.
type syncBuffer struct{ lines chan string }

func (b *syncBuffer) Write(p []byte) (int, error) {
	select {
	case b.lines <- string(p):
	default:
	}
	return len(p), nil
}

// TestValidate: what no executor starts.
func TestValidate(t *testing.T) {
	for _, c := range []Cmd{
		{},
		{Argv: []string{""}},
		{Argv: []string{"x", "a\x00b"}},
		{Argv: []string{"x"}, Env: []string{"NOEQUALS"}},
		{Argv: []string{"x"}, Env: []string{"1BAD=x"}},
		{Argv: []string{"x"}, Env: []string{"A B=x"}},
		{Argv: []string{"x"}, Env: []string{"A=x\x00"}},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q %q: %v, want ErrInvalid", c.Argv, c.Env, err)
		}
		if _, err := (Local{}).Start(context.Background(), &c); !errors.Is(err, ErrInvalid) {
			t.Errorf("Start %q: %v", c.Argv, err)
		}
	}
	ok := Cmd{Argv: []string{"x", "any\nbytes $(x) '\""}, Env: []string{"A_1=x=y\n", "_=z"}}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}
