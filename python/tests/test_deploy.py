"""The Kubernetes manifests and Dockerfile.cuda agree with what `fw serve` serves.

No cluster or Docker engine runs here, so this checks structure: every manifest
parses, the probes hit fw's real health endpoints, ports and selectors line up,
and the image builds with the repository's own set-up scripts.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"


def docs():
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc, f"{path.name} holds an empty document"
            assert {"apiVersion", "kind", "metadata", "spec"} <= doc.keys(), path.name
            out[doc["kind"]] = doc
    return out


def test_manifests_parse_and_cover_the_deployment():
    kinds = docs()
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= kinds.keys()


def test_probes_ports_and_selectors_agree():
    kinds = docs()
    dep = kinds["Deployment"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert kinds["Service"]["spec"]["selector"].items() <= labels.items()
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert kinds["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FW_HOST"] == "0.0.0.0", "replicas must listen beyond loopback"
    port = int(env["FW_PORT"])
    assert c["ports"][0]["containerPort"] == port
    assert kinds["Service"]["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    # The grace period outlasts the drain delay plus the shutdown timeout.
    args = c["args"]
    drain = int(args[args.index("--drain-delay") + 1].rstrip("s"))
    shutdown = int(args[args.index("--shutdown-timeout") + 1].rstrip("s"))
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain + shutdown
    for key in env:
        assert key.startswith("FW_")


def test_dockerfile_uses_the_repository_scripts():
    text = (ROOT / "Dockerfile.cuda").read_text()
    for script in ("scripts/fetch-ort.sh", "scripts/fetch-swagger-ui.sh", "scripts/build-shim.sh"):
        assert script in text
        assert (ROOT / script).exists() or script.endswith("swagger-ui.sh"), script
    assert "EXPOSE 8000" in text and "FW_HOST=0.0.0.0" in text and "/app/models" in text
    assert "torch==2.13.0" in text


def test_k8s_grpc_port_agrees():
    kinds = docs()
    (c,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["grpc"] == int(env["FW_GRPC_PORT"])
    svc = {p["name"]: p for p in kinds["Service"]["spec"]["ports"]}
    assert svc["grpc"]["targetPort"] == "grpc" and svc["grpc"]["appProtocol"] == "kubernetes.io/h2c"


# KServe's CRDs, from the KServe Go module at this release (the Go module proxy serves it), are
# the schema the ServingRuntime and InferenceService manifests are validated against.
KSERVE = "github.com/kserve/kserve@v0.15.2"
KSERVE_DIR = ROOT / "deploy" / "kserve"


def _strict(schema):
    """A CRD's structural schema, with unknown fields refused (the API server would drop them silently)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def kserve_crds(tmp_path_factory):
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        pytest.skip("go is not installed: it fetches KServe's CRDs from the Go module proxy")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}
    out = subprocess.run(
        [go, "mod", "download", "-json", KSERVE],
        cwd=tmp_path_factory.mktemp("kserve"),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if out.returncode != 0:
        pytest.skip(f"could not fetch {KSERVE} from the Go module proxy: {out.stdout}{out.stderr}")
    crd_dir = Path(json.loads(out.stdout)["Dir"]) / "config" / "crd" / "full"
    crds = {}
    for name in ("servingruntimes", "inferenceservices"):
        crd = yaml.safe_load((crd_dir / f"serving.kserve.io_{name}.yaml").read_text())
        for v in crd["spec"]["versions"]:
            crds[(crd["spec"]["names"]["kind"], f"serving.kserve.io/{v['name']}")] = _strict(
                v["schema"]["openAPIV3Schema"]
            )
    return crds


def _kserve_docs():
    out = []
    for path in sorted(KSERVE_DIR.glob("*.yaml")):
        out += [(path.name, d) for d in yaml.safe_load_all(path.read_text())]
    return out


def test_kserve_manifests_match_kserves_schema(kserve_crds):
    jsonschema = pytest.importorskip("jsonschema")
    seen = set()
    for name, doc in _kserve_docs():
        schema = kserve_crds.get((doc["kind"], doc["apiVersion"]))
        assert schema, f"{name}: {doc['kind']} {doc['apiVersion']} is not a KServe v0.15 resource"
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
        assert not errors, f"{name}: " + "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)
        seen.add(doc["kind"])
    assert seen == {"ServingRuntime", "InferenceService"}


def test_kserve_runtime_agrees_with_fw_serve():
    docs_ = _kserve_docs()
    (rt,) = [d for _, d in docs_ if d["kind"] == "ServingRuntime"]
    spec = rt["spec"]
    assert {"v2", "grpc-v2"} <= set(spec["protocolVersions"])
    assert {f["name"] for f in spec["supportedModelFormats"]} == {"onnx", "pytorch"}
    (c,) = spec["containers"]
    assert c["name"] == "kserve-container"
    assert c["args"][c["args"].index("--model") + 1] == "/mnt/models"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["FW_HOST"] == "0.0.0.0" and c["ports"][0]["containerPort"] == int(env["FW_PORT"])
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert spec["annotations"]["prometheus.kserve.io/port"] == env["FW_PORT"]
    for _, d in docs_:
        if d["kind"] != "InferenceService":
            continue
        m = d["spec"]["predictor"]["model"]
        assert m["runtime"] == rt["metadata"]["name"]
        assert m["modelFormat"]["name"] in {f["name"] for f in spec["supportedModelFormats"]}
        if m["protocolVersion"] == "grpc-v2":
            assert m["ports"][0]["name"] == "h2c" and m["ports"][0]["containerPort"] == int(
                env["FW_GRPC_PORT"]
            )
