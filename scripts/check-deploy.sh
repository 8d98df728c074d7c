#!/usr/bin/env bash
# Checks deploy/ offline: renders every kustomization under deploy/k8s (each overlay, and the
# examples with the trainyard-specs ConfigMap they document), validates every object strictly
# against the schemas of Kubernetes $TY_K8S_VERSION (kubernetes-validate: unknown or misspelt
# fields fail), checks what schemas cannot (scripts/check_deploy.py: volumes, Secrets and
# ConfigMap keys, $(VAR)s, ports, selectors and files each pod refers to; the Prometheus
# Operator's ServiceMonitor and PodMonitor against the cpu overlay), and checks the manifests
# and Dockerfiles against the binaries in BIN_DIR (every container flag is one its binary
# takes; each runtime stage has the Debian packages of the libraries its binary links). ctest
# runs it as deploy_manifests (tests/CMakeLists.txt).
#
#   scripts/check-deploy.sh [BIN_DIR]     # BIN_DIR default build/bin
#
# kubectl and the venv come from ty_ensure_deploy_tools (scripts/deps.sh; scripts/test.sh runs
# it). TY_KUBECTL picks another kubectl (e.g. Debian's 1.20, to check kustomize v2 renders).
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${1:-build/bin}
kubectl=${TY_KUBECTL:-kubectl}
k8s_version=${TY_K8S_VERSION:-1.29.0}
venv=${TY_DEPLOY_VENV:-.cache/deploy-venv}

fail() { echo "check-deploy: $*" >&2; exit 1; }
command -v "$kubectl" >/dev/null ||
  fail "no kubectl: install one (scripts/deps.sh ty_ensure_deploy_tools installs kubernetes-client)"
[ -x "$venv/bin/kubernetes-validate" ] ||
  fail "no $venv/bin/kubernetes-validate: run scripts/test.sh, or: source scripts/deps.sh && ty_ensure_deploy_tools"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# render NAME DIR: kubectl kustomize DIR into $tmp/NAME.yaml; kustomize v5's deprecation
# notes on `bases` and `patchesStrategicMerge` (kept for kustomize v2, base/kustomization.yaml)
# are dropped, anything else it says is shown.
render() {
  if ! "$kubectl" kustomize "$2" >"$tmp/$1.yaml" 2>"$tmp/$1.err"; then
    cat "$tmp/$1.err" >&2
    fail "kubectl kustomize $2 failed"
  fi
  grep -v "^# Warning: '\(bases\|patchesStrategicMerge\)' is deprecated" "$tmp/$1.err" >&2 || true
  [ -s "$tmp/$1.yaml" ] || fail "kubectl kustomize $2 rendered nothing"
}

sets=()
for dir in deploy/k8s/overlays/*/; do
  name=$(basename "$dir")
  render "$name" "$dir"
  sets+=("$tmp/$name.yaml")
done
render examples deploy/k8s/examples
# The ConfigMap the examples' README line makes, from examples/ as it is now.
"$kubectl" create configmap trainyard-specs --namespace trainyard --from-file=examples/ \
  --dry-run=client -o yaml >"$tmp/specs.yaml"

files=("${sets[@]}" "$tmp/examples.yaml" "$tmp/specs.yaml")
# It only warns of an object it has no schema for (a misspelt kind or apiVersion): that fails
# here too.
"$venv/bin/kubernetes-validate" --strict --quiet -k "$k8s_version" "${files[@]}" >"$tmp/validate.log" 2>&1 ||
  { cat "$tmp/validate.log" >&2; fail "schema validation (Kubernetes $k8s_version, strict) failed"; }
if [ -s "$tmp/validate.log" ]; then
  cat "$tmp/validate.log" >&2
  fail "schema validation (Kubernetes $k8s_version, strict) did not pass every object"
fi

py="$venv/bin/python3"
for s in "${sets[@]}"; do
  "$py" scripts/check_deploy.py refs "$(basename "$s" .yaml)" "$s"
done
# The examples run against a deployed overlay: check them with the cpu overlay's objects.
"$py" scripts/check_deploy.py refs "examples (on cpu)" "$tmp/cpu.yaml" "$tmp/examples.yaml" "$tmp/specs.yaml"
"$py" scripts/check_deploy.py monitors "$tmp/cpu.yaml" deploy/monitoring/servicemonitor.yaml \
  deploy/monitoring/podmonitor.yaml
"$py" scripts/check_deploy.py flags "$bin_dir" "${sets[@]}" "$tmp/examples.yaml"
"$py" scripts/check_deploy.py images deploy/docker "$bin_dir"

echo "check-deploy: ${#sets[@]} overlays and the examples render, validate against Kubernetes $k8s_version and hold together; the monitors select them; the flags and Dockerfiles match the binaries"
