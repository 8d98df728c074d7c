#!/usr/bin/env bash
# Checks deploy/monitoring with promtool (Debian's prometheus package, which scripts/test.sh
# installs): both scrape configurations, the alert rules, and the rules' unit tests
# (alerts_test.yml fires every alert from synthetic series). ctest runs it as
# monitoring_promtool (tests/CMakeLists.txt); it runs by hand too.
set -euo pipefail
cd "$(dirname "$0")/../deploy/monitoring"

if ! command -v promtool >/dev/null; then
  echo "check-monitoring: promtool is missing: install Debian's prometheus package" \
       "(scripts/test.sh does, through scripts/deps.sh)" >&2
  exit 1
fi

promtool check config prometheus.yml
promtool check rules alerts.yml
promtool test rules alerts_test.yml

# prometheus-kubernetes.yml: Debian builds Prometheus without Kubernetes service discovery, so
# its promtool rejects kubernetes_sd_configs. Check everything else (the scrape jobs, their
# relabelling, the rule file) with each such block swapped for a static target, and the
# blocks' roles by name.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp alerts.yml "$tmp/"
awk '
  skip && match($0, /^ */) && RLENGTH > indent && $0 !~ /^ *$/ { next }
  { skip = 0 }
  /^ *kubernetes_sd_configs:/ {
    match($0, /^ */); indent = RLENGTH; skip = 1; swapped++
    printf "%*sstatic_configs: [{targets: [\"kubernetes-sd.invalid:9600\"]}]\n", indent, ""
    next
  }
  { print }
  END { if (swapped == 0) exit 1 }
' prometheus-kubernetes.yml > "$tmp/prometheus-kubernetes.yml"
promtool check config "$tmp/prometheus-kubernetes.yml"
bad_roles=$(grep -E '^ *- role:' prometheus-kubernetes.yml |
            grep -vE 'role: (node|service|pod|endpoints|endpointslice|ingress)$' || true)
if [ -n "$bad_roles" ]; then
  echo "check-monitoring: prometheus-kubernetes.yml: unknown kubernetes_sd_configs role:" >&2
  echo "$bad_roles" >&2
  exit 1
fi
echo "check-monitoring: deploy/monitoring is valid"
