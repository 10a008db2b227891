#!/usr/bin/env bash
# Installs the development-only npm packages (oracles and test clients) listed in the
# repository's package.json, exactly as pinned by package-lock.json, into ./node_modules
# (ignored by git). Idempotent: when node_modules already matches the lock file the install
# is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v npm >/dev/null 2>&1; then
  echo "setup_npm: npm not found (run scripts/setup.sh first)" >&2
  exit 1
fi

# npm writes node_modules/.package-lock.json after every install; when it is newer than the
# committed lock and `npm ls` is satisfied, nothing needs doing.
if [ -f node_modules/.package-lock.json ] &&
   [ node_modules/.package-lock.json -nt package-lock.json ] &&
   npm ls --silent >/dev/null 2>&1; then
  echo "setup_npm: node_modules up to date"
  exit 0
fi

echo "setup_npm: installing npm packages from package-lock.json"
npm ci --no-audit --no-fund --loglevel=error
