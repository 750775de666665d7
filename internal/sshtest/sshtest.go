// Package sshtest starts a real OpenSSH server (/usr/sbin/sshd) on
// loopback for tests, with a host key and a user key of its own, and
// writes an ssh_config through which the system ssh client (and rsync,
// and anything else that runs ssh -F) reaches it. Nothing of the user's
// ~/.ssh is read or written.
package sshtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SSHD is where the server is looked for.
const SSHD = "/usr/sbin/sshd"

// Server is a running sshd.
type Server struct {
	Host   string // the Host alias Config names
	Config string // an ssh_config file: ssh -F Config Host
	Dir    string // the server's files (keys, config, log)
	Port   int
	cmd    *exec.Cmd
	log    bytes.Buffer
	extra  []string // more lines of sshd_config
}

// Available reports why a server cannot be started here, or "" if it can.
func Available() string {
	for _, bin := range []string{SSHD, "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Sprintf("%s is not installed (scripts/install-tools.sh installs openssh-server)", bin)
		}
	}
	return ""
}

// Start starts a server for the test and stops it at the test's end. The
// test fails if the server cannot be started or reached.
func Start(t testing.TB) *Server { return StartWith(t) }

// StartWith is Start with more lines of sshd_config, before the test's
// own: sshd takes the first value of a keyword, so a line here wins
// over them (MaxSessions 2, AllowStreamLocalForwarding no). No Match
// block: it would take the test's lines in.
func StartWith(t testing.TB, sshdConfig ...string) *Server {
	t.Helper()
	if why := Available(); why != "" {
		t.Fatal(why)
	}
	// sshd refuses keys and configs in a directory others can write, and
	// unix socket paths (ControlPath) are short: a short private dir.
	dir, err := os.MkdirTemp("", "sshtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{Host: "substrat-test", Dir: dir, extra: sshdConfig}
	if err := s.start(); err != nil {
		t.Fatalf("sshtest: %v\nsshd's log:\n%s", err, s.log.String())
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() error {
	for _, k := range []string{"host", "user"} {
		out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sshtest-"+k, "-f", s.path(k+"_key")).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ssh-keygen: %v: %s", err, out)
		}
	}
	pub, err := os.ReadFile(s.path("user_key.pub"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.path("authorized_keys"), pub, 0o600); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		// sshd run as root wants its privilege separation directory.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return err
		}
	}
	if s.Port, err = freePort(); err != nil {
		return err
	}
	if err := s.writeConfigs(); err != nil {
		return err
	}
	s.cmd = exec.Command(SSHD, "-D", "-e", "-f", s.path("sshd_config"))
	s.cmd.Stdout, s.cmd.Stderr = &s.log, &s.log
	if err := s.cmd.Start(); err != nil {
		return err
	}
	return s.waitReady()
}

func (s *Server) path(name string) string { return filepath.Join(s.Dir, name) }

func (s *Server) writeConfigs() error {
	u, err := user.Current()
	if err != nil {
		return err
	}
	sshd := strings.Join([]string{
		strings.Join(s.extra, "\n"),
		fmt.Sprintf("ListenAddress 127.0.0.1:%d", s.Port),
		"HostKey " + s.path("host_key"),
		"AuthorizedKeysFile " + s.path("authorized_keys"),
		"PidFile none",
		"StrictModes no",
		"UsePAM no",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PubkeyAuthentication yes",
		"PermitRootLogin prohibit-password",
		"AllowUsers " + u.Username,
		"LogLevel ERROR",
		"MaxStartups 100",
		"MaxSessions 100",
		// Bash run by sshd reads ~/.bashrc even to run one command,
		// unless SHLVL says it is not the first shell: a test must not
		// depend on the user's shell start-up (on this machine root's
		// hangs).
		"SetEnv SHLVL=1",
		"",
	}, "\n")
	if err := os.WriteFile(s.path("sshd_config"), []byte(sshd), 0o600); err != nil {
		return err
	}
	hostPub, err := os.ReadFile(s.path("host_key.pub"))
	if err != nil {
		return err
	}
	known := fmt.Sprintf("[127.0.0.1]:%d %s", s.Port, hostPub)
	if err := os.WriteFile(s.path("known_hosts"), []byte(known), 0o600); err != nil {
		return err
	}
	client := strings.Join([]string{
		"Host " + s.Host,
		"  HostName 127.0.0.1",
		fmt.Sprintf("  Port %d", s.Port),
		"  User " + u.Username,
		"  IdentityFile " + s.path("user_key"),
		"  IdentitiesOnly yes",
		"  UserKnownHostsFile " + s.path("known_hosts"),
		"  GlobalKnownHostsFile /dev/null",
		"  StrictHostKeyChecking yes",
		"  BatchMode yes",
		"  LogLevel ERROR",
		"",
	}, "\n")
	s.Config = s.path("ssh_config")
	return os.WriteFile(s.Config, []byte(client), 0o600)
}

// waitReady waits until a command runs over ssh, or sshd has exited. The
// wait is bounded only to fail a test that would hang; it is not a timing
// assumption (each try is a real connection).
func (s *Server) waitReady() error {
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			s.cmd = nil
			return fmt.Errorf("sshd exited at start: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := s.Command(ctx, "echo", "sshtest-ready").CombinedOutput()
		cancel()
		if err == nil && strings.TrimSpace(string(out)) == "sshtest-ready" {
			go func() { <-exited }() // reaped when Stop kills it
			return nil
		}
		last = fmt.Errorf("%v: %s", err, out)
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("sshd did not answer within 2 minutes: %v", last)
}

// Command returns ssh -F Config Host args...: the system client, as the
// code under test would run it.
func (s *Server) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ssh", append([]string{"-F", s.Config, s.Host}, args...)...)
}

// Stop kills the server.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}
