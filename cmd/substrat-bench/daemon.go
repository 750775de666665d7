package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/supervisor/rpc"

	"github.com/substrat/substrat/fsstore"
)

type benchDaemon struct {
	cmd  *exec.Cmd
	home string
	done chan error
}

// startBenchDaemon starts `substrat daemon run` on home, with env added to
// this program's environment, and waits until it answers, that is until
// its recovery is done.
func startBenchDaemon(ctx context.Context, exe, home string, timeout time.Duration, env ...string) (*benchDaemon, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	out, err := os.Create(filepath.Join(home, "bench-daemon.out"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(exe, "daemon", "run", "--home", home)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(append(os.Environ(), "SUBSTRAT_HOME="+home), env...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &benchDaemon{cmd: cmd, home: home, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	deadline := time.Now().Add(timeout)
	for {
		c, err := rpc.Dial(ctx, fsstore.Layout{Home: home}.Socket())
		if err == nil {
			_, err = rpc.Call(ctx, c, api.DaemonStatus, struct{}{})
			c.Close()
			if err == nil {
				return d, nil
			}
		}
		select {
		case err := <-d.done:
			d.done <- err
			data, _ := os.ReadFile(filepath.Join(home, "bench-daemon.out"))
			return nil, fmt.Errorf("the daemon exited at start (%v): %s", err, strings.TrimSpace(string(data)))
		case <-ctx.Done():
			d.kill()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.kill()
			return nil, fmt.Errorf("the daemon did not answer within %s", timeout)
		}
	}
}

func (d *benchDaemon) pid() int { return d.cmd.Process.Pid }

// daemonCall makes the call m on a connection of its own to d.
func daemonCall[P, R any](ctx context.Context, d *benchDaemon, m api.Method[P, R], p P) (R, error) {
	c, err := rpc.Dial(ctx, fsstore.Layout{Home: d.home}.Socket())
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Call(ctx, c, m, p)
}

// daemonStream makes the streaming call m on a connection of its own to
// d, dropping its frames.
func daemonStream[P, F, R any](ctx context.Context, d *benchDaemon, m api.StreamMethod[P, F, R], p P) (R, error) {
	c, err := rpc.Dial(ctx, fsstore.Layout{Home: d.home}.Socket())
	if err != nil {
		var zero R
		return zero, err
	}
	defer c.Close()
	return rpc.Stream(ctx, c, m, p, nil)
}

// stop asks the daemon to stop and waits for it; it is killed if it does
// not exit in time.
func (d *benchDaemon) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	daemonCall(ctx, d, api.DaemonStop, struct{}{})
	select {
	case err := <-d.done:
		return err
	case <-time.After(60 * time.Second):
		d.kill()
		return fmt.Errorf("the daemon did not stop within 60 s; killed")
	}
}

func (d *benchDaemon) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// daemonLatency measures, on a real daemon, the round trip of `agent send`
// waiting for the turn, and how long a hand edit of session.json takes to
// show in `agent inspect`.
func (b *benchRun) daemonLatency() error {
	home := filepath.Join(b.dir, "daemon")
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 60*time.Second)
	if err != nil {
		return err
	}
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	info, err := daemonCall(b.ctx, d, api.AgentCreate, api.CreateParams{Name: "echo", Provider: "script",
		Instructions: benchInstructions})
	if err != nil {
		return err
	}
	send := func(i int) (time.Duration, error) {
		t := time.Now()
		c, err := rpc.Dial(b.ctx, fsstore.Layout{Home: home}.Socket())
		if err != nil {
			return 0, err
		}
		defer c.Close()
		res, err := rpc.Stream(b.ctx, c, api.AgentSend, api.SendMessageParams{Ref: "echo", Text: fmt.Sprintf("ping %d", i), Wait: true},
			func(api.WatchFrame) error { return nil })
		if err == nil && res.Failed != "" {
			err = fmt.Errorf("turn failed: %s", res.Failed)
		}
		return time.Since(t), err
	}
	for i := range 3 { // warm-up
		if _, err := send(-i); err != nil {
			return fmt.Errorf("agent send: %w", err)
		}
	}
	var lat []time.Duration
	for i := range b.cfg.RPCSamples {
		dt, err := send(i)
		if err != nil {
			return fmt.Errorf("agent send: %w", err)
		}
		lat = append(lat, dt)
	}
	b.res.RPC = latencies(lat)
	b.progress("daemon: agent send round trip p50 %.1f ms, p99 %.1f ms (n=%d)", b.res.RPC.P50MS, b.res.RPC.P99MS, b.res.RPC.N)

	b.res.HandEdit, err = b.handEdits(home, info)
	if err != nil {
		return fmt.Errorf("hand edit: %w", err)
	}
	if b.res.HandEdit.NA != "" {
		b.progress("daemon: hand edit: %s", b.res.HandEdit.NA)
	} else {
		b.progress("daemon: hand edit visible p50 %.1f ms, p99 %.1f ms (n=%d)", b.res.HandEdit.P50MS, b.res.HandEdit.P99MS, b.res.HandEdit.N)
	}
	err = d.stop()
	d = nil
	return err
}

// handEdits edits the agent's session.json as a person would (write a copy
// elsewhere, mv it over session.json) and polls agent.inspect until the
// change shows. If the first edit does not show within EditProbe, no
// watcher adopts hand edits: the figure is n/a.
func (b *benchRun) handEdits(home string, info api.AgentInfo) (benchLatency, error) {
	c, err := rpc.Dial(b.ctx, fsstore.Layout{Home: home}.Socket())
	if err != nil {
		return benchLatency{}, err
	}
	defer c.Close()
	path := fsstore.AgentFiles{Dir: info.Dir}.Session()
	tmp := filepath.Join(b.dir, "session.json.edit")
	edit := func(i int, timeout time.Duration) (time.Duration, bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, false, err
		}
		sess, err := fsstore.DecodeSession(data)
		if err != nil {
			return 0, false, err
		}
		want := fmt.Sprintf("%s (hand edit %d)", benchInstructions, i)
		sess.Instructions = want
		out, err := fsstore.EncodeSession(sess)
		if err != nil {
			return 0, false, err
		}
		if err := os.WriteFile(tmp, out, 0o600); err != nil {
			return 0, false, err
		}
		t := time.Now()
		if err := os.Rename(tmp, path); err != nil {
			return 0, false, err
		}
		for time.Since(t) < timeout {
			res, err := rpc.Call(b.ctx, c, api.AgentInspect, api.RefParams{Ref: info.ID})
			if err != nil {
				return 0, false, err
			}
			if res.Session != nil && res.Session.Instructions == want {
				return time.Since(t), true, nil
			}
			time.Sleep(500 * time.Microsecond)
		}
		return 0, false, nil
	}
	dt, ok, err := edit(0, b.cfg.EditProbe)
	if err != nil || !ok {
		return benchLatency{NA: handEditNA}, err
	}
	lat := []time.Duration{dt}
	for i := 1; i < b.cfg.EditSamples; i++ {
		time.Sleep(20 * time.Millisecond) // let the daemon settle (edited event, snapshot)
		dt, ok, err := edit(i, 5*time.Second)
		if err != nil {
			return benchLatency{}, err
		}
		if !ok {
			dt = 5 * time.Second // counted as the timeout
		}
		lat = append(lat, dt)
	}
	return latencies(lat), nil
}

func latencies(ds []time.Duration) benchLatency {
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ms(ds[min(max(i, 0), len(ds)-1)])
	}
	return benchLatency{N: len(ds), P50MS: q(0.50), P99MS: q(0.99), MaxMS: ms(ds[len(ds)-1])}
}

// rss starts the real daemon on a fixture home and reads its resident set
// once its recovery is done and it has been idle a moment.
func (b *benchRun) rss(home string, agents int) error {
	t := time.Now()
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 5*time.Minute)
	if err != nil {
		return err
	}
	start := time.Since(t)
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	st, err := daemonCall(b.ctx, d, api.DaemonStatus, struct{}{})
	if err != nil {
		return err
	}
	if st.Agents != agents {
		return fmt.Errorf("the daemon has %d agents, want %d", st.Agents, agents)
	}
	time.Sleep(b.cfg.Settle)
	rss, peak, err := procMem(d.pid())
	if err != nil {
		return err
	}
	b.res.RSS = benchRSS{Agents: agents, RSSMB: rss, PeakMB: peak, StartMS: ms(start)}
	b.progress("daemon: %d idle agents: RSS %.0f MB (peak %.0f MB), started in %.0f ms", agents, rss, peak, ms(start))
	err = d.stop()
	d = nil
	return err
}

// procMem returns VmRSS and VmHWM of a process, in MB (10^6 bytes).
func procMem(pid int) (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmRSS":
			rss = kb * 1024 / 1e6
		case "VmHWM":
			peak = kb * 1024 / 1e6
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return rss, peak, sc.Err()
}

// The machine.
