// Package supervisor is Substrat's deterministic core: the in-memory model
// of the agent tree rebuilt from fsstore at start, the recovery procedure,
// the agent tools with one-hop routing, and the turns run on provider
// sessions.
//
// Core holds the model and performs every operation synchronously; it takes
// its clock, its store (and so fsstore's I/O seam) and its Host (processes,
// sockets, git, the work tools) as inputs, so the simulation can drive it
// step by step. Package supervisor/daemon wraps a Core with the
// single-daemon lock, the socket and its RPC methods, the scheduler
// goroutine, signals, and the Host that reaches the OS.
//
// Every operation that returns success has made its effect durable first:
// events are appended and fsynced, messages are published in the
// recipient's inbox, and new agents are committed by rename.
//
// # Glossary
//
// One name for each concept, here and in the packages around it:
//
//   - agent: a node of the tree, one directory under agents/. Its record
//     is fsstore.Session (session.json, rebuilt from events.jsonl); "the
//     agent's session" in fsstore means that record and nothing else.
//   - provider session: a live conversation with a model, provider.Session,
//     and the provider's id for it (ProviderSessionID). It is created,
//     suspended (its state kept in the record's blob) and resumed; a slot
//     pool bounds how many are live.
//   - send: publishing a message in a recipient's inbox/new (USER's inbox
//     included); the sender's acknowledgement means it is durable there.
//   - deliver: a turn taking the messages waiting in inbox/new; they move
//     to inbox/cur when the turn ends (message_delivered). A message is
//     sent once and delivered once.
//   - read: USER marking messages to USER read (inbox.read), which moves
//     them to cur/ as delivery does for an agent. Listing reads nothing.
//   - turn: one provider call with the delivered messages as its prompt,
//     ending in the record's turn event (counters, and what the turn took
//     and gave).
//   - payload: the data of one event type (fsstore.Payload); a change is a
//     payload that changes the record (fsstore.Change); the others are
//     history.
//   - gate: the record's hold on new turns (budgets, failures, a parent, a
//     person); a permit lets one turn through. park: a provider's rate or
//     usage limit, until a time. hold: the core's own short hold of an
//     agent while one operation runs on it.
//   - settings: what the user configures. config.json is config.File;
//     with the environment and the daemon's flags it resolves to
//     config.Effective, which is Settings (what the core reads) and where
//     each value came from; the daemon keeps the one in force and reloads
//     it when the file changes. Config (a Core's) and daemon.Options are
//     how a program builds a core or a daemon, not settings: a program
//     sets a setting as a flag would (daemon.Options.Flags).
//   - workspace: a directory an agent works in, sandboxed by bwrap; a
//     place is where a turn's processes run it (the local machine, or a
//     host an executor reaches).
package supervisor
