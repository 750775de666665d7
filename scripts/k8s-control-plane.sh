#!/usr/bin/env bash
# k8s-control-plane.sh — a real Kubernetes control plane on loopback, for the
# tests of executor/k8s. Everything is built from the Go module proxy, once
# per machine, into a cache directory; no release binary is downloaded.
#
#   etcd                 go.etcd.io/etcd/server/v3
#   kube-apiserver,      k8s.io/kubernetes, through a wrapper module (in the
#   kube-controller-manager, cache, not the project's go.mod) that replaces
#   kube-scheduler       each staging module with its published v0.MINOR.PATCH
#   kwok                 sigs.k8s.io/kwok: fake nodes, so scheduled pods go
#                        Running with no containers. There is no kubelet: an
#                        exec into any pod is served by kwok, which runs the
#                        command on this machine, as this user, in RUN_DIR/exec
#                        (a ClusterExec "local" target). So the exec path
#                        (client-go -> apiserver -> "kubelet" -> process) is
#                        real, but no container, image or volume is.
#   agent-sandbox        third_party/agent-sandbox (kubernetes-sigs/agent-sandbox,
#   controller           vendored: the proxy does not serve it), with its four CRDs
#                        (conversion None: no webhook), extensions on: SandboxClaims,
#                        SandboxTemplates and SandboxWarmPools become Sandboxes and pods.
#
# Usage:
#   k8s-control-plane.sh build           build into the cache if missing (a cold
#                                        build is 5-6 min on 2 cores, and about 3 more
#                                        for the agent-sandbox controller; then free)
#   k8s-control-plane.sh start RUN_DIR   build if needed, then start everything on
#                                        127.0.0.1 with free ports; state, logs and
#                                        the kubeconfig go to RUN_DIR. The kubeconfig's
#                                        path is the only line on stdout.
#   k8s-control-plane.sh image RUN_DIR TAG FILE...
#                                        one more agent image on the real kubelet's node,
#                                        with FILE... (and their libraries) at their paths;
#                                        its reference is the only line on stdout
#   k8s-control-plane.sh stop RUN_DIR    stop what start started (apiserver before
#                                        etcd), then remove RUN_DIR (--keep keeps it)
#
# Environment (all optional):
#   SUBSTRAT_K8S_CACHE   cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/substrat/k8s)
#   K8S_VERSION          default 1.34.4 (staging modules: v0.34.4)
#   ETCD_VERSION         default 3.6.16
#   KWOK_VERSION         default 0.8.0
#   K8S_KWOK_NODES       fake nodes (default 1), each with K8S_KWOK_PODS pods (default 2000)
#   SUBSTRAT_K8S_KUBELET auto (default), 1 or 0: also a node with a real kubelet and
#                        containerd (see "a real kubelet" below)
#   SUBSTRAT_K8S_IMAGE_FILES  absolute paths of more files for the agent image, at
#                        the same paths (space-separated: a test's model program)
set -Eeuo pipefail
# A command that fails ends the script (set -e); say which, not silently.
trap 'echo "k8s-control-plane: exit $? at line $LINENO: $BASH_COMMAND" >&2' ERR

CACHE_DIR=${SUBSTRAT_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/substrat/k8s}
K8S_VERSION=${K8S_VERSION:-1.34.4}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
KWOK_NODES=${K8S_KWOK_NODES:-1}
KWOK_PODS=${K8S_KWOK_PODS:-2000}
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

log() { printf '[k8s-control-plane %s] %s\n' "$(date +%T)" "$*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
RUN_DIR=
STARTED=0
die() {
	log "ERROR: $*"
	if [ "$STARTED" = 1 ] && [ -n "$RUN_DIR" ]; then "$SELF" stop "$RUN_DIR" --keep || true; fi
	exit 1
}

K8S_BIN=$CACHE_DIR/bin/k8s-v$K8S_VERSION
ETCD_BIN=$CACHE_DIR/bin/etcd-v$ETCD_VERSION
KWOK_BIN=$CACHE_DIR/bin/kwok-v$KWOK_VERSION
# The agent-sandbox controller, keyed by a digest of its vendored source: a
# change of the source builds it again.
SANDBOX_SRC=$(cd "$(dirname "$0")/.." && pwd)/third_party/agent-sandbox
sandbox_key() {
	(cd "$SANDBOX_SRC" && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}
SANDBOX_BIN=$CACHE_DIR/bin/agent-sandbox-$(sandbox_key)

# ---------------------------------------------------------------- build (cached)

moddir() { # module@version -> its directory in the module cache (downloads it)
	go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}

built() {
	local c
	for c in kube-apiserver kube-controller-manager kube-scheduler; do [ -x "$K8S_BIN/$c" ] || return 1; done
	[ -x "$ETCD_BIN/etcd" ] && [ -x "$KWOK_BIN/kwok" ] && [ -f "$KWOK_BIN/stages.yaml" ] &&
		[ -x "$SANDBOX_BIN/agent-sandbox-controller" ]
}

build_k8s() {
	local comps="kube-apiserver kube-controller-manager kube-scheduler" c missing=0
	for c in $comps; do [ -x "$K8S_BIN/$c" ] || missing=1; done
	[ $missing = 0 ] && return 0
	local t0 src kdir staging minor
	t0=$(now)
	log "building kubernetes v$K8S_VERSION ($comps) into $K8S_BIN (first time: several minutes)"
	src=$CACHE_DIR/src/k8s-v$K8S_VERSION
	rm -rf "$src" && mkdir -p "$src"
	kdir=$(moddir "k8s.io/kubernetes@v$K8S_VERSION") || true
	if [ -z "$kdir" ] || [ ! -f "$kdir/go.mod" ]; then die "could not download k8s.io/kubernetes@v$K8S_VERSION (is the Go module proxy reachable?)"; fi
	staging="v0.${K8S_VERSION#1.}"
	minor=$(echo "$K8S_VERSION" | cut -d. -f2)
	{
		printf 'module substratk8s\n\ngo 1.24.0\n\n'
		grep '^godebug ' "$kdir/go.mod" || true # the GODEBUG defaults kubernetes builds with
		printf '\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
		# k8s.io/kubernetes replaces its staging modules with ./staging/..., which its
		# module zip does not hold: point each at its published version instead.
		sed -n '/^replace (/,/^)/p' "$kdir/go.mod" | awk -v v="$staging" '$2=="=>" {print "\t" $1 " => " $1 " " v}'
		printf ')\n'
	} >"$src/go.mod"
	{
		printf '//go:build tools\n\npackage substratk8s\n\nimport (\n'
		for c in $comps; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
		printf ')\n'
	} >"$src/tools.go"
	(cd "$src" && go mod tidy) >&2 || die "go mod tidy failed for kubernetes v$K8S_VERSION"
	rm -rf "$K8S_BIN.tmp" && mkdir -p "$K8S_BIN.tmp"
	local ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	local pkgs=()
	for c in $comps; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	(cd "$src" && go build -trimpath -ldflags "$ld" -o "$K8S_BIN.tmp/" "${pkgs[@]}") >&2 || die "building kubernetes failed"
	rm -rf "$K8S_BIN" && mv "$K8S_BIN.tmp" "$K8S_BIN"
	log "kubernetes built in $(since "$t0")s"
}

build_etcd() {
	[ -x "$ETCD_BIN/etcd" ] && return 0
	local t0 src
	t0=$(now)
	log "building etcd v$ETCD_VERSION into $ETCD_BIN"
	src=$CACHE_DIR/src/etcd-v$ETCD_VERSION
	rm -rf "$src" && mkdir -p "$src"
	# server/v3's own go.mod replaces its siblings with ../; a wrapper module avoids that.
	printf 'module substratetcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" >"$src/go.mod"
	printf '//go:build tools\n\npackage substratetcd\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$src/tools.go"
	(cd "$src" && go mod tidy) >&2 || die "go mod tidy failed for etcd v$ETCD_VERSION"
	mkdir -p "$ETCD_BIN"
	(cd "$src" && go build -trimpath -ldflags "-s -w" -o "$ETCD_BIN/etcd.tmp" go.etcd.io/etcd/server/v3) >&2 || die "building etcd failed"
	mv "$ETCD_BIN/etcd.tmp" "$ETCD_BIN/etcd"
	log "etcd built in $(since "$t0")s"
}

build_kwok() {
	[ -x "$KWOK_BIN/kwok" ] && [ -f "$KWOK_BIN/stages.yaml" ] && return 0
	local t0 kdir f
	t0=$(now)
	log "building kwok v$KWOK_VERSION into $KWOK_BIN"
	mkdir -p "$KWOK_BIN"
	(cd "$CACHE_DIR" && GOBIN="$KWOK_BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION") >&2 || die "building kwok failed"
	# kwok needs its Stage objects in its config: kwokctl's defaults, from the module source.
	kdir=$(moddir "sigs.k8s.io/kwok@v$KWOK_VERSION") || true
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		[ -f "$kdir/kustomize/stage/$f" ] || die "kwok stage $f not found in $kdir"
		printf -- '---\n'
		cat "$kdir/kustomize/stage/$f"
	done >"$KWOK_BIN/stages.yaml.tmp"
	mv "$KWOK_BIN/stages.yaml.tmp" "$KWOK_BIN/stages.yaml"
	log "kwok built in $(since "$t0")s"
}

build_sandbox() {
	[ -x "$SANDBOX_BIN/agent-sandbox-controller" ] && return 0
	local t0
	t0=$(now)
	[ -f "$SANDBOX_SRC/go.mod" ] || die "no vendored agent-sandbox in $SANDBOX_SRC"
	log "building the agent-sandbox controller from $SANDBOX_SRC into $SANDBOX_BIN"
	rm -rf "$SANDBOX_BIN.tmp" && mkdir -p "$SANDBOX_BIN.tmp"
	# Its own module (go 1.26): GOTOOLCHAIN=local never downloads a toolchain.
	(cd "$SANDBOX_SRC" && GOTOOLCHAIN=local go build -trimpath -ldflags "-s -w" \
		-o "$SANDBOX_BIN.tmp/agent-sandbox-controller" ./cmd/agent-sandbox-controller) >&2 ||
		die "building the agent-sandbox controller failed"
	rm -rf "$SANDBOX_BIN" && mv "$SANDBOX_BIN.tmp" "$SANDBOX_BIN"
	log "agent-sandbox controller built in $(since "$t0")s"
}

build() {
	command -v go >/dev/null || die "go not found"
	mkdir -p "$CACHE_DIR"
	local kubelet=0
	kubelet_wanted >/dev/null && kubelet=1
	built && { [ $kubelet = 0 ] || [ -x "$KUBELET_BIN/kubelet" ]; } && return 0
	# One build at a time per cache: make test and the tests may both ask.
	exec 9>"$CACHE_DIR/build.lock"
	flock 9
	if ! built; then
		local t0
		t0=$(now)
		build_etcd
		build_k8s
		build_kwok
		build_sandbox
		log "built in $(since "$t0")s (cache $CACHE_DIR)"
	fi
	# The kubelet too, where one can run (see "a real kubelet").
	if [ $kubelet = 1 ]; then build_kubelet; fi
	exec 9>&-
}

# ---------------------------------------------------------------- a real kubelet (optional)
#
# SUBSTRAT_K8S_KUBELET=auto (default) also starts a real node when it can:
# root, and containerd and runc installed (Debian: apt-get install containerd
# runc). =1 fails when it cannot, =0 never tries. The node is a kubelet built
# from k8s.io/kubernetes like the rest, over a containerd of its own (its
# socket, root and state in RUN_DIR/containerd; the native snapshotter;
# restrict_oom_score_adj, as in a container without CAP_SYS_RESOURCE), with
# two images built here, not pulled: a pause image (a static Go program) and
# substrat-agent:test (this machine's /bin/sh, setsid, coreutils and grep with
# their libraries). There is no CNI: the node stays NotReady, and pods run
# there with the host's network, a toleration and their node named. The node
# is RUN_DIR/kubelet-node, the image RUN_DIR/kubelet-image.

kubelet_wanted() { # prints why not, and fails, when no kubelet can be started
	case "${SUBSTRAT_K8S_KUBELET:-auto}" in
	0) echo "SUBSTRAT_K8S_KUBELET=0"; return 1 ;;
	esac
	[ "$(id -u)" = 0 ] || { echo "not root"; return 1; }
	command -v containerd >/dev/null || { echo "containerd is not installed"; return 1; }
	command -v ctr >/dev/null || { echo "ctr is not installed"; return 1; }
	command -v runc >/dev/null || { echo "runc is not installed"; return 1; }
	return 0
}

KUBELET_BIN=$CACHE_DIR/bin/kubelet-v$K8S_VERSION

build_kubelet() {
	[ -x "$KUBELET_BIN/kubelet" ] && [ -f "$KUBELET_BIN/pause.tar" ] && return 0
	local t0 src minor
	t0=$(now)
	log "building kubelet v$K8S_VERSION and a pause image into $KUBELET_BIN"
	[ -f "$CACHE_DIR/src/k8s-v$K8S_VERSION/go.mod" ] || die "build kubernetes first"
	src=$CACHE_DIR/src/kubelet-v$K8S_VERSION
	rm -rf "$src" && mkdir -p "$src/pause"
	sed 's/^module .*/module substratkubelet/' "$CACHE_DIR/src/k8s-v$K8S_VERSION/go.mod" >"$src/go.mod"
	cp "$CACHE_DIR/src/k8s-v$K8S_VERSION/go.sum" "$src/go.sum"
	printf '//go:build tools\n\npackage substratkubelet\n\nimport _ "k8s.io/kubernetes/cmd/kubelet"\n' >"$src/tools.go"
	cat >"$src/pause/main.go" <<'EOF'
// Command pause is the pod sandbox's process: it waits for a signal.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
	(cd "$src" && go mod tidy) >&2 || die "go mod tidy failed for the kubelet"
	minor=$(echo "$K8S_VERSION" | cut -d. -f2)
	rm -rf "$KUBELET_BIN.tmp" && mkdir -p "$KUBELET_BIN.tmp/pause"
	(cd "$src" && go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		-o "$KUBELET_BIN.tmp/kubelet" k8s.io/kubernetes/cmd/kubelet) >&2 || die "building the kubelet failed"
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$KUBELET_BIN.tmp/pause/pause" ./pause) >&2 || die "building pause failed"
	image_tar registry.k8s.io/pause:3.10 "$KUBELET_BIN.tmp/pause.tar" "$KUBELET_BIN.tmp/pause" '["/pause"]'
	rm -rf "$KUBELET_BIN.tmp/pause" "$KUBELET_BIN" && mv "$KUBELET_BIN.tmp" "$KUBELET_BIN"
	log "kubelet built in $(since "$t0")s"
}

image_tar() { # image_tar REF OUT.tar ROOTFS ENTRYPOINT-JSON: a docker-archive of one layer
	local ref=$1 out=$2 root=$3 ep=$4 work diff
	work=$(mktemp -d)
	tar -C "$root" -cf "$work/layer.tar" .
	diff=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/usr/bin:/bin"]},"rootfs":{"type":"layers","diff_ids":["%s"]}}\n' "$ep" "$diff" >"$work/config.json"
	printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]\n' "$ref" >"$work/manifest.json"
	tar -C "$work" -cf "$out" manifest.json config.json layer.tar
	rm -rf "$work"
}

agent_image() { # agent_image [TAG [FILE...]]: the agent image, from this machine's binaries and their libraries
	local tag=${1:-test} root=$RUN_DIR/agent-root-${1:-test} b r l
	shift || true
	rm -rf "$root" && mkdir -p "$root"/{bin,usr/bin,tmp,workspace,etc}
	for b in /bin/sh /usr/bin/setsid /usr/bin/head /usr/bin/mkfifo /usr/bin/mktemp /usr/bin/cat /usr/bin/tr \
		/usr/bin/grep /usr/bin/sleep /usr/bin/env /usr/bin/rm /usr/bin/echo /usr/bin/true /usr/bin/false /usr/bin/id \
		/usr/bin/tar /usr/bin/find /usr/bin/ln /usr/bin/mkdir /usr/bin/xargs /usr/bin/mv /usr/bin/wc ${SUBSTRAT_K8S_IMAGE_FILES:-} "$@"; do
		r=$(readlink -f "$b") || continue
		if [ -d "$r" ]; then # a directory: as it is (a CLI's package)
			mkdir -p "$root$b" && cp -a "$r/." "$root$b/"
			continue
		fi
		mkdir -p "$root$(dirname "$b")" && cp "$r" "$root$b"
		for l in $(ldd "$r" 2>/dev/null | grep -o '/[^ ]*'); do
			mkdir -p "$root$(dirname "$l")" && cp -n "$(readlink -f "$l")" "$root$l"
		done
	done
	printf 'root:x:0:0::/:/bin/sh\nagent:x:65532:65532::/workspace:/bin/sh\n' >"$root/etc/passwd"
	chmod 1777 "$root/tmp"
	image_tar "docker.io/library/substrat-agent:$tag" "$RUN_DIR/agent-$tag.tar" "$root" '["/bin/sh"]'
	rm -rf "$root"
}

image() { # image TAG FILE...: one more agent image, with FILE... (files or directories) besides, on the real kubelet's node
	local tag=$1 C=$RUN_DIR/containerd
	shift
	[[ $tag =~ ^[a-z0-9][a-z0-9.-]*$ ]] || die "a bad image tag: $tag"
	[ -S "$C/sock" ] || die "no real kubelet's containerd in $RUN_DIR"
	agent_image "$tag" "$@"
	ctr --address "$C/sock" -n k8s.io images import --snapshotter native "$RUN_DIR/agent-$tag.tar" >/dev/null || die "importing the image"
	rm -f "$RUN_DIR/agent-$tag.tar"
	echo "docker.io/library/substrat-agent:$tag"
}

start_kubelet() { # after the control plane; uses api, wait_for, run from start
	local why t port node=substrat-kubelet C=$RUN_DIR/containerd
	if ! why=$(kubelet_wanted); then
		[ "${SUBSTRAT_K8S_KUBELET:-auto}" = 1 ] && die "no kubelet: $why"
		log "no real kubelet: $why"
		return 0
	fi
	t=$(now)
	build_kubelet
	mkdir -p "$C"/{root,state,cni/bin,cni/conf} "$RUN_DIR"/kubelet/{root,certs}
	cat >"$C/config.toml" <<EOF
version = 2
root = "$C/root"
state = "$C/state"
[grpc]
  address = "$C/sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$C/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$C/cni/bin"
    conf_dir = "$C/cni/conf"
EOF
	run containerd "$(command -v containerd)" --config "$C/config.toml"
	wait_for 60 "containerd" ctr --address "$C/sock" version
	agent_image
	ctr --address "$C/sock" -n k8s.io images import --snapshotter native "$KUBELET_BIN/pause.tar" >/dev/null || die "importing pause"
	ctr --address "$C/sock" -n k8s.io images import --snapshotter native "$RUN_DIR/agent-test.tar" >/dev/null || die "importing the agent image"
	rm -f "$RUN_DIR/agent-test.tar"
	port=$(free_port "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT" "$KWOK_PORT")
	cat >"$RUN_DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $port
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://$C/sock
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
resolvConf: ""
podLogsDir: $RUN_DIR/kubelet/pod-logs
EOF
	# The kubelet runs in a mount namespace of its own, where it changes
	# nothing of this machine: it sets kernel sysctls it wants
	# (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops...), which
	# are not namespaced, so it is shown files that already hold them; and
	# /var/lib/kubelet (its device plugins' socket, wherever its root) is
	# one of its own.
	local sys=$RUN_DIR/kubelet/sysctl kv f
	mkdir -p "$sys" "$RUN_DIR/kubelet/var-lib-kubelet" "$RUN_DIR/kubelet/pod-logs"
	local binds=""
	for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
		kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
		f=${kv%%=*}
		echo "${kv#*=}" >"$sys/${f//\//.}"
		binds="$binds mount --bind $sys/${f//\//.} /proc/sys/$f &&"
	done
	if [ -d /var/lib/kubelet ]; then
		binds="$binds mount --bind $RUN_DIR/kubelet/var-lib-kubelet /var/lib/kubelet &&"
	else
		binds="$binds mount -t tmpfs -o mode=0755 tmpfs /var/lib && mkdir /var/lib/kubelet &&"
	fi
	command -v unshare >/dev/null || die "unshare (util-linux) is not installed"
	# shellcheck disable=SC2016
	run kubelet unshare --mount --propagation slave /bin/sh -c "$binds"' exec "$0" "$@"' \
		"$KUBELET_BIN/kubelet" --config="$RUN_DIR/kubelet/config.yaml" --kubeconfig="$KUBECONFIG_PATH" \
		--node-ip=127.0.0.1 --hostname-override="$node" --root-dir="$RUN_DIR/kubelet/root" --cert-dir="$RUN_DIR/kubelet/certs"
	wait_for 120 "the kubelet's node" api GET "/api/v1/nodes/$node"
	# The kubelet refuses a loopback node IP and so reports no address:
	# the API server reaches it (exec) at the one given here.
	curl -sS --fail --max-time 10 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" -X PATCH \
		-H 'Content-Type: application/merge-patch+json' "https://127.0.0.1:$API_PORT/api/v1/nodes/$node/status" \
		--data '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"'"$node"'"}]}}' >/dev/null ||
		die "could not set the kubelet node's address"
	echo "$node" >"$RUN_DIR/kubelet-node"
	echo docker.io/library/substrat-agent:test >"$RUN_DIR/kubelet-image"
	log "a real kubelet up, node $node on 127.0.0.1:$port, in $(since "$t")s"
}

stop_kubelet_pods() { # kill what the kubelet's containerd runs, before it goes
	# Each step may fail (a task that ended meanwhile cannot be killed):
	# under set -e, one failure would end the stop there, silently, and
	# leave everything running.
	local C=$RUN_DIR/containerd id
	[ -S "$C/sock" ] || return 0
	for id in $(ctr --address "$C/sock" -n k8s.io tasks ls -q 2>/dev/null || true); do
		ctr --address "$C/sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
	done
	sleep 0.5
	for id in $(ctr --address "$C/sock" -n k8s.io tasks ls -q 2>/dev/null || true); do
		ctr --address "$C/sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
	done
	for id in $(ctr --address "$C/sock" -n k8s.io containers ls -q 2>/dev/null || true); do
		ctr --address "$C/sock" -n k8s.io containers delete "$id" >/dev/null 2>&1 || true
	done
}

# ---------------------------------------------------------------- start

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # a port nothing listens on now, that none of the args names
	local p i lo
	# Below the kernel's ephemeral range (ip_local_port_range), which a
	# connection of any process may take meanwhile.
	lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[ "$lo" -gt 12000 ] 2>/dev/null || lo=32768
	for ((i = 0; i < 200; i++)); do
		p=$((10000 + RANDOM % (lo - 10000)))
		case " $* " in *" $p "*) continue ;; esac
		port_busy "$p" || { echo "$p"; return 0; }
	done
	die "no free port found"
}

start() {
	command -v openssl >/dev/null || die "openssl not found"
	command -v curl >/dev/null || die "curl not found"
	build
	mkdir -p "$RUN_DIR"
	RUN_DIR=$(cd "$RUN_DIR" && pwd)
	local c
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubelet containerd agent-sandbox-controller; do
		if [ -f "$RUN_DIR/$c.pid" ] && kill -0 "$(cat "$RUN_DIR/$c.pid")" 2>/dev/null; then
			die "$c already runs from $RUN_DIR; stop it first"
		fi
	done
	rm -rf "${RUN_DIR:?}"/{pki,data,logs,kubeconfig,kwok.yaml,containerd,kubelet,kubelet-node,kubelet-image}
	mkdir -p "$RUN_DIR"/{pki,data,logs}
	STARTED=1
	local PKI=$RUN_DIR/pki T_START ETCD_PORT ETCD_PEER_PORT API_PORT KWOK_PORT t
	T_START=$(now)
	ETCD_PORT=$(free_port)
	ETCD_PEER_PORT=$(free_port "$ETCD_PORT")
	API_PORT=$(free_port "$ETCD_PORT" "$ETCD_PEER_PORT")
	KWOK_PORT=$(free_port "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT")

	(
		cd "$PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=substrat-k8s-ca"
		openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
		printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n' >apiserver.ext
		openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 3650 -extfile apiserver.ext
		# kwok's server stands for the nodes' kubelets (exec): the apiserver reaches it over HTTPS
		openssl req -newkey rsa:2048 -nodes -keyout kwok.key -out kwok.csr -subj "/CN=kwok"
		printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >kwok.ext
		openssl x509 -req -in kwok.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out kwok.crt -days 3650 -extfile kwok.ext
		openssl genrsa -out sa.key 2048
		openssl rsa -in sa.key -pubout -out sa.pub
	) >"$RUN_DIR/logs/openssl.log" 2>&1 || die "openssl failed: see $RUN_DIR/logs/openssl.log"
	local TOKEN
	TOKEN=$(openssl rand -hex 24)
	printf '%s,admin,admin,"system:masters"\n' "$TOKEN" >"$PKI/tokens.csv"
	chmod 600 "$PKI"/*.key "$PKI/tokens.csv"

	local KUBECONFIG_PATH=$RUN_DIR/kubeconfig
	cat >"$KUBECONFIG_PATH" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: substrat-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: substrat-test
  context:
    cluster: substrat-test
    user: admin
current-context: substrat-test
EOF
	chmod 600 "$KUBECONFIG_PATH"

	api() { # api METHOD PATH [JSON-BODY]: the body on stdout; fails on HTTP >= 400
		curl -sS --fail --max-time 10 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" \
			-X "$1" ${3:+-H 'Content-Type: application/json' --data "$3"} "https://127.0.0.1:$API_PORT$2"
	}
	wait_for() { # wait_for SECONDS WHAT COMMAND...
		local secs=$1 what=$2 i f
		shift 2
		for ((i = 0; i < secs * 5; i++)); do
			"$@" >/dev/null 2>&1 && return 0
			for f in "$RUN_DIR"/*.pid; do # fail fast when a component exited
				[ -e "$f" ] || continue
				kill -0 "$(cat "$f")" 2>/dev/null ||
					die "$(basename "$f" .pid) exited while waiting for $what; last lines of $RUN_DIR/logs/$(basename "$f" .pid).log:
$(tail -n 5 "$RUN_DIR/logs/$(basename "$f" .pid).log")"
			done
			sleep 0.2
		done
		die "timed out after ${secs}s waiting for $what (logs in $RUN_DIR/logs)"
	}
	run() { # run NAME BINARY ARGS...: the real pid of the binary goes to NAME.pid
		local name=$1
		shift
		nohup "$@" </dev/null >"$RUN_DIR/logs/$name.log" 2>&1 &
		echo $! >"$RUN_DIR/$name.pid"
	}

	t=$(now)
	run etcd "$ETCD_BIN/etcd" --name substrat-test --data-dir "$RUN_DIR/data/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "substrat-test=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync --log-level warn
	wait_for 60 "etcd health" curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"
	log "etcd ready on 127.0.0.1:$ETCD_PORT in $(since "$t")s"

	t=$(now)
	# --endpoint-reconciler-type=none: a loopback advertise address is refused for
	# the kubernetes endpoints otherwise.
	run kube-apiserver "$K8S_BIN/kube-apiserver" \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
		--authorization-mode=Node,RBAC \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range=10.96.0.0/16 \
		--kubelet-preferred-address-types=InternalIP \
		--cert-dir="$RUN_DIR/data/apiserver-certs" --profiling=false
	wait_for 180 "kube-apiserver /readyz" api GET /readyz
	log "kube-apiserver ready on https://127.0.0.1:$API_PORT in $(since "$t")s"

	t=$(now)
	# --secure-port=0: no HTTPS listener, so no more ports and no CA bundle noise.
	# The controller-manager makes the default ServiceAccount (no pod is admitted
	# without it); the scheduler binds pods to kwok's node.
	run kube-controller-manager "$K8S_BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG_PATH" \
		--secure-port=0 --leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
	run kube-scheduler "$K8S_BIN/kube-scheduler" --kubeconfig="$KUBECONFIG_PATH" \
		--secure-port=0 --leader-elect=false
	wait_for 120 "kube-controller-manager (the default ServiceAccount)" api GET /api/v1/namespaces/default/serviceaccounts/default
	log "kube-controller-manager and kube-scheduler up in $(since "$t")s"

	t=$(now)
	# A partial kwok config does not get kwok's defaults: set them all.
	{
		cat <<'EOF'
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  nodeIP: 127.0.0.1
  cidr: 10.244.0.0/16
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: 4
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enableDebuggingHandlers: true
EOF
		printf '  nodePort: %s\n  serverAddress: 127.0.0.1:%s\n' "$KWOK_PORT" "$KWOK_PORT"
		printf '  tlsCertFile: %s\n  tlsPrivateKeyFile: %s\n' "$PKI/kwok.crt" "$PKI/kwok.key"
		cat "$KWOK_BIN/stages.yaml"
		cat <<EOF
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: local
spec:
  execs:
  - local:
      workDir: $RUN_DIR/exec
EOF
	} >"$RUN_DIR/kwok.yaml"
	mkdir -p "$RUN_DIR/exec"
	run kwok "$KWOK_BIN/kwok" --kubeconfig="$KUBECONFIG_PATH" --config="$RUN_DIR/kwok.yaml"
	local n
	for ((n = 0; n < KWOK_NODES; n++)); do
		api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"kwok-node-$n\",\"annotations\":{\"kwok.x-k8s.io/node\":\"fake\"},\"labels\":{\"type\":\"kwok\",\"kubernetes.io/hostname\":\"kwok-node-$n\",\"kubernetes.io/os\":\"linux\",\"kubernetes.io/arch\":\"amd64\"}},\"status\":{\"capacity\":{\"cpu\":\"1000\",\"memory\":\"4Ti\",\"pods\":\"$KWOK_PODS\"},\"allocatable\":{\"cpu\":\"1000\",\"memory\":\"4Ti\",\"pods\":\"$KWOK_PODS\"}}}" >/dev/null ||
			die "could not create node kwok-node-$n"
	done
	node_ready() { api GET "/api/v1/nodes/kwok-node-$1" | tr -d ' \t\n' | grep -q '"type":"Ready","status":"True"'; }
	for ((n = 0; n < KWOK_NODES; n++)); do wait_for 120 "node kwok-node-$n Ready" node_ready "$n"; done
	log "kwok up, $KWOK_NODES fake node(s) Ready in $(since "$t")s"

	t=$(now)
	# agent-sandbox: its CRDs, with conversion None (there is no webhook:
	# only v1beta1, their storage version, is used), then its controller with
	# the extensions (claims, templates, warm pools), no leader election, no
	# metrics or probe listener.
	local crd
	for crd in "$SANDBOX_SRC"/k8s/crds/*.yaml; do
		sed '/^  conversion:/,$d' "$crd" | { cat; printf '  conversion:\n    strategy: None\n'; } |
			curl -sS --fail --max-time 30 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" \
				-H 'Content-Type: application/yaml' --data-binary @- \
				"https://127.0.0.1:$API_PORT/apis/apiextensions.k8s.io/v1/customresourcedefinitions" >/dev/null ||
			die "could not install the CRD $(basename "$crd")"
	done
	sandbox_api() { local d; d=$(api GET /apis/extensions.agents.x-k8s.io/v1beta1) && for r in sandboxclaims sandboxtemplates sandboxwarmpools; do echo "$d" | grep -q "\"$r\"" || return 1; done && api GET /apis/agents.x-k8s.io/v1beta1 | grep -q '"sandboxes"'; }
	wait_for 60 "the agent-sandbox CRDs" sandbox_api
	run agent-sandbox-controller "$SANDBOX_BIN/agent-sandbox-controller" --kubeconfig="$KUBECONFIG_PATH" \
		--extensions --enable-webhook=false --leader-elect=false \
		--metrics-bind-address=0 --health-probe-bind-address=0
	sandbox_up() { grep "Starting workers" "$RUN_DIR/logs/agent-sandbox-controller.log" | grep -q sandboxclaim; }
	wait_for 60 "the agent-sandbox controller" sandbox_up
	log "agent-sandbox CRDs and controller up in $(since "$t")s"

	# In a subshell whose failure stops only the kubelet (unless asked for).
	if ! (STARTED=0 && start_kubelet); then
		[ "${SUBSTRAT_K8S_KUBELET:-auto}" = 1 ] && die "the kubelet could not start (logs in $RUN_DIR/logs)"
		log "no real kubelet: it could not start (logs in $RUN_DIR/logs); going on without"
		stop_kubelet_pods
		stop_one kubelet
		stop_one containerd
		rm -f "$RUN_DIR/kubelet-node" "$RUN_DIR/kubelet-image"
	fi
	log "control plane ready in $(since "$T_START")s; stop with: $SELF stop $RUN_DIR"
	echo "$KUBECONFIG_PATH"
}

# ---------------------------------------------------------------- stop

gone() { # exited (a zombie waiting for its reaper counts)
	! kill -0 "$1" 2>/dev/null || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]
}

stop_one() {
	local name=$1 pidf=$RUN_DIR/$1.pid pid i
	[ -f "$pidf" ] || return 0
	pid=$(cat "$pidf")
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$pidf"
		return 0
	fi
	# Only the recorded pid, and only while it still runs the expected binary.
	if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "/$name "; then
		log "pid $pid is no longer $name; not touching it"
		rm -f "$pidf"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true # it may have ended meanwhile
	for ((i = 0; i < 100; i++)); do
		gone "$pid" && break
		sleep 0.2
	done
	if ! gone "$pid"; then
		log "$name (pid $pid) still runs after 20s; SIGKILL"
		kill -KILL "$pid" 2>/dev/null
		sleep 0.5
	fi
	rm -f "$pidf"
}

stop_shims() { # the shims of this containerd, and what they run, left when containerd went first
	local p
	for p in $(pgrep -f -- "-address $RUN_DIR/containerd/" 2>/dev/null || true); do
		pkill -KILL -P "$p" 2>/dev/null || true # none left: pkill fails
		kill -KILL "$p" 2>/dev/null || true
	done
	return 0
}

stop() {
	[ -d "$RUN_DIR" ] || return 0
	local c
	# The apiserver before etcd: with etcd gone first it hangs about 20 s.
	stop_kubelet_pods
	for c in agent-sandbox-controller kubelet containerd kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
		stop_one "$c"
	done
	# A stop after containerd died (a test run killed mid-way) left a
	# pod's shim and pause process running, an hour later.
	stop_shims
	# What the kubelet mounted for its pods; the shims' socket directory
	# containerd makes, when nothing else uses it.
	{ grep -F " $RUN_DIR/" /proc/mounts || true; } | awk '{print $2}' | sort -r | xargs -r umount -l 2>/dev/null || true
	if [ -d "$RUN_DIR/containerd" ]; then rmdir /run/containerd/s /run/containerd 2>/dev/null || true; fi
	if [ "${1:-}" = --keep ]; then
		log "stopped; kept $RUN_DIR"
	else
		rm -rf "$RUN_DIR"
		log "stopped; removed $RUN_DIR"
	fi
}

case "${1:-}" in
build) build ;;
start)
	[ -n "${2:-}" ] || die "usage: $0 start RUN_DIR"
	RUN_DIR=$2
	start
	;;
image)
	[ -n "${3:-}" ] || die "usage: $0 image RUN_DIR TAG FILE..."
	RUN_DIR=$2
	shift 2
	image "$@"
	;;
stop)
	[ -n "${2:-}" ] || die "usage: $0 stop RUN_DIR [--keep]"
	RUN_DIR=$2
	stop "${3:-}"
	;;
*)
	echo "usage: $0 build | start RUN_DIR | image RUN_DIR TAG FILE... | stop RUN_DIR [--keep]" >&2
	exit 2
	;;
esac
