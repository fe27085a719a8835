"""The deployment files agree with each other and with the image.

Run by .ci/deploy-checks.sh with the pinned tools of requirements.txt:

    python check.py KUBERNETES_VERSION...

- deploy/kubernetes/*.yaml: every resource valid (kubernetes-validate,
  strict: no unknown field, against each version given; its schemas are
  bundled, nothing is fetched), then what a schema cannot see: labels,
  selectors, probes, the grace period against server.shutdown_timeout, the
  user, the read-only root, resources, and the config and secret mounts
  against the ConfigMap's file and the Secret's keys;
- deploy/compose.yml: the services expected, health checks, and the same
  image, user, paths and environment as the Kubernetes files;
- the configuration files of both: only keys changegate knows (read from
  src/config/), secrets as `_file` keys under the mounted secret directory;
- Dockerfile: the service is built with exactly
  `cargo build --release --locked -p changegate`, its user, config path and
  environment are what the Docker section of the manual's
  docs/src/how-to/docker-kubernetes.md says and what the Kubernetes and
  Compose files use.

Prints every problem found and exits 1 when there is any.
"""

import base64
import pathlib
import re
import shlex
import sys
import tomllib

import kubernetes_validate
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
COMPOSE = ROOT / "deploy" / "compose.yml"
BUILD_COMMAND = "cargo build --release --locked -p changegate"
LABELS = {
    "app.kubernetes.io/name": "changegate",
    "app.kubernetes.io/instance": "changegate",
    "app.kubernetes.io/part-of": "changegate",
}
KINDS = {"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "Job"}
COMPOSE_SERVICES = {"mariadb", "sim", "migrate", "changegate-1", "changegate-2"}
# Secrets that also have a `_file` form (docs/src/how-to/configuring.md,
# "Secrets from files").
INLINE_SECRETS = {
    "gitlab.bot_token",
    "gitlab.reviewer_tokens",
    "approval.callback_secret",
    "deploy.callback_secret",
    "identity.jwt.hs256_secret",
    "identity.jwt.rs256_public_key",
    "webhooks.secret_key",
    "webhooks.previous_secret_keys",
}

problems = []


def problem(where, message):
    problems.append(f"{where}: {message}")


def check(condition, where, message):
    if not condition:
        problem(where, message)
    return condition


def seconds(duration):
    """A humantime duration as changegate writes them ("10s", "1m", "500ms")."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h)\s*", str(duration))
    if not match:
        raise ValueError(f"not a duration: {duration!r}")
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


# -- Dockerfile ---------------------------------------------------------------


def dockerfile():
    """The facts of the Dockerfile's default target (its last stage)."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    stages, current = {}, None
    order = []
    for line in joined.splitlines():
        words = line.split(None, 1)
        if not words:
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else f"#{len(order)}"
            current = {"name": name, "base": parts[0], "ops": []}
            stages[name] = current
            order.append(name)
        elif current is not None:
            current["ops"].append((op, rest.strip()))

    def needed(name, seen=None):
        """The stages building `name` needs: its bases and COPY --from sources."""
        seen = set() if seen is None else seen
        if name in seen or name not in stages:
            return seen
        seen.add(name)
        needed(stages[name]["base"], seen)
        for op, rest in stages[name]["ops"]:
            source = re.match(r"--from=(\S+)", rest) if op == "COPY" else None
            if source:
                needed(source[1], seen)
        return seen

    def chain(name):
        """`name` and the stages it is FROM, nearest first."""
        while name in stages:
            yield stages[name]
            name = stages[name]["base"]

    def cargo_builds(name):
        return [
            re.sub(r"\s+", " ", rest)
            for stage in needed(name)
            for op, rest in stages[stage]["ops"]
            if op == "RUN" and "cargo build" in rest
        ]

    default = order[-1]
    facts = {"default": default, "stages": stages, "env": {}, "user": None}
    for stage in reversed(list(chain(default))):
        for op, rest in stage["ops"]:
            if op == "ENV":
                for word in shlex.split(rest):
                    key, _, value = word.partition("=")
                    facts["env"][key] = value
            elif op == "USER":
                facts["user"] = rest
            elif op == "EXPOSE":
                facts["expose"] = rest.split()
            elif op == "RUN":
                uid = re.search(r"useradd [^&]*--uid (\d+)", rest)
                gid = re.search(r"groupadd [^&]*--gid (\d+)", rest)
                facts["uid"] = int(uid[1]) if uid else facts.get("uid")
                facts["gid"] = int(gid[1]) if gid else facts.get("gid")
            elif op == "ENTRYPOINT":
                facts["entrypoint"] = yaml.safe_load(rest)
            elif op == "COPY":
                facts.setdefault("copies", []).append(rest)

    where = "Dockerfile"
    check(
        cargo_builds(default) == [BUILD_COMMAND],
        where,
        f"the default target must build the service with exactly `{BUILD_COMMAND}`, "
        f"found {cargo_builds(default)}",
    )
    check(
        not any("sim" in stage for stage in needed(default) if not stage.startswith("#")),
        where,
        f"the default target must need no simulator stage: it needs {sorted(needed(default))}",
    )
    check(
        "sim" in stages and any("-p changegate-sim" in build for build in cargo_builds("sim")),
        where,
        "a target `sim` building `-p changegate-sim` (for deploy/compose.yml)",
    )
    check(
        any(copy.endswith("/src/target/release/changegate /usr/local/bin/changegate")
            for copy in facts.get("copies", [])),
        where,
        "the default target copies the service's binary to /usr/local/bin/changegate",
    )
    check(facts.get("entrypoint") == ["changegate"], where, "ENTRYPOINT [\"changegate\"]")
    uid, gid = facts.get("uid"), facts.get("gid")
    check(uid is not None and gid is not None, where, "useradd --uid N and groupadd --gid N")
    check(
        facts["user"] == f"{uid}:{gid}",
        where,
        f"USER must be numeric, the user's uid:gid ({uid}:{gid}), so runAsNonRoot can check it; "
        f"found {facts['user']!r}",
    )
    for key in ("CHANGEGATE_CONFIG", "CHANGEGATE_LISTEN", "CHANGEGATE_DATABASE_URL"):
        check(key in facts["env"], where, f"ENV {key}")
    config = facts["env"].get("CHANGEGATE_CONFIG", "")
    facts["config_dir"] = str(pathlib.PurePosixPath(config).parent)
    check(facts["config_dir"] == "/etc/changegate", where, f"the config file under /etc/changegate: {config}")
    port = facts["env"].get("CHANGEGATE_LISTEN", ":").rpartition(":")[2]
    facts["port"] = int(port) if port.isdigit() else None
    check(facts.get("expose") == [port], where, f"EXPOSE {port}, the port of CHANGEGATE_LISTEN")
    return facts


DOCKER_PAGE = "docs/src/how-to/docker-kubernetes.md"


def docker_section(image):
    """The manual's Docker section states the image's user, paths and environment."""
    where = f"{DOCKER_PAGE}, section Docker"
    page = (ROOT / DOCKER_PAGE).read_text()
    match = re.search(r"^## Docker\n(.*?)(?=^#{1,2} |\Z)", page, re.S | re.M)
    if not check(match, where, "missing"):
        return
    section = match[1]
    uid = re.search(r"uid and gid `(\d+)`", section)
    check(
        uid and int(uid[1]) == image["uid"] == image["gid"],
        where,
        f"says the image runs as uid and gid `{image['uid']}` (Dockerfile)",
    )
    stated = dict(re.findall(r"`(CHANGEGATE_[A-Z_]+)=([^`]*)`", section))
    for key, value in image["env"].items():
        check(
            stated.get(key) == value,
            where,
            f"says `{key}={value}` as the Dockerfile sets it (the page: {stated.get(key)!r})",
        )
    for key in set(stated) - set(image["env"]):
        problem(where, f"`{key}` is not set in the Dockerfile")
    for text in (f"`{image['config_dir']}`", "`/var/lib/changegate`", "--target sim"):
        check(text in section, where, f"mentions {text}")


# -- configuration files ------------------------------------------------------


def config_schema():
    """Section -> accepted keys (None: any), as src/config/ declares them."""
    # Every file of src/config/: a section's keys may be declared beside it
    # (retention.rs, telemetry.rs, ...).
    sources = {path.name: path.read_text() for path in sorted((ROOT / "src" / "config").glob("*.rs"))}
    consts = {}
    for text in sources.values():
        for match in re.finditer(r"const (\w+): &\[&str\] = &\[(.*?)\];", text, re.S):
            consts[match[1]] = re.findall(r'"([^"]*)"', match[2])
    schema = {}
    body = re.search(r"const SCHEMA: [^=]*= &\[(.*?)\n\];", sources["schema.rs"], re.S)
    for match in re.finditer(
        r'\(\s*"(\w+)",\s*(None|Some\(([^()]*)\))\s*,?\s*\)', body[1] if body else ""
    ):
        keys = match[3]
        if keys is None:
            schema[match[1]] = None
        elif "[" in keys:
            schema[match[1]] = re.findall(r'"([^"]*)"', keys)
        else:
            schema[match[1]] = consts.get(keys.rsplit("::", 1)[-1], "unresolved")
    nested = {"identity.jwt": consts.get("JWT_KEYS"), "targets.*": consts.get("TARGET_KEYS")}
    unresolved = "unresolved" in schema.values()
    if len(schema) < 10 or "server" not in schema or None in nested.values() or unresolved:
        raise SystemExit(
            "error: cannot read the configuration's keys from src/config/schema.rs and "
            "sections.rs: update config_schema() in .ci/deploy-checks/check.py"
        )
    return schema, nested


def check_config(where, text, schema, secret_dir):
    """Known keys only; every secret from a `_file` under `secret_dir`.
    Returns the parsed table and the secret files it names."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        problem(where, f"invalid TOML: {err}")
        return {}, []
    keys, nested = schema
    for section, value in table.items():
        if section not in keys:
            problem(where, f"[{section}]: unknown section")
            continue
        if not isinstance(value, dict):
            problem(where, f"{section}: must be a table")
            continue
        allowed = keys[section]
        for key, item in value.items():
            if allowed is not None and key not in allowed:
                problem(where, f"{section}.{key}: unknown key")
            inner = nested.get(f"{section}.{key}") or (section == "targets" and nested["targets.*"])
            if inner and isinstance(item, dict):
                for sub in item:
                    if sub not in inner:
                        problem(where, f"{section}.{key}.{sub}: unknown key")
    files = []

    def walk(prefix, node):
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict):
                walk(name, value)
                continue
            if key.endswith(("_file", "_files")):
                for path in value if isinstance(value, list) else [value]:
                    files.append((name, path))
                    check(
                        str(path).startswith(secret_dir + "/"),
                        where,
                        f"{name}: {path} is not under the secret mount {secret_dir}",
                    )
            elif name in INLINE_SECRETS:
                problem(where, f"{name}: a secret inline; give it as a _file key, from the secret mount")

    walk("", table)
    check("url" not in table.get("database", {}), where,
          "database.url is set in the environment (CHANGEGATE_DATABASE_URL), not here: "
          "the image sets that variable, and the environment wins over the file")
    try:
        seconds(table.get("server", {}).get("shutdown_timeout", "10s"))
    except ValueError as err:
        problem(where, f"server.shutdown_timeout: {err}")
    return table, files


def shutdown_timeout(table):
    try:
        return seconds(table.get("server", {}).get("shutdown_timeout", "10s"))
    except ValueError:
        return 10


def check_database_url(where, url):
    match = re.fullmatch(r"(mysql|mariadb)://([^@/]+)@[^/]+/\w+(\?.*)?", url or "")
    check(match, where, f"CHANGEGATE_DATABASE_URL must be mysql://USER@HOST:PORT/DATABASE: {url!r}")
    check(
        not match or ":" not in match[2],
        where,
        "CHANGEGATE_DATABASE_URL must hold no password (database.password_file gives it)",
    )


# -- Kubernetes ---------------------------------------------------------------


def kubernetes(image, schema, versions):
    documents = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.relative_to(ROOT), document))
    kinds = [document.get("kind") for _, document in documents]
    check(sorted(kinds) == sorted(KINDS), "deploy/kubernetes", f"one each of {sorted(KINDS)}: {kinds}")
    for path, document in documents:
        name = f"{path} ({document.get('kind')}/{document.get('metadata', {}).get('name')})"
        before = len(problems)
        for version in versions:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                at = ".".join(str(part) for part in err.path)
                problem(name, f"Kubernetes {version}: {at}: {err.message}")
            except (kubernetes_validate.SchemaNotFoundError,
                    kubernetes_validate.InvalidSchemaError) as err:
                problem(name, f"Kubernetes {version}: {err.message}")
        if len(problems) == before:
            print(f"ok  {name}: valid for Kubernetes {', '.join(versions)} (strict)")
    by_kind = {document["kind"]: (path, document) for path, document in documents}
    if set(by_kind) != KINDS:
        return None

    versions_label = set()
    for path, document in documents:
        meta = document.get("metadata", {})
        labels = meta.get("labels", {})
        for key, value in LABELS.items():
            check(labels.get(key) == value, path, f"label {key}={value}")
        versions_label.add(labels.get("app.kubernetes.io/version"))
        check("namespace" not in meta, path, "no namespace: the files are applied with -n")
    check(len(versions_label) == 1 and None not in versions_label, "deploy/kubernetes",
          f"one app.kubernetes.io/version on every resource: {versions_label}")

    _, config_map = by_kind["ConfigMap"]
    _, secret = by_kind["Secret"]
    _, deployment = by_kind["Deployment"]
    _, job = by_kind["Job"]
    _, service = by_kind["Service"]
    _, budget = by_kind["PodDisruptionBudget"]
    secret_keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))

    dep_where = "deploy/kubernetes/deployment.yaml"
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {item["name"]: item.get("value") for item in container.get("env", [])}
    config_path = pathlib.PurePosixPath(env.get("CHANGEGATE_CONFIG", ""))
    mounts = {mount["name"]: mount for mount in container.get("volumeMounts", [])}
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}

    def mount_of(kind):
        for name, volume in volumes.items():
            if kind in volume and name in mounts:
                return volume[kind], mounts[name]
        return None, None

    config_volume, config_mount = mount_of("configMap")
    secret_volume, secret_mount = mount_of("secret")
    facts = {}
    if check(config_mount and secret_mount, dep_where, "a ConfigMap and a Secret volume, mounted"):
        facts = {
            "config_dir": config_mount["mountPath"],
            "secret_dir": secret_mount["mountPath"],
            "env": env,
        }
        check(config_volume.get("name") == config_map["metadata"]["name"], dep_where,
              "the config volume is the ConfigMap")
        check(secret_volume.get("secretName") == secret["metadata"]["name"], dep_where,
              "the secret volume is the Secret")
        check(str(config_path.parent) == config_mount["mountPath"] == image["config_dir"], dep_where,
              f"CHANGEGATE_CONFIG ({config_path}) in the ConfigMap's mount "
              f"({config_mount['mountPath']}), the image's config directory ({image['config_dir']})")
        check(config_path.name in config_map.get("data", {}), dep_where,
              f"the ConfigMap has the key {config_path.name} CHANGEGATE_CONFIG names")
        for mount in container.get("volumeMounts", []):
            check("subPath" not in mount, dep_where,
                  f"{mount['name']}: no subPath (its files would never be updated, nor reloaded)")
            check(mount.get("readOnly") is True, dep_where, f"{mount['name']}: mounted read-only")

    table, files = check_config(
        "deploy/kubernetes/configmap.yaml",
        config_map.get("data", {}).get(config_path.name, ""),
        schema,
        facts.get("secret_dir", "/"),
    )
    for key, path in files:
        check(pathlib.PurePosixPath(path).name in secret_keys, "deploy/kubernetes/secret.example.yaml",
              f"a key {pathlib.PurePosixPath(path).name} for {key}")
    used = {pathlib.PurePosixPath(path).name for _, path in files}
    for key in secret_keys - used:
        problem("deploy/kubernetes/secret.example.yaml", f"{key} is named by no `_file` key")
    webhook_file = table.get("webhooks", {}).get("secret_key_file")
    check(webhook_file, "deploy/kubernetes/configmap.yaml",
          "webhooks.secret_key_file: on MySQL, webhooks need it")
    check(table.get("database", {}).get("password_file"), "deploy/kubernetes/configmap.yaml",
          "database.password_file")

    def pod_checks(where, pod, container):
        security = pod.get("securityContext", {})
        check(security.get("runAsNonRoot") is True, where, "runAsNonRoot: true")
        check(security.get("runAsUser") == image["uid"], where, f"runAsUser: {image['uid']} (the image's)")
        check(security.get("runAsGroup") == image["gid"], where, f"runAsGroup: {image['gid']}")
        check(security.get("fsGroup") == image["gid"], where, f"fsGroup: {image['gid']}")
        check(security.get("seccompProfile", {}).get("type") == "RuntimeDefault", where,
              "seccompProfile RuntimeDefault")
        check(pod.get("automountServiceAccountToken") is False, where, "automountServiceAccountToken: false")
        check(pod.get("enableServiceLinks") is False, where, "enableServiceLinks: false")
        own = container.get("securityContext", {})
        check(own.get("readOnlyRootFilesystem") is True, where, "readOnlyRootFilesystem: true")
        check(own.get("allowPrivilegeEscalation") is False, where, "allowPrivilegeEscalation: false")
        check(own.get("capabilities", {}).get("drop") == ["ALL"], where, "capabilities drop ALL")
        resources = container.get("resources", {})
        for part, names in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
            for name in names:
                check(name in resources.get(part, {}), where, f"resources.{part}.{name}")
        env = {item["name"]: item.get("value") for item in container.get("env", [])}
        check(env.get("CHANGEGATE_LISTEN") == image["env"].get("CHANGEGATE_LISTEN"), where,
              "CHANGEGATE_LISTEN as the image sets it")
        check_database_url(where, env.get("CHANGEGATE_DATABASE_URL"))

    pod_checks(dep_where, pod, container)
    check(deployment["spec"].get("replicas", 1) >= 2, dep_where, "several replicas")
    check(container.get("args") == ["serve"], dep_where, 'args: ["serve"]')
    ports = {port.get("name"): port["containerPort"] for port in container.get("ports", [])}
    check(ports.get("http") == image["port"], dep_where,
          f"containerPort http: {image['port']}, the port of CHANGEGATE_LISTEN")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path and get.get("port") in ("http", image["port"]), dep_where,
              f"{probe} on {path}, the http port")
    pause = 0
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if command[:1] == ["sleep"] and len(command) == 2:
        pause = int(command[1])
    grace = pod.get("terminationGracePeriodSeconds", 30)
    limit = shutdown_timeout(table)
    check(grace > pause + limit, dep_where,
          f"terminationGracePeriodSeconds ({grace}) above the preStop pause ({pause} s) plus "
          f"server.shutdown_timeout ({limit:g} s)")
    check(deployment["spec"].get("strategy", {}).get("rollingUpdate", {}).get("maxUnavailable") == 0,
          dep_where, "rollingUpdate.maxUnavailable: 0")
    selector = deployment["spec"]["selector"].get("matchLabels", {})
    template_labels = deployment["spec"]["template"]["metadata"].get("labels", {})
    check(selector and selector.items() <= template_labels.items(), dep_where,
          "the selector matches the pod template's labels")

    job_where = "deploy/kubernetes/migrate-job.yaml"
    job_pod = job["spec"]["template"]["spec"]
    job_container = job_pod["containers"][0]
    pod_checks(job_where, job_pod, job_container)
    check(job_container.get("args") == ["migrate"], job_where, 'args: ["migrate"]')
    check(job_container.get("image") == container.get("image"), job_where, "the Deployment's image")
    check(job_container.get("env") == container.get("env"), job_where, "the Deployment's environment")
    check(job_container.get("volumeMounts") == container.get("volumeMounts"), job_where,
          "the Deployment's mounts")
    check(job_pod.get("volumes") == pod.get("volumes"), job_where, "the Deployment's volumes")
    check(job_pod.get("restartPolicy") == "Never", job_where, "restartPolicy: Never")
    job_labels = job["spec"]["template"]["metadata"].get("labels", {})
    check(not selector.items() <= job_labels.items(), job_where,
          "its pod is not one of the Deployment's (nor the Service's, nor the budget's)")

    svc_where = "deploy/kubernetes/service.yaml"
    check(service["spec"].get("selector") == selector, svc_where, "the Deployment's selector")
    for port in service["spec"].get("ports", []):
        check(port.get("targetPort") in ("http", image["port"]), svc_where, "targetPort: http")
    check(budget["spec"].get("selector", {}).get("matchLabels") == selector,
          "deploy/kubernetes/poddisruptionbudget.yaml", "the Deployment's selector")
    return facts


# -- Compose ------------------------------------------------------------------


def compose(image, schema, kube):
    where = "deploy/compose.yml"
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec.get("services", {})
    check(set(services) == COMPOSE_SERVICES, where, f"services {sorted(COMPOSE_SERVICES)}: {sorted(services)}")
    if set(services) != COMPOSE_SERVICES:
        return
    for name in ("mariadb", "sim", "changegate-1", "changegate-2"):
        check(services[name].get("healthcheck", {}).get("test"), where, f"{name}: a healthcheck")

    def volume_of(service, target):
        for volume in service.get("volumes", []):
            parts = volume.split(":")
            if len(parts) >= 2 and parts[1] == target:
                return (COMPOSE.parent / parts[0]).resolve()
        return None

    sim = services["sim"]
    check(sim.get("build", {}).get("target") == "sim" and "sim" in image["stages"], where,
          "sim: built from the Dockerfile's target `sim`")
    published = set()
    for port in sim.get("ports", []):
        host, _, rest = str(port).partition(":")
        check(host == "127.0.0.1", where, f"sim: {port} published on the host's loopback only")
        published.add(rest)
    callback = re.search(r"--callback-url http://127\.0\.0\.1:(\d+)", " ".join(sim.get("command", [])))

    config_dir = kube.get("config_dir", image["config_dir"])
    secret_dir = kube.get("secret_dir", "/run/secrets/changegate")
    config_sources, listen_ports = set(), {}
    for name in ("migrate", "changegate-1", "changegate-2"):
        service = services[name]
        at = f"{where}: {name}"
        build = service.get("build", {})
        check(build.get("context") == ".." and build.get("dockerfile", "Dockerfile") == "Dockerfile"
              and "target" not in build, at, "built from the Dockerfile's default target")
        check(service.get("user") == f"{image['uid']}:{image['gid']}", at, "the image's uid:gid")
        check(service.get("read_only") is True, at, "read_only: true")
        check(service.get("network_mode") == "service:sim", at,
              "in the simulators' network namespace (they listen on 127.0.0.1 only)")
        env = service.get("environment", {})
        check(env.get("CHANGEGATE_CONFIG") == kube.get("env", {}).get("CHANGEGATE_CONFIG"), at,
              "CHANGEGATE_CONFIG as in deploy/kubernetes/deployment.yaml")
        check_database_url(at, env.get("CHANGEGATE_DATABASE_URL"))
        config_sources.add(volume_of(service, config_dir))
        secrets = volume_of(service, secret_dir)
        check(secrets == (COMPOSE.parent / "compose" / "secrets").resolve(), at,
              f"deploy/compose/secrets mounted at {secret_dir}, as in Kubernetes")
        if name == "migrate":
            check(service.get("command") == ["migrate"], at, 'command: ["migrate"]')
            check(services[name].get("depends_on", {}).get("mariadb", {}).get("condition")
                  == "service_healthy", at, "waits for MariaDB to be healthy")
            continue
        check(service.get("command") == ["serve"], at, 'command: ["serve"]')
        check(service.get("depends_on", {}).get("migrate", {}).get("condition")
              == "service_completed_successfully", at, "starts once migrate has succeeded")
        port = str(env.get("CHANGEGATE_LISTEN", "")).rpartition(":")[2]
        listen_ports[name] = port
        check(f"{port}:{port}" in published, at, f"its port {port} published by sim")
        test = " ".join(service.get("healthcheck", {}).get("test", []))
        check(f"http://127.0.0.1:{port}/readyz" in test, at, "its healthcheck asks its own /readyz")
    check(len(set(listen_ports.values())) == 2, where, f"the instances listen on two ports: {listen_ports}")
    check(callback and callback[1] in listen_ports.values(), where,
          "sim: --callback-url names an instance")

    check(len(config_sources) == 1 and None not in config_sources, where,
          f"one configuration directory mounted at {config_dir}")
    if len(config_sources) != 1 or None in config_sources:
        return
    source = config_sources.pop()
    config_name = pathlib.PurePosixPath(kube.get("env", {}).get("CHANGEGATE_CONFIG", "")).name
    config_file = source / config_name
    if not check(config_file.is_file(), where, f"{config_file.relative_to(ROOT)} exists"):
        return
    file_where = str(config_file.relative_to(ROOT))
    table, files = check_config(file_where, config_file.read_text(), schema, secret_dir)
    secrets_dir = COMPOSE.parent / "compose" / "secrets"
    for key, path in files:
        local = secrets_dir / pathlib.PurePosixPath(path).name
        check(local.is_file() and local.read_text().strip(), file_where,
              f"{key}: {local.relative_to(ROOT)} exists and is not empty")
    key_file = table.get("webhooks", {}).get("secret_key_file")
    if check(key_file, file_where, "webhooks.secret_key_file: on MySQL, webhooks need it"):
        local = secrets_dir / pathlib.PurePosixPath(key_file).name
        try:
            check(len(base64.b64decode(local.read_text().strip(), validate=True)) == 32, file_where,
                  f"{local.relative_to(ROOT)}: 32 bytes in base64")
        except (OSError, ValueError) as err:
            problem(file_where, f"{local.relative_to(ROOT)}: {err}")
    password = services["mariadb"].get("environment", {}).get("MARIADB_PASSWORD_FILE", "")
    check(password == table.get("database", {}).get("password_file")
          and volume_of(services["mariadb"], secret_dir) == secrets_dir.resolve(), where,
          "mariadb: the password file changegate reads (database.password_file)")
    subnets = [item.get("subnet") for item in
               spec.get("networks", {}).get("default", {}).get("ipam", {}).get("config", [])]
    check(subnets and subnets[0] in table.get("identity", {}).get("trusted_proxies", []), file_where,
          f"identity.trusted_proxies holds the compose network {subnets}, through which the browser comes")
    limit = shutdown_timeout(table)
    for name in ("changegate-1", "changegate-2"):
        try:
            grace = seconds(services[name].get("stop_grace_period", "10s"))
        except ValueError as err:
            problem(f"{where}: {name}", f"stop_grace_period: {err}")
            continue
        check(grace > limit, f"{where}: {name}",
              f"stop_grace_period ({grace:g} s) above server.shutdown_timeout ({limit:g} s)")
    print(f"ok  {where}: services {', '.join(sorted(services))}")


def main():
    versions = sys.argv[1:]
    if not versions:
        raise SystemExit("usage: check.py KUBERNETES_VERSION...")
    print(f"kubernetes-validate {kubernetes_validate.__version__}")
    image = dockerfile()
    docker_section(image)
    schema = config_schema()
    kube = kubernetes(image, schema, versions) or {}
    compose(image, schema, kube)
    print(f"ok  Dockerfile: `{BUILD_COMMAND}`, user {image['user']}, "
          f"config {image['env'].get('CHANGEGATE_CONFIG')}, port {image['port']}")
    if problems:
        print(f"\n{len(problems)} problem(s), each saying what is expected:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    print("deployment files: no problem found")


if __name__ == "__main__":
    main()
