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
}


# Hand-written reading of the numbers (from the run of 2026-11-22; re-check it
# when the numbers move).
NOTES = """
What the numbers say (read from the run of 2026-11-22; the machine is shared with other work, so
single runs move by 10-30 %; compare ratios inside one run, not across runs):

- **fw /predict vs the HTTP ceiling is missed** (about 0.25-0.3 at c=16..256; the target is 0.5).
  A `perf record -g` of fw at c=64 (below) puts about 57 % of fw's CPU inside libonnxruntime for a
  64-float MLP, about 21 % in the kernel (socket writes, context switches: `finish_task_switch`
  alone is 12 %) and only about 21 % in fw's own Go code (fasthttp, fastjson parsing, the JSON
  writer, the batcher). So the HTTP and JSON path is not what stands in the way; the engine call is:
  ONNX Runtime's intra-op thread pool (2 threads by default, spinning while it waits for work)
  competes for the two cores with wrk and with fasthttp's goroutines. `--threads 1` (one intra-op
  thread, no pool) is the lever that helps at high concurrency; `--max-delay 0` is the one that
  helps at low concurrency. Even tuned, fw stays below 0.5 on this 2-core box with the load
  generator on the same cores.
- **The default `--max-delay 1ms` costs c=1..16 dearly.** With the defaults every batch waits the full
  1 ms for company even when the engine is idle and no other request can arrive (c=1): about 870
  req/s and p50 1.1 ms at c=1, against about 20,000 req/s and p50 0.04 ms with `--max-delay 0`. At
  c=16 the batch can never reach 64 rows, so every request still pays the 1 ms. This is the
  documented behaviour (batcher.Config.MaxDelay: "how long the first request of a batch may wait"),
  not a bug, but it makes the defaults 20x slower than they need to be at low load; a batcher that
  runs at once when the engine is idle (and only gathers while a call is in flight) would keep the
  high-concurrency gain without the low-load cost.
- **fw /predict/image at c=64 vs the engine ceiling is borderline** (0.89 against the best engine pass,
  0.93 against the first pass; the target is 0.9). The engine gains little from batching on 2 cores
  (about 83 images/s at batch 1, 98-100 at 8-32), and fw at c=64 also decodes and resizes every JPEG
  in Go on the same two cores and shares them with wrk; that work (a few ms per image) is the gap.
- **fw vs LitServe**: LitServe's throughput on the tiny model is bounded at about 1,000 req/s by its
  architecture (an API-server process and an inference-worker process talking through queues,
  pickling every request and response), whatever `max_batch_size`/`batch_timeout` (tried 8/64 with
  1, 10 and 50 ms: 1,000-1,200 req/s at c=64..256, p99 70 ms-1.5 s). fw is far above 3x there at a
  much lower p99. At c=1 the target is missed with the defaults (1.5x): fw's default 1 ms delay
  makes it wait like LitServe's batch timeout does; with `--max-delay 0` fw is 35x LitServe at c=1. On resnet18 both are bound by the same onnxruntime engine, so the 3x target cannot be
  met there: see the ratios above.
- The c=1 ceiling row is latency-bound (one connection, wrk's own round trip), so fw tuned can
  exceed it within noise; the c>=16 rows are the meaningful ceiling comparison.
- FastAPI (one process, blocking `session.run` inside `async def`) tops out at about 4,500-5,000
  req/s on the MLP: the event loop runs one request at a time, no batching.
- Fairness notes: peers use onnxruntime's default thread count (the physical cores, 2 here), as fw
  does; fw answers /predict with `labels` and `model` fields too, peers with `predictions` and
  `labels`; LitServe gets the image as multipart (it has no raw-body mode).
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
        f"Python {meta['python']}; {meta['wrk']}."
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
        "with wrk on one it would only add contention. **HTTP ceiling**: `bench/ceiling`, a bare fasthttp "
        "server (same version as fw) answering a fixed 80-byte JSON body to any request."
    )
    w("")

    w("### /predict, digits_mlp.onnx (1 row of 64 floats per request)")
    w("")
    w(table(pred, ["ceiling", "fw", "fw-tuned", "litserve", "fastapi"], meta))
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
            "fw and FastAPI receive the raw body (`Content-Type: image/jpeg`); LitServe has no raw-body mode, so "
            "it receives the same JPEG as `multipart/form-data`. Peers decode with PIL, resize bilinear to "
            "224x224, normalise with the ImageNet mean/std in numpy."
        )
        w("")
        if img:
            w(table(img, ["fw", "litserve", "fastapi"], meta))
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
    for scen, rs, cs in (
        ("predict", pred, concs),
        ("image", img, sorted({r["concurrency"] for r in img})),
    ):
        for c in cs:
            fw, ls = pick(rs, scen, "fw", c), pick(rs, scen, "litserve", c)
            if not (fw and ls):
                continue
            ratio = rps(fw) / rps(ls) if rps(ls) else float("inf")
            p99ok = fw["p99_us"] <= ls["p99_us"]
            w(
                f"| fw / LitServe >= 3x at <= p99, {'/predict' if scen == 'predict' else '/predict/image'} c={c} | "
                f"{ratio:.1f}x; p99 {ms(fw['p99_us'])} vs {ms(ls['p99_us'])} ms | "
                f"{verdict(ratio >= 3 and p99ok)} |"
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
