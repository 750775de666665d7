// Package supervisor is the Substrat daemon: the in-memory model of the
// agent tree rebuilt from fsstore at start, the recovery procedure, the
// agent tools with one-hop routing, the wake loop that runs turns on
// provider sessions, and the RPC methods served on daemon.sock.
//
// Core holds the model and performs every operation synchronously; it takes
// its clock and its store (and so fsstore's I/O seam) as inputs, so the
// simulation can drive it step by step. Daemon wraps a Core with the
// single-daemon lock, the socket, the scheduler goroutine and signals.
//
// Every operation that returns success has made its effect durable first:
// events are appended and fsynced, messages are published in the
// recipient's inbox, and new agents are committed by rename.
package supervisor
