#!/usr/bin/env bash
# Renders deploy/k8s (the base) and every overlay with `kubectl kustomize` and validates every
# object offline (validate.js: the Kubernetes 1.27 OpenAPI schemas, unknown fields refused).
# Usage: render_validate.sh REPO_ROOT OUT_DIR. Exit 77 (skipped) naming what is missing.
set -euo pipefail
root="$1"; out="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v kubectl >/dev/null; then
  echo "SKIP: kubectl is missing (Debian package kubernetes-client; scripts/lib.sh installs it)"
  exit 77
fi
if ! command -v node >/dev/null; then
  echo "SKIP: node is missing (Debian packages nodejs npm; scripts/lib.sh installs them)"
  exit 77
fi
if [ ! -d "$here/node_modules/kubernetes-models" ] || [ ! -d "$here/node_modules/yaml" ]; then
  echo "SKIP: $here/node_modules lacks kubernetes-models or yaml (scripts/lib.sh runs npm ci there)"
  exit 77
fi
mkdir -p "$out"
dirs=("$root/deploy/k8s")
for d in "$root"/deploy/k8s/overlays/*/; do dirs+=("${d%/}"); done
files=()
for d in "${dirs[@]}"; do
  name="$(basename "$d")"; [ "$name" = k8s ] && name=base
  # kustomize v5 warns on stderr about the v2-compatible fields (bases, patchesStrategicMerge)
  if ! kubectl kustomize "$d" > "$out/$name.yaml" 2> "$out/$name.err"; then
    echo "FAIL: kubectl kustomize $d:"; grep -v '^# Warning' "$out/$name.err"; exit 1
  fi
  echo "rendered $d -> $out/$name.yaml ($(grep -c '^kind:' "$out/$name.yaml") objects)"
  files+=("$out/$name.yaml")
done
[ "${#dirs[@]}" -ge 5 ] || { echo "FAIL: want the base and 4 overlays, found ${#dirs[@]}"; exit 1; }
node "$here/validate.js" "${files[@]}"
