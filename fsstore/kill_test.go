package fsstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The kill -9 test: the test binary re-executes itself as a helper that
// appends large events to one agent and prints each seq once Append has
// returned; the test SIGKILLs it at random moments and checks, each time,
// that the log reopens as a valid prefix holding every acknowledged event.

const (
	killHelperEnv = "FSSTORE_KILL_HELPER_HOME" // the helper's home; set only in the helper
	killAgentEnv  = "FSSTORE_KILL_HELPER_AGENT"
	killSeedEnv   = "FSSTORE_KILL_SEED" // replays the random delays of an earlier run
	killRounds    = 50
	killEventType = "bulk"
)

// bulk is the data of the helper's events.
type bulk struct {
	Seq uint64 `json:"seq"`
	Pad string `json:"pad"`
}

func (bulk) EventType() string { return killEventType }

// killPayload is the data of the event with the given seq: a little more
// than 64 KiB, a length that varies with seq so that lines start and end at
// every offset of a 4 KiB page, and content that depends on seq.
func killPayload(seq uint64) bulk {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 64<<10+int(seq*1237%4096))
	for i := range b {
		b[i] = alphabet[(i+int(seq))%len(alphabet)]
	}
	return bulk{Seq: seq, Pad: string(b)}
}

// killHelper is the helper process: it recovers the home as the daemon
// would, then appends to the agent until it is killed, snapshotting every
// fifth event.
func killHelper() int {
	home, id := os.Getenv(killHelperEnv), os.Getenv(killAgentEnv)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "kill helper: "+format+"\n", args...)
		return 2
	}
	s, err := Open(home, Options{})
	if err != nil {
		return fail("%v", err)
	}
	res, err := s.Scan(context.Background(), ScanOptions{Repair: true})
	if err != nil {
		return fail("scan: %v", err)
	}
	var a *Agent
	for _, x := range res.Agents {
		if x.ID() == id {
			a = x
		}
	}
	if a == nil {
		return fail("agent %s is not live: %+v", id, res.Findings)
	}
	fmt.Printf("ready %d\n", a.Log().LastSeq())
	for {
		seq := a.Log().LastSeq() + 1
		sess, err := a.Commit(killPayload(seq))
		if err != nil {
			return fail("commit %d: %v", seq, err)
		}
		// Only now is the event acknowledged.
		fmt.Printf("ack %d\n", sess.LastSeq)
		if sess.LastSeq%5 == 0 {
			if err := a.Snapshot(); err != nil {
				return fail("snapshot %d: %v", sess.LastSeq, err)
			}
		}
	}
}

func TestKill9(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv(killSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", killSeedEnv, err)
		}
	}
	t.Logf("seed %d (%s=%d replays the delays)", seed, killSeedEnv, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	home := t.TempDir()
	s := mustOpen(t, home, Options{})
	a, err := s.CreateAgent(&Session{Name: "writer", Provider: "script"})
	if err != nil {
		t.Fatal(err)
	}
	id, path := a.ID(), a.Files().Events()
	a.Close()

	var (
		durable  uint64 = 1 // every event up to here is known to be in the log
		acked    int        // acknowledgements seen in all rounds
		tornSeen int        // rounds whose recovery cut a torn tail
		early    int        // rounds killed before the helper was ready
		// Running estimates of the helper's start-up (to its ready line)
		// and of one append, so that the kills land at random points of
		// them however fast this machine is (and with -race).
		startup   = 50 * time.Millisecond
		perAppend = 5 * time.Millisecond
	)
	for round := 0; round < killRounds; round++ {
		// A fifth of the rounds kill the helper at a random point of its
		// start-up (exec, open, scan); the others after a random number
		// of acknowledged appends, either at a random point of the next
		// one or, a fifth, as soon as the log grows: a write(2) is short
		// and random delays seldom land in one.
		var p killPlan
		switch rng.IntN(5) {
		case 0:
			p = killPlan{waitAcks: -1, delay: randDur(rng, startup)}
		case 1:
			p = killPlan{waitAcks: rng.IntN(8), chase: path}
		default:
			p = killPlan{waitAcks: rng.IntN(8), delay: randDur(rng, perAppend*5/4)}
		}
		r := runAndKill(t, exe, home, id, p)
		if r.startup > 0 {
			startup = (3*startup + r.startup) / 4
		}
		if r.append > 0 {
			perAppend = (3*perAppend + r.append) / 4
		}
		if r.ready >= 0 && uint64(r.ready) != durable {
			t.Fatalf("round %d: the helper recovered up to event %d, the test up to %d", round, r.ready, durable)
		}
		if r.ready < 0 {
			early++
		}
		acked += len(r.acks)
		for i, seq := range r.acks {
			if seq != durable+uint64(i)+1 {
				t.Fatalf("round %d: acknowledged seqs %v do not follow %d", round, r.acks, durable)
			}
		}

		// Recover as the daemon would, and check.
		res := mustScan(t, s, ScanOptions{Repair: true})
		if len(res.Agents) != 1 || res.Agents[0].ID() != id {
			t.Fatalf("round %d (%+v): live agents %v, findings:\n%s", round, p, liveIDs(res), fmtFindings(res.Findings))
		}
		for _, f := range res.Findings {
			switch f.Kind {
			case FindTornTail:
				tornSeen++
				checkTornCopy(t, res.Agents[0].Files(), f)
			case FindLeftover, FindReplayed:
			default:
				t.Fatalf("round %d: unexpected finding %s %s: %s", round, f.Kind, f.Path, f.Detail)
			}
		}
		ag := res.Agents[0]
		last := ag.Log().LastSeq()
		if len(r.acks) > 0 && last < r.acks[len(r.acks)-1] {
			t.Fatalf("round %d: the log ends at event %d but event %d was acknowledged", round, last, r.acks[len(r.acks)-1])
		}
		if last < durable {
			t.Fatalf("round %d: the log ends at event %d but held event %d before", round, last, durable)
		}
		if got := ag.Session().LastSeq; got != last {
			t.Fatalf("round %d: session at event %d, log at %d", round, got, last)
		}
		ag.Close()

		// The repaired log is a clean prefix: seqs 1..last, no tail, and
		// the data of every new event is what the helper wrote.
		info, err := readLog(OS{}, path, func(seq uint64, line []byte) error {
			if seq <= durable {
				return nil
			}
			e, err := DecodeEvent(line)
			if err != nil {
				return err
			}
			var p bulk
			if err := e.Decode(&p); err != nil {
				return err
			}
			if e.Type != killEventType || p != killPayload(seq) {
				return fmt.Errorf("event %d (%s) does not hold the data written", seq, e.Type)
			}
			return nil
		})
		if err != nil || info.TornLen != 0 || info.LastSeq != last || info.Lines != int(last) {
			t.Fatalf("round %d: log after recovery: %+v, %v", round, info, err)
		}
		durable = last
	}
	fi, _ := os.Stat(path)
	t.Logf("%d rounds (%d killed before ready): %d events acknowledged, log at event %d (%d bytes), %d torn tails cut; start-up ~%v, append ~%v",
		killRounds, early, acked, durable, fi.Size(), tornSeen, startup, perAppend)
	if acked == 0 {
		t.Error("no append was ever acknowledged: the kills came too early to test anything")
	}
}

func randDur(rng *rand.Rand, max time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(max) + 1))
}

// killPlan says when to kill the helper: after waitAcks acknowledgements
// (-1: without waiting for it to be ready) and then delay.
type killPlan struct {
	waitAcks int
	delay    time.Duration
	chase    string // if set, kill as soon as this file changes size instead
}

// checkTornCopy checks the copy of a tail cut off after a kill: the
// unfinished write of the next event's line, so a prefix of such a line.
func checkTornCopy(t *testing.T, files AgentFiles, f Finding) {
	t.Helper()
	if !f.Repaired {
		t.Fatalf("torn tail not repaired: %+v", f)
	}
	var copyPath string
	for n := 0; exists(files.Broken(f.Offset, n)); n++ {
		copyPath = files.Broken(f.Offset, n)
	}
	if copyPath == "" {
		t.Fatalf("no copy of the tail cut at %d", f.Offset)
	}
	tail := readFile(t, copyPath)
	valid := readFile(t, files.Events())[:f.Offset]
	info, err := scanLog(bytes.NewReader(valid), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"seq":%d,"ts":"`, info.LastSeq+1)
	n := min(len(tail), len(want))
	if len(tail) == 0 || bytes.IndexByte(tail, '\n') >= 0 || string(tail[:n]) != want[:n] {
		t.Fatalf("%s holds %d bytes %q..., not the start of the line of event %d", copyPath, len(tail), trunc(tail), info.LastSeq+1)
	}
}

type killRun struct {
	ready   int64 // the helper's LastSeq after its recovery; -1 if it never said
	acks    []uint64
	startup time.Duration // from start to the ready line, if waited for
	append  time.Duration // mean time between acknowledgements, if waited for
}

// runAndKill starts the helper, follows the plan, SIGKILLs it and collects
// what it acknowledged.
func runAndKill(t *testing.T, exe, home, id string, p killPlan) killRun {
	t.Helper()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), killHelperEnv+"="+home, killAgentEnv+"="+id)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	r := killRun{ready: -1}
	parse := func(l string) {
		verb, arg, _ := strings.Cut(l, " ")
		n, err := strconv.ParseUint(arg, 10, 64)
		switch {
		case err != nil:
			t.Errorf("helper said %q", l)
		case verb == "ready":
			r.ready = int64(n)
		case verb == "ack":
			r.acks = append(r.acks, n)
		default:
			t.Errorf("helper said %q", l)
		}
	}
	if p.waitAcks >= 0 {
		timeout := time.After(20 * time.Second)
		var readyAt time.Time
		for r.ready < 0 || len(r.acks) < p.waitAcks {
			select {
			case l, ok := <-lines:
				if !ok {
					cmd.Wait()
					t.Fatalf("the helper exited early: %s", stderr.String())
				}
				parse(l)
				if r.ready >= 0 && readyAt.IsZero() {
					readyAt = time.Now()
					r.startup = readyAt.Sub(start)
				}
			case <-timeout:
				cmd.Process.Kill()
				t.Fatal("the helper did not get ready or acknowledge in 20s")
			}
		}
		if n := len(r.acks); n > 0 {
			r.append = time.Since(readyAt) / time.Duration(n)
		}
	}
	if p.chase != "" {
		fi, err := os.Stat(p.chase)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			if now, err := os.Stat(p.chase); err != nil || now.Size() != fi.Size() {
				break
			}
		}
	}
	time.Sleep(p.delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		parse(l)
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the helper ended with %v before it was killed: %s", err, stderr.String())
	}
	return r
}
