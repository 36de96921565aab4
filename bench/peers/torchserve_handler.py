"""TorchServe custom handler for the bench peers: TorchServe's own dynamic
batcher (batchSize / maxBatchDelay in bench/peers/torchserve.properties) hands
handle() a list of requests; this runs one onnxruntime call on all of them and
answers each with the same JSON as the other peers. No torch in the handler
(TorchServe's worker imports torch itself).

  rows model (rank-2 input):  POST /predictions/<name> {"data": [[64 floats], ...]}
                              -> {"predictions", "labels"}
  image model (rank-4 input): POST /predictions/<name>, raw JPEG body
                              (Content-Type: image/jpeg) -> {"predictions": [{"top_k"}]}

Packaged by bench/serve.sh with torch-model-archiver (--serialized-file is the
same .onnx file fw serves, --extra-files bench/peers/common.py)."""

import json
import os

import numpy as np
from common import image_tensor, rows, rows_response, session, topk_response

_state = {}


def _initialize(context):
    model_dir = context.system_properties["model_dir"]
    onnx_file = context.manifest["model"]["serializedFile"]
    sess, input_name = session(os.path.join(model_dir, onnx_file))
    _state.update(
        sess=sess, input=input_name, image=len(sess.get_inputs()[0].shape) == 4
    )


def _body(req):
    v = req.get("body")
    if v is None:
        v = req.get("data")
    return v


def handle(data, context):
    if (
        data is None
    ):  # TorchServe's load call: initialize(context) as handle(None, context)
        _initialize(context)
        return None
    sess, name = _state["sess"], _state["input"]
    if _state["image"]:
        x = np.stack([image_tensor(bytes(_body(r))) for r in data])
        (logits,) = sess.run(None, {name: x})
        out = [json.dumps(topk_response(logits[i : i + 1])) for i in range(len(data))]
    else:
        parts = []
        for r in data:
            b = _body(r)
            if isinstance(b, (bytes, bytearray)):
                b = json.loads(b)
            parts.append(rows(b))
        (logits,) = sess.run(None, {name: np.concatenate(parts)})
        out, i = [], 0
        for p in parts:
            out.append(json.dumps(rows_response(logits[i : i + len(p)])))
            i += len(p)
    for i in range(len(out)):
        context.set_response_content_type(i, "application/json")
    return out
