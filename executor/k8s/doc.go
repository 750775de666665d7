// Package k8s is the executor that runs agents' processes in Kubernetes
// pods, with client-go: an agent created with --executor
// k8s://CONTEXT/NAMESPACE (CONTEXT a context of the kubeconfig) runs in
// NAMESPACE of that context's cluster.
//
// Pods. There is one pod per live agent session and incarnation,
// substrat-AGENT-INCARNATION-xxxxx (Pod, PodPrefix: a name is never used
// again), found by its labels: the agent, the incarnation and the
// daemon's home id (two homes may share a
// namespace; each sees only its own pods). Its container only waits;
// the agent's limits are its resources, its workspace is a volume (by
// default a PersistentVolumeClaim per agent, which outlives its pods),
// and it runs hardened: not root, no privilege escalation, no
// capability, the runtime's seccomp profile, a read-only root with a
// private /tmp, no service account token. Ensure makes it; WaitRunning
// waits for it; Status maps it onto what the daemon shows and does
// (Classify: missing, pending, running, failed, evicted, broken,
// deleting, stale).
//
// Processes. Start runs a turn's argv through an exec into the pod
// (WebSocket, else SPDY, as kubectl does), with the transport of
// executor/ssh: the same wrapper in the pod, and the request and input
// framed on the exec's standard input (ssh.WrapperArgv, ssh.Feed). The
// pod is the sandbox: the daemon gives the argv the pod runs, and the
// image needs /bin/sh, setsid, GNU head, mkfifo and mktemp.
//
// Fencing. The current daemon's incarnation wins. Ensure and Fence
// delete an agent's pods of any other incarnation, and what ran in them
// dies with them (the kubelet kills their containers). Start runs only in
// a pod of the command's own incarnation, found by its labels, and execs
// into it by its name, which no other pod ever has: so a stale
// incarnation's command finds no pod and is refused (ErrNoPod), and one
// cannot land in a newer incarnation's pod even if a fence comes between
// the look-up and the exec. A command whose pod goes while it runs
// fails (ErrPodGone): its stream would otherwise end as a clean exit.
//
// Leftovers. Reap kills what an agent's processes left running in its
// pod, out of their exec's group (setsid), all but PID 1: the daemon
// calls it before each copy back. It acts only as the pod's user, in a
// process tree whose PID 1 is the pod's (not on kwok, whose exec runs on
// its own machine).
//
// Copies. Push copies a workspace into the pod's workspace volume and
// Pull copies it back, each through an exec like Start's (a tar stream
// on its input or output: the image needs tar, find, xargs, mv and wc
// too (a push after a clean copy back sends only what changed:
// increment.go; a copy back after a push brings only what changed:
// increment_pull.go), and chmod
// to unlock what the agent locked there, which would otherwise fail
// every later copy). Push makes
// the pod's copy a mirror; Pull treats what comes back as hostile, under
// the SSH executor's rules and bounds: no .git (nor lost+found) at any
// depth either way (and this side's are neither replaced nor deleted),
// no symlink that points out of the tree (nor one with a .. after a
// name, which may go out through another: rsync's rule since
// CVE-2024-12088), no device, FIFO or socket, no hard link but to
// a file of the stream, no owner and no mode but the executable bit; a
// file over MaxFileSize, more than MaxTotalSize or MaxFiles entries
// refuse the whole copy (ErrRefused). What comes back is unpacked into a
// directory of its own first, checked entry by entry (nothing goes
// through a symlink or a file of the stream), then moved into the local
// tree through an os.Root, with none of its symlinks followed; a file
// whose bytes did not change is left alone.
//
// Trees. PushTrees and PullTrees copy, besides the workspace root, what
// the process sees there besides it, each a Tree at its place in the
// pod's workspace volume (the pod has no other path of this machine): a
// git workspace's clone's git directory, read-write, at .git, with its
// Keep (config, hooks, info, alternates, commondir, gitdir) pushed but
// never brought back nor deleted here; read-only copies (a link, the
// repository's .git that the clone's alternates and origin name, at
// OriginRel), never brought back, their places left alone here. The
// paths that name the repository are this machine's, so the pod's copy
// of the alternates and config (and only it) names the copy instead
// (GitTrees, git.go). The bounds are over all the trees of a copy back,
// and each is unpacked aside before any is moved in: one refused, none
// comes back. A tree the pod holds as anything but a directory (a
// symlink, a .git file) refuses the copy back. Leaving out the trees
// inside another and its Keep takes GNU tar's exact exclusions
// (--anchored --no-wildcards) in the pod: so the image needs GNU tar for
// a git workspace or links (a plain workspace's copies need neither);
// what is left out is also dropped on this side. A read-only directory
// tree unchanged here since the executor last pushed it for the agent
// (its names, sizes, modes and times) is kept as the pod's volume holds
// it, and not sent again (a large repository goes once per daemon's
// life, not once per turn); if the volume no longer holds it, it is
// sent. The trees of the agent's provider (its CLI's own HOME, its MCP
// config) go under OwnDir, which the root's copies leave out whole, both
// ways; the clone's info/exclude in the pod ignores it. In a real
// container (TestRealKubeletTrees) the trees go and come back as the
// pod's user.
//
// Salvage. SalvageTrees brings back what a turn cut short before its
// pull (a pod that went, a daemon killed) left in the volume, before the
// next push replaces it: under Pull's rules and bounds, only what is
// missing here or a regular file older here (to the second) than there;
// it deletes nothing and replaces nothing of another kind (no symlink or
// directory over a file, nor a file over them). It reads the volume the
// new pod mounts: the agent's claim, which outlives its pods; a volume
// that does not (an emptyDir) has nothing left to salvage. VolumeID
// names the volume a pod mounts by the API server's objects only (the
// claim's name and UID, an emptyDir's pod's), never by what is in it:
// a daemon keeps it to tell, across its restarts, that the volume is
// the one it last copied back in full, and skip the salvage
// (TestVolumeID; cmd/substrat TestK8sExecutorCleanRestart: a file
// deleted here after a clean turn and a clean restart does not come
// back, while TestK8sExecutorSalvage's turns cut short still salvage).
//
// Reconcile. At the daemon's start, Reconcile makes the home's pods
// agree with the store, and the store wins: pods of no live agent
// (orphans), of a stale incarnation, or failed or evicted, are deleted;
// busy agents without a pod get one.
//
// SandboxClaims. Where the agent-sandbox CRDs
// (kubernetes-sigs/agent-sandbox, extensions.agents.x-k8s.io/v1beta1)
// are installed, the pod is made by agent-sandbox's controller from a
// SandboxClaim (claims.go): Options.SandboxClaims, or
// $SUBSTRAT_K8S_SANDBOX_CLAIMS, is on, off or auto (the default: on when
// the API server serves sandboxclaims, sandboxtemplates and
// sandboxwarmpools; asked once, and again at each Reconcile: one
// request). A target may change modes between daemons: Reconcile drops
// what the other mode left (claims_mode.go): in claims mode the home's
// pods that no kept claim names, pod mode's among them; in pod mode,
// where the API server serves the claims, every claim of the home, with
// its Sandbox, template, pool and pod, then the home's templates and
// pools left. Per claim, all of one name (PodPrefix and five
// random characters, never used again): the SandboxClaim, with the
// agent's labels; a SandboxTemplate whose pod template is Pod (labels,
// resources, workspace, hardened spec; no network policy or DNS of the
// controller's: Unmanaged); and a SandboxWarmPool of no replica, which
// the claim must name and which names the template (a claim is then
// started cold, from the template). Template and pool are owned by the
// claim. The controller makes a Sandbox of the claim's name, owned by
// it, and the Sandbox a pod of that name with the template's labels: the
// look-ups by label find it. The claim stands for the pod: only a pod
// that a live claim of the agent, incarnation and home names counts (for
// Start, Status, WaitRunning), so a pod that outlives its claim is
// refused. Ensure, Fence, Delete and Reconcile act on claims as they do
// on pods; a claim is replaced, never its pod alone (its Sandbox would
// make it again under the same name), and dropped with its Sandbox,
// template, pool and pod, in that order. A claim without a pod yet is
// pending (Status: the claim's Ready reason), or broken when the
// controller could not make it (a pod the API server refuses: WaitRunning
// returns ErrNotReady with the reason); WaitRunning waits for its pod; Ensure replaces a claim that has no pod and lacks its template or
// pool. A pod deleted under a command (ErrPodGone) takes its claim along:
// its Sandbox would make it again under the same name, and the retry
// runs in a new claim and pod instead.
//
// The daemon (supervisor/daemon/kube.go) runs a turn of an agent on
// k8s://CONTEXT/NAMESPACE so: Fence, Ensure (with the limits in force;
// a pod whose resources are not those limits is replaced), WaitRunning,
// a salvage (unless the daemon's record, kept on this machine, says the
// agent's last turn came back in full from that very volume: none after
// a turn cut short, a daemon killed, or a copy that did not come back;
// a clean restart keeps it), PushTrees of the workspace root with a git
// workspace's clone and read-only links, Start of the provider's process
// (no bwrap: the pod is the sandbox), and PullTrees when it has ended; a
// pod that went meanwhile (ErrPodGone) fails the turn, which is retried,
// and salvaged first.
//
// Tests. They run against a real control plane that
// scripts/k8s-control-plane.sh builds from the Go module proxy (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok for fake
// nodes). Pods are scheduled and go Running with no container; an exec
// goes through the real API server to kwok, which stands for the
// kubelet and runs the command on the test's machine. So the pod
// lifecycle, the spec as the API server admits it, reconcile, fencing,
// status mapping, the exec path (client-go, the API server's streaming,
// the wrapper and the framing), and Push and Pull (the pod's workspace
// being a directory of the test, MountPath) are tested for real; and so
// are the daemon's turn in a pod, its restart's reconcile, and an attack
// through the copy back (cmd/substrat TestK8sExecutorE2E); no
// container, image, volume mount, security context or resource limit is
// enforced there, since kwok has no container runtime.
//
// Where it can (root, containerd and runc installed), the script also
// starts a node with a real kubelet (built the same way) over a
// containerd of its own, with a pause image and an agent image built
// there from this machine's binaries; no registry is reached. On it
// (TestRealKubelet) a command runs in a real container, as the pod's
// user, under its memory limit in the cgroup, on a read-only root with a
// writable workspace; the conformance suite passes; a command whose
// pod is fenced dies, and its Wait says so; and a turn's Push, command
// and Pull go through a real container's volume, as its user, with the
// hostile part left behind (TestRealKubeletTurn); and so does the
// daemon's own turn, in a claim bound to a host-path volume, with a model
// program put in the image (cmd/substrat TestK8sExecutorRealKubelet).
// That node has no CNI (its pods use the host's network) and no
// provisioner; CPU weights, seccomp and a pids limit are not checked
// there.
//
// The script also builds agent-sandbox's controller from
// third_party/agent-sandbox (vendored at 2fd412d5: the module proxy does
// not serve it), installs its four CRDs (with conversion None: there is
// no webhook) and runs it with its extensions. claims_test.go runs
// claims mode against it: claim to controller to pod Running, with the
// agent's labels, resources, workspace and hardened spec as admitted, a
// command and the conformance suite through Start; fencing (the old
// claim, Sandbox, template, pool and pod deleted; the old incarnation's
// Start refused, even in a running pod with its labels that no claim
// names); Reconcile (orphan and stale claims and stray pods deleted, busy
// agents' claims made again); a switch to pod mode and back
// (claims_switch_test.go: the home's claims and all they made dropped,
// another home's kept; then pod mode's pods deleted), and auto mode
// asked again by Reconcile; Delete; a claim whose pod cannot be made
// (its pool gone, or a pod the API server refuses);
// and a pod deleted under a command. cmd/substrat's TestK8sExecutorE2E
// and TestK8sExecutorPodGone pass in claims mode too, when run with
// SUBSTRAT_K8S_SANDBOX_CLAIMS=on (they run in pod mode by default). On
// the node with a real kubelet (TestClaimRealKubelet), a claim's pod runs
// a command in a real container, as its user, under its memory limit, on
// a read-only root, passes the conformance suite, and a fence kills what
// runs there. Not tested: a warm pool of more than zero replicas (not
// used), the controller's webhook, and CRDs with no controller running
// (a claim then stays pending).
package k8s
