// Package fsstore is Substrat's database: a home directory of plain files
// that people can read with cat and jq, back up with rsync and edit by hand.
// The directories are the database. This comment describes the format;
// layout.go names every path.
//
// # The tree
//
//	HOME/                      0700
//	  daemon.sock daemon.lock daemon.pid daemon.log recovery.json
//	                           (the daemon's; not written by this package)
//	  home.json                the home's identity: {version, id, path,
//	                           created_at, copied_from}, made at its first
//	                           start (home.go)
//	  backup.json              only in a copy made by 'substrat backup':
//	                           {version, backup_of (the id of the home
//	                           copied), source, copied_at}
//	  providers.json           provider processes running, for reaping
//	  providers/<name>/        a provider's own state (a CLI's HOME,
//	                           session ids); homes/<id>/ per agent
//	  run/<id>.sock            a sandboxed agent's tool socket (no data)
//	  run/k8s/<id>.synced      the identity of an agent's Kubernetes volume
//	                           whose last turn came back in full
//	  inbox/{tmp,new,cur}/     messages to USER
//	  agents/<id>/             one live agent
//	    session.json           snapshot of the agent as of event last_seq
//	    events.jsonl           append-only history: the source of truth
//	    inbox/{tmp,new,cur}/   messages to the agent, Maildir style
//	    transcript.txt mcp.json (written by the daemon; observability)
//	  archive/<id>/            agents moved out of the live tree
//	  copy.lock                held (flock, shared) by copies of the home
//	                           while they run (home.go)
//	  workspaces/              (the daemon's)
//	  scratch/<id>/            working directory of an agent with no other
//	  shell/<id>/              the shell work tool's saved cwd and exports
//
// An id is a UUIDv7 in canonical lower-case form, such as
// 019a6f1e-7c2b-7d3e-9a1b-2c3d4e5f6a7b. Only entries of agents/ named so are
// agent directories; anything else there is reported and left alone.
// Every JSON document carries "version": 1, field names are snake_case and
// times are RFC 3339 in UTC.
//
// # session.json
//
// An indented JSON object: id, name, parent_id (absent for a root),
// provider, model, instructions, workspace, agent_state (IDLE, BUSY,
// WAITING, TERMINATED), session_state (CREATED, ACTIVE, SUSPENDED,
// TERMINATED), state_reason, provider_session_id, state_blob (the
// provider's opaque state, base64), spawn_key (the tool-use id of the spawn
// that made the agent), metadata, counters {turns, input_tokens,
// output_tokens, cost_usd, and context_tokens and context_window, the
// tokens of its model's context window its conversation took after its
// last turn, when the provider says}, created_at, updated_at, and last_seq: the seq of
// the last event the snapshot reflects. Unknown fields are refused.
//
// Where the agent works and what it may do there:
//
//   - workspace: "scope/name" of its workspace, when its provider runs in
//     a bwrap sandbox (with the workspace root as working directory);
//   - work_dir: otherwise, the absolute host directory its provider runs
//     in, which the user chose at create (the store is never a provider's
//     working directory). An agent created before work_dir existed, with
//     neither, is given HOME/scratch/<id> (made then) by a "work_dir"
//     event the next time the daemon loads it;
//   - permissions {mode, allowed_tools, disallowed_tools}: mode is one of
//     default, acceptEdits, plan, dontAsk or bypassPermissions, as the
//     Claude Code CLI names them (other providers map them onto their own
//     settings); the tool lists are rules passed through ("Bash(git *)").
//     Children inherit it. An agent created without a mode gets
//     bypassPermissions in a sandbox (the sandbox is the boundary) and
//     default (the CLI's safe mode) outside one. It may be changed by hand
//     (an "edited" event) or with 'substrat agent permissions' (a
//     "permissions" event). Two more fields say who answers what the mode
//     would prompt for: approver ("parent", the default: the parent, or
//     USER for a root; "user"; or "deny") and approval_timeout (a Go
//     duration, "10m" when empty);
//   - limits {memory_bytes, pids, cpu_weight}: the resources its
//     provider processes and tool commands may use together (absent: the
//     daemon's defaults, config.json's "limits"). A zero or absent field
//     is the default; -1 is none, whatever the default. cpu_weight is
//     1..10000 as cgroup v2's cpu.weight. Children inherit them. Set at
//     create ('substrat agent create --memory 512M --pids 256') and
//     changed by a "limits" event, whose data is the whole setting
//     ('substrat agent limits'); the daemon enforces them with a cgroup
//     per agent, or rlimits (see supervisor/daemon/limits);
//   - executor: where the agent's provider process and tool commands
//     run: absent for this machine, "ssh://HOST" for a host reached
//     with the system OpenSSH client (HOST is an ssh destination: a name
//     from the ssh_config, user@host; never starting with '-', no spaces,
//     controls or shell characters), or "k8s://CONTEXT/NAMESPACE" for a
//     pod in NAMESPACE of the cluster of the kubeconfig's context CONTEXT
//     (package executor/k8s). Children inherit it unless created
//     with their own. Set at create ('substrat agent create --executor
//     ssh://HOST') and changed by an "executor" event ({executor,
//     reason}); see executor.go. The provider's processes of an agent
//     on ssh://HOST run there, in a copy of its workspace that the
//     daemon pushes before each and pulls back after (see
//     supervisor/daemon/remote.go); nothing on the host writes the
//     store. Those of an agent on k8s://CONTEXT/NAMESPACE run in its pod
//     of the daemon's incarnation, with a copy of its workspace pushed
//     into the pod before each and pulled back after (see
//     supervisor/daemon/kube.go); at its start the daemon deletes the
//     pods of no live agent or of an earlier incarnation (the store
//     wins).
//   - approvals: the agent's approval requests that wait ({id, tool,
//     input, tool_use_id, call_key, batch, approver, requested_at,
//     deadline}) and the last 20 answered (with answer allow, deny or expired, reason, by,
//     remember, answered_at). An answer's remembered rule joins
//     allowed_tools (deny: disallowed_tools) in the same event
//     (approval.go). call_key (a digest of the tool and its input) and
//     batch (the first message of the turn that asked) name the call: a
//     turn run again after a crash that asks for the same call gets this
//     request, pending or answered, instead of a new one.
//
// It is only ever replaced whole: a temporary file ".session.json<digits>"
// is written in the same directory and fsynced, and exchanged with
// session.json in one atomic step (renameat2 RENAME_EXCHANGE). The
// directory is not fsynced after the exchange: events.jsonl is the record,
// and a crash that loses the exchange leaves the older session.json, from
// which the log is replayed (a session.json is never ahead of the log,
// whose events are durable first). A reader sees the old file or the new one, never a
// mix. The file that comes out of the exchange is checked: if it is not
// the one the daemon last wrote or adopted, it is a hand edit that landed
// in between, and it is put back at once (with any newer edit renamed
// over the snapshot meanwhile), so that no edit is replaced unseen; the
// daemon then adopts or refuses it. What remains: a crash in the
// microseconds between the exchange and the put-back, when an edit landed
// just before, leaves that edit in the temporary file. A crash can leave
// the temporary file behind; it is removed on the next scan. Where the
// file system cannot exchange names, the daemon checks the file and then
// renames over it, which an edit renamed in between can still lose.
//
// # events.jsonl
//
// One JSON object per line, each written with a single write(2) and then
// fsynced before the operation that made it is acknowledged. A line looks
// like
//
//	{"seq":3,"ts":"2026-11-22T10:00:00.123Z","type":"state","data":{"agent_state":"BUSY"},"crc":"1a2b3c4d"}
//
// seq is always the first field and counts up from 1 without gaps. crc is
// always the last field: the CRC-32C (Castagnoli) of every byte of the line
// before `,"crc":`, as 8 lower-case hex digits. It tells garbage from data.
// A line is at most MaxEventSize (1 MiB) including its newline.
//
// The first event is "created", whose data is the whole session as created.
// The other types that change the snapshot are "state", "provider", "turn"
// (counters, added; the context use replaced; and, for people reading the
// log, the messages the turn took and the output it streamed, text, tool
// calls and results, cut to a few KiB: see turnlog.go), "metadata", "edited" (a hand edit that was adopted),
// "permissions", "limits", "executor", "work_dir", "approval_requested", "approval_answered",
// "parked" (a provider's usage or rate limit: until when, why, and the
// provider and credentials it applies to; a zero until unparks; the
// session's "parked" field) and the orchestration events (pool, budget, gate, waiting, reminders,
// subscriptions); see apply.go and approval.go for their data.
// Other types ("message_sent", "message_delivered", "spawned",
// "tool_denied" (a tool call the provider's own rules refused), "work" (a
// work tool the daemon ran: tool, args, result cut to a few KiB),
// "effect" (an agent tool call that acts beyond its turn, recorded before
// it acts and again with its result, so that a turn run again acts once:
// see effect.go), "compaction" (a provider replaced the older part of its
// model's conversation with a summary: see compaction.go; the transcript
// keeps the whole conversation), and any the daemon adds) are history and leave the
// snapshot as it is. Replaying every event from "created" on
// yields the snapshot, so session.json can be rebuilt from the log.
//
// # Damage and what is done about it
//
// A torn tail is damage at the end of events.jsonl with no valid line
// after it: a last line without its newline, a line whose checksum does not
// match, or a zero-filled tail left by a power loss. It is the trace of an
// append that never returned, so nothing acknowledged is in it. When the log
// is opened for the daemon it is cut off: the bytes are first copied to
// events.jsonl.<offset>.broken (fsynced; a tail over 2 MiB keeps its first
// and last MiB, with a line between them saying how many bytes were left
// out), then the log is truncated to its valid prefix and fsynced. The
// tail is read from the end of the valid prefix, never the whole log.
//
// A damaged line followed by a valid one, or a valid line whose seq is not
// the next one, is corruption. It is never skipped or repaired: the agent is
// kept out of the live tree, the directory is left untouched, and the error
// (a *CorruptError) names the file, the line and its byte offset.
//
// # Files that are not what they should be
//
// Every file of the store is opened without following a symlink and
// without blocking, and must be a regular file: a FIFO, a device, a socket
// or a symlink (to /dev/zero, say) where session.json, events.jsonl or a
// message should be is damage, reported like any other, and files are
// read up to a size limit (64 MiB). An agent directory in agents/ that is
// a symlink (to a directory on another disk) is not an agent directory:
// it is reported and left alone, at start and while the daemon runs.
//
// The same holds for every other file of the home that the daemon or the
// CLI reads and that a person or an agent could replace. Each is read
// with ReadRegular (or opened with OpenRegular, OpenAppendRegular): never
// through a symlink (no file of the home is expected to be one; keep
// config.json itself in HOME, not a link to it), never blocking on a
// FIFO, only if it is a regular file, and up to a size cap:
//
//	file                                     cap        read by
//	agents/<id>/session.json, messages,      64 MiB     the store (FS.ReadFile),
//	  workspaces/…/workspace.json                       MaxFileSize
//	events.jsonl                             1 MiB a line (MaxEventSize)
//	config.json, recovery.json,              16 MiB     MaxJSONSize
//	  providers.json, a workspace's git
//	  marker, providers/<name>/ session ids
//	providers/openai/ saved conversations    64 MiB     MaxFileSize
//	daemon.log                               its last 64 KiB (daemon start's error line)
//	daemon.lock                              its first 64 bytes (the owner's pid)
//
// Files appended to (events.jsonl, transcript.txt, daemon.log) are opened
// the same way, and a directory is fsynced through an O_DIRECTORY open, so
// a FIFO put in place of either fails at once.
//
// Anything else is refused with an error that names the file and says
// what it is: "open HOME/config.json: fsstore: not a regular file: a
// FIFO", or "... a symlink", "... a directory", "read ...: fsstore: file
// too large (more than 16777216 bytes)". A refused config.json is left out
// (the daemon starts with the other settings, and 'daemon start' and
// 'config show' say why); a refused daemon.lock or daemon.log stops the
// start with that error. Neither 'daemon start' nor 'daemon stop' waits on
// such a file.
//
// A session.json that is missing, is not valid JSON, or fails validation
// is rebuilt from a valid log by the daemon's start and by 'substrat fsck
// --repair' (a snapshot_rebuilt finding in recovery.json), and the old file
// is kept as session.json.<n>.broken; when the log is not valid either, the
// agent is kept out. The daemon's start, 'daemon status' and 'agent list'
// say how many agents are kept out; 'substrat recover' says why. An unknown
// version is never rewritten. A session.json whose last_seq is past the end
// of the log (a copy taken while the daemon wrote: rsync copies events.jsonl
// before session.json; or writes the disk lost) is not trusted: the log is
// the truth, the state is rebuilt from it, and repairing rewrites
// session.json, keeping the old one as session.json.<n>.broken.
//
// Siblings (agents with the same parent_id) never share a name, so that a
// path names one agent. A session.json edited to a sibling's name is
// refused while the daemon runs; at the next start (and with 'substrat
// fsck --repair') the agent goes back to the name its events.jsonl
// records, the last good one: session.json is rebuilt from the log and
// the edited file kept as session.json.<n>.broken (a duplicate_name
// finding; 'substrat fsck' counts it as a problem until then). Siblings
// whose logs give them the same name (directories copied in from
// another home) are kept out, all but the oldest, and a directory moved
// in while the daemon runs is not adopted while a sibling has its name.
//
// # Creating an agent
//
// The directory is built as agents/.tmp-<id>/ with its session.json
// (last_seq 1), its first event and its inbox, made durable; it is
// renamed to agents/<id> without replacing anything, and agents/ is
// fsynced. A crash leaves either no agent or a whole one; a .tmp-*
// leftover is removed by the next scan. A child's parent_id is in its own
// session.json, so the tree link commits with the child.
//
// # Group commit
//
// Creates and sends that run at once share their fsyncs (group.go); the
// files they write are the same as one at a time. Each operation writes
// its files under their temporary name without fsyncing them, then joins
// a batch. A batch is made durable by one barrier, then renamed, then
// each directory renamed into is fsynced once, and only then is any
// operation of it acknowledged. The barrier is syncfs(2) of the home's
// file system when the batch holds several operations (and the home,
// agents/ and inbox/ are on that one file system, and syncfs has not
// lately cost more than fsyncs, as it does while other programs have
// much unwritten data), and otherwise an fsync of each of its files and
// new directories: a lone operation so never waits for another
// program's writes. The durability argument is
// the one of a single operation, with the barrier in place of its
// fsyncs: nothing is renamed to its final name before its content is
// durable, and nothing is acknowledged before the rename is. A crash in a
// batch leaves each of its operations whole under its final name, or
// under its temporary name (never acknowledged, removed by the next
// scan), or absent. A failed barrier fails the whole batch and renames
// nothing; a failed directory fsync fails the operations renamed into
// that directory, as a single operation's would. syncfs cannot say which
// file a write-back error was in, so one it reports also fails every
// operation begun before it (group.go).
//
// # Messages
//
// A message is a JSON file named <message-id>.json with version, id, from
// (an agent id, USER or SYSTEM), from_name, to, kind (message, reply,
// system), reply_to, text and sent_at. Sending writes it to the recipient's
// inbox/tmp/ and makes it durable (with the messages and agents of its
// batch: see Group commit), moves it to inbox/new/ with a rename that never
// overwrites, and fsyncs new/; only then is the sender answered. A message
// left in tmp/ was never acknowledged and is removed by the next scan.
// A message is delivered when the turn that took it has ended: a
// "message_delivered" event naming it is appended to the log (in the same
// write and fsync as the turn's "turn" event), then the message is linked
// into inbox/cur/. That link is not fsynced at once: the event is what
// makes the delivery durable, and cur/ is fsynced before the next
// session.json is written (and before a name is swept from new/), so that
// a link a crash loses is always one that an event after last_seq
// records (see below). Its name in new/ stays for ten minutes (DeliveredGrace) and is then removed. A message in
// new/ that is also in cur/ is delivered. The grace is for backups: rsync
// lists cur/ before new/, so a message delivered while rsync runs is still
// found in the copy's new/. Whatever is in new/ and not in cur/ after a
// crash is undelivered and is delivered again, unless an event after
// last_seq already records it as delivered (the stop fell between the
// event and the link): the scan reports that as unfinished_delivery and
// a repairing scan makes the link.
//
// # Archive
//
// Archiving an agent makes archive/<id>: archive/.tmp-<id> is built with
// a hard link to every file of agents/<id> (the same inodes; nothing is
// copied), each directory fsynced, renamed to archive/<id> without
// overwriting, and archive/ fsynced. Then agents/<id> goes (renamed to
// agents/.tmp-<id> first, so that a crash leaves a leftover, never half
// an agent), unless a copy of the home is running: a copy holds a shared
// flock on copy.lock while it runs ('substrat backup' does; by hand,
// flock -s HOME/copy.lock rsync -a HOME/ DEST/), and while one does,
// agents/<id> stays, for an hour at most (ArchiveGrace), and the
// daemon's sweep removes it once no copy runs. With agents/<id> gone,
// 'mv archive/<id> agents/' undoes the archive by hand (the daemon adopts
// it); 'substrat agent restore' undoes it at any time, removing an
// agents/<id> left for a copy first.
//
// An agent whose directory is in both agents/ and archive/ is archived:
// it is not loaded, the scan reports the agents/ copy as archived_copy
// (not a problem), and a repairing scan removes it once the grace is
// over. The copy left in agents/ is for copies of the home: a copy that
// lists the directories, then copies the files, finds the agent whole in
// agents/, in archive/, or in both, at every instant of an archive; a
// rename from one to the other could make it find neither. A copy can
// still hold one whole copy and one partial one (the files of agents/<id>
// vanished during a copy that ran longer than the grace): the whole one
// is used, and a repairing scan removes the partial one and says so
// (partial_copy). A copy that does not hold copy.lock, or a hand move of
// an agent directory while a copy runs, has that window.
//
// # Scanning
//
// Scan reads every agent directory in parallel: it removes leftovers, cuts
// torn tails, loads session.json, checks the checksums and seqs of the
// whole log and replays the events after last_seq. It returns the live
// agents and a list of findings (JSON-serialisable), which 'substrat fsck'
// and the daemon's recovery.json show. Without ScanOptions.Repair it
// changes nothing on disk.
//
// # What an agent can write
//
// Every agent is untrusted code. What it can write is hostile input to the
// daemon, the CLI, other agents' prompts and the user's own tools, and is
// never trusted as code, configuration or a path. The places, and what
// reads them:
//
//   - A workspace's root/ (read-write in its sandbox, and in the sandboxes
//     of views and links that grant it): read on the host only by the work
//     tools (read_file, edit_file: resolved beneath the grant, openat2 with
//     no symlink out, regular files only, size-capped) on the agent's own
//     behalf. root/.git must stay the empty directory the daemon made
//     (workspace.CheckGit refuses the workspace otherwise). Nothing in
//     root/ is ever given to git on the host.
//   - A git workspace's git/ (read-write in its sandbox but for config,
//     hooks/ and info/, which are read-only): read only by git running
//     inside the workspace's read-only sandbox (package workspace/gitws).
//     What comes out is data: a commit id checked for form, a pack that
//     git index-pack --strict checks object by object on the host, a diff
//     or status cut at 4 MiB (the CLI shows control characters as
//     escapes).
//   - The user's repository of a git workspace: read-only in every
//     sandbox. Host git there is hardened and refuses a .git holding a
//     commondir or gitdir file.
//   - workspaces/<scope>/<name>/shell-state/ and the agent's own shell
//     state: the shell wrapper reads them inside the sandbox.
//   - A CLI provider's private HOME (providers/<cli>/..., read-write in the
//     agent's sandbox: the CLI's own config, sessions and MCP config): read
//     only by the CLI and its MCP server, inside the sandbox. The session
//     id the daemon resumes is kept outside it.
//   - Everything an agent says through its tools or its provider's output:
//     message bodies, results, reports, approval reasons and tool inputs,
//     names it chooses (agents, workspaces, branches), usage figures.
//     Names are validated (ValidateName, git check-ref-format); bodies are
//     stored as they are and framed in other agents' prompts so that no
//     body can look like a header; tool inputs reach an approver whole.
//
// Files of the home that a person may replace by hand (config.json,
// session.json, workspace.json, approvals) are read as data only, and
// what is invalid in them is refused with the file named.
//
// # The I/O seam
//
// Every file operation goes through the FS interface (fs.go), whose
// production implementation is OS. The simulation package replaces it with
// a file system that loses what was not fsynced when it "crashes". One
// exception, read-only: on OS, Scan reads each agent directory with its
// own system calls, relative to one descriptor of the directory
// (agentdir.go), because start-up time is mostly system calls; its errors
// read as package os's, and the tests check that a scan through the FS
// methods finds exactly the same.
package fsstore
