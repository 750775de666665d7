package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"golang.org/x/sys/unix"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/rpc"
)

var (
	flagKills     = flag.Int("chaos.kills", 0, "kill -9s of TestChaos (0: 50, or 10 with -short)")
	flagChaosSeed = flag.Uint64("chaos.seed", 0, "seed of TestChaos's timing and load (0: from the clock)")
)

// built says whether buildSubstrat ran (TestMain removes what it built).
var built bool

// buildSubstrat builds bin/substrat into a temporary directory, once.
var buildSubstrat = sync.OnceValues(func() (string, error) {
	built = true
	dir, err := os.MkdirTemp("", "substrat-chaos-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "substrat")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/substrat/substrat/cmd/substrat").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// maxChaosAgents bounds the roots TestChaos creates, so that each restart
// (which recovers them all) stays quick.
const maxChaosAgents = 30

// chaos drives a real daemon and remembers what it acknowledged.
type chaos struct {
	t    *testing.T
	bin  string
	home string
	r    *rand.Rand

	pid int // the running daemon, 0 if none

	mu     sync.Mutex          // guards the fields below
	agents map[string]string   // acknowledged agents: id -> name
	msgs   map[string][]string // acknowledged messages: agent id -> message ids
	names  int
}

// substrat runs the binary and returns its standard output (with its
// standard error after it if it failed) and exit code.
func (c *chaos) substrat(args ...string) (string, int) {
	cmd := exec.Command(c.bin, append([]string{"--home", c.home}, args...)...)
	cmd.Env = append(os.Environ(), "SUBSTRAT_HOME="+c.home)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out) + stderr.String(), ee.ExitCode()
	}
	if err != nil {
		c.t.Fatalf("substrat %v: %v", args, err)
	}
	return string(out), 0
}

// start starts the daemon with 'daemon start' and returns its pid.
func (c *chaos) start() int {
	out, code := c.substrat("--json", "daemon", "start", "--timeout", "30s")
	if code != 0 {
		log, _ := os.ReadFile(filepath.Join(c.home, fsstore.LogName))
		c.t.Fatalf("daemon start: exit %d: %s\n%s", code, out, tail(string(log), 2000))
	}
	var res struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Pid == 0 {
		c.t.Fatalf("daemon start printed %q", out)
	}
	c.pid = res.Pid
	return res.Pid
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// kill sends SIGKILL and reaps the daemon (the test is its subreaper).
func (c *chaos) kill(pid int) {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.t.Fatalf("kill -9 %d: %v", pid, err)
	}
	c.reap(pid)
}

// reap waits for a daemon that exited or was killed (the test is its
// subreaper).
func (c *chaos) reap(pid int) {
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		c.t.Fatalf("wait for the daemon %d: %v", pid, err)
	}
	c.pid = 0
}

// load runs one client until its connection dies: it creates roots and
// sends them messages that make them message each other, and records
// what the daemon acknowledged.
func (c *chaos) load(ctx context.Context, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	cl, err := rpc.Dial(ctx, filepath.Join(c.home, fsstore.SocketName))
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		c.mu.Lock()
		var ids, names []string
		for id, name := range c.agents {
			ids, names = append(ids, id), append(names, name)
		}
		c.mu.Unlock()
		if len(ids) < 2 || (len(ids) < maxChaosAgents && r.IntN(8) == 0) {
			c.mu.Lock()
			c.names++
			name := fmt.Sprintf("r%d", c.names)
			c.mu.Unlock()
			info, err := rpc.Call(ctx, cl, api.AgentCreate, api.CreateParams{Name: name})
			if err != nil {
				if isConnErr(err) {
					return
				}
				continue
			}
			c.mu.Lock()
			c.agents[info.ID] = name
			c.mu.Unlock()
			continue
		}
		i := r.IntN(len(ids))
		other := names[r.IntN(len(names))]
		text := fmt.Sprintf("load %d\n!send_message {\"recipient\":%q,\"text\":%s}", r.Uint32(), other,
			jsonString(fmt.Sprintf("!send_message {\"recipient\":%q,\"text\":\"pong\"}", names[i])))
		if r.IntN(40) == 0 {
			text += fmt.Sprintf("\n!spawn_agent {\"name\":\"k%d\",\"instructions\":\"hello\"}", r.Uint32())
		}
		res, err := rpc.Stream(ctx, cl, api.AgentSend, api.SendMessageParams{Ref: ids[i], Text: text}, nil)
		if err != nil {
			if isConnErr(err) {
				return
			}
			continue
		}
		c.mu.Lock()
		c.msgs[ids[i]] = append(c.msgs[ids[i]], res.MessageID)
		c.mu.Unlock()
	}
}

// isConnErr tells a dead daemon from a refused request.
func isConnErr(err error) bool {
	var re *api.Error
	return !errors.As(err, &re) || re.Code == api.CodeUnavailable
}

// verify checks that every acknowledged agent is live and every
// acknowledged message is in its recipient's inbox (new/ or cur/).
func (c *chaos) verify(when string) {
	cl, err := rpc.Dial(context.Background(), filepath.Join(c.home, fsstore.SocketName))
	if err != nil {
		c.t.Fatalf("%s: dial: %v", when, err)
	}
	defer cl.Close()
	list, err := rpc.Call(context.Background(), cl, api.AgentList, api.ListParams{})
	if err != nil {
		c.t.Fatalf("%s: agent.list: %v", when, err)
	}
	live := map[string]bool{}
	for _, a := range list {
		live[a.ID] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := fsstore.Layout{Home: c.home}
	for id, name := range c.agents {
		if !live[id] {
			c.t.Fatalf("%s: acknowledged agent %s (%s) is missing", when, name, id)
		}
		inbox := l.Agent(id).Inbox()
		for _, m := range c.msgs[id] {
			_, errNew := os.Stat(inbox.Path(fsstore.InboxNew, m))
			_, errCur := os.Stat(inbox.Path(fsstore.InboxCur, m))
			if errNew != nil && errCur != nil {
				c.t.Fatalf("%s: acknowledged message %s to %s is in neither inbox/new nor inbox/cur", when, m, name)
			}
		}
	}
}

// fsck runs 'substrat fsck --json' with the daemon down and returns its
// exit code and the kinds of the problems it reports.
func (c *chaos) fsck(args ...string) (int, []fsstore.Finding) {
	out, code := c.substrat(append([]string{"--json", "fsck"}, args...)...)
	var res struct {
		Findings []fsstore.Finding `json:"findings"`
	}
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&res); err != nil {
		c.t.Fatalf("fsck printed %q: %v", out, err)
	}
	var problems []fsstore.Finding
	for _, f := range res.Findings {
		if f.Problem() {
			problems = append(problems, f)
		}
	}
	return code, problems
}

// TestChaos kills a real daemon with SIGKILL at random moments while
// clients create agents and send messages that make them message each
// other. After each kill: plain fsck (the daemon down) may only report
// what a kill legitimately leaves, a leftover temporary file or a torn
// tail; then, on every other such kill, 'fsck --repair' must fix it (exit
// 0), and otherwise the restarted daemon's recovery does. After each
// restart, every agent and message the clients saw acknowledged is there.
// At the end a clean stop leaves a store that plain fsck passes.
//
// -chaos.kills sets the number of kills (make chaos N=1000).
func TestChaos(t *testing.T) {
	kills := *flagKills
	if kills == 0 {
		kills = 50
		if testing.Short() {
			kills = 10
		}
	}
	bin, err := buildSubstrat()
	if err != nil {
		t.Fatal(err)
	}
	seed := *flagChaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos seed %d (replay the timing with -chaos.seed=%d)", seed, seed)
	// Orphaned daemons (daemon start detaches them) become our children,
	// so that each killed one can be reaped.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	c := &chaos{t: t, bin: bin, home: t.TempDir(), r: rand.New(rand.NewPCG(seed, 1)),
		agents: map[string]string{}, msgs: map[string][]string{}}
	t.Cleanup(func() { // a failed test leaves no daemon behind
		if c.pid != 0 {
			syscall.Kill(c.pid, syscall.SIGKILL)
			syscall.Wait4(c.pid, nil, 0, nil)
		}
	})
	start := time.Now()
	repaired, leftForRecovery, clean := 0, 0, 0
	kinds := map[string]int{}
	clients := max(2, runtime.GOMAXPROCS(0))
	for k := 1; k <= kills; k++ {
		pid := c.start()
		if k > 1 {
			c.verify(fmt.Sprintf("after restart %d", k-1))
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() { defer wg.Done(); c.load(ctx, seed+uint64(k*100+i)) }()
		}
		time.Sleep(time.Duration(20+c.r.IntN(400)) * time.Millisecond)
		c.kill(pid)
		cancel()
		wg.Wait()

		code, problems := c.fsck()
		for _, f := range problems {
			// What a kill may leave: half-made files, a torn last line,
			// and a delivery logged but not yet linked into cur/.
			if f.Kind != fsstore.FindLeftover && f.Kind != fsstore.FindTornTail && f.Kind != fsstore.FindUnfinishedDelivery {
				t.Fatalf("kill %d: fsck found %s at %s: %s", k, f.Kind, f.Path, f.Detail)
			}
			what, _, _ := strings.Cut(f.Detail, ":") // the ids and offsets vary
			kinds[string(f.Kind)+" ("+what+")"]++
		}
		switch {
		case code == 0 && len(problems) == 0:
			clean++
		case code == 0 || len(problems) == 0:
			t.Fatalf("kill %d: fsck exited %d with %d problems", k, code, len(problems))
		case k%2 == 0:
			if code, left := c.fsck("--repair"); code != 0 || len(left) > 0 {
				t.Fatalf("kill %d: fsck --repair exited %d, leaving %v", k, code, left)
			}
			if code, left := c.fsck(); code != 0 {
				t.Fatalf("kill %d: fsck after fsck --repair exited %d: %v", k, code, left)
			}
			repaired++
		default:
			leftForRecovery++
		}
	}
	pid := c.start()
	c.verify("after the last restart")
	if out, code := c.substrat("daemon", "stop"); code != 0 {
		t.Fatalf("daemon stop: %s", out)
	}
	c.reap(pid)
	if code, problems := c.fsck(); code != 0 {
		t.Fatalf("fsck after a clean stop exited %d: %v", code, problems)
	}
	msgs := 0
	for _, m := range c.msgs {
		msgs += len(m)
	}
	t.Logf("%d kills in %.1fs: %d agents and %d messages acknowledged, all present; after the kills fsck was clean %d times, "+
		"found what a kill leaves (leftovers, torn tails, unfinished deliveries) %d times (%d fixed by fsck --repair, %d by the restart's recovery)",
		kills, time.Since(start).Seconds(), len(c.agents), msgs, clean, repaired+leftForRecovery, repaired, leftForRecovery)
	t.Logf("what fsck found after the kills: %s", countList(kinds))
}
