"""Strict validation of Kubernetes manifests against the real API schemas, offline.

* Built-in kinds: the OpenAPI v3 documents a Kubernetes release publishes
  (``api/openapi-spec/v3/*.json`` in the ``k8s.io/kubernetes`` Go module at that tag, which the
  Go module proxy serves): one document per group version, each holding every schema it uses.
* Custom resources: the CRDs' ``openAPIV3Schema`` from the projects' own Go modules at a pinned
  release (KEDA, prometheus-operator, KServe).

Strict, as ``kubectl apply --validate=strict`` is: an unknown field is an error (the schemas
leave ``additionalProperties`` open, and the API server would drop such a field silently, so
this closes every object schema that lists its properties and does not declare
``x-kubernetes-preserve-unknown-fields``), and so are a wrong type, a missing required field,
and an apiVersion/kind the release does not serve.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import jsonschema
import yaml

# The Kubernetes releases the chart is validated against: the oldest it supports (Chart.yaml's
# kubeVersion) and the newest.
KUBERNETES = ("v1.31.14", "v1.37.2")
# Custom resources the chart renders, from these releases' CRDs.
KEDA = "github.com/kedacore/keda/v2@v2.21.0"
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.92.0"
KSERVE = "github.com/kserve/kserve@v0.15.2"


class Unavailable(Exception):
    """A schema source could not be fetched (no Go, no module proxy)."""


@cache
def module_dir(module: str) -> Path:
    """The directory of a Go module version, downloaded through the module proxy (cached by Go)."""
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise Unavailable("go is not installed: it fetches the schemas from the Go module proxy")
    with tempfile.TemporaryDirectory() as tmp:  # outside any module: -mod=mod downloads freely
        out = subprocess.run(
            [go, "mod", "download", "-json", module],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
    if out.returncode != 0:
        raise Unavailable(f"could not fetch {module} from the Go module proxy: {out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"])


def strict(schema):
    """The schema with unknown fields refused wherever an object lists its properties."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


class Schemas:
    """Validators by (apiVersion, kind) for one Kubernetes release plus the pinned CRDs."""

    def __init__(self, kubernetes: str, crd_files: list[Path]):
        self.kubernetes = kubernetes
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        spec = module_dir(f"k8s.io/kubernetes@{kubernetes}") / "api" / "openapi-spec" / "v3"
        for doc_path in sorted(spec.glob("*_openapi.json")):
            doc = json.loads(doc_path.read_text())
            schemas = doc.get("components", {}).get("schemas", {})
            gvks = {
                (f"{g['group']}/{g['version']}" if g["group"] else g["version"], g["kind"]): name
                for name, s in schemas.items()
                for g in s.get("x-kubernetes-group-version-kind", [])
            }
            if not gvks:
                continue
            root = {"components": {"schemas": strict(schemas)}}
            for gvk, name in gvks.items():
                if gvk in self._validators:
                    continue
                schema = {**root, "$ref": f"#/components/schemas/{name}"}
                self._validators[gvk] = jsonschema.Draft7Validator(schema)
        for path in crd_files:
            crd = yaml.safe_load(path.read_text())
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                if v.get("served", True):
                    schema = strict(v["schema"]["openAPIV3Schema"])
                    self._validators[(f"{group}/{v['name']}", kind)] = jsonschema.Draft7Validator(schema)

    def errors(self, doc: dict) -> list[str]:
        """Every problem with one manifest, as 'path: message' lines; empty when it is valid."""
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            return ["a manifest needs apiVersion and kind"]
        v = self._validators.get((doc["apiVersion"], doc["kind"]))
        if v is None:
            return [
                f"{doc['apiVersion']} {doc['kind']} is not served by Kubernetes {self.kubernetes} or a pinned CRD"
            ]
        out = []
        for e in sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in e.absolute_path) or "(root)"
            # A oneOf/anyOf failure says little by itself; its sub-errors say what was wrong.
            detail = "; ".join(sorted({c.message for c in e.context})) if e.context else ""
            out.append(f"{where}: {e.message}" + (f" ({detail})" if detail else ""))
        return out


@cache
def schemas(kubernetes: str) -> Schemas:
    keda = module_dir(KEDA) / "config" / "crd" / "bases"
    prom = module_dir(PROMETHEUS_OPERATOR) / "example" / "prometheus-operator-crd-full"
    kserve = module_dir(KSERVE) / "config" / "crd" / "full"
    return Schemas(
        kubernetes,
        [
            keda / "keda.sh_scaledobjects.yaml",
            prom / "monitoring.coreos.com_servicemonitors.yaml",
            prom / "monitoring.coreos.com_prometheusrules.yaml",
            kserve / "serving.kserve.io_servingruntimes.yaml",
            kserve / "serving.kserve.io_inferenceservices.yaml",
        ],
    )


def keda_prometheus_metadata() -> dict[str, bool]:
    """The trigger metadata KEDA's Prometheus scaler reads at the pinned release: name -> required.

    Read from the scaler's own source (its ``keda:"name=...,optional"`` struct tags), because the
    CRD leaves a trigger's metadata a free string map that KEDA checks only at run time.
    """
    import re

    src = (module_dir(KEDA) / "pkg" / "scalers" / "prometheus_scaler.go").read_text()
    out = {}
    for tag in re.findall(r'keda:"([^"]+)"', src):
        fields = [f.strip() for f in tag.split(",")]
        name = next((f[len("name=") :] for f in fields if f.startswith("name=")), None)
        if name and any(f.startswith("order=") and "triggerMetadata" in f for f in fields):
            out[name] = not any(f == "optional" or f.startswith("default=") for f in fields)
    return out
