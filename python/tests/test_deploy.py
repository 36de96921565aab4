"""deploy/: the Helm chart, rendered and linted by a real helm, validated against Kubernetes.

No cluster runs here, so the manifests are checked as strictly as an API server would admit
them, and against what fw really serves:

* ``helm lint --strict`` and ``helm template`` (helm v3.22.0 built from its Go module:
  scripts/fetch-helm.sh) with the defaults and with every optional part on;
* every rendered manifest validated against the OpenAPI schemas of two Kubernetes releases
  (k8s_schema.KUBERNETES) and the KEDA, prometheus-operator and KServe CRDs (k8s_schema),
  unknown fields and wrong types refused: the validator is shown to catch both;
* the chart against fw itself: every FW_* variable and flag it sets exists in ``fw serve
  --help`` / ``fw dashboard --help``, probes use fw's health endpoints, ports, selectors and
  names agree, the grace period outlasts the drain, KEDA's trigger metadata is what KEDA's
  Prometheus scaler reads;
* the chart's own refusals (a dashboard without a token, several dashboards on SQLite).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("jsonschema")

import k8s_schema  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "fw"
HELM = Path(os.environ.get("FW_HELM") or ROOT / "build" / "tools" / "helm")
FW_BIN = Path(os.environ.get("FW_BIN") or ROOT / "bin" / "fw")

# Values that turn every optional part on (with keda autoscaling), and the other choices.
ALL_ON = {
    "postgresql.enabled": "true",
    "postgresql.auth.existingSecret": "fw-postgres",
    "kserve.enabled": "true",
    "monitoring.serviceMonitor.enabled": "true",
    "monitoring.prometheusRule.enabled": "true",
    "monitoring.grafanaDashboard.enabled": "true",
    "serve.gpus": "1",
    "serve.device": "cuda",
    "serve.apiKeys.existingSecret": "fw-keys",
    "serve.env.FW_ACCESS_LOG": "true",
    "serve.extraArgs[0]": "--watch",
    "dashboard.allowedHosts": "fw.example.com",
}
HPA_EXTERNAL_DB = {
    "serve.autoscaling.mode": "hpa",
    "serve.grpcPort": "0",
    "dashboard.database.existingSecret": "fw-db",
    "dashboard.replicas": "2",
    "dashboard.persistence.accessModes[0]": "ReadWriteMany",
}
NO_AUTOSCALING = {"serve.autoscaling.enabled": "false", "dashboard.persistence.enabled": "false"}
VALUE_SETS = {
    "defaults": {},
    "all-on": ALL_ON,
    "hpa-external-db": HPA_EXTERNAL_DB,
    "fixed-replicas": NO_AUTOSCALING,
}


def _helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not HELM.exists():
        pytest.skip(f"{HELM} is missing: scripts/fetch-helm.sh builds it (make test does)")
    out = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        pytest.fail(f"helm {' '.join(args)}:\n{out.stdout}{out.stderr}")
    return out


def _sets(values: dict) -> list[str]:
    return [
        a
        for k, v in values.items()
        for a in ("--set-string" if k.endswith("existingSecret") else "--set", f"{k}={v}")
    ]


def render(values: dict, kube: str = k8s_schema.KUBERNETES[-1], release: str = "fw") -> list[dict]:
    out = _helm("template", release, str(CHART), "--namespace", "ml", "--kube-version", kube, *_sets(values))
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(docs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


@pytest.fixture(scope="module", params=k8s_schema.KUBERNETES)
def schemas(request):
    try:
        return k8s_schema.schemas(request.param)
    except k8s_schema.Unavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def fw_env_names() -> set[str]:
    """Every FW_* name fw documents: the flags' variables and those its --help texts name."""
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `make build` (or set FW_BIN)")
    names = set()
    for cmd in ("serve", "dashboard"):
        out = subprocess.run([str(FW_BIN), cmd, "--help"], capture_output=True, text=True, timeout=30)
        names |= set(re.findall(r"FW_[A-Z0-9_]+", out.stdout + out.stderr))
    # Read from the environment only (cmd/fw/environ.go; docs/tracking.md lists them).
    return names | {"FW_ARTIFACT_DIR", "FW_ORT_LIB", "FW_TORCH_SHIM"}


@pytest.fixture(scope="module")
def flags() -> dict[str, set[str]]:
    if not FW_BIN.exists():
        pytest.skip(f"{FW_BIN} is missing: build it with `make build` (or set FW_BIN)")
    out = {}
    for cmd in ("serve", "dashboard"):
        h = subprocess.run([str(FW_BIN), cmd, "--help"], capture_output=True, text=True, timeout=30)
        out[cmd] = set(re.findall(r"^  -([a-z0-9-]+)", h.stdout + h.stderr, re.M))
    return out


# ----------------------------------------------------------------------------- helm itself


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_strict(name):
    for kube in k8s_schema.KUBERNETES:
        _helm("lint", "--strict", "--kube-version", kube, str(CHART), *_sets(VALUE_SETS[name]))


def test_chart_refuses_what_cannot_work():
    def refused(values: dict, why: str) -> None:
        out = _helm(
            "template",
            "fw",
            str(CHART),
            "--kube-version",
            k8s_schema.KUBERNETES[-1],
            *_sets(values),
            check=False,
        )
        assert out.returncode != 0 and why in out.stderr, (values, out.stderr)

    refused({"dashboard.token.existingSecret": ""}, "needs a token")
    refused({"dashboard.replicas": "2"}, "needs PostgreSQL")
    refused({"dashboard.replicas": "2", "dashboard.database.existingSecret": "db"}, "ReadWriteMany")
    refused({"postgresql.enabled": "true"}, "postgresql.auth.existingSecret is required")
    refused({"serve.autoscaling.mode": "cpu"}, "must be keda or hpa")
    refused({"serve.autoscaling.maxReplicas": "1"}, "maxReplicas must be >= minReplicas")
    refused({"serve.terminationGraceMarginSeconds": "0"}, "grace period must outlast")
    out = _helm("template", "fw", str(CHART), "--kube-version", "1.30.0", check=False)
    assert out.returncode != 0 and "kubeVersion" in out.stderr, out.stderr


# ----------------------------------------------------------------------------- schemas


@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_manifests_match_kubernetes_schemas(schemas, name):
    docs = render(VALUE_SETS[name], kube=schemas.kubernetes)
    problems = [f"{d['kind']} {d['metadata']['name']}: {e}" for d in docs for e in schemas.errors(d)]
    assert not problems, "\n".join(problems)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service"} <= kinds


def test_all_on_renders_every_kind():
    kinds = by_kind(render(ALL_ON))
    assert {k: len(v) for k, v in kinds.items()} == {
        "Deployment": 2,  # fw serve, dashboard
        "Service": 3,  # and PostgreSQL's
        "StatefulSet": 1,
        "PersistentVolumeClaim": 1,
        "PodDisruptionBudget": 1,
        "ScaledObject": 1,
        "ServiceMonitor": 2,
        "PrometheusRule": 1,
        "ConfigMap": 1,
        "ServingRuntime": 1,
    }
    assert "HorizontalPodAutoscaler" in by_kind(render(HPA_EXTERNAL_DB))


def test_validator_refuses_misspelled_fields_and_wrong_types(schemas):
    """The validator is not a rubber stamp: each broken copy of a valid manifest is refused."""
    docs = by_kind(render(ALL_ON, kube=schemas.kubernetes))
    dep = docs["Deployment"][0]
    assert not schemas.errors(dep)

    def refused(doc: dict, where: str, what: str) -> None:
        errs = schemas.errors(doc)
        assert any(e.startswith(where) and what in e for e in errs), errs

    def broken(doc: dict, edit) -> dict:
        doc = copy.deepcopy(doc)
        edit(doc)
        return doc

    pod = lambda d: d["spec"]["template"]["spec"]  # noqa: E731
    refused(broken(dep, lambda d: d["spec"].update(replica=3)), "spec:", "'replica' was unexpected")
    refused(
        broken(dep, lambda d: pod(d)["containers"][0]["readinessProbe"]["httpGet"].update(paht="/x")),
        "spec/template/spec/containers/0/readinessProbe/httpGet:",
        "'paht' was unexpected",
    )
    refused(
        broken(dep, lambda d: d["metadata"].update(label={"a": "b"})), "metadata:", "'label' was unexpected"
    )
    refused(
        broken(dep, lambda d: pod(d)["containers"][0]["ports"][0].update(containerPort="8000")),
        "spec/template/spec/containers/0/ports/0/containerPort:",
        "is not of type 'integer'",
    )
    refused(
        broken(dep, lambda d: pod(d).update(terminationGracePeriodSeconds="45s")),
        "spec/template/spec/terminationGracePeriodSeconds:",
        "is not of type 'integer'",
    )
    refused(
        broken(dep, lambda d: d["metadata"]["labels"].update(tier=1)),
        "metadata/labels/tier:",
        "not of type 'string'",
    )
    refused(
        broken(dep, lambda d: pod(d)["containers"][0].pop("name")),
        "spec/template/spec/containers/0:",
        "'name' is a required",
    )
    refused(broken(dep, lambda d: d.update(apiVersion="extensions/v1beta1")), "", "is not served")
    # Custom resources: the same, against their CRDs.
    so = docs["ScaledObject"][0]
    assert not schemas.errors(so)
    refused(
        broken(so, lambda d: d["spec"]["triggers"][0].update(metdata={})),
        "spec/triggers/0:",
        "'metdata' was unexpected",
    )
    refused(
        broken(so, lambda d: d["spec"].update(minReplicaCount="two")),
        "spec/minReplicaCount:",
        "not of type 'integer'",
    )
    sm = docs["ServiceMonitor"][0]
    refused(
        broken(sm, lambda d: d["spec"]["endpoints"][0].update(intervall="5s")),
        "spec/endpoints/0:",
        "'intervall'",
    )
    rt = docs["ServingRuntime"][0]
    refused(
        broken(rt, lambda d: d["spec"].update(multiModel="no")), "spec/multiModel:", "not of type 'boolean'"
    )


def test_kserve_examples_match_kserves_schema(schemas):
    docs = [
        d for d in yaml.safe_load_all((ROOT / "deploy" / "kserve" / "inferenceservice.yaml").read_text()) if d
    ]
    assert {d["kind"] for d in docs} == {"InferenceService"}
    for d in docs:
        assert not schemas.errors(d), (d["metadata"]["name"], schemas.errors(d))


# ----------------------------------------------------------------------------- against fw


def _containers(docs: list[dict]):
    for d in docs:
        spec = d.get("spec", {})
        pod = spec.get("template", {}).get("spec") if d["kind"] in ("Deployment", "StatefulSet") else None
        if d["kind"] == "ServingRuntime":
            pod = spec
        for c in (pod or {}).get("containers", []):
            yield d, c


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_fw_setting_exists(name, fw_env_names, flags):
    """A misspelled FW_* variable would be ignored silently by fw: each one the chart sets is real."""
    checked = 0
    for d, c in _containers(render(VALUE_SETS[name])):
        if d["kind"] == "StatefulSet":  # PostgreSQL's
            continue
        cmd = "dashboard" if c.get("command", [None, None])[1:] == ["dashboard"] else "serve"
        for e in c.get("env", []):
            if e["name"] == "FW_PG_PASSWORD":  # the chart's own, spliced into FW_DATABASE_URL
                continue
            assert e["name"] in fw_env_names, f"{d['kind']} {c['name']}: {e['name']} is not an fw setting"
            checked += 1
        for a in c.get("args", []):
            if a.startswith("--"):
                assert a[2:].split("=")[0] in flags[cmd], f"{c['name']}: fw {cmd} has no flag {a}"
    assert checked > 10


def test_serve_probes_drain_ports_and_selectors():
    docs = by_kind(render(ALL_ON))
    dep = next(d for d in docs["Deployment"] if d["metadata"]["name"] == "fw-serve")
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (c,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FW_HOST"] == "0.0.0.0", "replicas must listen beyond loopback"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(env["FW_PORT"]), "grpc": int(env["FW_GRPC_PORT"])}
    assert c["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    assert c["startupProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    # Graceful drain: the pod's grace period outlasts fw's drain delay plus its shutdown timeout.
    drain, shutdown = (int(env[k].rstrip("s")) for k in ("FW_DRAIN_DELAY", "FW_SHUTDOWN_TIMEOUT"))
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain + shutdown
    assert drain >= 2 * c["readinessProbe"]["periodSeconds"], (
        "readiness must see 503 before the listener closes"
    )
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1 and env["FW_DEVICE"] == "cuda"
    assert c["securityContext"]["readOnlyRootFilesystem"] and pod["spec"]["securityContext"]["runAsNonRoot"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/app/models"]["readOnly"] and "/tmp" in mounts
    svc = next(s for s in docs["Service"] if s["metadata"]["name"] == "fw-serve")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == set(ports)
    grpc = next(p for p in svc["spec"]["ports"] if p["name"] == "grpc")
    assert grpc["appProtocol"] == "kubernetes.io/h2c"
    (pdb,) = docs["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "replicas" not in dep["spec"], "the autoscaler owns the replica count"


def test_keda_scaled_object_reads_fws_metrics():
    """The ScaledObject targets the Deployment and its triggers are what KEDA's Prometheus scaler
    reads (its own source says which metadata keys exist and which are required); the queries
    themselves run against a real Prometheus in test_observability.py."""
    try:
        known = k8s_schema.keda_prometheus_metadata()
    except k8s_schema.Unavailable as e:
        pytest.skip(str(e))
    docs = by_kind(render(ALL_ON))
    (so,) = docs["ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == "fw-serve"
    assert so["spec"]["minReplicaCount"] >= 1, "scale-to-zero would unload the model"
    triggers = {t["name"]: t for t in so["spec"]["triggers"]}
    assert set(triggers) == {"queue", "latency"}
    for t in triggers.values():
        assert t["type"] == "prometheus" and t["metricType"] in ("AverageValue", "Value")
        md = t["metadata"]
        assert set(md) <= set(known), set(md) - set(known)
        assert {k for k, req in known.items() if req} <= set(md)
        float(md["threshold"])
        assert 'namespace="ml",job="fw-serve"' in md["query"]
    assert "fw_queue_depth" in triggers["queue"]["metadata"]["query"]
    assert "fw_http_request_duration_seconds_bucket" in triggers["latency"]["metadata"]["query"]
    # The series the queries select are the ones the ServiceMonitor makes: job = the Service.
    sm = next(m for m in docs["ServiceMonitor"] if m["metadata"]["name"] == "fw-serve")
    svc = next(s for s in docs["Service"] if s["metadata"]["name"] == "fw-serve")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}


def test_dashboard_token_database_and_volume():
    docs = by_kind(render(ALL_ON))
    dep = next(d for d in docs["Deployment"] if d["metadata"]["name"] == "fw-dashboard")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["/opt/fw/bin/fw", "dashboard"]
    env = {e["name"]: e for e in c["env"]}
    assert env["FW_DASHBOARD_HOST"]["value"] == "0.0.0.0"
    assert env["FW_DASHBOARD_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "fw-dashboard"
    # The bundled PostgreSQL: the URL is composed from the password Secret; Kubernetes expands
    # $(FW_PG_PASSWORD) because it is defined earlier in the list.
    names = [e["name"] for e in c["env"]]
    assert names.index("FW_PG_PASSWORD") < names.index("FW_DATABASE_URL")
    assert (
        env["FW_DATABASE_URL"]["value"]
        == "postgres://fw:$(FW_PG_PASSWORD)@fw-postgresql:5432/fw?sslmode=disable"
    )
    (pg,) = docs["StatefulSet"]
    pg_env = {e["name"]: e for e in pg["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert pg_env["POSTGRES_PASSWORD"]["valueFrom"] == env["FW_PG_PASSWORD"]["valueFrom"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert dep["spec"]["strategy"]["type"] == "Recreate", "one writer of the ReadWriteOnce volume"
    # An external database from a Secret, several replicas on a shared volume.
    docs = by_kind(render(HPA_EXTERNAL_DB))
    dep = next(d for d in docs["Deployment"] if d["metadata"]["name"] == "fw-dashboard")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FW_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "fw-db", "key": "url"}
    assert "FW_PG_PASSWORD" not in env and "StatefulSet" not in docs
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["strategy"]["type"] == "RollingUpdate"


def test_prometheus_rule_and_grafana_dashboard_are_the_tested_files():
    docs = by_kind(render(ALL_ON))
    (rule,) = docs["PrometheusRule"]
    files = CHART / "files"
    assert rule["spec"] == yaml.safe_load((files / "prometheus-rules.yaml").read_text())
    (cm,) = docs["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["fw.json"].strip() == (files / "grafana-dashboard.json").read_text().strip()


def test_kserve_runtime_agrees_with_fw_serve():
    docs = by_kind(render(ALL_ON))
    (rt,) = docs["ServingRuntime"]
    spec = rt["spec"]
    assert rt["metadata"]["name"] == "fw-serve"
    assert {"v2", "grpc-v2"} <= set(spec["protocolVersions"])
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"onnx", "pytorch"}
    (c,) = spec["containers"]
    assert c["name"] == "kserve-container"
    assert c["args"][c["args"].index("--model") + 1] == "/mnt/models"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["FW_HOST"] == "0.0.0.0" and c["ports"][0]["containerPort"] == int(env["FW_PORT"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert spec["annotations"]["prometheus.kserve.io/port"] == env["FW_PORT"]
    examples = [
        d for d in yaml.safe_load_all((ROOT / "deploy" / "kserve" / "inferenceservice.yaml").read_text()) if d
    ]
    for d in examples:
        m = d["spec"]["predictor"]["model"]
        assert m["runtime"] == rt["metadata"]["name"]
        assert m["modelFormat"]["name"] in {f["name"] for f in spec["supportedModelFormats"]}
        if m["protocolVersion"] == "grpc-v2":
            assert m["ports"][0]["name"] == "h2c" and m["ports"][0]["containerPort"] == int(
                env["FW_GRPC_PORT"]
            )


def test_dockerfiles_use_the_repository_scripts():
    cpu = (ROOT / "Dockerfile").read_text()
    for script in (
        "fetch-go.sh",
        "fetch-libtorch.sh",
        "fetch-ort.sh",
        "fetch-swagger-ui.sh",
        "build-shim.sh",
        "image-rootfs.sh",
    ):
        assert f"scripts/{script}" in cpu and (ROOT / "scripts" / script).exists(), script
    assert "FW_SHIM_CPU_ONLY=1" in cpu and "FROM scratch" in cpu and "ARG BASE" in cpu
    assert "FW_HOST=0.0.0.0" in cpu and "/app/models" in cpu and "USER 10001" in cpu
    gpu = (ROOT / "Dockerfile.cuda").read_text()
    for script in ("fetch-ort.sh", "fetch-swagger-ui.sh", "build-shim.sh"):
        assert f"scripts/{script}" in gpu, script
    assert "torch==2.13.0" in gpu and "EXPOSE 8000" in gpu
