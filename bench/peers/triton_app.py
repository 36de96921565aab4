"""Triton Inference Server peer, from PyPI's nvidia-pytriton (its tritonserver
binary ships the Python backend only, no ONNX Runtime backend): the same .onnx
file run by onnxruntime inside the Python callable, behind Triton's C++
HTTP/gRPC front end and Triton's own dynamic batcher
(ModelConfig(max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=1000)),
fw's --max-batch-size / --max-delay defaults). PyTriton's path: tritonserver
-> its Python backend stub -> PyTriton's proxy (ZeroMQ + shared memory) -> the
@batch callable in this process, one session.run per batch.

  --kind rows:  model NAME, input named as the .onnx input (FP32 [-1, 64]),
                output named as the .onnx output (FP32 [-1, 10]); the request is
                KServe V2 JSON: POST /v2/models/NAME/infer
                {"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":[...]}]}
  --kind image: input "image" (BYTES [-1, 1], one JPEG/PNG per row, sent with
                the V2 binary-data extension), decoded and resized with PIL as
                the other peers do (common.image_tensor), outputs "index"
                (INT64 [-1, 5]) and "score" (FP32 [-1, 5]): the top 5 of the
                softmax, like fw's /predict/image answer.

Every port binds to 127.0.0.1. Environment as common.py (FW_PEER_THREADS,
FW_BENCH_ORT_SPIN). Needs Python 3.12 here (see bench/peers/triton_requirements.txt).

Run: python bench/peers/triton_app.py --model build/models/digits_mlp.onnx --name digits_mlp \
       --http-port 18114 --grpc-port 18115 --metrics-port 18116
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
from common import image_tensor, session
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig


def rows_model(path):
    sess, input_name = session(path)
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    output_name = out.name

    @batch
    def infer(**inputs):
        (logits,) = sess.run(None, {input_name: inputs[input_name]})
        return {output_name: logits}

    inputs = [Tensor(name=input_name, dtype=np.float32, shape=tuple(inp.shape[1:]))]
    outputs = [Tensor(name=output_name, dtype=np.float32, shape=tuple(out.shape[1:]))]
    return infer, inputs, outputs


def image_model(path, k=5):
    sess, input_name = session(path)

    @batch
    def infer(image):
        x = np.stack([image_tensor(bytes(b[0])) for b in image])
        (logits,) = sess.run(None, {input_name: x})
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        idx = np.argsort(-p, axis=1)[:, :k]
        return {"index": idx.astype(np.int64), "score": np.take_along_axis(p, idx, 1)}

    inputs = [Tensor(name="image", dtype=np.bytes_, shape=(1,))]
    outputs = [
        Tensor(name="index", dtype=np.int64, shape=(k,)),
        Tensor(name="score", dtype=np.float32, shape=(k,)),
    ]
    return infer, inputs, outputs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--kind", choices=["rows", "image"], default="rows")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--max-queue-delay-us", type=int, default=1000)
    ap.add_argument(
        "--workspace", default=None, help="PyTriton's workspace (model store, sockets)"
    )
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    infer, inputs, outputs = (rows_model if a.kind == "rows" else image_model)(a.model)
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=a.http_port,
        grpc_address="127.0.0.1",
        grpc_port=a.grpc_port,
        metrics_address="127.0.0.1",
        metrics_port=a.metrics_port,
        log_verbose=0,
    )
    with Triton(config=config, workspace=a.workspace) as triton:
        triton.bind(
            model_name=a.name,
            infer_func=infer,
            inputs=inputs,
            outputs=outputs,
            config=ModelConfig(
                max_batch_size=a.max_batch_size,
                batcher=DynamicBatcher(
                    max_queue_delay_microseconds=a.max_queue_delay_us
                ),
            ),
        )
        print(
            f"triton_app: serving {a.name} on 127.0.0.1:{a.http_port}",
            file=sys.stderr,
            flush=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
