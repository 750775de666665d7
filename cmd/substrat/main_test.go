package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/daemon"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/k8stest"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/rpc"
)

func TestMain(m *testing.M) {
	testscript.Main(stopK8s{m}, map[string]func(){
		"k8s-model":      func() { os.Exit(k8sModel()) },
		"k8s-git-model":  func() { os.Exit(k8sGitModel()) },
		"substrat":       func() { os.Exit(run(os.Args[1:])) },
		"approver-model": func() { os.Exit(approverModel()) },
		"hog-model":      func() { os.Exit(hogModel()) },
		"forkbomb-model": func() { os.Exit(forkBombModel()) },
		"remote-model":   func() { os.Exit(remoteModel()) },
	})
}

// stopK8s runs the tests, then stops the Kubernetes control plane one
// of them started (internal/k8stest).
type stopK8s struct{ m *testing.M }

func (s stopK8s) Run() int {
	// The model program of a daemon's turn on the real kubelet, which
	// goes into the agent image (scripts/k8s-control-plane.sh) at the
	// same path.
	if dir, err := os.MkdirTemp("/var/tmp", "substrat-k8s-model-"); err == nil {
		os.Chmod(dir, 0o755)
		p := filepath.Join(dir, "model.sh")
		if os.WriteFile(p, []byte(k8sShellModel), 0o755) == nil {
			os.Setenv("SUBSTRAT_K8S_IMAGE_FILES", p)
			k8sShellModelPath = p
		}
		defer os.RemoveAll(dir)
	}
	code := s.m.Run()
	k8stest.Stop()
	return code
}

// TestScripts drives the real binary through testdata/script/*.txtar.
// Each script has its own home in $WORK/home; daemons left running are
// killed when the script ends.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			home := filepath.Join(env.WorkDir, "home")
			env.Setenv("SUBSTRAT_HOME", home)
			env.Defer(func() { killDaemon(home) })
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "cgroup1":
				// cgroup v1's memory and pids hierarchies, writable: where
				// the daemon enforces limits with them.
				for _, c := range []string{"memory", "pids"} {
					if unix.Access("/sys/fs/cgroup/"+c+"/cgroup.procs", unix.W_OK) != nil {
						return false, nil
					}
				}
				return true, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exitcode":   cmdExitCode,
			"waitdaemon": cmdWaitDaemon,
			"killdaemon": cmdKillDaemon,
			"waitfor":    cmdWaitFor,
		},
	})
}

func killDaemon(home string) {
	if held, pid := daemon.Held(fsstore.Layout{Home: home}.Lock()); held && pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// exitcode N cmd args... runs cmd and checks its exit status is N.
func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exitcode N command args...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("%v", err)
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}

// waitdaemon waits until the daemon of $SUBSTRAT_HOME answers.
func cmdWaitDaemon(ts *testscript.TestScript, neg bool, args []string) {
	sock := fsstore.Layout{Home: ts.Getenv("SUBSTRAT_HOME")}.Socket()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := rpc.Dial(context.Background(), sock)
		if err == nil {
			_, err = rpc.Call(context.Background(), c, api.DaemonStatus, struct{}{})
			c.Close()
			if err == nil {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("the daemon did not answer on %s", sock)
}

// killdaemon sends SIGKILL to the daemon holding the lock and waits until
// the lock is free.
func cmdKillDaemon(ts *testscript.TestScript, neg bool, args []string) {
	lock := fsstore.Layout{Home: ts.Getenv("SUBSTRAT_HOME")}.Lock()
	held, pid := daemon.Held(lock)
	if !held || pid <= 0 {
		ts.Fatalf("no daemon holds %s", lock)
	}
	ts.Check(syscall.Kill(pid, syscall.SIGKILL))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if h, _ := daemon.Held(lock); !h {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.Fatalf("daemon pid %d still holds the lock", pid)
}

// waitfor REGEXP cmd args... retries cmd (for up to 30 s) until its
// stdout matches REGEXP.
func cmdWaitFor(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 {
		ts.Fatalf("usage: waitfor REGEXP command args...")
	}
	want, err := regexp.Compile("(?m)" + args[0])
	ts.Check(err)
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ts.Exec(args[1], args[2:]...)
		last = ts.ReadFile("stdout")
		if want.MatchString(last) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Fatalf("%q never appeared; last output:\n%s", args[0], last)
}
