#!/usr/bin/env bash
# The dependency rule: fsstore is the database and knows nothing of the
# daemon, the providers or the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
bad=$(go list -deps ./fsstore | grep -E "^$mod/(supervisor|provider|bwrap|sim|cmd)" || true)
if [ -n "$bad" ]; then
  echo "fsstore must not import:"; echo "$bad"; exit 1
fi

# The core is deterministic: it reaches the OS through its Host, and the
# process around it (socket, fsnotify, processes, git, the work tools) is
# supervisor/daemon. Checked over every package the core, the wire
# contract and the simulation reach (go list -deps), not only their own
# imports: none of them imports os/exec, net or fsnotify. Running things
# lives in bwrap/launch, provider/internal/proc and provider/script (model
# mode); what the core needs of them is data (bwrap.Spec, provider.Process)
# or in-process (provider/script/native).
for root in ./supervisor ./supervisor/api ./sim; do
  for p in $(go list -deps "$root" | grep "^$mod/"); do
    imports=$(go list -f '{{join .Imports "\n"}}' "$p")
    if echo "$imports" | grep -qE "^(net|os/exec|github.com/fsnotify/fsnotify|$mod/supervisor/rpc|$mod/supervisor/daemon)$"; then
      echo "$root reaches $p, which runs processes or opens sockets (move it behind the core's Host):"
      echo "$imports" | grep -E "^(net|os/exec|github.com/fsnotify/fsnotify|$mod/supervisor/rpc|$mod/supervisor/daemon)$"; exit 1
    fi
  done
done

# The wire contract is data: supervisor/api links no code that runs
# processes (os/exec, at any depth) and not the workspace store, whose
# types it carries as its own (api.Workspace; workspace converts).
bad=$(go list -deps ./supervisor/api | grep -E "^(os/exec|$mod/supervisor/workspace)$" || true)
if [ -n "$bad" ]; then
  echo "supervisor/api must not link:"; echo "$bad"; exit 1
fi

# Arrows run down: no provider imports the daemon (supervisor) but for
# its wire contract (supervisor/api), except in tests, and the bench
# program is the only user of SQLite.
bad=$(go list -deps ./provider/... | grep -E "^$mod/supervisor" | grep -v "^$mod/supervisor/api$" || true)
if [ -n "$bad" ]; then
  echo "provider must not import:"; echo "$bad"; exit 1
fi
bad=$(go list -deps ./cmd/substrat ./supervisor/... ./provider/... ./fsstore/... | grep -E "^modernc.org/sqlite$" || true)
if [ -n "$bad" ]; then
  echo "only cmd/substrat-bench may import modernc.org/sqlite"; exit 1
fi

# Every package says what it is for.
undocumented=$(go list -f '{{if not .Doc}}{{.ImportPath}}{{end}}' ./... | grep -v '^$' || true)
if [ -n "$undocumented" ]; then
  echo "packages without a doc comment:"; echo "$undocumented"; exit 1
fi
