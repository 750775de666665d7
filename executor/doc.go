// Package executor is the seam between the daemon and the machine that
// runs an agent's processes (its provider process, its tool commands).
//
// The daemon builds a process's sandboxed command line itself (bwrap,
// with paths of the machine that will run it) and gives it to an
// Executor with the agent's id and incarnation, the environment, the
// working directory and the three streams; the executor starts it and
// returns a Process to wait on and kill. Local runs it on this machine
// in a process group of its own, as the daemon always has;
// executor/ssh runs it on another host over the system OpenSSH client;
// executor/k8s in a Kubernetes pod of the agent's, through an exec.
//
// An executor knows nothing of how the sandbox is built: its input is
// argv. Resource limits are applied the same way, as a wrapper in front
// of bwrap in the argv, where the machine that runs it can apply them:
// this machine's cgroups here, rlimits on another host (the limits
// package writes only this machine's cgroups).
package executor
