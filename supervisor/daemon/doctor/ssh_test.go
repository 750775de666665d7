package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/substrat/substrat/executor/ssh"
	"github.com/substrat/substrat/internal/sshtest"
	"github.com/substrat/substrat/supervisor/api"
)

// TestSSHHosts: each distinct host of the agents' ssh executors is
// checked against a real sshd (reached through $SUBSTRAT_SSH_CONFIG): the
// test's host passes, one the config does not know fails, and local
// agents add no check.
func TestSSHHosts(t *testing.T) {
	if why := sshtest.Available(); why != "" {
		t.Skip(why)
	}
	s := sshtest.Start(t)
	t.Setenv(ssh.ConfigEnv, s.Config)
	var in Input
	for _, e := range []string{"ssh://" + s.Host, "", "ssh://" + s.Host, "ssh://nowhere.invalid"} {
		in.CountExecutor(e)
	}
	if len(in.SSH) != 2 || in.SSH[s.Host] != 2 || in.SSH["nowhere.invalid"] != 1 {
		t.Fatalf("counted %v", in.SSH)
	}
	got := map[string]api.DoctorCheck{}
	for host := range in.SSH {
		got[host] = checkSSH(context.Background(), host, in.SSH[host])
	}
	if c := got[s.Host]; c.Status != api.DoctorOK || c.Check != "ssh "+s.Host || !strings.Contains(c.Detail, "2 agent(s)") {
		t.Errorf("the test's host: %+v", c)
	}
	if c := got["nowhere.invalid"]; c.Status != api.DoctorFail || !strings.Contains(c.Detail, "not reachable") || c.Hint == "" {
		t.Errorf("an unknown host: %+v", c)
	}
}
