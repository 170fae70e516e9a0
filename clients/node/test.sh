#!/usr/bin/env bash
# The Node client's checks: installs its pinned dev dependencies
# (package-lock.json: typescript, @types/node), type-checks and builds it
# with tsc (strict), then runs its tests against a real `tollgate serve`
# (TOLLGATE_BIN, default target/debug/tollgate: build it with `cargo build
# -p tollgate-server` first) and a real redis-server.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
npm ci --no-audit --no-fund --loglevel=error
npm test
