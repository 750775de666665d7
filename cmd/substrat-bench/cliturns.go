package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/substrat/substrat/provider/fakeapi"
	"github.com/substrat/substrat/supervisor/api"
)

// The turns of the real agent CLIs, bare and through Substrat.
//
// For each CLI provider, a loopback fake of its API answers every request
// with a short text. A real daemon runs an agent of that provider (no
// workspace: it works in its scratch directory, in the default
// permissions). Its first two turns go through a shim that records the
// command line, environment, directory and standard input the adapter
// gave the CLI (the second turn resumes the session, as every later one
// does); then the shim becomes a plain symlink to the CLI. After that,
// three kinds of turns alternate, so that all meet the same load and the
// same growing conversation:
//
//   - bare: the recorded command run directly, without Substrat's MCP
//     server (withoutMCP): the CLI as one would run it by hand;
//   - bare+MCP: the recorded command as it is; its `substrat mcp` server
//     reaches the running daemon's tool socket;
//   - Substrat: agent send, waiting for the turn, from the client's side.
//
// Two more turns, a bare one and one through Substrat, measure the peak
// RSS of the CLI's process tree (the sum of each process's peak), sampled
// while they run.

// benchCLI is the result for one CLI.
type benchCLI struct {
	Name    string `json:"name"`
	Skipped string `json:"skipped,omitempty"` // why it was not measured
	Path    string `json:"path,omitempty"`
	Turns   int    `json:"turns"`
	// The turn times, in ms: bare, bare with the MCP server, and through
	// Substrat. Ratio is Substrat's median over the bare median; MCPRatio
	// over the bare+MCP median (the daemon's share).
	BareP50MS float64 `json:"bare_p50_ms"`
	// BareResultP50MS is how long the bare CLI took to print its result
	// line (it exits later: a turn through Substrat ends at that line).
	BareResultP50MS float64 `json:"bare_result_p50_ms"`
	MCPP50MS        float64 `json:"bare_mcp_p50_ms"`
	SubstratP50MS   float64 `json:"substrat_p50_ms"`
	BareMinMS       float64 `json:"bare_min_ms"`
	MCPMinMS        float64 `json:"bare_mcp_min_ms"`
	SubstratMinMS   float64 `json:"substrat_min_ms"`
	Ratio           float64 `json:"ratio"`
	MCPRatio        float64 `json:"ratio_bare_mcp"`
	// BareRSSMB and RSSMB are the peak RSS of the CLI's process tree in
	// a bare turn and in a turn through Substrat (its bwrap included).
	BareRSSMB float64 `json:"bare_rss_mb"`
	RSSMB     float64 `json:"rss_mb"`
}

// cliProviders are the CLI providers measured, in order.
var cliProviders = []string{"claude", "codex", "gemini"}

// withoutMCP returns a CLI's command line args without Substrat's MCP
// server: the CLI as one runs it by hand.
func withoutMCP(name string, args []string) []string {
	var out []string
	switch name {
	case "claude":
		// No server (--strict-mcp-config stays: nothing else is read),
		// and no approval tool, which was one of its tools.
		for i := 0; i < len(args); i++ {
			switch args[i] {
			case "--mcp-config", "--permission-prompt-tool":
				i++
				continue
			}
			out = append(out, args[i])
		}
		return append(out, "--mcp-config", `{"mcpServers":{}}`)
	case "codex":
		// The server is in CODEX_HOME's config.toml; an override turns
		// it off. The prompt ("-") stays last.
		off := []string{"-c", "mcp_servers.substrat.enabled=false"}
		if n := len(args); n > 0 && args[n-1] == "-" {
			return slices.Concat(args[:n-1], off, []string{"-"})
		}
		return slices.Concat(args, off)
	case "gemini":
		// The server is in the HOME's settings.json; none is allowed.
		return append(append(out, args...), "--allowed-mcp-server-names", "none")
	}
	return args
}

// cliFake starts the fake API of a CLI, answering every request with a
// short text, and returns the environment that points the CLI at it.
func cliFake(name string) (env []string, stop func()) {
	switch name {
	case "claude":
		s := fakeapi.NewClaude(func(fakeapi.ClaudeRequest) fakeapi.ClaudeOut { return fakeapi.ClaudeOut{Text: "ok"} })
		return []string{"ANTHROPIC_BASE_URL=" + s.URL, "ANTHROPIC_API_KEY=sk-ant-fake", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}, s.Close
	case "codex":
		s := fakeapi.NewCodex(func(fakeapi.CodexRequest) fakeapi.CodexOut { return fakeapi.CodexOut{Text: "ok"} })
		return []string{"OPENAI_BASE_URL=" + s.URL, "OPENAI_API_KEY=sk-fake-codex"}, s.Close
	case "gemini":
		s := fakeapi.NewGemini(func(fakeapi.GeminiRequest) fakeapi.GeminiOut { return fakeapi.GeminiOut{Text: "ok"} })
		return []string{"GEMINI_API_KEY=fake-gemini", "GOOGLE_GEMINI_BASE_URL=" + s.URL}, s.Close
	}
	return nil, func() {}
}

// findCLI returns the CLI called name: in dir if given (and only there),
// else in the pinned tools of the repository around the working directory
// (.tools/npm/node_modules/.bin), else in PATH.
func findCLI(dir, name string) (string, error) {
	isCLI := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	if dir != "" {
		if p := filepath.Join(dir, name); isCLI(p) {
			return p, nil
		}
		return "", fmt.Errorf("not installed (no %s in %s)", name, dir)
	}
	var tried []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if bin := filepath.Join(d, ".tools", "npm", "node_modules", ".bin"); isDir(bin) {
				if p := filepath.Join(bin, name); isCLI(p) {
					return p, nil
				}
				tried = append(tried, bin)
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	tried = append(tried, "PATH")
	return "", fmt.Errorf("not installed (no %s in %s)", name, strings.Join(tried, " or "))
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// cliTurns measures every CLI provider.
func (b *benchRun) cliTurns() error {
	if b.cfg.CLITurns <= 0 {
		b.progress("CLI turns: skipped (0 turns asked)")
		return nil
	}
	for _, name := range cliProviders {
		r := benchCLI{Name: name}
		path, err := findCLI(b.cfg.CLIDir, name)
		if err != nil {
			r.Skipped = err.Error()
			b.progress("CLI turns: %s: %s; skipped", name, r.Skipped)
			b.res.CLIs = append(b.res.CLIs, r)
			continue
		}
		r.Path = path
		if err := b.cliTurnsOf(&r); err != nil {
			if ctxErr := b.ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			r.Skipped = "failed: " + err.Error()
			b.progress("CLI turns: %s: %s", name, r.Skipped)
		} else {
			b.progress("CLI turns: %s: bare p50 %.0f ms, through Substrat p50 %.0f ms: x%.2f; RSS of a turn %.0f MB (bare %.0f MB), n=%d",
				name, r.BareP50MS, r.SubstratP50MS, r.Ratio, r.RSSMB, r.BareRSSMB, r.Turns)
		}
		b.res.CLIs = append(b.res.CLIs, r)
	}
	return nil
}

// recorded is the command the adapter gave the CLI, as the shim saw it.
type recorded struct {
	args  []string
	env   []string
	dir   string
	stdin []byte
}

// shimScript records the command it is run as in dir, then runs cli.
const shimScript = `#!/bin/sh
d=%s
cat /proc/$$/environ > "$d/env"
printf '%%s\0' "$@" > "$d/argv"
pwd > "$d/cwd"
cat > "$d/stdin"
exec %s "$@" < "$d/stdin"
`

func readRecorded(dir string) (*recorded, error) {
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	argv, err := read("argv")
	if err != nil {
		return nil, fmt.Errorf("the shim recorded no command: %w", err)
	}
	env, err := read("env")
	if err != nil {
		return nil, err
	}
	cwd, err := read("cwd")
	if err != nil {
		return nil, err
	}
	stdin, err := read("stdin")
	if err != nil {
		return nil, err
	}
	split := func(b []byte) []string { // NUL-terminated, and an argument may be empty
		if len(b) == 0 {
			return nil
		}
		return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	}
	return &recorded{args: split(argv), env: split(env), dir: strings.TrimSpace(string(cwd)), stdin: stdin}, nil
}

// cliTurnsOf measures one CLI, installed at r.Path.
func (b *benchRun) cliTurnsOf(r *benchCLI) error {
	root := filepath.Join(b.dir, "cli-"+r.Name)
	shims, rec, home := filepath.Join(root, "shim"), filepath.Join(root, "rec"), filepath.Join(root, "home")
	for _, d := range []string{shims, rec} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	real, err := filepath.Abs(r.Path)
	if err != nil {
		return err
	}
	shim := filepath.Join(shims, r.Name)
	if err := os.WriteFile(shim, fmt.Appendf(nil, shimScript, shellQuote(rec), shellQuote(real)), 0o700); err != nil {
		return err
	}
	env, stop := cliFake(r.Name)
	defer stop()
	env = append(env, "PATH="+shims+string(os.PathListSeparator)+filepath.Dir(real)+string(os.PathListSeparator)+os.Getenv("PATH"))
	d, err := startBenchDaemon(b.ctx, b.cfg.Exe, home, 60*time.Second, env...)
	if err != nil {
		return err
	}
	defer func() {
		if d != nil {
			d.kill()
		}
	}()
	if _, err := daemonCall(b.ctx, d, api.AgentCreate, api.CreateParams{Name: r.Name, Provider: r.Name, Model: "fake-model",
		Instructions: benchInstructions}); err != nil {
		return fmt.Errorf("agent create: %w", err)
	}
	send := func(i int) (time.Duration, error) {
		t := time.Now()
		res, err := daemonStream(b.ctx, d, api.AgentSend, api.SendMessageParams{Ref: r.Name, Text: fmt.Sprintf("%s %d", benchText, i), Wait: true})
		if err == nil && res.Failed != "" {
			err = errors.New(res.Failed)
		}
		if err != nil {
			return 0, fmt.Errorf("agent send: %w (daemon log: %s)", err, filepath.Join(home, "daemon.log"))
		}
		return time.Since(t), nil
	}
	for i := range 2 { // a new session, then a resumed one: recorded
		if _, err := send(-1 - i); err != nil {
			return err
		}
	}
	cmd, err := readRecorded(rec)
	if err != nil {
		return err
	}
	// From now on the daemon runs the CLI itself.
	if err := os.Remove(shim); err != nil {
		return err
	}
	if err := os.Symlink(real, shim); err != nil {
		return err
	}
	noMCP := withoutMCP(r.Name, cmd.args)
	var resultAt time.Duration // of the last bare turn
	bare := func(args []string, sample func(pid int) func() (float64, []string)) (time.Duration, float64, error) {
		c := exec.CommandContext(b.ctx, real, args...)
		c.Env, c.Dir, c.Stdin = cmd.env, cmd.dir, bytes.NewReader(cmd.stdin)
		var stderr bytes.Buffer
		out := &resultWatch{}
		c.Stdout, c.Stderr = out, &stderr
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		t := time.Now()
		if err := c.Start(); err != nil {
			return 0, 0, err
		}
		var peak func() (float64, []string)
		if sample != nil {
			peak = sample(c.Process.Pid)
		}
		err := c.Wait()
		dt := time.Since(t)
		resultAt = dt
		if !out.at.IsZero() {
			resultAt = out.at.Sub(t)
		}
		// What it left behind: its group outlives the reaped leader, and
		// Linux gives no new process that pid while the group exists.
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		mb := 0.0
		if peak != nil {
			var names []string
			mb, names = peak()
			if slices.Contains(names, "substrat") {
				return 0, 0, fmt.Errorf("the bare CLI started substrat mcp: withoutMCP does not take it out")
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("the bare CLI: %v: %s", err, tail(stderr.String()+out.buf.String(), 300))
		}
		return dt, mb, nil
	}
	var bares, results, mcps, subs []time.Duration
	for i := range b.cfg.CLITurns {
		for j := range 3 {
			switch (i + j) % 3 { // each goes first in turn
			case 0:
				dt, _, err := bare(noMCP, nil)
				if err != nil {
					return err
				}
				bares, results = append(bares, dt), append(results, resultAt)
			case 1:
				dt, _, err := bare(cmd.args, nil)
				if err != nil {
					return err
				}
				mcps = append(mcps, dt)
			default:
				dt, err := send(i)
				if err != nil {
					return err
				}
				subs = append(subs, dt)
			}
		}
	}
	bl, ml, sl := latencies(bares), latencies(mcps), latencies(subs)
	r.Turns = len(subs)
	r.BareP50MS, r.MCPP50MS, r.SubstratP50MS = bl.P50MS, ml.P50MS, sl.P50MS
	r.BareResultP50MS = latencies(results).P50MS
	r.BareMinMS, r.MCPMinMS, r.SubstratMinMS = ms(slices.Min(bares)), ms(slices.Min(mcps)), ms(slices.Min(subs))
	r.Ratio, r.MCPRatio = ratio(sl.P50MS, bl.P50MS), ratio(sl.P50MS, ml.P50MS)

	// Peak RSS, in one more turn of each.
	if _, r.BareRSSMB, err = bare(noMCP, func(pid int) func() (float64, []string) { return sampleTree(pid, true) }); err != nil {
		return err
	}
	peak := sampleTree(d.pid(), false)
	_, err = send(b.cfg.CLITurns)
	r.RSSMB, _ = peak()
	if err != nil {
		return err
	}
	err = d.stop()
	d = nil
	return err
}

// sampleTree samples, until the returned function is called, the
// processes under pid (and pid itself if self), and returns the sum of
// their peak RSS (VmHWM) in MB, and the names of the programs seen.
func sampleTree(pid int, self bool) func() (float64, []string) {
	stop := make(chan struct{})
	var (
		mu    sync.Mutex
		peaks = map[int]float64{}
		names []string
		wg    sync.WaitGroup
	)
	look := func() {
		for _, p := range descendants(pid, self) {
			if _, hwm, err := procMem(p); err == nil {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
				mu.Lock()
				peaks[p] = max(peaks[p], hwm)
				if n := strings.TrimSpace(string(comm)); n != "" && !slices.Contains(names, n) {
					names = append(names, n)
				}
				mu.Unlock()
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			look()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (float64, []string) {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		sum := 0.0
		for _, v := range peaks {
			sum += v
		}
		return sum, names
	}
}

// descendants returns the processes under pid (and pid if self), from
// /proc.
func descendants(pid int, self bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	var out []int
	if self {
		out = append(out, pid)
	}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// resultWatch keeps a CLI's output and notes when its result line came
// (claude's and gemini's "result", codex's "turn.completed").
type resultWatch struct {
	mu  sync.Mutex
	buf bytes.Buffer
	at  time.Time
}

func (w *resultWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.at.IsZero() {
		b := w.buf.Bytes()
		if bytes.Contains(b, []byte(`"type":"result"`)) || bytes.Contains(b, []byte(`"type":"turn.completed"`)) {
			w.at = time.Now()
		}
	}
	return len(p), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tail is the end of s, at most n bytes, on one line.
func tail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
