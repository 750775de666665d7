package bwrap

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// cat concatenates argv fragments.
func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The fixed fragments of every command line, spelled out.
var (
	head    = []string{"/usr/bin/bwrap", "--die-with-parent", "--new-session", "--unshare-all"}
	caps    = []string{"--cap-drop", "ALL"}
	system  = []string{"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr", "--ro-bind-try", "/bin", "/bin", "--ro-bind-try", "/sbin", "/sbin", "--ro-bind-try", "/lib", "/lib", "--ro-bind-try", "/lib64", "/lib64"}
	etc     = []string{"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--ro-bind-try", "/etc/alternatives", "/etc/alternatives", "--ro-bind-try", "/etc/passwd", "/etc/passwd", "--ro-bind-try", "/etc/group", "/etc/group", "--ro-bind-try", "/etc/nsswitch.conf", "/etc/nsswitch.conf", "--ro-bind-try", "/etc/localtime", "/etc/localtime", "--ro-bind-try", "/etc/ssl", "/etc/ssl", "--ro-bind-try", "/etc/ca-certificates", "/etc/ca-certificates"}
	etcNet  = []string{"--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf", "--ro-bind-try", "/etc/hosts", "/etc/hosts"}
	defEnvW = []string{"HOME=/workspace", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=dumb"}
)

func TestArgv(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		cmd  []string
		want []string
		env  []string // Environ; nil: defEnvW
	}{
		{
			name: "minimal",
			spec: Spec{Root: Source{Host: "/home/u/ws/root"}},
			cmd:  []string{"echo", "hi"},
			want: []string{
				"/usr/bin/bwrap", "--die-with-parent", "--new-session", "--unshare-all",
				"--cap-drop", "ALL",
				"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
				"--ro-bind", "/usr", "/usr",
				"--ro-bind-try", "/bin", "/bin",
				"--ro-bind-try", "/sbin", "/sbin",
				"--ro-bind-try", "/lib", "/lib",
				"--ro-bind-try", "/lib64", "/lib64",
				"--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
				"--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
				"--ro-bind-try", "/etc/passwd", "/etc/passwd",
				"--ro-bind-try", "/etc/group", "/etc/group",
				"--ro-bind-try", "/etc/nsswitch.conf", "/etc/nsswitch.conf",
				"--ro-bind-try", "/etc/localtime", "/etc/localtime",
				"--ro-bind-try", "/etc/ssl", "/etc/ssl",
				"--ro-bind-try", "/etc/ca-certificates", "/etc/ca-certificates",
				"--bind-fd", "3", "/workspace", // the root, opened by Command
				"--remount-ro", "/",
				"--chdir", "/workspace",
				"--", "echo", "hi",
			},
		},
		{
			name: "network",
			spec: Spec{Root: Source{Host: "/r"}, Network: true},
			cmd:  []string{"curl", "https://example.com"},
			want: cat(head, []string{"--share-net"}, caps, system, etc, etcNet,
				[]string{"--bind-fd", "3", "/workspace", "--remount-ro", "/", "--chdir", "/workspace", "--", "curl", "https://example.com"}),
		},
		{
			name: "read-only root",
			spec: Spec{Root: Source{Host: "/r"}, RootReadOnly: true},
			cmd:  []string{"ls"},
			want: cat(head, caps, system, etc,
				[]string{"--ro-bind-fd", "3", "/workspace", "--remount-ro", "/", "--chdir", "/workspace", "--", "ls"}),
		},
		{
			name: "ro and rw mounts in order",
			spec: Spec{Root: Source{Host: "/r"}, Mounts: []Mount{
				{Source: Source{Host: "/data/in"}, Target: "/in", ReadOnly: true},
				{Source: Source{Host: "/data/out"}, Target: "/workspace/out"},
				{Source: Source{Host: "/data/in/x"}, Target: "/in/x"},
			}},
			cmd: []string{"make"},
			want: cat(head, caps, system, etc, []string{
				"--bind-fd", "3", "/workspace", // descriptors in the order of Grants
				"--ro-bind-fd", "4", "/in",
				"--bind-fd", "5", "/workspace/out",
				"--bind-fd", "6", "/in/x",
				"--remount-ro", "/", "--chdir", "/workspace", "--", "make"}),
		},
		{
			name: "env sorted, defaults overridable",
			spec: Spec{Root: Source{Host: "/r"}, Env: map[string]string{"ZED": "z", "API_KEY": "k=v w", "PATH": "/opt/bin:/usr/bin", "M": ""}},
			cmd:  []string{"env"},
			want: cat(head, caps, system, etc, []string{"--bind-fd", "3", "/workspace", "--remount-ro", "/", "--chdir", "/workspace", "--", "env"}),
			env:  []string{"API_KEY=k=v w", "HOME=/workspace", "M=", "PATH=/opt/bin:/usr/bin", "TERM=dumb", "ZED=z"},
		},
		{
			name: "custom workdir is the root target and HOME",
			spec: Spec{Root: Source{Host: "/r"}, Workdir: "/src/proj"},
			cmd:  []string{"pwd"},
			want: cat(head, caps, system, etc, []string{"--bind-fd", "3", "/src/proj", "--remount-ro", "/", "--chdir", "/src/proj", "--", "pwd"}),
			env:  []string{"HOME=/src/proj", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=dumb"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Argv("/usr/bin/bwrap", tt.spec, tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("argv mismatch\n got: %q\nwant: %q", got, tt.want)
			}
			for k, v := range tt.spec.Env {
				if v != "" && slices.Contains(got, v) {
					t.Errorf("the value of %s is on the command line, where any user can read it: %q", k, got)
				}
			}
			want := tt.env
			if want == nil {
				want = defEnvW
			}
			if env := Environ(tt.spec); !reflect.DeepEqual(env, want) {
				t.Errorf("environment mismatch\n got: %q\nwant: %q", env, want)
			}
		})
	}
}

func TestArgvDeterministic(t *testing.T) {
	env := map[string]string{}
	for _, k := range strings.Fields("Q W E R T Y U I O P A S D F G H J K L Z X C V B N M") {
		env[k] = strings.ToLower(k)
	}
	s := Spec{Root: Source{Host: "/r"}, Env: env}
	first, err := Argv("bwrap", s, []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		again, err := Argv("bwrap", s, []string{"true"})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("argv changed between calls:\n%q\n%q", first, again)
		}
	}
}

func TestArgvInvalid(t *testing.T) {
	ok := Spec{Root: Source{Host: "/r"}}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	mount := func(m ...Mount) Spec { return with(func(s *Spec) { s.Mounts = m }) }
	tests := []struct {
		name string
		spec Spec
		cmd  []string
		want string // substring of the error
	}{
		{"empty root", Spec{}, []string{"true"}, "root: empty path"},
		{"relative root", Spec{Root: Source{Host: "ws/root"}}, []string{"true"}, `root: "ws/root" is not absolute`},
		{"dotdot root", Spec{Root: Source{Host: "/home/u/../../etc"}}, []string{"true"}, `root: "/home/u/../../etc" contains '..'`},
		{"unclean root", Spec{Root: Source{Host: "/home//u/"}}, []string{"true"}, `root: "/home//u/" is not clean`},
		{"workdir slash", with(func(s *Spec) { s.Workdir = "/" }), []string{"true"}, `workdir: "/" would hide`},
		{"workdir in usr", with(func(s *Spec) { s.Workdir = "/usr/local/ws" }), []string{"true"}, "workdir: /usr/local/ws would shadow /usr"},
		{"relative target", mount(Mount{Source: Source{Host: "/d"}, Target: "d"}), []string{"true"}, `mount 1: target: "d" is not absolute`},
		{"dotdot target", mount(Mount{Source: Source{Host: "/d"}, Target: "/workspace/../usr"}), []string{"true"}, `mount 1: target: "/workspace/../usr" contains '..'`},
		{"root target", mount(Mount{Source: Source{Host: "/d"}, Target: "/"}), []string{"true"}, `mount 1: target: "/" would hide`},
		{"usr target", mount(Mount{Source: Source{Host: "/d"}, Target: "/usr"}), []string{"true"}, "/usr would shadow /usr"},
		{"lib subdir target", mount(Mount{Source: Source{Host: "/d"}, Target: "/lib/x"}), []string{"true"}, "/lib/x would shadow /lib"},
		{"proc target", mount(Mount{Source: Source{Host: "/d"}, Target: "/proc"}), []string{"true"}, "/proc would shadow /proc"},
		{"dev target", mount(Mount{Source: Source{Host: "/d"}, Target: "/dev/shm"}), []string{"true"}, "/dev/shm would shadow /dev"},
		{"etc target", mount(Mount{Source: Source{Host: "/d"}, Target: "/etc"}), []string{"true"}, "/etc would shadow /etc"},
		{"shell dir target", mount(Mount{Source: Source{Host: "/d"}, Target: "/.substrat-shell/state"}), []string{"true"}, "would shadow /.substrat-shell"},
		{"target hides root", mount(Mount{Source: Source{Host: "/d"}, Target: "/workspace"}), []string{"true"}, "would hide the root"},
		{"duplicate target", mount(Mount{Source: Source{Host: "/d"}, Target: "/x"}, Mount{Source: Source{Host: "/e"}, Target: "/x"}), []string{"true"}, "mount 2: target /x is used twice"},
		{"relative host", mount(Mount{Source: Source{Host: "d"}, Target: "/x"}), []string{"true"}, `mount 1: host: "d" is not absolute`},
		{"dotdot host", mount(Mount{Source: Source{Host: "/a/../b"}, Target: "/x"}), []string{"true"}, `mount 1: host: "/a/../b" contains '..'`},
		{"empty env name", with(func(s *Spec) { s.Env = map[string]string{"": "x"} }), []string{"true"}, "empty name"},
		{"env name with =", with(func(s *Spec) { s.Env = map[string]string{"A=B": "x"} }), []string{"true"}, `"A=B" contains '='`},
		{"env value with NUL", with(func(s *Spec) { s.Env = map[string]string{"A": "x\x00y"} }), []string{"true"}, "A contains a NUL"},
		{"no command", ok, nil, "empty command"},
		{"empty program", ok, []string{""}, "empty command"},
		{"NUL argument", ok, []string{"echo", "a\x00b"}, "NUL byte"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Argv("/usr/bin/bwrap", tt.spec, tt.cmd)
			if err == nil {
				t.Fatalf("Argv succeeded: %q", got)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("error %v does not wrap ErrInvalidSpec", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
	if _, err := Argv("", ok, []string{"true"}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("empty bwrap path: %v", err)
	}
}

func TestValidateTargetAccepts(t *testing.T) {
	for _, p := range []string{"/workspace/data", "/data", "/tmp/x", "/opt/tool", "/usr2", "/etcetera", "/.substrat-shellfish"} {
		if err := ValidateTarget(p); err != nil {
			t.Errorf("ValidateTarget(%q) = %v, want nil", p, err)
		}
	}
}

func TestGrants(t *testing.T) {
	s := Spec{Root: Source{Host: "/r"}, RootReadOnly: true, Workdir: "/w", Mounts: []Mount{{Source: Source{Host: "/a"}, Target: "/a"}}}
	want := []Mount{{Source: Source{Host: "/r"}, Target: "/w", ReadOnly: true}, {Source: Source{Host: "/a"}, Target: "/a"}}
	if got := s.Grants(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Grants() = %+v, want %+v", got, want)
	}
	if got := (Spec{Root: Source{Host: "/r"}}).Grants(); got[0].Target != DefaultWorkdir {
		t.Fatalf("default grant target %q", got[0].Target)
	}
}

// TestPathArgv: for another machine every bind is made from its path
// there, in the order of Argv's descriptors.
func TestPathArgv(t *testing.T) {
	spec := Spec{Root: Source{Host: "/home/r/.substrat-exec/a1/place"}, Mounts: []Mount{
		{Source: Source{Host: "/opt/model"}, Target: "/opt/model", ReadOnly: true},
		{Source: Source{Host: "/home/r/.substrat-exec/a1/tool-1.sock"}, Target: "/h/agents/a1/tool.sock"},
	}}
	got, err := PathArgv("bwrap", spec, []string{"/opt/model", "x y"})
	if err != nil {
		t.Fatal(err)
	}
	want := cat([]string{"bwrap", "--die-with-parent", "--new-session", "--unshare-all"}, caps, system, etc,
		[]string{"--bind", "/home/r/.substrat-exec/a1/place", "/workspace",
			"--ro-bind", "/opt/model", "/opt/model",
			"--bind", "/home/r/.substrat-exec/a1/tool-1.sock", "/h/agents/a1/tool.sock",
			"--remount-ro", "/", "--chdir", "/workspace", "--", "/opt/model", "x y"})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PathArgv:\n got %q\nwant %q", got, want)
	}
	if _, err := PathArgv("bwrap", Spec{Root: Source{Host: "rel"}}, []string{"x"}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("a relative root: %v", err)
	}
}
