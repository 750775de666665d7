package fsstore

import "sync/atomic"

// Bug names a known durability bug that the simulation (package sim) can
// plant in this package to prove that it would catch it.
//
// TEST-ONLY. PlantBug exists for sim's TestSimCatchesPlantedBugs and nothing
// else: no production code path calls it, and with no bug planted each check
// below is one atomic load that changes nothing. Each bug is consulted at
// exactly one point, marked "planted bug (faults.go)" in the code.
type Bug int32

const (
	// BugNone plants nothing.
	BugNone Bug = iota
	// BugNoDirSyncAfterRename skips the fsync of agents/ after a new agent
	// directory is renamed into place (store.go, CreateAgent): the create
	// is acknowledged while the directory entry is still volatile.
	BugNoDirSyncAfterRename
	// BugAckBeforeSync makes Log.Append return without fsyncing the line
	// it wrote (log.go): events are acknowledged before they are durable.
	BugAckBeforeSync
	// BugOverwritingPublish publishes a message into inbox/new with a plain
	// rename, which replaces a message of the same name (message.go,
	// Publish), instead of RenameNoReplace.
	BugOverwritingPublish
	// BugNoTornTailRepair makes a repairing scan report a torn tail of
	// events.jsonl but not cut it off (scan.go, loadAgent).
	BugNoTornTailRepair
	// BugNoBarrier makes group commit skip its barrier (group.go, flush):
	// a batch's renames are published, and acknowledged, before the
	// files they name are durable.
	BugNoBarrier
	// BugSnapshotBeforeCurSync makes Snapshot skip the fsync of
	// inbox/cur that makes MarkDelivered's links durable (store.go,
	// syncDeliveredLocked): a snapshot past a delivery can outlive the
	// delivery's link, and a later sweep remove the message's last name.
	BugSnapshotBeforeCurSync
)

// Bugs lists the bugs PlantBug can plant.
var Bugs = []Bug{BugNoDirSyncAfterRename, BugAckBeforeSync, BugOverwritingPublish, BugNoTornTailRepair, BugNoBarrier, BugSnapshotBeforeCurSync}

func (b Bug) String() string {
	switch b {
	case BugNone:
		return "none"
	case BugNoDirSyncAfterRename:
		return "no-dir-sync-after-rename"
	case BugAckBeforeSync:
		return "ack-before-sync"
	case BugOverwritingPublish:
		return "overwriting-publish"
	case BugNoTornTailRepair:
		return "no-torn-tail-repair"
	case BugNoBarrier:
		return "no-barrier"
	case BugSnapshotBeforeCurSync:
		return "snapshot-before-cur-sync"
	}
	return "unknown"
}

var plantedBug atomic.Int32

// PlantBug plants b in this package, process-wide, until the returned
// function is called. TEST-ONLY: see Bug.
func PlantBug(b Bug) (restore func()) {
	old := plantedBug.Swap(int32(b))
	return func() { plantedBug.Store(old) }
}

// planted reports whether bug b is planted.
func planted(b Bug) bool { return Bug(plantedBug.Load()) == b }

// publishRename is the rename Publish moves a message into new/ with:
// RenameNoReplace, or with BugOverwritingPublish planted, Rename.
func publishRename(fsys FS) func(oldname, newname string) error {
	if planted(BugOverwritingPublish) {
		return fsys.Rename
	}
	return fsys.RenameNoReplace
}

// syncLog fsyncs an appended log line, unless BugAckBeforeSync is planted.
func syncLog(f File) error {
	if planted(BugAckBeforeSync) {
		return nil
	}
	return f.Sync()
}
