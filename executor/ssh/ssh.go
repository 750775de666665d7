package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/syntax"
)

// Errors. Test for them with errors.Is.
var (
	// ErrHost: a host name that could pass for an ssh option or is not
	// one word.
	ErrHost = errors.New("ssh executor: invalid host")
	// ErrID: an agent id or incarnation that is not a plain token.
	ErrID = errors.New("ssh executor: invalid id")
	// ErrRefused: a workspace that Pull refuses to bring back.
	ErrRefused = errors.New("ssh executor: workspace refused")
)

// ConfigEnv names an ssh_config file that replaces ~/.ssh/config for
// every ssh the executor runs (ssh -F).
const ConfigEnv = "SUBSTRAT_SSH_CONFIG"

// RootEnv names the directory on every host under which the agents'
// places are kept, when Options.Root is empty: for a host whose home is
// not the place for them, and for tests, whose host is this machine.
const RootEnv = "SUBSTRAT_SSH_ROOT"

// MaxMastersEnv and MaxSessionsEnv set Options.MaxMasters and
// Options.MaxSessions when they are zero.
const (
	MaxMastersEnv  = "SUBSTRAT_SSH_MAX_MASTERS"
	MaxSessionsEnv = "SUBSTRAT_SSH_MAX_SESSIONS"
)

// Options configure an Executor.
type Options struct {
	// Config is the ssh_config file (ssh -F); "" is the user's own.
	// New takes it from $SUBSTRAT_SSH_CONFIG when it is empty.
	Config string
	// Root is the absolute directory on the host under which the
	// agents' places are kept; "" is $SUBSTRAT_SSH_ROOT, else
	// ~/.substrat-exec there.
	Root string
	// Home is the id of the Substrat home whose copies these are
	// (fsstore.HomeID): they are kept under Root/Home, apart from other
	// homes' under the same root, and Copies lists them. "" keeps them
	// directly under Root (the layout of older daemons), and lists none.
	Home string
	// MaxFileSize and MaxTotalSize bound what Pull brings back: no file
	// larger than MaxFileSize, and no more than MaxTotalSize in all.
	// MaxFiles bounds the number of its entries. Zero means the
	// defaults.
	MaxFileSize, MaxTotalSize, MaxFiles int64
	// MaxMasters bounds the master connections to the host (the pool,
	// see the package doc); MaxSessions is how many sessions (a
	// process, an rsync, a command of the executor) one of them
	// carries: the host's sshd MaxSessions, learned lower from a
	// refused session. Zero means $SUBSTRAT_SSH_MAX_MASTERS and
	// $SUBSTRAT_SSH_MAX_SESSIONS, else the defaults.
	MaxMasters, MaxSessions int
}

// Default bounds of Pull.
const (
	DefaultMaxFileSize  = 256 << 20
	DefaultMaxTotalSize = 2 << 30
	DefaultMaxFiles     = 200_000
	// DefaultMaxMasters masters to a host, DefaultMaxSessions sessions
	// each (sshd's default MaxSessions).
	DefaultMaxMasters  = 4
	DefaultMaxSessions = 10
)

// Executor runs agents' processes on one host over ssh.
type Executor struct {
	host   string
	opts   Options
	ctlDir string // private: the masters' sockets and logs

	mu   sync.Mutex // guards root
	root string

	omu     sync.Mutex            // held while a master is opened
	fmu     sync.Mutex            // held while a forwarding is made
	pmu     sync.Mutex            // guards what follows
	masters []*master             // the pool, MaxMasters slots; nil: none opened
	limit   int                   // sessions a master carries, learned
	fwds    map[string]forwarding // by the path on the host
	closed  bool
}

// hostRE: what a host may look like: a name, an alias, user@host, an
// IPv6 address in brackets. Never an option, never a shell word.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9_.@:\[\]%-]+$`)

// idRE: agent ids and incarnations (UUIDs, counters, tokens).
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// New returns an executor for host (an ssh destination: a name from the
// ssh_config, user@host...). It connects to nothing yet. Close it.
func New(host string, opts Options) (*Executor, error) {
	if !hostRE.MatchString(host) || strings.HasPrefix(host, "-") {
		return nil, fmt.Errorf("%w: %q", ErrHost, host)
	}
	if opts.Config == "" {
		opts.Config = os.Getenv(ConfigEnv)
	}
	if opts.Root == "" {
		opts.Root = os.Getenv(RootEnv)
	}
	if opts.Root != "" && (!filepath.IsAbs(opts.Root) || filepath.Clean(opts.Root) != opts.Root) {
		return nil, fmt.Errorf("ssh executor: root %q is not a clean absolute path", opts.Root)
	}
	if opts.Home != "" && !idRE.MatchString(opts.Home) {
		return nil, fmt.Errorf("%w: home %q", ErrID, opts.Home)
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.MaxTotalSize <= 0 {
		opts.MaxTotalSize = DefaultMaxTotalSize
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if err := opts.pool(); err != nil {
		return nil, err
	}
	// A unix socket path is short (108 bytes): a short private dir (ssh
	// adds 17 bytes to the socket's name while it binds it).
	base := os.TempDir()
	if len(base) > 60 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "substrat-ssh")
	if err != nil {
		return nil, err
	}
	return &Executor{host: host, opts: opts, ctlDir: dir, root: opts.Root,
		masters: make([]*master, opts.MaxMasters), limit: opts.MaxSessions, fwds: map[string]forwarding{}}, nil
}

// pool fills in the pool's bounds: from $SUBSTRAT_SSH_MAX_MASTERS and
// $SUBSTRAT_SSH_MAX_SESSIONS when they are zero, else the defaults.
func (o *Options) pool() error {
	for _, b := range []struct {
		v   *int
		env string
		def int
	}{{&o.MaxMasters, MaxMastersEnv, DefaultMaxMasters}, {&o.MaxSessions, MaxSessionsEnv, DefaultMaxSessions}} {
		if *b.v > 0 {
			continue
		}
		*b.v = b.def
		if s := os.Getenv(b.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 || n > 1000 {
				return fmt.Errorf("ssh executor: $%s=%q is not a number from 1 to 1000", b.env, s)
			}
			*b.v = n
		}
	}
	return nil
}

// Host is the destination the executor runs on.
func (e *Executor) Host() string { return e.host }

// Close stops every master connection and removes the private dir.
// Processes still running through them die with them. Nothing runs
// through the executor after.
func (e *Executor) Close() error {
	e.pmu.Lock()
	e.closed = true
	ms := e.masters
	e.pmu.Unlock()
	for _, m := range ms {
		if m != nil {
			m.stop(e)
		}
	}
	return os.RemoveAll(e.ctlDir)
}

// args returns the options every ssh of the executor takes, through the
// master whose control socket is sock, then more.
// No agent or X11 forwarding, whatever the user's ssh_config says for
// the host: a host that runs agents is not to reach the user's keys or
// display (the command line wins over the config).
func (e *Executor) args(sock string, more ...string) []string {
	var a []string
	if e.opts.Config != "" {
		a = append(a, "-F", e.opts.Config)
	}
	a = append(a,
		"-o", "ControlPath="+sock,
		"-o", "BatchMode=yes",
		"-o", "ForwardAgent=no",
		"-o", "ForwardX11=no",
	)
	return append(a, more...)
}

// client returns an ssh client command through the master m that runs
// the POSIX shell command line script on the host.
func (e *Executor) client(ctx context.Context, m *master, script string) *exec.Cmd {
	return exec.CommandContext(ctx, "ssh", e.args(m.sock, "-o", "ControlMaster=no", "-o", "ClearAllForwardings=yes", "-T", "--", e.host, script)...)
}

// run runs script on the host with args ($1, $2...) and returns its
// standard output.
func (e *Executor) run(ctx context.Context, script string, args ...string) ([]byte, error) {
	line, err := shellLine(script, "substrat-ssh", args...)
	if err != nil {
		return nil, err
	}
	m, err := e.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer e.release(m)
	var stderr bytes.Buffer
	cmd := e.client(ctx, m, line)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	e.watch(m, stderr.Bytes())
	if err != nil {
		return out, fmt.Errorf("ssh %s: %v: %s", e.host, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// shellLine returns the command line that makes the host's login shell,
// whatever it is, run script in /bin/sh with a clean environment and
// the arguments given ($0 is name): every word quoted for a POSIX
// shell. Nothing of the user's shell start-up matters after the exec.
func shellLine(script, name string, args ...string) (string, error) {
	words := []string{"exec", "/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
		"/bin/sh", "-c", script, name}
	words = append(words, args...)
	for i, w := range words {
		q, err := syntax.Quote(w, syntax.LangPOSIX)
		if err != nil {
			return "", fmt.Errorf("ssh executor: cannot quote %q: %v", w, err)
		}
		words[i] = q
	}
	return strings.Join(words, " "), nil
}

// Root returns the directory on the host under which places are kept,
// asking the host for its home the first time when Options.Root was "".
func (e *Executor) Root(ctx context.Context) (string, error) {
	e.mu.Lock()
	root := e.root
	e.mu.Unlock()
	if root != "" {
		return root, nil
	}
	// sshd starts every command in the user's home.
	out, err := e.run(ctx, `pwd`)
	if err != nil {
		return "", err
	}
	home := strings.TrimSuffix(string(out), "\n")
	if !filepath.IsAbs(home) || filepath.Clean(home) != home {
		return "", fmt.Errorf("ssh %s: home %q is not a clean absolute path; set the executor's root", e.host, home)
	}
	e.mu.Lock()
	e.root = filepath.Join(home, ".substrat-exec")
	root = e.root
	e.mu.Unlock()
	return root, nil
}

// Place returns the directory on the host that holds agent's place, the
// one Push fills: the daemon builds the sandbox's command line with it
// as the sandbox's root.
func (e *Executor) Place(ctx context.Context, agent string) (string, error) {
	dir, err := e.copyDir(ctx, agent)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "place"), nil
}

// copyDir returns the directory on the host of everything kept there
// for agent (a copy's key): Root/Home/agent, or Root/agent without a
// home.
func (e *Executor) copyDir(ctx context.Context, agent string) (string, error) {
	if !idRE.MatchString(agent) {
		return "", fmt.Errorf("%w: agent %q", ErrID, agent)
	}
	root, err := e.Root(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, e.opts.Home, agent), nil
}

// master returns the pid of the first master connection of the pool,
// if it runs.
func (e *Executor) master(ctx context.Context) (int, error) {
	out, err := exec.CommandContext(ctx, "ssh", e.args(e.socket(0), "-O", "check", "--", e.host)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ssh %s: no master: %v: %s", e.host, err, bytes.TrimSpace(out))
	}
	var pid int
	if _, err := fmt.Sscanf(string(out), "Master running (pid=%d)", &pid); err != nil {
		return 0, fmt.Errorf("ssh -O check said %q", out)
	}
	return pid, nil
}
