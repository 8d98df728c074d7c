"""What schema validation cannot see in deploy/ (scripts/check-deploy.sh runs this).

  check_deploy.py refs NAME RENDERED.yaml...   # the objects of one deployment, as rendered
  check_deploy.py flags BIN_DIR RENDERED.yaml...   # containers' flags against the binaries
  check_deploy.py monitors RENDERED.yaml MONITOR.yaml...   # Operator monitors against a deployment
  check_deploy.py images DOCKER_DIR BIN_DIR    # the Dockerfiles against the built binaries

refs: within one set of objects, every pod's ServiceAccount, ConfigMaps, Secrets (the two the
README has users create, with their keys), claims, mounts, $(VAR)s, probe ports and the files
its flags name exist; every selector selects a pod and every named port is one of its ports;
monitors: every ServiceMonitor and PodMonitor (Prometheus Operator) uses only fields of the
Operator's monitoring.coreos.com/v1 schema (the ones below; kubernetes-validate has no schema
for them) and selects, in its namespaces, a Service or pods of the deployment by their labels,
on a named port they have, with its jobLabel among their labels.
flags: every --flag a container passes is one its image's binary lists in --help (the client
image's: that of the command its first argument names).
images: each runtime stage of deploy/docker/Dockerfile installs the Debian packages of the
libraries its binary links (readelf, dpkg -S), every one a package of this Debian; the GPU
image's CUDA is the toolkit's here. Prints each problem and exits 1 if there is any.
"""
import os
import re
import shutil
import subprocess
import sys

import yaml

# Created by hand (deploy/k8s/README.md), never rendered: their names and keys.
EXTERNAL_SECRETS = {"trainyard-tls": {"tls.crt", "tls.key", "ca.crt"},
                    "trainyard-tokens": {"tokens", "worker", "client"}}
POD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}
problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def load(paths):
    """Every object of the YAML files `paths`, in order."""
    return [o for p in paths for o in yaml.safe_load_all(open(p)) if o]


def pod_spec(obj):
    spec = obj["spec"]["template"]
    return spec.get("metadata", {}).get("labels", {}), spec["spec"]


def selects(match, labels):
    return all(labels.get(k) == v for k, v in match.items())


def check_file(where, path, mounts, volumes, configmaps, secrets):
    """`path` (a file or directory a flag names) lies in a mount, and in a key it has."""
    best = max((m for m in mounts if path == m["mountPath"] or
                path.startswith(m["mountPath"].rstrip("/") + "/")),
               key=lambda m: len(m["mountPath"]), default=None)
    if best is None:
        return problem(where, f"{path} is in no volume mount")
    rel = path[len(best["mountPath"]):].strip("/")
    vol = volumes.get(best["name"], {})
    source = vol.get("secret") or vol.get("configMap")
    if not rel or source is None:
        return
    if "items" in source:
        keys = {i["path"] for i in source["items"]}
    elif "secret" in vol:
        keys = secrets.get(source.get("secretName"), set())
    else:
        keys = configmaps.get(source.get("name"), set())
    if rel.split("/")[0] not in keys:
        problem(where, f"{path}: {best['name']} has no {rel} (it has {sorted(keys)})")


def check_container(where, c, volumes, configmaps, configmap_data, secrets):
    mounts = c.get("volumeMounts", [])
    for m in mounts:
        if m["name"] not in volumes:
            problem(where, f"mount {m['mountPath']}: no volume {m['name']}")
    env = {e["name"] for e in c.get("env", [])}
    file_env = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {})
        if "secretKeyRef" in ref:
            r = ref["secretKeyRef"]
            if r["key"] not in secrets.get(r["name"], set()):
                problem(where, f"env {e['name']}: no Secret {r['name']} with key {r['key']}")
        if "configMapKeyRef" in ref:
            r = ref["configMapKeyRef"]
            if r["key"] not in configmaps.get(r["name"], set()):
                problem(where, f"env {e['name']}: no ConfigMap {r['name']} with key {r['key']}")
        if "value" in e:
            file_env[e["name"]] = e["value"]
    for ef in c.get("envFrom", []):
        name = ef.get("configMapRef", {}).get("name")
        if name is not None and name not in configmaps:
            problem(where, f"envFrom: no ConfigMap {name}")
        env |= configmaps.get(name, set())
        file_env.update(configmap_data.get(name, {}))
    args = c.get("command", []) + c.get("args", [])
    for a in args:
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            if var not in env:
                problem(where, f"{a}: ${var} is not in the container's environment")
        value = a.split("=", 1)[1] if a.startswith("--") and "=" in a else a
        if value.startswith("/") and "$(" not in value:
            check_file(where, value, mounts, volumes, configmaps, secrets)
    for name, value in file_env.items():  # files the binaries read from their environment
        if re.search(r"(CERT|KEY|FILE)$", name) and value.startswith("/"):
            check_file(f"{where} ${name}", value, mounts, volumes, configmaps, secrets)
    names = {p.get("name") for p in c.get("ports", [])}
    numbers = {p["containerPort"] for p in c.get("ports", [])}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = c.get(kind)
        if not probe:
            continue
        for how in ("httpGet", "tcpSocket", "grpc"):
            port = probe.get(how, {}).get("port")
            if port is not None and port not in names | numbers:
                problem(where, f"{kind}: port {port} is none of the container's ports")


def check_refs(paths):
    objs = load(paths)
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    cms = by_kind.get("ConfigMap", {})
    configmap_data = {n: o.get("data", {}) for n, o in cms.items()}
    configmaps = {n: set(d) | set(cms[n].get("binaryData", {})) for n, d in configmap_data.items()}
    secrets = dict(EXTERNAL_SECRETS)
    secrets.update({n: set(o.get("data", {})) | set(o.get("stringData", {}))
                    for n, o in by_kind.get("Secret", {}).items()})
    pods = []  # (labels, spec, where)
    for kind in POD_KINDS:
        for name, o in by_kind.get(kind, {}).items():
            where = f"{kind}/{name}"
            labels, spec = pod_spec(o)
            pods.append((labels, spec, where))
            match = o["spec"].get("selector", {}).get("matchLabels", {})
            if kind != "Job" and not (match and selects(match, labels)):
                problem(where, f"selector {match} does not select its own pods {labels}")
            sa = spec.get("serviceAccountName")
            if sa and sa not in by_kind.get("ServiceAccount", {}):
                problem(where, f"no ServiceAccount {sa}")
            volumes = {v["name"]: v for v in spec.get("volumes", [])}
            for v in volumes.values():
                if "configMap" in v and v["configMap"]["name"] not in configmaps:
                    problem(where, f"volume {v['name']}: no ConfigMap {v['configMap']['name']}")
                if "secret" in v:
                    keys = secrets.get(v["secret"]["secretName"])
                    if keys is None:
                        problem(where, f"volume {v['name']}: no Secret {v['secret']['secretName']}")
                    for item in v["secret"].get("items", []):
                        if keys is not None and item["key"] not in keys:
                            problem(where, f"volume {v['name']}: Secret has no key {item['key']}")
                claim = v.get("persistentVolumeClaim", {}).get("claimName")
                if claim and claim not in by_kind.get("PersistentVolumeClaim", {}):
                    problem(where, f"volume {v['name']}: no PersistentVolumeClaim {claim}")
            for c in spec.get("initContainers", []) + spec["containers"]:
                check_container(f"{where} container {c['name']}", c, volumes, configmaps,
                                configmap_data, secrets)

    def port_names(match):
        return {p.get("name") for labels, spec, _ in pods if selects(match, labels)
                for c in spec["containers"] for p in c.get("ports", [])}

    for name, svc in by_kind.get("Service", {}).items():
        match = svc["spec"].get("selector", {})
        if not any(selects(match, labels) for labels, _, _ in pods):
            problem(f"Service/{name}", f"selector {match} selects no pod")
        for p in svc["spec"].get("ports", []):
            target = p.get("targetPort")
            if isinstance(target, str) and target not in port_names(match):
                problem(f"Service/{name}", f"targetPort {target} is no port of its pods")
    for name, np in by_kind.get("NetworkPolicy", {}).items():
        match = np["spec"]["podSelector"].get("matchLabels", {})
        if match and not any(selects(match, labels) for labels, _, _ in pods):
            problem(f"NetworkPolicy/{name}", f"podSelector {match} selects no pod")
        for rule in np["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                if isinstance(p.get("port"), str) and p["port"] not in port_names(match):
                    problem(f"NetworkPolicy/{name}", f"port {p['port']} is no port of its pods")
            for peer in rule.get("from", []):
                m = peer.get("podSelector", {}).get("matchLabels")
                if m and "namespaceSelector" not in peer and \
                        not any(selects(m, labels) for labels, _, _ in pods):
                    problem(f"NetworkPolicy/{name}", f"from podSelector {m} selects no pod")


# The fields of monitoring.coreos.com/v1 (Prometheus Operator 0.7x) that a monitor may set.
RELABEL_FIELDS = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement",
                  "action"}
ENDPOINT_FIELDS = {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
                   "tlsConfig", "bearerTokenSecret", "authorization", "honorLabels",
                   "honorTimestamps", "trackTimestampsStaleness", "basicAuth", "oauth2",
                   "metricRelabelings", "relabelings", "proxyUrl", "followRedirects",
                   "enableHttp2", "filterRunning"}
SPEC_FIELDS = {"jobLabel", "podTargetLabels", "selector", "namespaceSelector", "sampleLimit",
               "targetLimit", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit",
               "keepDroppedTargets", "attachMetadata", "scrapeClass", "scrapeProtocols",
               "bodySizeLimit"}
# kind -> (its list of endpoints, an endpoint's fields, its spec's fields)
MONITORS = {
    "ServiceMonitor": ("endpoints", ENDPOINT_FIELDS | {"bearerTokenFile"},
                       SPEC_FIELDS | {"endpoints", "targetLabels"}),
    "PodMonitor": ("podMetricsEndpoints", ENDPOINT_FIELDS | {"portNumber"},
                   SPEC_FIELDS | {"podMetricsEndpoints"}),
}


# The scrape job names deploy/monitoring/alerts.yml and the dashboard select by.
SCRAPE_JOBS = {"trainyard-coordinator", "trainyard-worker"}


def unknown(where, obj, allowed):
    for key in sorted(set(obj) - allowed):
        problem(where, f"{key} is no field here (allowed: {', '.join(sorted(allowed))})")


def check_monitors(paths):
    """ServiceMonitors and PodMonitors in `paths` against the deployment objects beside them."""
    objs = load(paths)
    services = [o for o in objs if o["kind"] == "Service"]
    pods = [(o["metadata"].get("namespace"), *pod_spec(o)) for o in objs if o["kind"] in POD_KINDS]
    checked = 0
    for o in objs:
        if o["kind"] not in MONITORS:
            continue
        checked += 1
        where = f"{o['kind']}/{o['metadata']['name']}"
        list_key, endpoint_fields, spec_fields = MONITORS[o["kind"]]
        if o.get("apiVersion") != "monitoring.coreos.com/v1":
            problem(where, f"apiVersion {o.get('apiVersion')}; expected monitoring.coreos.com/v1")
        unknown(where, o, {"apiVersion", "kind", "metadata", "spec"})
        spec = o["spec"]
        unknown(f"{where} spec", spec, spec_fields)
        match = spec.get("selector", {}).get("matchLabels", {})
        if not match:
            problem(where, "spec.selector.matchLabels is empty: it would select everything")
        namespaces = spec.get("namespaceSelector", {}).get("matchNames",
                                                           [o["metadata"].get("namespace")])
        if o["kind"] == "ServiceMonitor":
            targets = [(s["metadata"].get("labels", {}),
                        {p.get("name") for p in s["spec"].get("ports", [])})
                       for s in services if s["metadata"].get("namespace") in namespaces]
        else:
            targets = [(labels, {p.get("name") for c in pod["containers"]
                                 for p in c.get("ports", [])})
                       for ns, labels, pod in pods if ns in namespaces]
        selected = [(labels, ports) for labels, ports in targets if selects(match, labels)]
        if not selected:
            problem(where, f"selector {match} selects no {'Service' if o['kind'] == 'ServiceMonitor' else 'pod'} in {namespaces}")
        job_label = spec.get("jobLabel")
        for labels, _ in selected:
            if job_label and job_label not in labels:
                problem(where, f"jobLabel {job_label} is not a label of what it selects ({labels})")
            elif job_label and labels[job_label] not in SCRAPE_JOBS:
                problem(where, f"jobLabel {job_label} makes the scrape job {labels[job_label]}; "
                        f"the alert rules and the dashboard expect one of {sorted(SCRAPE_JOBS)}")
        endpoints = spec.get(list_key, [])
        if not endpoints:
            problem(where, f"spec.{list_key} is empty")
        for i, e in enumerate(endpoints):
            unknown(f"{where} {list_key}[{i}]", e, endpoint_fields)
            for r in e.get("relabelings", []) + e.get("metricRelabelings", []):
                unknown(f"{where} {list_key}[{i}] relabeling", r, RELABEL_FIELDS)
            for labels, ports in selected:
                if "port" in e and e["port"] not in ports:
                    problem(where, f"{list_key}[{i}].port {e['port']} is not a port name of "
                            f"what it selects ({sorted(p for p in ports if p)})")
    if checked == 0:
        problem(" ".join(paths), "no ServiceMonitor or PodMonitor")
    return checked


# Image name (before the tag) -> the binary its Dockerfile stage runs (ENTRYPOINT).
IMAGE_BINARIES = {"trainyard-coordinator": "trainyard-coordinator",
                  "trainyard-worker": "trainyard-worker",
                  "trainyard-worker-gpu": "trainyard-worker",
                  "trainyard-client": "trainyard"}


def help_flags(bin_dir, binary, command):
    """The flags `binary [command] --help` lists (its "  --name ..." lines)."""
    path = os.path.join(bin_dir, binary)
    if not os.path.exists(path):
        return None
    argv = [path] + ([command] if command else []) + ["--help"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return set(re.findall(r"^  --([a-z0-9-]+)", out.stdout + out.stderr, re.M))


def check_flags(bin_dir, paths):
    """Every --flag a container of `paths` passes is one its binary accepts."""
    objs = load(paths)
    checked = 0
    for o in objs:
        if o["kind"] not in POD_KINDS:
            continue
        _, spec = pod_spec(o)
        for c in spec.get("initContainers", []) + spec["containers"]:
            where = f"{o['kind']}/{o['metadata']['name']} container {c['name']}"
            image = c["image"].rsplit("/", 1)[-1].split(":")[0].split("@")[0]
            binary = IMAGE_BINARIES.get(image)
            if binary is None:
                problem(where, f"image {c['image']} is none of ours ({sorted(IMAGE_BINARIES)})")
                continue
            args = c.get("command", [])[1:] + c.get("args", [])
            command = args[0] if binary == "trainyard" and args else None
            known = help_flags(bin_dir, binary, command)
            program = f"{binary} {command}" if command else binary
            if known is None:
                problem(where, f"no {os.path.join(bin_dir, binary)} to check its flags against")
                continue
            if not known:
                problem(where, f"{program} --help lists no flags")
                continue
            checked += 1
            for a in args:
                if a.startswith("--") and a[2:].split("=", 1)[0] not in known:
                    problem(where, f"{a}: {program} has no such flag "
                            f"(it has --{', --'.join(sorted(known))})")
    if checked == 0:
        problem(" ".join(paths), "no container of ours to check")
    return checked


def stages(dockerfile):
    """{stage: (base image, [RUN commands], [COPY lines])}, continuation lines joined."""
    text = re.sub(r"\\\n", " ", open(dockerfile).read())
    out, current = {}, None
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "FROM":
            current = words[3] if len(words) > 3 and words[2].upper() == "AS" else words[1]
            out[current] = (words[1], [], [])
        elif words[0] in ("RUN", "COPY") and current:
            out[current][1 if words[0] == "RUN" else 2].append(" ".join(words[1:]))
    return out


def installed_packages(run_commands):
    pkgs = []
    for cmd in run_commands:
        for segment in re.split(r"&&|;", cmd):
            words = segment.split()
            if "install" in words and "apt-get" in words:
                pkgs += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            elif words and words[0] == "ty_ensure_packages":  # scripts/deps.sh's
                pkgs += [w for w in words[1:] if not w.startswith(("-", '"'))]
    return pkgs


def package_of(path):
    """The Debian package holding a library (merged /usr: either spelling of the path)."""
    real = os.path.realpath(path)
    for p in {path, real, re.sub(r"^/usr/lib/", "/lib/", real), re.sub(r"^/lib/", "/usr/lib/", real)}:
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0]
    return None


def linked_packages(binary):
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]",
                        subprocess.run(["readelf", "-d", binary], capture_output=True,
                                       text=True, check=True).stdout)
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", subprocess.run(
        ["ldd", binary], capture_output=True, text=True).stdout, re.M))
    pkgs = {}
    for lib in needed:
        if lib in resolved:
            pkgs[lib] = package_of(resolved[lib])
        elif not lib.startswith("ld-linux"):
            pkgs[lib] = None
    return pkgs


def check_images(docker_dir, bin_dir):
    # The base image's own: glibc, libstdc++ and libgcc.
    given = {"libc6", "libstdc++6", "libgcc-s1"}
    cpu = stages(os.path.join(docker_dir, "Dockerfile"))
    checked = 0
    for stage, (base, runs, copies) in cpu.items():
        binaries = [os.path.basename(c.split()[-2]) for c in copies if "--from=build" in c]
        pkgs = installed_packages(runs)
        if stage == "build" or not binaries:
            continue
        for pkg in pkgs:
            r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
            if "install ok installed" not in r.stdout:
                problem(f"Dockerfile {stage}", f"{pkg} is not a package installed here (Debian 12)")
        for b in binaries:
            path = os.path.join(bin_dir, b)
            if not os.path.exists(path):
                problem(f"Dockerfile {stage}", f"no {path} to check the stage's packages against "
                        "(build it first)")
                continue
            checked += 1
            for lib, pkg in sorted(linked_packages(path).items()):
                if pkg is None:
                    problem(f"Dockerfile {stage}", f"{b} links {lib}, which no package here holds")
                elif pkg not in given and pkg not in pkgs:
                    problem(f"Dockerfile {stage}", f"{b} links {lib} from {pkg}, which the stage does not install")
    gpu_file = os.path.join(docker_dir, "Dockerfile.gpu")
    gpu = stages(gpu_file)
    runtime = [s for s, (base, _, _) in gpu.items() if base.startswith("nvidia/cuda:")]
    if not runtime:
        problem("Dockerfile.gpu", "no stage on an nvidia/cuda image")
    text = open(gpu_file).read()
    for lib in ("libtrainyard_cuda.so", "libtrainyard_nccl.so"):
        if lib not in text:
            problem("Dockerfile.gpu", f"does not carry {lib}")
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc and runtime:
        release = re.search(r"release (\d+)\.(\d+)", subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True).stdout)
        image = re.match(r"nvidia/cuda:(\d+)\.(\d+)", gpu[runtime[0]][0])
        if release and image and release.groups() != image.groups():
            problem("Dockerfile.gpu", f"{gpu[runtime[0]][0]} is not CUDA {'.'.join(release.groups())}, the toolkit here")
        pkg = "cuda-nvcc-%s-%s" % release.groups() if release else None
        if pkg and pkg not in installed_packages(gpu["build"][1]):
            problem("Dockerfile.gpu", f"its build stage does not install {pkg}")
    return checked


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "refs":
        check_refs(sys.argv[3:])
        what = f"refs {sys.argv[2]}"
    elif len(sys.argv) >= 4 and sys.argv[1] == "monitors":
        n = check_monitors(sys.argv[2:])
        what = f"monitors ({n} checked)"
    elif len(sys.argv) >= 4 and sys.argv[1] == "flags":
        n = check_flags(sys.argv[2], sys.argv[3:])
        what = f"flags ({n} containers checked)"
    elif len(sys.argv) == 4 and sys.argv[1] == "images":
        n = check_images(sys.argv[2], sys.argv[3])
        if n == 0:
            problem(sys.argv[3], "no binary of a Dockerfile stage found")
        what = f"images ({n} binaries checked)"
    else:
        sys.exit(__doc__)
    for p in problems:
        print(f"check_deploy: {what}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"check_deploy: {what}: ok")


if __name__ == "__main__":
    main()
