package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/google/renameio/v2"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/provider"
)

// Home returns the Substrat home of cfg's agent: home if set, else
// Config.Home, else derived from Config.WorkDir (<home>/agents/<agent-id>).
func Home(name, home string, cfg provider.Config) (string, error) {
	if home != "" {
		return home, nil
	}
	if cfg.Home != "" {
		return cfg.Home, nil
	}
	wd := filepath.Clean(cfg.WorkDir)
	if cfg.WorkDir != "" && filepath.Base(wd) == cfg.AgentID && filepath.Base(filepath.Dir(wd)) == fsstore.AgentsDirName {
		return filepath.Dir(filepath.Dir(wd)), nil
	}
	return "", fmt.Errorf("%s: cannot tell the Substrat home from the work dir %q (want <home>/agents/%s); set the provider's Options.Home",
		name, cfg.WorkDir, cfg.AgentID)
}

// AgentHome is the private HOME of one sandboxed agent's CLI under the
// provider's state directory: <stateDir>/homes/<agent-id>. Unsandboxed
// sessions of a provider share one HOME; a sandbox shows the CLI only its
// own agent's conversations.
func AgentHome(stateDir, agentID string) string {
	return filepath.Join(stateDir, "homes", agentID)
}

// Sandboxed returns how a CLI at path runs inside an agent's sandbox: by
// its real path (symlinks resolved, as the symlink that put it on PATH is
// not in the sandbox), and what the sandbox must show: the CLI's package
// directory (a launcher and what it loads beside it), the substrat binary
// that its MCP config starts (bin, or the running executable) and the
// files in ro, read-only; its private HOME, read-write; the network, for
// its API; and the agent's tool socket, for its MCP server.
func Sandboxed(path, bin, home string, ro ...string) (string, provider.SandboxNeeds, error) {
	prog, err := filepath.EvalSymlinks(path)
	if err == nil {
		prog, err = filepath.Abs(prog)
	}
	if err != nil {
		return "", provider.SandboxNeeds{}, fmt.Errorf("the CLI at %s: %w", path, err)
	}
	substrat, err := Substrat(bin)
	if err != nil {
		return "", provider.SandboxNeeds{}, err
	}
	return prog, provider.SandboxNeeds{
		ReadOnly:   append([]string{filepath.Dir(prog), substrat}, ro...),
		ReadWrite:  []string{home},
		Network:    true,
		ToolSocket: true,
	}, nil
}

// Substrat returns the substrat binary: bin if set, else the running
// executable.
func Substrat(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the substrat binary for the MCP config: %w", err)
	}
	return exe, nil
}

// WriteFile replaces path with data atomically (a temp file in the same
// directory, renamed), unless it already holds data. The directory must
// exist and be a real directory, not a symlink to one.
//
// The files it writes may sit where a sandboxed CLI can write between
// turns (its private HOME): whatever is at path is never followed or read
// beyond len(data)+1 bytes (a symlink to /dev/zero, a FIFO), and the
// rename replaces it, whatever it is.
func WriteFile(path string, data []byte) error {
	if holds(path, data) {
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", dir, fi.Mode().Type())
	}
	return renameio.WriteFile(path, data, 0o600, renameio.WithTempDir(dir))
}

// holds reports whether path is a regular file holding exactly data. It
// opens path without following a symlink or blocking on a FIFO, and reads
// at most len(data)+1 bytes.
func holds(path string, data []byte) bool {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return false
	}
	buf := make([]byte, len(data)+1)
	n, _ := io.ReadFull(f, buf)
	return n == len(data) && bytes.Equal(buf[:n], data)
}

// Environ returns the daemon's environment with set replacing, defaults
// added where unset, and drop removed, plus extra.
func Environ(set, defaults map[string]string, drop []string, extra []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok {
			continue
		}
		skip := false
		for _, d := range drop {
			skip = skip || k == d
		}
		if skip {
			continue
		}
		seen[k] = true
		out = append(out, kv)
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	for k, v := range defaults {
		if !seen[k] {
			out = append(out, k+"="+v)
		}
	}
	return append(out, extra...)
}

// minimalPrefixes are the variables every sandboxed CLI keeps: what a
// program needs to run and to go through a proxy. A name ends in "=", a
// prefix does not. TMPDIR is not among them: the sandbox has its own /tmp.
var minimalPrefixes = []string{"PATH=", "HOME=", "LANG=", "LC_", "TZ=", "TERM=", "USER=", "SUBSTRAT_AGENT_ID=",
	"HTTP_PROXY=", "HTTPS_PROXY=", "NO_PROXY=", "http_proxy=", "https_proxy=", "no_proxy=",
	"SSL_CERT_FILE=", "SSL_CERT_DIR=", "NODE_EXTRA_CA_CERTS="}

// Minimal keeps only the variables of env a sandboxed CLI needs (the
// sandbox passes nothing else in, and should not see the daemon's
// secrets): the common ones, and those keep names (a name ends in "=", a
// prefix does not).
func Minimal(env []string, keep ...string) []string {
	var out []string
	for _, kv := range env {
		if slices.ContainsFunc(minimalPrefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) ||
			slices.ContainsFunc(keep, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			out = append(out, kv)
		}
	}
	return out
}

// Names returns "NAME=" for each NAME=value of env: what Minimal keeps to
// let env through whole (an adapter's Options.Env, which the user set on
// purpose).
func Names(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k+"=")
	}
	return out
}

// StateDir is a provider's directory of its own files: dir when set, else
// <home>/providers/<name> of the agent's Substrat home (see Home).
func StateDir(name, dir, home string, cfg provider.Config) (string, error) {
	if dir != "" {
		return dir, nil
	}
	h, err := Home(name, home, cfg)
	if err != nil {
		return "", err
	}
	return fsstore.Layout{Home: h}.ProviderDir(name), nil
}

// PrivateDir makes dir, a directory of a CLI's own HOME, for the daemon to
// write into: the HOME is the CLI's to write, so what is there and is not
// a plain directory (a symlink planted by a turn) is removed rather than
// written through.
func PrivateDir(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		if err := os.Remove(dir); err != nil {
			return err
		}
	}
	return os.MkdirAll(dir, 0o700)
}
