package ssh

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPullHardLinks: a place whose files are hard links of one big file
// is as large as rsync writes it here (each link a file of its own), not
// as du counts it (each inode once): Pull refuses it.
func TestPullHardLinks(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	e.opts.MaxFileSize = 1 << 20
	e.opts.MaxTotalSize = 4 << 20
	if err := e.Push(ctx, "agenth", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agenth")
	one := filepath.Join(dir, "one")
	if err := os.WriteFile(one, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := os.Link(one, filepath.Join(dir, "l"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	local := t.TempDir()
	if err := e.Pull(ctx, "agenth", local); !errors.Is(err, ErrRefused) {
		t.Fatalf("Pull of 17 MiB in hard links, over a bound of 4 MiB: %v, want ErrRefused", err)
	}
	if _, err := os.Lstat(filepath.Join(local, "la")); !os.IsNotExist(err) {
		t.Fatal("a refused place came back")
	}
}

// TestPullRaceSymlink: while Pull writes into local, a process that can
// write there too (an agent of the same workspace at work on this
// machine) swaps a directory of it for a symlink out of it, again and
// again. Nothing is written outside.
func TestPullRaceSymlink(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	local, outside := t.TempDir(), t.TempDir()
	write(t, outside, map[string]string{"precious": "the user's", "sub/precious": "the user's"})
	if err := e.Push(ctx, "agentr", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agentr")
	files := map[string]string{}
	for i := range 300 {
		files[filepath.Join("d", "f"+strconv.Itoa(i))] = "x"
	}
	write(t, dir, files)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		d, tmp := filepath.Join(local, "d"), filepath.Join(local, "d.tmp")
		os.Mkdir(d, 0o755)
		os.Symlink(outside, tmp)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, tmp, unix.RENAME_EXCHANGE) != nil {
				os.Symlink(outside, tmp)
				os.Mkdir(d, 0o755)
			}
		}
	}()
	for i := range 10 {
		for k := range files {
			files[k] = "x" + strconv.Itoa(i)
		}
		write(t, dir, files)
		e.Pull(ctx, "agentr", local) // it may fail: the swaps are in its way
		if got := tree(t, outside); len(got) != 3 || got["precious"] != "the user's" || got["sub/precious"] != "the user's" {
			close(stop)
			<-done
			t.Fatalf("pull %d changed what lies outside, through a swapped directory: %v", i, got)
		}
	}
	close(stop)
	<-done
}

// TestPullNames: names that look like rsync's options or hold a newline,
// quotes, a glob or a colon come back as the files they are, and do
// nothing else: no option is taken, nothing outside the place changes.
func TestPullNames(t *testing.T) {
	_, e := start(t)
	ctx := context.Background()
	local := t.TempDir()
	write(t, local, map[string]string{"keep": "here"})
	if err := e.Push(ctx, "agentn", local); err != nil {
		t.Fatal(err)
	}
	dir, _ := e.Place(ctx, "agentn")
	names := map[string]string{
		"--delete-excluded": "1", "-e sh -c 'touch pwned-n'": "2", "two\nlines": "3",
		"big x\ntotal 0 0": "4", "a:b": "5", "*": "6", "$(touch pwned-n)": "7", ";touch pwned-n;": "10", "--rsh=sh": "8",
		"sub/-r": "9",
	}
	write(t, dir, names)
	if err := e.Pull(ctx, "agentn", local); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"keep": "here", "sub": "dir"}
	for k, v := range names {
		want[k] = v
	}
	same(t, "pulled", tree(t, local), want)
	for _, d := range []string{".", local, dir, filepath.Dir(dir)} {
		if _, err := os.Stat(filepath.Join(d, "pwned-n")); err == nil {
			os.Remove(filepath.Join(d, "pwned-n"))
			t.Fatal("a name was run")
		}
	}
}

// TestNoAgentForwarding: the user's ssh_config may forward their ssh
// agent (ForwardAgent yes) to a host for their own logins; the
// executor's connection does not, as a host that runs agents could use
// the user's keys through it.
func TestNoAgentForwarding(t *testing.T) {
	s, _ := start(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	if err := agent.Start(); err != nil {
		t.Skip("no ssh-agent: ", err)
	}
	defer func() { agent.Process.Kill(); agent.Wait() }()
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)
	base, err := os.ReadFile(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(cfg, append(base, "  ForwardAgent yes\n  ForwardX11 yes\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(s.Host, Options{Config: cfg, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	m, err := e.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer e.release(m)
	out, err := e.client(ctx, m, `echo "agent=${SSH_AUTH_SOCK}"`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "agent=\n" {
		t.Fatalf("the host got the user's ssh agent: %q", out)
	}
}

// TestNoConfigForwardings: forwardings the user's ssh_config sets up for
// their own logins to the host (RemoteForward: a socket of this machine
// reachable there) are not made by the executor's connection; its own
// (Forward, the agents' tool sockets) still are.
func TestNoConfigForwardings(t *testing.T) {
	s, _ := start(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "local.sock")
	l, err := net.Listen("unix", local)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	remote := filepath.Join(dir, "remote.sock")
	base, err := os.ReadFile(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(cfg, append(base, "  RemoteForward "+remote+" "+local+"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := New(s.Host, Options{Config: cfg, Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if _, err := e.run(ctx, `true`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(remote); err == nil {
		t.Fatal("the user's RemoteForward was made on the host")
	}
	fw, err := e.Forward(ctx, "agentf", "tool.sock", local)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fw); err != nil {
		t.Fatalf("the executor's own forwarding: %v", err)
	}
}
