"""FastAPI + uvicorn + onnxruntime peer, written the way FastAPI's docs write
it: one process, a pydantic body model, one session.run per request (no
batching). Two variants of the same routes, chosen by FW_PEER_FASTAPI:

  async (default): `async def` path operations calling the blocking
                   session.run on the event loop (the tutorial's shape);
  def:             plain `def` path operations, which FastAPI runs in its
                   threadpool ("Concurrency and async / await": use `def` for
                   blocking work), so the event loop keeps accepting.

Run: FW_PEER_MODEL=build/models/digits_mlp.onnx [FW_PEER_FASTAPI=def] \
     uvicorn fastapi_app:app --app-dir bench/peers --host 127.0.0.1 --port 18104
"""

import os

import numpy as np
from common import image_tensor, rows_response, session, topk_response
from fastapi import Body, FastAPI, Request
from pydantic import BaseModel

MODE = os.environ.get("FW_PEER_FASTAPI", "async")
if MODE not in ("async", "def"):
    raise ValueError(f"FW_PEER_FASTAPI must be async or def, not {MODE!r}")

sess, input_name = session()
app = FastAPI()


class Rows(BaseModel):
    data: list[list[float]]


def _rows(body: Rows):
    x = np.asarray(body.data, dtype=np.float32)
    (logits,) = sess.run(None, {input_name: x})
    return rows_response(logits)


def _image(data: bytes):
    (logits,) = sess.run(None, {input_name: image_tensor(data)[None]})
    return topk_response(logits)


if MODE == "async":

    @app.post("/predict")
    async def predict(body: Rows):
        return _rows(body)

    @app.post("/predict/image")
    async def predict_image(request: Request):
        return _image(await request.body())

else:

    @app.post("/predict")
    def predict(body: Rows):
        return _rows(body)

    @app.post("/predict/image")
    def predict_image(data: bytes = Body(media_type="image/jpeg")):
        # a non-JSON body declared as `bytes` arrives raw (FastAPI reads it
        # before calling the function in the threadpool)
        return _image(data)
