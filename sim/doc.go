// Package sim checks Substrat's promise that nothing acknowledged is lost
// across kill -9 or power loss, by simulation and by force.
//
// # The power-loss file system
//
// FS implements fsstore's I/O seam in memory, with a volatile state (what
// the program sees) and a durable one (what survives a crash):
//
//   - file data is durable once File.Sync returns;
//   - a directory entry (create, mkdir, rename, link, remove) is durable
//     once SyncDir of its directory returns; fsyncing a file does not make
//     its name durable, and a rename across directories needs both
//     directories synced (only the destination: the file has both names;
//     only the source: neither);
//   - WriteFileAtomic writes a temporary file beside the target, fsyncs it
//     and renames it over the target, without a directory fsync.
//
// FS.Crash drops what is volatile. Given a random source it is also as
// untidy as real crashes: some directories were written back on their own
// (a journaled write-back: a rename reaches the disk whole), and an
// unsynced append may survive in part, cut at a 512-byte sector boundary,
// the rest of its length possibly zero-filled. Every mutating call is a
// numbered persist point; FS.CrashAfter(k) fails call k+1 and all after it,
// and a hook sees (and can Clone) the file system before each call.
//
// # The simulation
//
// Run takes a seed. A generator draws actions from it, looking at the tree
// as it goes (create a root, a USER message whose lines make the script
// provider spawn, send, broadcast, complete, remind, subscribe...; run a
// turn or every runnable turn; let time pass so reminders fire; suspend,
// resume and so evict sessions from a two-slot pool; terminate; archive;
// hand-edit session.json; send a message whose id collides with an
// undelivered one). They run against the real supervisor.Core on an FS,
// with an abstract clock and ids made from the seed: nothing sleeps, and a
// run replays exactly. The first run records the actions and its persist
// points (a second run that does not do the same calls in the same order
// fails as nondeterminism).
//
// The second run crashes at every persist point: before each mutating
// call it clones the file system, and the clone is crashed, opened by a new
// store and core, recovered (Core.Recover, unclean), and checked against
// an oracle. The oracle keeps a ledger of what was acknowledged: the home
// as the program saw it each time an action returned success or an agent
// tool call returned a result (each of which must extend, never rewrite,
// the ledger). After recovery:
//
//   - every acknowledged agent is there (archived ones still archived), its
//     log starts with the acknowledged events, and its counters did not go
//     backwards;
//   - every acknowledged message is in its recipient's inbox/new or
//     inbox/cur, byte for byte;
//   - nothing unacknowledged is half-made: no agents/.tmp-*, nothing in
//     inbox/tmp, no torn line, no message that was not written whole, no
//     agent or message that was never written (only the recovery prompt is
//     new);
//   - each log, before recovery, is a prefix of what was written;
//   - no session is ACTIVE and no agent BUSY, on disk or in the core;
//   - the tree is consistent (no orphan, the core agrees with the disk), and
//     a deep fsstore scan finds nothing (no kept_out, no corruption).
//
// Parking is checked on its own (park_test.go): a turn that hits its
// provider's usage limit parks its agent; the machine loses power before
// each persist point of that turn and after it, and every image recovers
// with the message waiting, an agent recovered parked is not runnable
// before the reset, and at the reset (a Tick) the agent answers by itself.
//
// For some crash points (all of them with -sim.crash) the recovered core
// then runs the rest of the actions: nothing acknowledged may be lost
// later, the home must stay clean, everything acknowledged before the crash
// must be in the run without a crash too (the dual-run check), agents made
// before the crash must stand where they stand there, and no path may name
// two agents (a spawn run twice).
//
// fsstore.PlantBug plants known durability bugs; TestSimCatchesPlantedBugs
// shows the simulation catches each.
//
// # Replaying a failure
//
// A failure names the seed, the persist point, the action under way, and
// a command that replays just that crash with a log of every action:
//
//	go test ./sim -run 'TestSim$' -count=1 -v -sim.seed=N -sim.seeds=1 -sim.steps=S -sim.crash=K
//
// (or make sim SEED=N SEEDS=1 STEPS=S CRASH=K). make sim SEEDS=100000 runs
// long; go test runs a few seeds.
//
// # Scenarios
//
// A failure also prints its run's actions as a scenario, one readable line
// an action (see ParseScenario). Kept in testdata/scenarios with a "run"
// directive, in the style of etcd's raft datadriven tests, it becomes a
// regression test: TestScenarios crashes it at every persist point as it
// does a seed, and compares each action's outcome, a summary of the home
// at the end, and the verdict with the file (-rewrite updates them after a
// deliberate change). Hand-written scenarios there pin down the cases worth
// reading: a hierarchy, a hand edit, an id collision, reminders across a
// suspension, and a planted bug the checks catch.
//
// # Beyond the simulation
//
// TestChaos builds the real binary, starts the daemon with 'substrat
// daemon start', lets clients create agents and send messages that make
// them message each other, and kills the daemon with SIGKILL at random
// moments; fsck, restart, and every acknowledged agent and message must be
// there (make chaos N=1000 for long runs). TestFullDisk fills a small
// tmpfs under the real store and core (it needs root to mount one).
package sim
