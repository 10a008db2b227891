#!/usr/bin/env bash
# The systemd unit (deploy/systemd): systemd-analyze verify must print nothing (unknown keys
# and bad values are only warnings there), the offline security score must stay "OK", and
# the properties the operations docs promise must be present.
set -euo pipefail
cd "$(dirname "$0")/../.."
unit=deploy/systemd/deltaserve.service
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify wants an executable ExecStart: point it at any binary (the daemon's when built).
binary=/bin/true
[ -n "${DELTASERVE_BUILD_DIR:-}" ] && [ -x "$DELTASERVE_BUILD_DIR/cli/deltaserve" ] && binary="$DELTASERVE_BUILD_DIR/cli/deltaserve"
sed "s|^ExecStart=/usr/local/bin/deltaserve |ExecStart=$binary |" "$unit" > "$work/deltaserve.service"
grep -q "^ExecStart=$binary " "$work/deltaserve.service" || { echo "ExecStart is not /usr/local/bin/deltaserve serve ..." >&2; exit 1; }
out=$(systemd-analyze verify "$work/deltaserve.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then echo "systemd-analyze verify:" >&2; echo "$out" >&2; exit 1; fi

# Exposure 0-10 (x10 for --threshold): 2.0 and below is what systemd calls "OK".
systemd-analyze security --offline=yes --threshold=20 "$work/deltaserve.service" > "$work/security.txt" ||
  { tail -3 "$work/security.txt" >&2; echo "security exposure above 2.0" >&2; exit 1; }
tail -1 "$work/security.txt"

fail=0
need() { grep -qx "$1" "$unit" || { echo "$unit: missing '$1'" >&2; fail=1; }; }
need "NoNewPrivileges=yes"
need "ProtectSystem=strict"
need "ProtectHome=yes"
need "CapabilityBoundingSet="
need "DevicePolicy=closed"
need "KillSignal=SIGTERM"
need "User=deltaserve"
grep -q "^ExecReload=" "$unit" && { echo "$unit: no ExecReload (a restart is the reload)" >&2; fail=1; }
# Devices: only GPU nodes (NVIDIA, AMD KFD, DRM render nodes).
while read -r line; do
  dev=${line#DeviceAllow=}
  [[ "$dev" =~ ^(char-nvidia-(frontend|uvm|caps)|char-kfd|char-drm|/dev/nvidia[a-z0-9-]*|/dev/kfd|/dev/dri/renderD[0-9]+)\ rw?$ ]] ||
    { echo "$unit: DeviceAllow of a non-GPU device: $dev" >&2; fail=1; }
done < <(grep "^DeviceAllow=" "$unit")
# The stop timeout must outlast the daemon's drain (shutdown_grace_s, default config).
grace_s=$(sed -n 's/.*"shutdown_grace_s": *\([0-9]*\).*/\1/p' config/deltaserve.json)
stop_s=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s\{0,1\}$/\1/p' "$unit")
if [ -z "$grace_s" ] || [ -z "$stop_s" ] || [ "$stop_s" -le "$grace_s" ]; then
  echo "$unit: TimeoutStopSec (${stop_s:-unset}) must exceed shutdown_grace_s (${grace_s:-unset})" >&2
  fail=1
fi
grep -q "^u deltaserve " deploy/systemd/deltaserve.sysusers.conf || { echo "sysusers.conf lacks the user" >&2; fail=1; }
[ "$fail" -eq 0 ]
echo "systemd: unit verifies, hardening and drain settings present"
