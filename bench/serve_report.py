"""Write the serving-benchmark section of docs/benchmarks.md from the results
bench/serve.sh collected (build/bench/serve/*.jsonl, meta.json).

Only the text between <!-- bench:serve:start --> and <!-- bench:serve:end -->
is replaced; the section is appended when the markers are absent. Standard
library only."""

import argparse
import json
import os
from pathlib import Path

START, END = "<!-- bench:serve:start -->", "<!-- bench:serve:end -->"

NAMES = {
    "ceiling": "HTTP ceiling (bare fasthttp, fixed body)",
    "fw": "fw serve (defaults)",
    "fw-tuned": "fw serve (tuned: `{tuned}`)",
    "litserve": "LitServe + onnxruntime (batching)",
    "fastapi": "FastAPI + uvicorn + onnxruntime",
    "torchserve": "TorchServe + onnxruntime (batching)",
}


# Hand-written reading of the numbers (the idle run of 2026-11-22 09:02 UTC, the first with
# TorchServe; re-check it when the numbers move).
NOTES = """
What the numbers say (an idle machine; single runs still move by 10-20 %, so compare ratios
inside one run, not across runs):

- **fw /predict vs the HTTP ceiling is missed: about 0.26-0.33 at c=16..256 (target 0.5).** A perf
  profile of fw at c=64 (`PROFILE=1 make bench-serve`, taken in an earlier run) puts about half of
  fw's CPU in the kernel, most of it in `finish_task_switch` and `_raw_spin_unlock_irqrestore`:
  thread wake-ups and context switches, with wrk on one of the two cores. fw's own Go code
  (fasthttp, fastjson, the JSON writer, the batcher) is about a third and ONNX Runtime about an
  eighth. The bare ceiling does none of that work (no body parsing, no engine call). Not the
  cause: the hand-off from the handler to the batcher's worker. Running a lone request on the
  handler's own goroutine when the engine is idle was tried twice; in the second try (alternating
  A/B runs, the request demonstrably skipping the queue) c=1 did not move (12.0-12.9k vs
  11.1-16.1k req/s), so it was not kept. What does move c=1 is ONNX Runtime's thread pool:
  `--threads 1` (the tuned row) runs the small MLP on the calling thread, about 1.5x at c=1.
  Batching is not the limit either: at c=64 the engine runs about 1.3 rows per call because each
  call is ~10 us.
- **fw vs TorchServe** (0.12.0, its own dynamic batching at fw's defaults, one Python worker, the
  same onnxruntime call in a custom handler): on the small model fw has about 36x TorchServe's
  throughput at c=1 and 6-14x at c=16..256, at a lower p99 at every concurrency; TorchServe tops
  out near 9,000 req/s. Every request goes from the Java (Netty) front end through its batch
  aggregator to the single Python worker over a Unix socket and back, the worker JSON-decodes each
  body in Python, and TorchServe's default logging writes several lines per request (access log,
  per-request metrics: about 6 MB/s under load). At c=1 a request also waits for the aggregator's
  maxBatchDelay (1 ms). On resnet18 all servers share the same onnxruntime engine, so fw's edge is
  small (1.1-1.6x, largest at c=1 where TorchServe waits for its 5 ms batching window), again at a
  lower p99.
- **Low concurrency.** The batcher starts a batch at once when no engine call is running (waiting
  then only adds latency) and gathers only while a call is in flight. At c=1 the defaults went
  from about 870 req/s (p50 1.1 ms, every batch waiting the full 1 ms) to the figure in the table
  (p50 well under 0.1 ms).
- **fw /predict/image at c=64 vs the engine ceiling is met (about 0.94).** The engine barely gains
  from batching on 2 cores (resnet18 is compute-bound); the remaining gap is fw decoding and
  resizing every JPEG in Go on the same cores (about 0.85 ms per image,
  `BenchmarkPreprocessJPEG224`).
- **fw vs LitServe**: on the small model fw is 24-60x LitServe's throughput at a much lower p99 at
  every concurrency; LitServe is bounded near 1,000 req/s by its architecture (an API-server
  process and an inference-worker process exchanging pickled requests through queues), whatever
  `max_batch_size`/`batch_timeout` (tried 8/64 with 1, 10 and 50 ms). On resnet18 every server is
  bound by the same onnxruntime engine on the same two cores, so 3x is out of reach there by
  construction: fw is 1.1-1.5x, and what matters is its ratio to the engine ceiling (above).
- `--threads 1` against the defaults: better at c=1 and c=256, worse at c=16 in this run; the
  defaults (threads = CPUs) are kept because they are never far behind.
- The c=1 ceiling row is latency-bound (one connection, wrk's own round trip), so fw can exceed
  it within noise; the c>=16 rows are the meaningful ceiling comparison.
- FastAPI (one process, blocking `session.run` inside `async def`) tops out near 5,000 req/s on the
  MLP: the event loop runs one request at a time, no batching.
- Fairness notes: peers use onnxruntime's default thread count (the physical cores, 2 here), as fw
  does; fw answers /predict with `labels` and `model` fields too, peers with `predictions` and
  `labels`; LitServe gets the image as multipart (it has no raw-body mode); TorchServe answers on
  its own URL (`/predictions/<model>`) and adds `x-request-id` and cache headers, and its
  per-request logging is its default, not turned off.
"""


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


def table(rows, servers, meta):
    out = [
        "| server | concurrency | requests/s | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in servers:
        for r in sorted(
            (r for r in rows if r["server"] == s), key=lambda r: r["concurrency"]
        ):
            name = NAMES.get(s, s).format(tuned=meta.get("fw_tuned_flags", ""))
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


def ts_versions(meta):
    t = meta.get("torchserve") or {}
    if not t:
        return ""
    return (
        f"TorchServe's own venv: torchserve {t['torchserve']}, torch-model-archiver "
        f"{t['torch-model-archiver']}, torch {t['torch']} (imported by TorchServe's worker, unused "
        f"by the handler), onnxruntime {t['onnxruntime']}, Python {t['python']}, {meta.get('java', 'Java ?')}; "
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


def verdict(ok):
    return "**met**" if ok else "**missed**"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--perf", default="")
    ap.add_argument("--doc", default="docs/benchmarks.md")
    a = ap.parse_args()
    rows = load(a.results)
    eng = load(a.engine)
    meta = json.loads(Path(a.meta).read_text())
    pred = [r for r in rows if r["scenario"] == "predict"]
    img = [r for r in rows if r["scenario"] == "image"]
    concs = sorted({r["concurrency"] for r in pred})

    L = []
    w = L.append
    w("## Serving benchmark (HTTP)")
    w("")
    w(
        f"Generated by `make bench-serve` (`bash bench/serve.sh`, then `bench/serve_report.py`) on {meta['date']}. "
        "Do not edit by hand: the next run rewrites this section."
    )
    w("")
    w(
        f"- Machine: {meta['nproc']} CPUs ({meta['cpu']}), {meta['mem']} RAM, Linux {meta['kernel']}. "
        "wrk runs on the same machine with one thread (`-t1`) and takes about one of the cores, "
        "so every server here effectively has one core and a half; nothing is pinned."
    )
    w(
        f"- Versions: fw {meta['fw_commit']} ({meta['go']}, fasthttp {meta['fasthttp']}, "
        f"ONNX Runtime C library {meta.get('onnxruntime_go') or '?'}); peers in their own venv: "
        f"litserve {meta['litserve']}, fastapi {meta['fastapi']}, uvicorn {meta['uvicorn']}, "
        f"onnxruntime {meta['onnxruntime_py']}, numpy {meta['numpy']}, pillow {meta['pillow']}, "
        f"Python {meta['python']}; {ts_versions(meta)}{meta['wrk']}."
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
        f"- Servers: **fw** `bin/fw serve --model M` (defaults: --max-batch-size 64 rows, --max-delay 1ms, "
        f"--instances 1, threads = CPUs); **fw tuned** adds `{meta['fw_tuned_flags']}`; "
        f"**LitServe** `bench/peers/litserve_app.py`, `LitAPI(max_batch_size={meta['lit_batch']}, "
        f"batch_timeout={meta['lit_timeout']})` for rows (fw's batching defaults) and "
        f"`max_batch_size={meta['lit_img_batch']}, batch_timeout={meta['lit_img_timeout']}` for images, "
        "`LitServer(accelerator='cpu', workers_per_device=1)`, one API server process plus one inference "
        "worker, onnxruntime in `predict`, no torch; **FastAPI** `bench/peers/fastapi_app.py` as the FastAPI "
        "tutorial writes it: `uvicorn fastapi_app:app` (one process, the default), a pydantic body model, an "
        "`async def` endpoint calling `session.run` per request. `--workers 2` was not measured: on 2 cores "
        "with wrk on one it would only add contention. "
        + ts_servers(meta)
        + "**HTTP ceiling**: `bench/ceiling`, a bare fasthttp "
        "server (same version as fw) answering a fixed 80-byte JSON body to any request."
    )
    w("")

    w("### /predict, digits_mlp.onnx (1 row of 64 floats per request)")
    w("")
    w(
        table(
            pred,
            ["ceiling", "fw", "fw-tuned", "litserve", "fastapi", "torchserve"],
            meta,
        )
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
            "### /predict/image, resnet18.onnx (224x224 JPEG, 8 KB, decode + resize + normalise per request)"
        )
        w("")
        w(
            "fw, FastAPI and TorchServe receive the raw body (`Content-Type: image/jpeg`); LitServe has no raw-body mode, so "
            "it receives the same JPEG as `multipart/form-data`. Peers decode with PIL, resize bilinear to "
            "224x224, normalise with the ImageNet mean/std in numpy."
        )
        w("")
        if img:
            w(table(img, ["fw", "litserve", "fastapi", "torchserve"], meta))
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

    # ---- targets
    w("### Targets")
    w("")
    w("| target | measured | |")
    w("|---|---|---|")
    for c in concs:
        fw, ce = pick(pred, "predict", "fw", c), pick(pred, "predict", "ceiling", c)
        ft = pick(pred, "predict", "fw-tuned", c)
        if fw and ce:
            best = max([x for x in (fw, ft) if x], key=rps)
            tag = " (tuned)" if best is ft else ""
            ratio = rps(best) / rps(ce)
            w(
                f"| fw /predict / HTTP ceiling >= 0.5, c={c} | {rps(best):,.0f} / {rps(ce):,.0f} req/s = "
                f"**{ratio:.2f}**{tag} | {verdict(ratio >= 0.5)} |"
            )
    fi = pick(img, "image", "fw", 64)
    if fi and best_eng:
        ratio = rps(fi) / best_eng
        w(
            f"| fw /predict/image c=64 / engine ceiling >= 0.9 | {rps(fi):.1f} / {best_eng:.1f} images/s = "
            f"**{ratio:.2f}** | {verdict(ratio >= 0.9)} |"
        )
    # fw vs each batching peer: LitServe's target is 3x; TorchServe's is to be ahead
    for peer, label, need in (
        ("litserve", "LitServe", 3),
        ("torchserve", "TorchServe", 1),
    ):
        for scen, rs, cs in (
            ("predict", pred, concs),
            ("image", img, sorted({r["concurrency"] for r in img})),
        ):
            for c in cs:
                fw, ls = pick(rs, scen, "fw", c), pick(rs, scen, peer, c)
                if not (fw and ls):
                    continue
                ratio = rps(fw) / rps(ls) if rps(ls) else float("inf")
                p99ok = fw["p99_us"] <= ls["p99_us"]
                cmp = f">= {need}x" if need > 1 else "> 1x"
                ok = ratio >= need if need > 1 else ratio > 1
                w(
                    f"| fw / {label} {cmp} at <= p99, {'/predict' if scen == 'predict' else '/predict/image'} c={c} | "
                    f"{ratio:.1f}x; p99 {ms(fw['p99_us'])} vs {ms(ls['p99_us'])} ms | "
                    f"{verdict(ok and p99ok)} |"
                )
    w("")
    w(NOTES.strip())
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


if __name__ == "__main__":
    main()
