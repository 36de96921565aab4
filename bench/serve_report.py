"""Write the serving-benchmark section of docs/benchmarks.md from the results
bench/serve.sh collected (build/bench/serve/*.jsonl, meta.json).

Only the text between <!-- bench:serve:start --> and <!-- bench:serve:end -->
is replaced; the section is appended when the markers are absent. Every
figure in the section, the reading of the numbers included, comes from the
run's own files. Standard library only.

`serve_report.py --commit` prints the commit stamp ("commit abc1234", with
", dirty" when tracked files have uncommitted changes), as
internal/benchdoc.Commit does for the Go benchmarks."""

import argparse
import json
import os
import subprocess
from pathlib import Path

START, END = "<!-- bench:serve:start -->", "<!-- bench:serve:end -->"

ORTDEF = "-ortdefaults"  # suffix of the rows run at onnxruntime's own defaults

NAMES = {
    "ceiling": "HTTP ceiling (bare fasthttp, fixed body)",
    "fw": "fw serve (defaults)",
    "fw-tuned": "fw serve (tuned: `{tuned}`)",
    "fw-spin": "fw serve (`--engine-spin`)",
    "fw-stretch": "fw serve, simple recipe (stretch to 224x224; the recipe before the eval transform)",
    "litserve": "LitServe + onnxruntime (batching)",
    "fastapi": "FastAPI + uvicorn + onnxruntime (`async def`)",
    "fastapi-def": "FastAPI + uvicorn + onnxruntime (`def`, threadpool)",
    "torchserve": "TorchServe + onnxruntime (batching)",
    "triton": "Triton (PyTriton) + onnxruntime (batching)",
}
SHORT = {
    "fw": "fw",
    "litserve": "LitServe",
    "fastapi": "FastAPI (`async def`)",
    "fastapi-def": "FastAPI (`def`)",
    "torchserve": "TorchServe",
    "triton": "Triton",
}
PEERS = ["litserve", "fastapi", "fastapi-def", "torchserve", "triton"]


def commit():
    """Mirror of internal/benchdoc.Commit: "commit abc1234[, dirty]"."""

    def git(*args):
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=30, check=True
        ).stdout

    try:
        s = "commit " + git("rev-parse", "--short=7", "HEAD").strip()
    except (OSError, subprocess.SubprocessError):
        return "an unknown commit"
    try:
        # docs/ is left out: the benchmarks' own output is not the code they ran.
        if git(
            "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"
        ).strip():
            s += ", dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return s


def load(path):
    rows = []
    if path and os.path.exists(path):
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def rps(r):
    return (
        r["requests"] / r["duration_us"] * 1e6
        if not r.get("failed") and r["duration_us"]
        else 0.0
    )


def errors(r):
    if r.get("failed"):
        return None
    return sum(v for k, v in r.items() if k.startswith("err_"))


def ms(us):
    return f"{us / 1000:.2f}" if us < 100_000 else f"{us / 1000:.0f}"


def num(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def times(x):
    """A throughput ratio: 0.26x, 1.4x, 36x."""
    if x >= 10:
        return f"{x:.0f}x"
    if x >= 1:
        return f"{x:.1f}x"
    return f"{x:.2f}x"


def span(vals, fmt):
    """'a-b' over the values (formatted), or one value when they round alike."""
    if not vals:
        return "?"
    lo, hi = fmt(min(vals)), fmt(max(vals))
    return lo if lo == hi else f"{lo}-{hi}"


def name_of(server, meta):
    base = server.removesuffix(ORTDEF)
    n = NAMES.get(base, base).format(tuned=meta.get("fw_tuned_flags", ""))
    if server.endswith(ORTDEF):
        n += " [onnxruntime defaults]"
    return n


def good(r):
    return r is not None and not r.get("failed") and r["requests"] > 0


def table(rows, servers, meta, label=None):
    out = [
        "| server | concurrency | requests/s | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in servers:
        for r in sorted(
            (r for r in rows if r["server"] == s), key=lambda r: r["concurrency"]
        ):
            name = (label or {}).get(s) or name_of(s, meta)
            if r.get("failed"):
                out.append(
                    f"| {name} | {r['concurrency']} | run failed (wrk rc {r.get('wrk_rc')}) | | | |"
                )
                continue
            if not r["requests"]:
                out.append(
                    f"| {name} | {r['concurrency']} | 0 (no response completed within the run) | - | - | - |"
                )
                continue
            e = errors(r)
            detail = ""
            if e:
                parts = [
                    f"{k[4:]} {v}" for k, v in r.items() if k.startswith("err_") and v
                ]
                detail = " (" + ", ".join(parts) + ")"
            out.append(
                f"| {name} | {r['concurrency']} | {num(rps(r))} | {ms(r['p50_us'])} | {ms(r['p99_us'])} | {e}{detail} |"
            )
    return "\n".join(out)


def cpu_us(r):
    """The server's CPU microseconds per answered request in run r (None when not measured)."""
    if not good(r) or not r.get("requests") or r.get("server_cpu_s") is None:
        return None
    return r["server_cpu_s"] * 1e6 / r["requests"]


def cpu_rows(rows):
    """(label, transport, row) for the CPU-per-request table: the bare servers, fw and Triton."""
    out = []
    for server, label, scens in (
        ("ceiling", "ceiling (bare fasthttp / bare grpc-go)", ("predict", "grpc")),
        ("fw", "fw serve (defaults)", ("predict", "grpc", "v2")),
        ("triton", "Triton (PyTriton)", ("grpc", "v2")),
    ):
        for scen in scens:
            for r in sorted(
                (r for r in rows if r["scenario"] == scen and r["server"] == server),
                key=lambda r: r["concurrency"],
            ):
                if cpu_us(r):
                    out.append((label, TRANSPORTS[scen], r))
    return out


TRANSPORTS = {
    "predict": "HTTP `/predict` (wrk)",
    "grpc": "gRPC (ghz)",
    "v2": "HTTP V2 JSON (wrk)",
}


def cpu_ratios(rows):
    """Lines of fw's CPU per request over the bare server's, per transport and concurrency
    (issue #24's measure: <= 2.0x at c=16 and 64 and <= 2.5x at c=1 for /predict, <= 1.6x for gRPC)."""
    out = []
    for scen in ("predict", "grpc"):
        parts = []
        for c in sorted({r["concurrency"] for r in rows if r["scenario"] == scen}):
            fw, bare = (
                cpu_us(pick(rows, scen, "fw", c)),
                cpu_us(pick(rows, scen, "ceiling", c)),
            )
            if fw and bare:
                parts.append(f"c={c} {fw / bare:.1f}x ({fw:.0f} / {bare:.0f} µs)")
        if parts:
            out.append(
                f"- fw's CPU per request over the bare server's, {TRANSPORTS[scen]}: "
                + "; ".join(parts)
                + "."
            )
    return out


def pick(rows, scenario, server, c):
    for r in rows:
        if (
            r["scenario"] == scenario
            and r["server"] == server
            and r["concurrency"] == c
            and not r.get("failed")
        ):
            return r
    return None


def concs_of(rows, scenario, server=None):
    return sorted(
        {
            r["concurrency"]
            for r in rows
            if r["scenario"] == scenario and (server is None or r["server"] == server)
        }
    )


def ts_versions(meta):
    t = meta.get("torchserve") or {}
    if not t:
        return ""
    return (
        f"TorchServe's own venv: torchserve {t['torchserve']}, torch-model-archiver "
        f"{t['torch-model-archiver']}, torch {t['torch']} (imported by TorchServe's worker, unused "
        f"by the handler), onnxruntime {t['onnxruntime']}, Python {t['python']}, {meta.get('java', 'Java ?')}; "
    )


def triton_versions(meta):
    t = meta.get("triton") or {}
    if not t:
        return ""
    return (
        f"Triton's own venv: nvidia-pytriton {t['nvidia-pytriton']} (tritonserver {t.get('tritonserver', '?')}, "
        f"Python backend), onnxruntime {t['onnxruntime']}, numpy {t['numpy']}, pillow {t['pillow']}, "
        f"Python {t['python']}; "
    )


def ts_servers(meta):
    if not meta.get("torchserve"):
        return ""
    return (
        "**TorchServe** `torchserve --start --foreground --ncs --ts-config` with "
        "`bench/peers/torchserve.properties` (everything on 127.0.0.1, token authorization and the model "
        "API off, metrics and logging left at TorchServe's defaults, `job_queue_size=1024` like fw's "
        "--max-queue) and one model archived by `torch-model-archiver --archive-format no-archive` from the "
        "same .onnx file plus the custom handler `bench/peers/torchserve_handler.py` (one onnxruntime "
        "`session.run` on the whole batch, same JSON as the other peers, no torch); TorchServe's dynamic "
        f"batching with `batchSize={meta['ts_batch']}, maxBatchDelay={meta['ts_delay_ms']}` ms for rows "
        f"(fw's defaults) and `batchSize={meta['ts_img_batch']}, maxBatchDelay={meta['ts_img_delay_ms']}` "
        "ms for images (LitServe's setting), `minWorkers=maxWorkers=1` (one Python worker behind the Java "
        "front end); its URL is `/predictions/<model>`. "
    )


def triton_servers(meta):
    if not meta.get("triton"):
        return ""
    return (
        "**Triton** `bench/peers/triton_app.py`: PyPI's nvidia-pytriton, whose tritonserver ships the Python "
        "backend only (no ONNX Runtime backend), so the same .onnx file runs in onnxruntime inside the "
        "`@batch` Python callable; Triton's own dynamic batcher with "
        f"`ModelConfig(max_batch_size={meta.get('triton_batch')}, "
        f"batcher=DynamicBatcher(max_queue_delay_microseconds={meta.get('triton_delay_us')}))` for rows "
        f"(fw's defaults) and `{meta.get('triton_img_batch')}` / `{meta.get('triton_img_delay_us')}` us for "
        "images; HTTP, gRPC and metrics on 127.0.0.1; a request goes through tritonserver's C++ HTTP front end "
        "and batcher, its Python backend stub and PyTriton's proxy (ZeroMQ and shared memory) to the callable. "
        "Triton speaks only KServe V2, so it gets the V2 request (below), not `/predict`; for images the JPEG "
        "travels as one BYTES element with V2's binary-data extension and the callable answers the top 5 "
        "indices and scores. "
    )


def verdict(ok):
    return "**met**" if ok else "**missed**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results")
    ap.add_argument("--engine")
    ap.add_argument("--meta")
    ap.add_argument("--perf", default="")
    ap.add_argument("--doc", default="docs/benchmarks.md")
    ap.add_argument(
        "--commit", action="store_true", help="print the commit stamp and exit"
    )
    a = ap.parse_args()
    if a.commit:
        print(commit())
        return
    if not (a.results and a.engine and a.meta):
        ap.error("--results, --engine and --meta are required")
    rows = load(a.results)
    eng = load(a.engine)
    meta = json.loads(Path(a.meta).read_text())
    pred = [r for r in rows if r["scenario"] == "predict"]
    v2 = [r for r in rows if r["scenario"] == "v2"]
    img = [r for r in rows if r["scenario"] == "image"]
    grpc = [r for r in rows if r["scenario"] == "grpc"]
    concs = concs_of(rows, "predict", "fw") or concs_of(rows, "predict")
    threads = meta.get("peer_threads", "?")
    defc = [int(c) for c in str(meta.get("defaults_concurrency") or "").split()]
    stamp = meta.get("commit") or commit()

    L = []
    w = L.append
    w("## Serving benchmark (HTTP)")
    w("")
    w(
        f"Generated by `make bench-serve` (`bash bench/serve.sh`, then `bench/serve_report.py`) on {meta['date']}, "
        f"{stamp}. Do not edit by hand: the next run rewrites this section."
    )
    if meta.get("bench_only"):
        w("")
        w(
            f"**Partial run** (`BENCH_ONLY={meta['bench_only']}`): only those servers were measured."
        )
    w("")
    load_avg = (
        f" Load average when the run started: {meta['load_start']}."
        if meta.get("load_start")
        else ""
    )
    w(
        f"- Machine: {meta['nproc']} CPUs ({meta['cpu']}), {meta['mem']} RAM, Linux {meta['kernel']}. "
        "wrk runs on the same machine with one thread (`-t1`) and takes about one of the cores, "
        f"so every server here effectively has one core and a half; nothing is pinned.{load_avg}"
    )
    w(
        f"- Versions: fw {stamp} ({meta['go']}, fasthttp {meta['fasthttp']}, "
        f"ONNX Runtime C library {meta.get('onnxruntime_go') or '?'}); peers in their own venv: "
        f"litserve {meta['litserve']}, fastapi {meta['fastapi']}, uvicorn {meta['uvicorn']}, "
        f"onnxruntime {meta['onnxruntime_py']}, numpy {meta['numpy']}, pillow {meta['pillow']}, "
        f"Python {meta['python']}; {ts_versions(meta)}{triton_versions(meta)}{meta['wrk']}."
    )
    w(
        f"- Load: `wrk -t1 -c<concurrency> -d{meta['duration']} --latency --timeout 10s` "
        f"(`-d{meta['img_duration']}` for images), a 2 s warm-up before each server, every server "
        "on 127.0.0.1 and alone on the machine while measured. Same model files for everyone "
        "(`build/models/digits_mlp.onnx`, `build/models/resnet18.onnx`), same request and response "
        "shapes. *errors* = wrk's non-2xx/3xx answers (status >= 400) plus socket errors "
        "(connect, read, write, timeout)."
    )
    w(
        f"- ONNX Runtime settings, like for like: fw runs its intra-op threads without spinning (`--engine-spin` "
        f"off, its default) and {threads} intra-op threads here for digits_mlp ({meta.get('peer_img_threads', '?')} "
        "for resnet18): the CPUs it may use, or one where an ONNX model's calls, timed at load, are as fast with "
        f"one. **Every peer row is measured with the same settings** ({threads} intra-op threads for the row "
        f"model, {meta.get('peer_img_threads', '?')} for resnet18, `session.intra_op.allow_spinning` and "
        "`session.inter_op.allow_spinning` = 0, set by `bench/peers/common.py` from FW_PEER_THREADS and "
        "FW_BENCH_ORT_SPIN) unless it says **[onnxruntime defaults]**: those rows leave both unset, "
        "onnxruntime's defaults (threads = physical cores, spinning on), and are measured at "
        f"c={', '.join(map(str, defc)) or 'none'} only. The other direction is the row **fw serve "
        "(`--engine-spin`)**: fw with spinning on, as onnxruntime's default. Headline ratios use fw's "
        "default configuration; its tuned and spinning rows stand beside it."
    )
    w(
        f"- Servers: **fw** `bin/fw serve --model M` (defaults: --max-batch-size 64 rows, --max-delay 1ms, "
        f"--instances 1, threads = CPUs, or one for a model whose calls are as fast with one); **fw tuned** adds `{meta['fw_tuned_flags']}`; "
        f"**LitServe** `bench/peers/litserve_app.py`, `LitAPI(max_batch_size={meta['lit_batch']}, "
        f"batch_timeout={meta['lit_timeout']})` for rows (fw's batching defaults) and "
        f"`max_batch_size={meta['lit_img_batch']}, batch_timeout={meta['lit_img_timeout']}` for images, "
        "`LitServer(accelerator='cpu', workers_per_device=1)`, one API server process plus one inference "
        "worker, onnxruntime in `predict`, no torch; **FastAPI** `bench/peers/fastapi_app.py`, "
        "`uvicorn fastapi_app:app` (one process, the default), a pydantic body model, `session.run` per "
        "request, in two variants: `async def` endpoints (the tutorial's shape: the blocking call runs on "
        "the event loop) and plain `def` endpoints (`FW_PEER_FASTAPI=def`: what FastAPI's docs recommend for "
        "blocking work, run in its threadpool). `--workers 2` was not measured: on 2 cores "
        "with wrk on one it would only add contention. "
        + ts_servers(meta)
        + triton_servers(meta)
        + "**HTTP ceiling**: `bench/ceiling`, a bare fasthttp "
        "server (same version as fw) answering a fixed 80-byte JSON body to any request."
    )
    w("")

    w("### /predict, digits_mlp.onnx (1 row of 64 floats per request)")
    w("")
    w(
        table(
            pred,
            [
                "ceiling",
                "fw",
                "fw-tuned",
                "fw-spin",
                "litserve",
                "fastapi",
                "fastapi-def",
                "torchserve",
            ],
            meta,
        )
    )
    w("")

    if v2:
        w(
            "### KServe V2 JSON, digits_mlp.onnx: Triton and fw's `/v2/models/digits_mlp/infer`"
        )
        w("")
        w(
            "The same request to both: `POST /v2/models/digits_mlp/infer` with "
            '`{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":[64 floats]}]}`, answered '
            "with the `logits` output as JSON. fw's `/predict` rows (its own JSON, same server "
            "process as its V2 rows) are repeated for comparison."
        )
        w("")
        v2rows = list(v2) + [
            dict(r, server="fw/predict") for r in pred if r["server"] == "fw"
        ]
        w(
            table(
                v2rows,
                ["fw", "fw/predict", "triton"],
                meta,
                label={
                    "fw": "fw serve (defaults), `/v2/.../infer`",
                    "fw/predict": "fw serve (defaults), `/predict`",
                    "triton": name_of("triton", meta) + ", `/v2/.../infer`",
                },
            )
        )
        w("")

    if grpc:
        w(
            "### gRPC (Open Inference Protocol `ModelInfer`), digits_mlp.onnx: fw, Triton and the gRPC ceiling"
        )
        w("")
        w(
            "The same message to each: `inference.GRPCInferenceService/ModelInfer` with the row as "
            "`raw_input_contents` (64 little-endian FP32, what `tritonclient.grpc` sends), answered with the "
            f"`logits` output as `raw_output_contents`. Load: **ghz {meta.get('ghz', '?')}** "
            "(github.com/bojand/ghz from the Go module proxy, the usual gRPC benchmarking tool; given fw's "
            "`.proto`), `--cpus 1` (one CPU, as wrk's one thread), "
            f"one HTTP/2 connection per {meta.get('grpc_connections_per', '?')} concurrent calls, "
            f"`-z {meta['duration']}`, a 2 s warm-up per server. **gRPC ceiling**: `bench/ceiling -grpc`, a bare "
            f"grpc-go {meta.get('grpc_go', '?')} server (fw's version and generated service) answering every "
            "`ModelInfer` with a fixed output. fw's HTTP V2 JSON rows (wrk, the same server process) stand "
            "beside them; the two load generators differ, so compare each against its own ceiling. "
            "*errors* = non-OK status codes."
        )
        w("")
        grows = list(grpc) + [
            dict(r, server="fw/v2-http") for r in v2 if r["server"] == "fw"
        ]
        w(
            table(
                grows,
                ["ceiling", "fw", "triton", "fw/v2-http"],
                meta,
                label={
                    "ceiling": "gRPC ceiling (bare grpc-go)",
                    "fw": "fw serve (defaults) `--grpc-port`, gRPC",
                    "triton": name_of("triton", meta) + ", gRPC",
                    "fw/v2-http": "fw serve (defaults), HTTP `/v2/.../infer` (wrk)",
                },
            )
        )
        w("")
        cpu = cpu_rows(rows)
        if cpu:
            w(
                "Server CPU per answered request (user + system time of the server's processes during the run "
                "over the requests it answered; independent of how fast the load generator is):"
            )
            w("")
            w(
                "| server | transport | concurrency | requests/s | server CPU per request, µs |"
            )
            w("|---|---|---:|---:|---:|")
            for label, transport, r in cpu:
                w(
                    f"| {label} | {transport} | {r['concurrency']} | {num(rps(r))} | {cpu_us(r):.0f} |"
                )
            w("")
            for line in cpu_ratios(rows):
                w(line)
            w("")

    # the same peers at onnxruntime's defaults, beside their rows at fw's settings
    pairs = []
    for base in ["fw"] + PEERS:
        scen = "v2" if base == "triton" else "predict"
        other = "fw-spin" if base == "fw" else base + ORTDEF
        for c in defc:
            x, y = pick(rows, scen, base, c), pick(rows, scen, other, c)
            if good(x) and good(y):
                pairs.append((base, c, x, y))
    if pairs:
        w("### ONNX Runtime settings: fw's against onnxruntime's defaults")
        w("")
        w(
            f"Each server twice at the same concurrency: with fw's settings ({threads} intra-op threads, no "
            "spinning; fw's default, the peers' headline rows) and with onnxruntime's defaults (spinning on; "
            "for fw: `--engine-spin`). Triton on the V2 request, the rest on `/predict`."
        )
        w("")
        w(
            "| server | concurrency | fw's settings: req/s, p99 ms | onnxruntime defaults: req/s, p99 ms | defaults / fw's settings | errors |"
        )
        w("|---|---:|---:|---:|---:|---:|")
        for base, c, x, y in pairs:
            label = (
                "fw serve (defaults vs `--engine-spin`)"
                if base == "fw"
                else NAMES[base]
            )
            w(
                f"| {label} | {c} | {num(rps(x))}, {ms(x['p99_us'])} | {num(rps(y))}, {ms(y['p99_us'])} | "
                f"{rps(y) / rps(x):.2f} | {errors(x)} / {errors(y)} |"
            )
        w("")

    # the engine ceiling runs twice (first and last); keep the best pass per batch size
    per_batch = {}
    for e in eng:
        if "batch" in e and (
            e["batch"] not in per_batch
            or e["rows_per_s"] > per_batch[e["batch"]]["rows_per_s"]
        ):
            per_batch[e["batch"]] = e
    eng = [per_batch[b] for b in sorted(per_batch)]
    best_eng = max((e["rows_per_s"] for e in eng), default=None)
    if img or eng:
        w(
            "### /predict/image, resnet18.onnx (224x224 JPEG, 8 KB, decode + torchvision's eval transform per request)"
        )
        w("")
        w(
            "fw, FastAPI and TorchServe receive the raw body (`Content-Type: image/jpeg`); LitServe has no raw-body mode, so "
            "it receives the same JPEG as `multipart/form-data`; Triton receives it as a V2 BYTES tensor "
            "(binary-data extension). Every server runs the model's eval transform: fw from the file's "
            "preprocessing steps (Pillow's antialiased bilinear resize of the shorter side to 256, center crop "
            "224, ImageNet normalisation), the peers the same with PIL and numpy, all at fw's ONNX Runtime "
            "settings. fw-stretch is fw on the same weights with the simple recipe it used before (stretch to "
            "224x224, bilinear without antialiasing): the transform's cost side by side."
        )
        w("")
        if img:
            w(
                table(
                    img,
                    [
                        "fw",
                        "fw-stretch",
                        "litserve",
                        "fastapi",
                        "fastapi-def",
                        "torchserve",
                        "triton",
                    ],
                    meta,
                )
            )
            w("")
        if eng:
            w(
                "Engine ceiling (no HTTP, no decoding: `build/bench/ceiling -engine build/models/resnet18.onnx "
                "-batches 1,8,16,32 -seconds 3`, the test vector tiled, calls back to back, no load generator running; measured at the start and at the end of the run, best pass per batch size shown):"
            )
            w("")
            w("| batch | calls | p50 ms per call | rows/s |")
            w("|---:|---:|---:|---:|")
            for e in eng:
                if "batch" in e:
                    w(
                        f"| {e['batch']} | {e['calls']} | {e['p50_ms']:.1f} | {e['rows_per_s']:.1f} |"
                    )
            w("")

    # ---- targets (fw's default configuration; the tuned one beside it)
    T = []
    for c in concs:
        fw, ce = pick(pred, "predict", "fw", c), pick(pred, "predict", "ceiling", c)
        ft = pick(pred, "predict", "fw-tuned", c)
        if good(fw) and good(ce):
            ratio = rps(fw) / rps(ce)
            tuned = (
                f" (tuned `{meta['fw_tuned_flags']}`: {rps(ft) / rps(ce):.2f})"
                if good(ft)
                else ""
            )
            T.append(
                f"| fw /predict / HTTP ceiling >= 0.5, c={c} | {rps(fw):,.0f} / {rps(ce):,.0f} req/s = "
                f"**{ratio:.2f}**{tuned} | {verdict(ratio >= 0.5)} |"
            )
    fi = pick(img, "image", "fw", 64)
    if good(fi) and best_eng:
        ratio = rps(fi) / best_eng
        T.append(
            f"| fw /predict/image c=64 / engine ceiling >= 0.9 | {rps(fi):.1f} / {best_eng:.1f} images/s = "
            f"**{ratio:.2f}** | {verdict(ratio >= 0.9)} |"
        )
    # fw vs each batching peer: LitServe's target is 3x; TorchServe's and Triton's are to be ahead
    for peer, label, need in (
        ("litserve", "LitServe", 3),
        ("torchserve", "TorchServe", 1),
        ("triton", "Triton", 1),
    ):
        for scen, path in (
            ("predict", "/predict"),
            ("v2", "V2 infer"),
            ("grpc", "gRPC ModelInfer"),
            ("image", "/predict/image"),
        ):
            for c in concs_of(rows, scen, peer):
                fw, ls = pick(rows, scen, "fw", c), pick(rows, scen, peer, c)
                if not (good(fw) and ls):
                    continue
                ratio = rps(fw) / rps(ls) if rps(ls) else float("inf")
                p99ok = fw["p99_us"] <= ls["p99_us"]
                cmp = f">= {need}x" if need > 1 else "> 1x"
                ok = ratio >= need if need > 1 else ratio > 1
                T.append(
                    f"| fw / {label} {cmp} at <= p99, {path} c={c} | "
                    f"{ratio:.1f}x; p99 {ms(fw['p99_us'])} vs {ms(ls['p99_us'])} ms | "
                    f"{verdict(ok and p99ok)} |"
                )
    # fw's gRPC against fw's HTTP V2: the load generators differ (ghz is heavier than wrk), so
    # the measure is the server's own CPU per request; throughput and shares of each ceiling beside
    for c in concs_of(rows, "grpc", "fw"):
        g, gc = pick(rows, "grpc", "fw", c), pick(rows, "grpc", "ceiling", c)
        h, hc = pick(rows, "v2", "fw", c), pick(rows, "predict", "ceiling", c)
        if good(g) and good(h) and cpu_us(g) and cpu_us(h):
            share = ""
            if good(gc) and good(hc):
                share = f"; of each ceiling: gRPC {rps(g) / rps(gc):.2f}, HTTP V2 {rps(h) / rps(hc):.2f}"
            T.append(
                f"| fw gRPC at least as fast as fw HTTP V2 (server CPU per request), c={c} | "
                f"{cpu_us(g):.0f} vs {cpu_us(h):.0f} µs; throughput {num(rps(g))} vs {num(rps(h))} req/s "
                f"(ghz vs wrk){share} | {verdict(cpu_us(g) <= cpu_us(h))} |"
            )
    if T:
        w("### Targets")
        w("")
        w("| target | measured | |")
        w("|---|---|---|")
        for t in T:
            w(t)
        w("")

    meta["_perf"] = bool(a.perf and os.path.exists(a.perf) and os.path.getsize(a.perf))
    notes = reading(rows, meta, best_eng, defc)
    if notes:
        w(
            "What the numbers say (generated from this run's rows; single runs move, so compare ratios "
            "inside one run, not across runs):"
        )
        w("")
        for n in notes:
            w("- " + n)
        w("")
    if a.perf and os.path.exists(a.perf) and os.path.getsize(a.perf):
        w(
            "Profile of fw serving /predict at c=64 (`PROFILE=1 make bench-serve`, `perf record -g`, top symbols, self time):"
        )
        w("")
        w("```")
        w(Path(a.perf).read_text().rstrip())
        w("```")
        w("")
    w("Raw wrk output of the last run: `build/bench/serve/`.")
    section = START + "\n" + "\n".join(L).rstrip() + "\n" + END

    doc = a.doc
    text = Path(doc).read_text() if os.path.exists(doc) else "# Benchmarks\n"
    i, j = text.find(START), text.find(END)
    if i >= 0 and j > i:
        text = text[:i] + section + text[j + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(doc)), exist_ok=True)
    tmp = doc + ".tmp-serve"
    Path(tmp).write_text(text)
    os.replace(tmp, doc)


def ratios(rows, scen, a, b, cs=None):
    """{c: (row a, row b, rps a / rps b)} where both rows are good."""
    out = {}
    for c in cs if cs is not None else concs_of(rows, scen, b):
        x, y = pick(rows, scen, a, c), pick(rows, scen, b, c)
        if good(x) and good(y) and rps(y):
            out[c] = (x, y, rps(x) / rps(y))
    return out


def at(rs):
    """'36x at c=1, 6.1-14x at c=16..256': a summary of {c: (x, y, ratio)}."""
    if not rs:
        return ""
    cs = sorted(rs)
    parts = []
    if cs[0] == 1 and len(cs) > 1:
        parts.append(f"{times(rs[1][2])} at c=1")
        cs = cs[1:]
    vals = [rs[c][2] for c in cs]
    where = f"c={cs[0]}" if len(cs) == 1 else f"c={cs[0]}..{cs[-1]}"
    parts.append(f"{span(vals, times)} at {where}")
    return ", ".join(parts)


def p99_side(rs):
    """Whether the first server's p99 is lower at every concurrency, at some, or none."""
    lower = [c for c, (x, y, _) in rs.items() if x["p99_us"] <= y["p99_us"]]
    if len(lower) == len(rs):
        return "at a lower or equal p99 at every concurrency"
    if not lower:
        return "at a higher p99 at every concurrency"
    return "at a lower p99 at c=" + ", ".join(map(str, sorted(lower))) + " only"


def peak(rows, scen, server):
    rs = [
        r for r in rows if r["scenario"] == scen and r["server"] == server and good(r)
    ]
    if not rs:
        return None
    return max(rs, key=rps)


def total_errors(rows):
    bad = [
        (r["scenario"], r["server"], r["concurrency"], errors(r))
        for r in rows
        if r.get("failed") or errors(r)
    ]
    return bad


def reading(rows, meta, best_eng, defc):
    """The bullets of 'What the numbers say', every figure from this run."""
    N = []
    scen_pred = "predict"

    # errors first: a row with errors is not a clean measurement
    bad = total_errors(rows)
    if bad:
        N.append(
            "**Rows with errors or failed runs**: "
            + "; ".join(
                f"{name_of(s, meta)}, {sc}, c={c}: "
                + ("run failed" if e is None else f"{e} errors")
                for sc, s, c, e in bad
            )
            + ". Their throughput is not comparable."
        )

    # fw vs the HTTP ceiling
    ce = ratios(rows, scen_pred, "fw", "ceiling")
    hi = {c: v for c, v in ce.items() if c >= 16}
    if hi:
        vals = [v[2] for v in hi.values()]
        met = [c for c in sorted(hi) if hi[c][2] >= 0.5]
        state = (
            "met at every c>=16"
            if len(met) == len(hi)
            else (
                "missed"
                if not met
                else "met at c=" + ", ".join(map(str, met)) + " only"
            )
        )
        tuned = ratios(rows, scen_pred, "fw-tuned", "ceiling", sorted(hi))
        tuned_s = (
            f" (tuned `{meta['fw_tuned_flags']}`: {span([v[2] for v in tuned.values()], lambda x: f'{x:.2f}')})"
            if tuned
            else ""
        )
        N.append(
            f"**fw /predict vs the HTTP ceiling at c>=16: {span(vals, lambda x: f'{x:.2f}')}{tuned_s}; "
            f"target 0.5 {state}.** The bare ceiling does none of fw's work (no body parsing, no "
            f"validation, no engine call, no batching hand-off); with wrk on one of the {meta.get('nproc', '?')} cores, fw's "
            "thread wake-ups and context switches compete with the load generator. Where fw's CPU goes: "
            "`PROFILE=1 make bench-serve`"
            + (" (the profile below)." if meta.get("_perf") else ".")
        )
    c1 = ce.get(1)
    if c1 and c1[2] >= 1:
        N.append(
            f"At c=1 fw ({num(rps(c1[0]))} req/s) is at or above the ceiling ({num(rps(c1[1]))}): one "
            "connection is latency-bound by wrk's own round trip, so the c>=16 rows are the meaningful "
            "ceiling comparison."
        )

    # low concurrency: the batcher does not wait when idle
    fw1 = pick(rows, scen_pred, "fw", 1)
    if good(fw1):
        if fw1["p50_us"] < 1000:
            N.append(
                "**Low concurrency.** fw's batcher starts a batch at once when no engine call is running and "
                "gathers only while one is in flight, so a lone request does not wait for --max-delay (1 ms): "
                f"fw's p50 at c=1 is {ms(fw1['p50_us'])} ms."
            )
        else:
            N.append(
                f"**Low concurrency.** fw's p50 at c=1 is {ms(fw1['p50_us'])} ms, not below --max-delay "
                "(1 ms), although its batcher is meant to start a batch at once when no engine call is running."
            )

    # tuned and spinning fw against the defaults
    for other, what in (
        ("fw-tuned", f"`{meta.get('fw_tuned_flags', '')}`"),
        ("fw-spin", "`--engine-spin` (spinning on)"),
    ):
        rs = ratios(rows, scen_pred, other, "fw")
        if rs:
            better = [c for c in sorted(rs) if rs[c][2] > 1]
            N.append(
                f"fw {what} against fw's defaults, throughput ratio per concurrency: "
                + ", ".join(f"c={c} {rs[c][2]:.2f}" for c in sorted(rs))
                + (
                    f" (ahead at c={', '.join(map(str, better))})."
                    if better
                    else " (never ahead)."
                )
                + (
                    " The defaults are what the headline ratios use."
                    if other == "fw-tuned"
                    else ""
                )
            )

    # the peers at onnxruntime's defaults
    dd = []
    for base in PEERS:
        scen = "v2" if base == "triton" else scen_pred
        rs = ratios(rows, scen, base + ORTDEF, base, defc)
        for c, (x, y, r) in sorted(rs.items()):
            dd.append(f"{SHORT[base]} {r:.2f} at c={c}")
    if dd:
        N.append(
            "**The peers at onnxruntime's defaults** (spinning on, threads = physical cores) against the "
            "same peers at fw's settings, throughput ratio: "
            + "; ".join(dd)
            + ". Above 1 means the defaults would have served that peer better than the settings its "
            "headline rows use."
        )

    # fw vs each peer on /predict
    for peer, prose in (
        (
            "torchserve",
            (
                "Every request goes from TorchServe's Java (Netty) front end through its batch aggregator "
                "to the single Python worker over a Unix socket and back, the worker JSON-decodes each body "
                "in Python, and its default logging writes several lines per request. At c=1 a request also "
                f"waits for the aggregator's maxBatchDelay ({meta.get('ts_delay_ms', '?')} ms)."
            ),
        ),
        (
            "litserve",
            (
                "LitServe's architecture is an API-server process and an inference-worker process "
                "exchanging pickled requests through queues."
            ),
        ),
        (
            "fastapi",
            (
                "The `async def` endpoint runs the blocking `session.run` on the event loop: one request "
                "at a time, no batching."
            ),
        ),
        (
            "fastapi-def",
            (
                "The `def` endpoint runs in FastAPI's threadpool, so the event loop keeps parsing while "
                "onnxruntime runs, still one `session.run` per request, no batching."
            ),
        ),
    ):
        rs = ratios(rows, scen_pred, "fw", peer)
        if not rs:
            continue
        pk = peak(rows, scen_pred, peer)
        N.append(
            f"**fw vs {SHORT[peer]}** on the small model, fw's throughput over {SHORT[peer]}'s: {at(rs)}, "
            f"{p99_side(rs)}; {SHORT[peer]} peaks at {num(rps(pk))} req/s (c={pk['concurrency']}). "
            + prose
        )
    rs = ratios(rows, scen_pred, "fastapi-def", "fastapi")
    if rs:
        N.append(
            "FastAPI `def` (threadpool) against `async def`, throughput ratio: "
            + ", ".join(f"c={c} {rs[c][2]:.2f}" for c in sorted(rs))
            + "."
        )

    # Triton on the V2 request
    rs = ratios(rows, "v2", "fw", "triton")
    if rs:
        pk = peak(rows, "v2", "triton")
        N.append(
            f"**fw vs Triton** on the same V2 JSON request, fw's throughput over Triton's: {at(rs)}, "
            f"{p99_side(rs)}; Triton peaks at {num(rps(pk))} req/s (c={pk['concurrency']}). With PyTriton "
            "every batch crosses from tritonserver to its Python backend stub and on, through PyTriton's "
            "proxy (ZeroMQ and shared memory), to the Python callable, and back; Triton's own ONNX Runtime "
            "backend, which would skip those hops, is not in the PyPI package."
        )
    # gRPC
    rs = ratios(rows, "grpc", "fw", "triton")
    if rs:
        pk = peak(rows, "grpc", "triton")
        N.append(
            f"**fw vs Triton over gRPC** (the same `ModelInfer` message), fw's throughput over Triton's: {at(rs)}, "
            f"{p99_side(rs)}; Triton peaks at {num(rps(pk))} req/s (c={pk['concurrency']}). The same PyTriton "
            "hops as on HTTP sit behind Triton's gRPC front end."
        )
    gc = {}
    for c in concs_of(rows, "grpc", "fw"):
        x, y = pick(rows, "grpc", "fw", c), pick(rows, "grpc", "ceiling", c)
        if good(x) and good(y):
            gc[c] = rps(x) / rps(y)
    if gc:
        N.append(
            "fw gRPC as a share of the gRPC ceiling (bare grpc-go, same ghz): "
            + ", ".join(f"c={c} {gc[c]:.2f}" for c in sorted(gc))
            + ". ghz decodes and encodes every message through protobuf reflection, so on these "
            f"{meta.get('nproc', '?')} cores it is a heavier load generator than wrk: the gRPC rows are bounded "
            "lower than the HTTP ones by the client, not only by the servers."
        )
    pv = {}
    for c in concs_of(rows, "v2", "fw"):
        x, y = pick(rows, "v2", "fw", c), pick(rows, scen_pred, "fw", c)
        if good(x) and good(y):
            pv[c] = rps(x) / rps(y)
    if pv:
        N.append(
            "fw's V2 endpoint against its own `/predict` on the same process, throughput ratio: "
            + ", ".join(f"c={c} {pv[c]:.2f}" for c in sorted(pv))
            + (
                " (the V2 body is larger: names, shape and datatype per input, and the answer repeats "
                "them)."
                if min(pv.values()) < 0.9
                else "."
            )
        )

    # images
    fi = pick(rows, "image", "fw", 64)
    if good(fi) and best_eng:
        r = rps(fi) / best_eng
        N.append(
            f"**fw /predict/image at c=64 vs the engine ceiling: {r:.2f}** (target 0.9 "
            f"{'met' if r >= 0.9 else 'missed'})."
            + (
                " The rest is mostly fw decoding and resizing every JPEG in Go on the same cores "
                "(`BenchmarkPreprocessJPEG224` times that step alone)."
                if r < 1
                else ""
            )
        )
    st = ratios(rows, "image", "fw", "fw-stretch")
    if st:
        parts = []
        for c, (a, b, r) in sorted(st.items()):
            cpu = ""
            if cpu_us(a) and cpu_us(b):
                cpu = f", server CPU {cpu_us(a) / 1e3:.1f} vs {cpu_us(b) / 1e3:.1f} ms per image"
            parts.append(f"c={c}: {r:.2f}x the throughput{cpu}")
        N.append(
            "**The eval transform's cost** (fw running the file's steps, Resize(256) + CenterCrop(224), vs "
            "fw-stretch, the simple recipe it replaced, on the same weights): "
            + "; ".join(parts)
            + "."
        )
    im = []
    for peer in PEERS:
        rs = ratios(rows, "image", "fw", peer)
        if rs:
            im.append(f"{SHORT[peer]} {span([v[2] for v in rs.values()], times)}")
    if im:
        N.append(
            "**Images, fw vs each peer** (throughput ratio over the image concurrencies): "
            + "; ".join(im)
            + ". resnet18 is compute-bound, and every server runs the same onnxruntime engine on the same "
            f"{meta.get('nproc', '?')} cores, so the spread here is decoding, batching and transport, not the "
            "engine."
        )

    N.append(
        f"Fairness notes: every peer at fw's ONNX Runtime settings ({meta.get('peer_threads', '?')} intra-op "
        f"threads for the row model, {meta.get('peer_img_threads', '?')} for resnet18, no spinning) unless marked; fw answers /predict with `labels` and `model` fields too, peers "
        "with `predictions` and `labels`; LitServe gets the image as multipart (it has no raw-body mode); "
        "TorchServe answers on its own URL (`/predictions/<model>`) and adds `x-request-id` and cache headers, "
        "and its per-request logging is its default, not turned off; Triton gets V2 requests only (JSON for "
        "rows, the binary-data extension for images, and gRPC `ModelInfer`)."
    )
    return N


if __name__ == "__main__":
    main()
