"""LitServe + onnxruntime peer with LitServe's dynamic batching on
(LitAPI(max_batch_size=..., batch_timeout=...)), no torch.

  --kind rows:  POST /predict {"data": [[64 floats], ...]} -> {"predictions", "labels"}
  --kind image: POST /predict/image, multipart/form-data field "file" (LitServe
                hands decode_request a parsed form; it has no raw-body mode)

Run: python bench/peers/litserve_app.py --model build/models/digits_mlp.onnx --port 18103
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import litserve as ls
import numpy as np
from common import image_tensor, rows, rows_response, session, topk_response


class RowsAPI(ls.LitAPI):
    def setup(self, device):
        self.sess, self.input_name = session()

    def decode_request(self, request):
        return rows(request)

    def batch(self, inputs):
        return np.concatenate(inputs), [len(x) for x in inputs]

    def predict(self, batch):
        x, sizes = batch
        (logits,) = self.sess.run(None, {self.input_name: x})
        return logits, sizes

    def unbatch(self, output):
        logits, sizes = output
        out, i = [], 0
        for n in sizes:
            out.append(logits[i : i + n])
            i += n
        return out

    def encode_response(self, output):
        return rows_response(output)


class ImageAPI(ls.LitAPI):
    def setup(self, device):
        self.sess, self.input_name = session()

    def decode_request(self, request):
        f = request["file"]
        data = f.file.read() if hasattr(f, "file") else f
        return image_tensor(data)

    def batch(self, inputs):
        return np.stack(inputs)

    def predict(self, x):
        (logits,) = self.sess.run(None, {self.input_name: x})
        return logits

    def unbatch(self, output):
        return list(output)

    def encode_response(self, output):
        return topk_response(output[None])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kind", choices=["rows", "image"], default="rows")
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--batch-timeout", type=float, default=0.001)
    a = ap.parse_args()
    os.environ["FW_PEER_MODEL"] = a.model
    if a.kind == "rows":
        api = RowsAPI(
            max_batch_size=a.max_batch_size,
            batch_timeout=a.batch_timeout,
            api_path="/predict",
        )
    else:
        api = ImageAPI(
            max_batch_size=a.max_batch_size,
            batch_timeout=a.batch_timeout,
            api_path="/predict/image",
        )
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1)
    server.run(
        host="127.0.0.1", port=a.port, generate_client_file=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
