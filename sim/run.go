package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/substrat/substrat/fsstore"
)

// Options select what Run does with a seed.
type Options struct {
	Seed  uint64
	Steps int // actions in the run
	// Actions, if not nil, are the run's actions (a scenario) instead of
	// those the generator draws from the seed; Steps is their number.
	Actions []Action
	// Crash is the one persist point to crash at; negative: every one.
	Crash int64
	// ContinueEvery runs the rest of the actions after recovery (the
	// dual-run check) for every n-th crash point, and always for the one
	// chosen with Crash; 0: never.
	ContinueEvery int
	// Workers check crash points in parallel; 0: GOMAXPROCS.
	Workers int
	// Bug is the bug planted for this run, for the replay command.
	Bug fsstore.Bug
	// Log, if set, is told each action and its outcome, in the reference
	// run and in the runs that continue after a crash.
	Log func(format string, args ...any)
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return "refused: " + err.Error()
}

// Result is what Run found.
type Result struct {
	Seed      uint64
	Ops       int64 // persist points of the run
	Points    int   // crash points checked
	Continued int   // crash points run to the end after recovery
	Failure   *Failure
	Stats     Stats
	End       *Facts // the home at the end of the run without a crash
}

// Stats count what the runs of a seed did, to show that the checks were
// not vacuous.
type Stats struct {
	Actions  map[string]int              // "kind ok" and "kind refused", in the run without a crash
	Recovery map[fsstore.FindingKind]int // the recoveries' findings, by kind
	Torn     int                         // crashes that kept part of an unsynced write
	Acked    int                         // crash points with something acknowledged before them
	// Suspended and Redelivered count recoveries that found an ACTIVE
	// session, or undelivered messages.
	Suspended, Redelivered int
	DoubleCrashes          int // crashes during a recovery, recovered again
}

// Add adds o to s.
func (s *Stats) Add(o Stats) {
	if s.Actions == nil {
		s.Actions, s.Recovery = map[string]int{}, map[fsstore.FindingKind]int{}
	}
	for k, v := range o.Actions {
		s.Actions[k] += v
	}
	for k, v := range o.Recovery {
		s.Recovery[k] += v
	}
	s.Torn += o.Torn
	s.Acked += o.Acked
	s.Suspended += o.Suspended
	s.Redelivered += o.Redelivered
	s.DoubleCrashes += o.DoubleCrashes
}

// Failure is a broken promise, with what it takes to see it again.
type Failure struct {
	Seed     uint64
	Steps    int
	Crash    int64 // the persist point crashed at; -1 for the run without a crash
	Action   int   // the action in progress at the crash (len(actions): none)
	What     string
	Problems []string
	Tears    []string
	Bug      fsstore.Bug
	Actions  []Action // the run's actions: a scenario to keep as a test
}

// Replay is the command that runs the failing case again.
func (f *Failure) Replay() string {
	s := fmt.Sprintf("go test ./sim -run 'TestSim$' -count=1 -v -sim.seed=%d -sim.seeds=1 -sim.steps=%d -sim.crash=%d", f.Seed, f.Steps, f.Crash)
	if f.Bug != fsstore.BugNone {
		s += " -sim.bug=" + f.Bug.String()
	}
	return s
}

func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, ", f.Seed)
	if f.Crash >= 0 {
		fmt.Fprintf(&b, "crash after persist point %d, during action %d (%s)", f.Crash, f.Action, f.What)
	} else {
		fmt.Fprintf(&b, "run without a crash: %s", f.What)
	}
	if f.Bug != fsstore.BugNone {
		fmt.Fprintf(&b, ", planted bug %s", f.Bug)
	}
	b.WriteString(":\n")
	for i, p := range f.Problems {
		if i == 10 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(f.Problems)-10)
			break
		}
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	if len(f.Tears) > 0 {
		fmt.Fprintf(&b, "  (the crash tore: %s)\n", strings.Join(f.Tears, "; "))
	}
	fmt.Fprintf(&b, "replay: %s", f.Replay())
	return b.String()
}

// Times returns the abstract time at which each action runs.
func Times(actions []Action) []time.Time {
	out := make([]time.Time, len(actions))
	t := Epoch
	for i, a := range actions {
		t = t.Add(a.Advance)
		out[i] = t
	}
	return out
}

// reference is the run of the seed without a crash.
type reference struct {
	stats   Stats
	actions []Action // drawn as the run went
	trace   []string // the persist points, in order
	facts   *Facts   // the home at the end
}

// runReference draws the seed's actions and runs them without crashing,
// and checks the home at the end.
func runReference(o Options) (*reference, *Failure) {
	fail := func(what string, problems ...string) *Failure {
		return &Failure{Seed: o.Seed, Steps: o.Steps, Crash: -1, Action: o.Steps, What: what, Problems: problems, Bug: o.Bug}
	}
	clock := NewClock(Epoch)
	fsys := NewFS(clock.Now)
	ref := &reference{stats: Stats{Actions: map[string]int{}, Recovery: map[fsstore.FindingKind]int{}}}
	fsys.SetHook(func(_ int64, op string) { ref.trace = append(ref.trace, op) })
	w, err := start(fsys, clock, NewIDs(clock.Now, o.Seed, 0), false, nil)
	if err != nil {
		return nil, fail("start", err.Error())
	}
	ctx := context.Background()
	g := NewGen(o.Seed)
	for i := 0; i < o.Steps; i++ {
		var a Action
		if o.Actions != nil {
			a = o.Actions[i]
		} else {
			a = g.Next(i, w.tree())
		}
		ref.actions = append(ref.actions, a)
		clock.Set(clock.Now().Add(a.Advance))
		err := w.do(ctx, a) // refusals are part of the game: agents that do not exist...
		o.logf("reference %d: %s: %s", i, a, outcome(err))
		if err == nil {
			ref.stats.Actions[a.Kind.String()+" ok"]++
		} else {
			ref.stats.Actions[a.Kind.String()+" refused"]++
		}
	}
	fsys.SetHook(nil)
	if ref.facts, err = ReadFacts(fsys, Home); err != nil {
		return nil, fail("read the home", err.Error())
	}
	var p problems
	checkHealthy(&p, "at the end", w, false, nil)
	if len(p) > 0 {
		return nil, fail("at the end", p...)
	}
	return ref, nil
}

// crashJob is one persist point to crash at: the file system just before
// the next mutating call, and what was acknowledged before it.
type crashJob struct {
	k      int64
	img    *FS
	acked  *Facts
	action int    // the action in progress (len(actions): after the last)
	ids    uint64 // ids made so far
}

// Run runs a seed: the actions once without a crash (the reference), then
// again, crashing at every persist point (or at o.Crash): each crash is
// recovered and checked against the oracle, and some are run to the end
// and compared with the reference. It returns the first failure, by
// persist point.
func Run(o Options) Result {
	if o.Actions != nil {
		o.Steps = len(o.Actions)
	}
	res := Result{Seed: o.Seed}
	ref, f := runReference(o)
	if f != nil {
		res.Failure = f
		return res
	}
	res.End = ref.facts
	res.Stats.Add(ref.stats)
	res.Ops = int64(len(ref.trace))

	p := startChecks(o, ref)
	early := crashingRun(o, ref, p)
	p.wait()
	res.Stats.Add(p.stats)
	res.Points, res.Continued = p.points, p.continued
	res.Failure = p.first
	if early != nil && (p.first == nil || early.Crash <= p.first.Crash) {
		res.Failure = early
	}
	if res.Failure == nil && o.Crash >= 0 && res.Points == 0 {
		res.Failure = &Failure{Seed: o.Seed, Steps: o.Steps, Crash: o.Crash, Action: len(ref.actions), What: "replay", Bug: o.Bug,
			Problems: []string{fmt.Sprintf("the seed has persist points 0 to %d only", res.Ops)}}
	}
	if res.Failure != nil {
		res.Failure.Actions = ref.actions
	}
	return res
}

// checks crashes the images of the crashing run in parallel workers and
// keeps the tally: the first failure by persist point, and the stats.
type checks struct {
	jobs chan crashJob
	wg   sync.WaitGroup

	mu        sync.Mutex
	first     *Failure
	stats     Stats
	points    int
	continued int
}

func startChecks(o Options, ref *reference) *checks {
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	p := &checks{jobs: make(chan crashJob, workers)}
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for j := range p.jobs {
				cont := o.Crash >= 0 || (o.ContinueEvery > 0 && j.k%int64(o.ContinueEvery) == 0)
				st, f := crashAt(o, ref.actions, j, cont, ref.facts)
				p.mu.Lock()
				if f != nil && (p.first == nil || f.Crash < p.first.Crash) {
					p.first = f
				}
				p.stats.Add(st)
				p.points++
				if cont {
					p.continued++
				}
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// failed reports whether a check has failed: no more jobs are worth
// queueing after it.
func (p *checks) failed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first != nil
}

// wait ends the checks once the queued jobs are done.
func (p *checks) wait() {
	close(p.jobs)
	p.wg.Wait()
}

// crashingRun runs the reference's actions again, with a hook before each
// persist point that queues the file system's image there (with what was
// acknowledged before it) for p to crash. It returns a failure the run
// itself shows: nondeterminism, or an acknowledgement that rewrote an
// earlier one.
func crashingRun(o Options, ref *reference, p *checks) *Failure {
	actions := ref.actions
	times := Times(actions)
	clock := NewClock(Epoch)
	fsys := NewFS(clock.Now)
	ids := NewIDs(clock.Now, o.Seed, 0)
	var (
		book    ledger
		acked   = &Facts{Agents: map[string]*AgentFacts{}, User: map[string][]byte{}}
		current = -1     // setup
		early   *Failure // nondeterminism, or an acknowledgement that rewrote an earlier one
	)
	want := func(k int64) bool { return o.Crash < 0 || o.Crash == k }
	fsys.SetHook(func(done int64, op string) {
		if early == nil && (done >= int64(len(ref.trace)) || ref.trace[done] != op) {
			was := "nothing"
			if done < int64(len(ref.trace)) {
				was = ref.trace[done]
			}
			early = &Failure{Seed: o.Seed, Steps: o.Steps, Crash: done, Action: current, What: "nondeterminism", Bug: o.Bug,
				Problems: []string{fmt.Sprintf("persist point %d is %q in one run of the seed and %q in another", done+1, was, op)}}
		}
		if want(done) && early == nil && !p.failed() {
			p.jobs <- crashJob{k: done, img: fsys.Clone(), acked: acked, action: current, ids: ids.Count()}
		}
	})
	onAck := func() {
		f, err := ReadFacts(fsys, Home)
		var pr problems
		if err != nil {
			pr.add("reading the home: %v", err)
		} else {
			acked, pr = book.add(f)
		}
		if len(pr) > 0 && early == nil {
			early = &Failure{Seed: o.Seed, Steps: o.Steps, Crash: -1, Action: current, What: "an acknowledgement", Bug: o.Bug, Problems: pr}
			if current >= 0 && current < len(actions) {
				early.What = actions[current].String()
			}
		}
	}
	w, err := start(fsys, clock, ids, false, onAck)
	if err != nil {
		return &Failure{Seed: o.Seed, Steps: o.Steps, Crash: -1, What: "start", Problems: []string{err.Error()}, Bug: o.Bug}
	}
	ctx := context.Background()
	for i, a := range actions {
		current = i
		clock.Set(times[i])
		if w.do(ctx, a) == nil {
			onAck()
		}
	}
	current = len(actions)
	fsys.SetHook(nil)
	if k := fsys.Ops(); want(k) && early == nil && !p.failed() {
		p.jobs <- crashJob{k: k, img: fsys.Clone(), acked: acked, action: current, ids: ids.Count()}
	}
	return early
}

// crashAt crashes the image of job j, recovers it, checks it, and with
// cont runs the rest of the actions and compares the outcome with the
// reference.
func crashAt(o Options, actions []Action, j crashJob, cont bool, ref *Facts) (st Stats, _ *Failure) {
	what := "setup"
	if j.action >= 0 && j.action < len(actions) {
		what = actions[j.action].String()
	} else if j.action == len(actions) {
		what = "after the last action"
	}
	f := &Failure{Seed: o.Seed, Steps: o.Steps, Crash: j.k, Action: j.action, What: what, Bug: o.Bug}
	fail := func(p ...string) (Stats, *Failure) { f.Problems = p; return st, f }

	written, err := ReadFacts(j.img, Home)
	if err != nil {
		return fail("reading the home before the crash: " + err.Error())
	}
	acked := j.acked
	if len(acked.Agents) > 0 {
		st.Acked = 1
	}
	r := rand.New(rand.NewPCG(o.Seed, uint64(j.k)))
	f.Tears = j.img.Crash(r)
	for _, t := range f.Tears {
		if !strings.Contains(t, "transcript") {
			st.Torn = 1
		}
	}
	crashed, err := ReadFacts(j.img, Home)
	if err != nil {
		return fail("reading the home after the crash: " + err.Error())
	}
	var p problems
	checkWritten(&p, written, crashed)

	times := Times(actions)
	at := Epoch
	if j.action >= 0 {
		at = times[min(j.action, len(times)-1)]
	}
	clock := NewClock(at)
	j.img.SetClock(clock.Now)
	// The restarted daemon's ids continue after those made before the
	// crash, as a later wall clock would.
	ids := NewIDs(clock.Now, o.Seed^0x9e3779b97f4a7c15, j.ids+1<<20)
	var pre *FS // the crashed home before recovery, to crash recovery itself
	if cont {
		pre = j.img.Clone()
	}
	w, err := start(j.img, clock, ids, true, nil)
	if err != nil {
		return fail(append(p, "recovery failed: "+err.Error())...)
	}
	var recOps int64
	if pre != nil {
		recOps = j.img.Ops() - pre.Ops()
	}
	st.Recovery = map[fsstore.FindingKind]int{}
	for _, x := range w.report.Findings {
		st.Recovery[x.Kind]++
	}
	st.Suspended, st.Redelivered = min(1, len(w.report.Suspended)), min(1, len(w.report.Redelivered))
	rec, err := ReadFacts(j.img, Home)
	if err != nil {
		return fail(append(p, "reading the recovered home: "+err.Error())...)
	}
	checkAcked(&p, "after recovery", acked, rec)
	checkRecovered(&p, written, rec, w, acked)
	if len(p) > 0 || !cont {
		return st, failIf(f, p)
	}

	// A crash during recovery, then another recovery: recovery must be
	// safe to interrupt.
	if recOps > 0 {
		q, fatal := crashRecovery(o, j, pre, clock, r, recOps, written, acked)
		if fatal != "" {
			return fail(fatal)
		}
		st.DoubleCrashes = 1
		if p = append(p, q...); len(p) > 0 {
			return st, failIf(f, p)
		}
	}

	// The dual run: carry on with the actions the crash cut off.
	ctx := context.Background()
	for i := j.action + 1; i < len(actions); i++ {
		clock.Set(times[i])
		err := w.do(ctx, actions[i])
		o.logf("after crash %d: %d: %s: %s", j.k, i, actions[i], outcome(err))
	}
	end, err := ReadFacts(j.img, Home)
	if err != nil {
		return fail("reading the home at the end: " + err.Error())
	}
	checkAcked(&p, "at the end of the run after the crash", acked, end)
	checkHealthy(&p, "at the end of the run after the crash", w, false, acked)
	checkDual(&p, acked, end, ref)
	return st, failIf(f, p)
}

// crashRecovery crashes pre, the home as the crash of job j left it, at
// a drawn one of recovery's recOps persist points (which are not in a
// replayable order, since the scan runs in parallel), recovers it again,
// and checks it. fatal says why it could not be checked.
func crashRecovery(o Options, j crashJob, pre *FS, clock *Clock, r *rand.Rand, recOps int64, written, acked *Facts) (p problems, fatal string) {
	k2 := r.Int64N(recOps)
	pre.SetClock(clock.Now)
	pre.CrashAfter(pre.Ops() + k2)
	start(pre, clock, NewIDs(clock.Now, o.Seed^0x51, j.ids+2<<20), true, nil) // fails at the crash, or not
	tears := pre.Crash(r)
	w2, err := start(pre, clock, NewIDs(clock.Now, o.Seed^0x52, j.ids+3<<20), true, nil)
	if err != nil {
		return nil, fmt.Sprintf("a crash after %d of recovery's %d persist points, then recovery failed: %v", k2, recOps, err)
	}
	rec2, err := ReadFacts(pre, Home)
	if err != nil {
		return nil, "reading the home recovered twice: " + err.Error()
	}
	when := fmt.Sprintf("after a crash during recovery (at its persist point %d of %d, tearing %v) and a second recovery", k2+1, recOps, tears)
	checkAcked(&p, when, acked, rec2)
	var q problems
	checkRecovered(&q, written, rec2, w2, acked)
	for _, x := range q {
		p.add("%s: %s", when, x)
	}
	return p, ""
}

func failIf(f *Failure, p problems) *Failure {
	if len(p) == 0 {
		return nil
	}
	f.Problems = p
	return f
}
