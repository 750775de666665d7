package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/substrat/substrat/supervisor/daemon"

	"github.com/substrat/substrat/supervisor/api"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/internal/jsontext"
)

// DemoCmd runs the main job end to end on the script provider.
type DemoCmd struct {
	Timeout time.Duration `help:"Give up after this long." default:"60s"`
	Keep    bool          `help:"Leave the daemon running at the end."`
}

var demoWorkers = []string{"alice", "bob", "carol"}

// demoScript is what the lead agent is told: spawn three workers. Each
// worker greets the next one with a message that, read by the script
// provider, makes the next one finish and report to the lead.
func demoScript() string {
	cmd := func(tool string, args any) string {
		b, _ := jsontext.Marshal(args)
		return "!" + tool + " " + string(b)
	}
	var lines []string
	for i, w := range demoWorkers {
		next := demoWorkers[(i+1)%len(demoWorkers)]
		greeting := strings.Join([]string{
			fmt.Sprintf("hello %s, this is %s", next, w),
			"!sleep 500ms",
			cmd("complete", map[string]string{"result": fmt.Sprintf("%s was greeted by %s and is done", next, w)}),
		}, "\n")
		instructions := strings.Join([]string{
			fmt.Sprintf("I am %s, a worker of the demo team.", w),
			"!sleep 700ms",
			cmd("send_message", map[string]string{"recipient": next, "text": greeting}),
		}, "\n")
		lines = append(lines, cmd("spawn_agent", map[string]string{"name": w, "instructions": instructions}))
	}
	lines = append(lines, cmd("list_children", map[string]string{}))
	return strings.Join(lines, "\n")
}

// Run runs the demo.
func (c *DemoCmd) Run(g *Globals) error {
	// Always a fresh temporary home: never the user's, whatever --home,
	// $SUBSTRAT_HOME or $HOME say.
	if g.homeTyped {
		fmt.Fprintln(os.Stderr, "note: --home is ignored; the demo always runs in a fresh temporary home")
	}
	dir, err := os.MkdirTemp("", "substrat-demo-")
	if err != nil {
		return err
	}
	d := &demo{start: time.Now(), home: dir}
	d.g, d.layout, d.deadline = &Globals{Home: d.home}, fsstore.Layout{Home: d.home}, time.Now().Add(c.Timeout)
	for _, phase := range []func() error{d.startTeam, d.waitWork, d.killAndRestart, d.waitDone, d.show} {
		if err := phase(); err != nil {
			return err
		}
	}
	if c.Keep {
		d.step("the daemon keeps running: substrat --home %s daemon stop", d.home)
	} else if err := (&DaemonStopCmd{Timeout: 30 * time.Second}).Run(d.g); err != nil {
		return err
	}
	d.step("done. Everything is plain files; look for yourself:")
	fmt.Printf(`
  export SUBSTRAT_HOME=%[1]s
  jq . $SUBSTRAT_HOME/recovery.json                        # what the restart found and did
  for d in $SUBSTRAT_HOME/agents/*/; do jq -r '"\(.name)\t\(.agent_state)\t\(.counters.turns) turns"' $d/session.json; done
  jq -c '{seq, type, data}' $SUBSTRAT_HOME/agents/%[2]s/events.jsonl   # lead's history
  jq -r .text $SUBSTRAT_HOME/agents/%[2]s/inbox/cur/*.json            # what lead was told
  substrat agent list                                      # (after: substrat daemon start)
  substrat top                                             # the team, live (after: substrat daemon start)
`, d.home, d.lead.ID)
	return nil
}

// demo is one run of the demo, phase by phase.
type demo struct {
	start    time.Time
	home     string
	g        *Globals
	layout   fsstore.Layout
	deadline time.Time
	pid      int
	lead     api.AgentInfo
}

func (d *demo) step(format string, args ...any) {
	fmt.Printf("[%5.1fs] ", time.Since(d.start).Seconds())
	fmt.Printf(format+"\n", args...)
}

// startTeam starts the daemon and asks the lead to spawn the workers.
func (d *demo) startTeam() error {
	d.step("home: %s", d.home)
	pid, err := startDaemon(d.g, settingFlags{MaxSlots: 4}, 30*time.Second)
	if err != nil {
		return err
	}
	d.pid = pid
	d.step("daemon started (pid %d)", pid)
	if d.lead, err = call(d.g, api.AgentCreate, api.CreateParams{Name: "lead", Provider: "script",
		Instructions: "Lead the demo team."}); err != nil {
		return err
	}
	d.step("created root agent %s (%s)", d.lead.Name, d.lead.ID)
	sent, err := stream(d.g, api.AgentSend, api.SendMessageParams{Ref: "lead", Text: demoScript()})
	if err != nil {
		return err
	}
	d.step("asked lead to spawn %s; message %s is durable", strings.Join(demoWorkers, ", "), sent.MessageID)
	return nil
}

// waitWork waits until the team is mid-work: every worker exists and one
// is busy.
func (d *demo) waitWork() error {
	for {
		if time.Now().After(d.deadline) {
			return fail("the demo timed out before the team started", "see "+d.layout.Log())
		}
		list, err := demoList(d.g)
		if err != nil {
			return err
		}
		workers, busy := 0, 0
		for _, a := range list {
			if a.ParentID == d.lead.ID {
				workers++
				if a.AgentState == "BUSY" {
					busy++
				}
			}
		}
		if workers == len(demoWorkers) && busy > 0 {
			d.step("team at work: %d workers, %d busy", workers, busy)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killAndRestart kills the daemon with SIGKILL, starts a new one, and
// prints what its recovery did.
func (d *demo) killAndRestart() error {
	d.step("kill -9 the daemon (pid %d) mid-work", d.pid)
	if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
		return err
	}
	for held, _ := daemon.Held(d.layout.Lock()); held; held, _ = daemon.Held(d.layout.Lock()) {
		time.Sleep(10 * time.Millisecond)
	}
	pid, err := startDaemon(d.g, settingFlags{MaxSlots: 4}, 30*time.Second)
	if err != nil {
		return err
	}
	d.pid = pid
	d.step("daemon restarted (pid %d); recovery report:", pid)
	rep, err := call(d.g, api.DaemonRecovery, struct{}{})
	if err != nil {
		return err
	}
	if rep == nil {
		rep = &api.Report{}
	}
	printReport(rep)
	return nil
}

// waitDone waits until every worker completed and the lead read it all.
func (d *demo) waitDone() error {
	d.step("waiting for the team to finish")
	for {
		if time.Now().After(d.deadline) {
			return fail("the demo timed out waiting for the team", "see "+d.layout.Log()+" and 'substrat --home "+d.home+" agent list'")
		}
		list, err := demoList(d.g)
		if err != nil {
			return err
		}
		done, idle := 0, false
		for _, a := range list {
			if a.ParentID == d.lead.ID && a.AgentState == "TERMINATED" {
				done++
			}
			if a.ID == d.lead.ID {
				idle = a.AgentState == "IDLE"
			}
		}
		insp, err := call(d.g, api.AgentInspect, api.RefParams{Ref: d.lead.ID})
		if err != nil {
			return err
		}
		if done == len(demoWorkers) && idle && insp.Pending == 0 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// show prints the final tree and what the lead was told, from its files.
func (d *demo) show() error {
	d.step("all %d workers completed; final tree:", len(demoWorkers))
	list, err := demoList(d.g)
	if err != nil {
		return err
	}
	fmt.Print(drawTree(list))
	d.step("what lead was told, read straight from its inbox/cur/ files:")
	msgs, _, err := fsstore.ReadInbox(fsstore.OS{}, d.layout.Agent(d.lead.ID).Inbox(), fsstore.InboxCur)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		fmt.Printf("  from %-7s %s\n", m.FromName+":", oneLine(m.Text, 90))
	}
	return nil
}

func demoList(g *Globals) ([]api.AgentInfo, error) {
	list, err := call(g, api.AgentList, api.ListParams{})
	return list, err
}
