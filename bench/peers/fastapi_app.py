"""FastAPI + uvicorn + onnxruntime peer, written the way FastAPI's tutorial
suggests: one process, a pydantic body model, an `async def` path operation
that calls session.run for each request (no batching).

Run: FW_PEER_MODEL=build/models/digits_mlp.onnx \
     uvicorn fastapi_app:app --app-dir bench/peers --host 127.0.0.1 --port 18104
"""

import numpy as np
from common import image_tensor, rows_response, session, topk_response
from fastapi import FastAPI, Request
from pydantic import BaseModel

sess, input_name = session()
app = FastAPI()


class Rows(BaseModel):
    data: list[list[float]]


@app.post("/predict")
async def predict(body: Rows):
    x = np.asarray(body.data, dtype=np.float32)
    (logits,) = sess.run(None, {input_name: x})
    return rows_response(logits)


@app.post("/predict/image")
async def predict_image(request: Request):
    x = image_tensor(await request.body())[None]
    (logits,) = sess.run(None, {input_name: x})
    return topk_response(logits)
