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
# process around it (socket, fsnotify, processes) is supervisor/daemon.
bad=$(go list -f '{{join .Imports "\n"}}' ./supervisor | grep -E "^(net|os/exec|github.com/fsnotify/fsnotify|$mod/supervisor/rpc|$mod/supervisor/daemon)$" || true)
if [ -n "$bad" ]; then
  echo "supervisor (the core) must not import:"; echo "$bad"; exit 1
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
