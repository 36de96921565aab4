"""Triton's Python backend (``backend: "python"``, a ``model.py``) served by ``fw serve --model-repository``.

Starts the real ``fw`` binary (FW_BIN) on a repository of Python models written the way Triton's python_backend
examples write them (``import triton_python_backend_utils as pb_utils``, ``TritonPythonModel`` with ``initialize``,
``execute`` and ``finalize``) beside Triton's ONNX ``simple`` sample (``make models``), and drives it with tritonclient
over HTTP and gRPC: FP32 and BYTES tensors, a list of requests per ``execute`` under dynamic batching, an error
response, a model calling another (BLS), ``auto_complete_config`` for a model without config.pbtxt, a crashed model
process replaced, unloading running ``finalize``, a load with a config override, and no process left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fwserve import FwServer, free_port

httpclient = pytest.importorskip("tritonclient.http", reason="tritonclient[http] is not installed")
grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
from tritonclient.utils import InferenceServerException  # noqa: E402

METRICS_PORT = free_port()
REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")
SAMPLES = Path(os.environ.get("FW_MODELS_DIR") or REPO / "build" / "models") / "triton"

ADD_SUB = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(self.model_config, "OUTPUT0")
        self.dtype = pb_utils.triton_string_to_numpy(out["data_type"])
        self.finalized = self.model_config["parameters"]["finalized"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a[0] == 13:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("13 is unlucky: send another first number")))
                continue
            if a[0] == 666:
                import os
                os._exit(9)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype)),
            ]))
        return responses

    def finalize(self):
        with open(self.finalized, "w") as f:
            f.write("finalized")
"""

ADD_SUB_CONFIG = """backend: "python"
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }, { name: "INPUT1", data_type: TYPE_FP32, dims: [ 4 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }, { name: "OUTPUT1", data_type: TYPE_FP32, dims: [ 4 ] }]
instance_group [{ kind: KIND_CPU }]
parameters { key: "finalized", value: { string_value: "%s" } }
"""

# Dynamic batching: execute gets every request of a batch; each answer says how many there were.
BATCHED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            upper = np.array([[t.decode().upper().encode() for t in row] for row in text], dtype=object)
            n = np.full((text.shape[0], 1), len(requests), dtype=np.int64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("N", n)]))
        return out
"""

BATCHED_CONFIG = """backend: "python"
max_batch_size: 16
input [{ name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] }]
output [{ name: "UPPER", data_type: TYPE_STRING, dims: [ 1 ] }, { name: "N", data_type: TYPE_INT64, dims: [ 1 ] }]
dynamic_batching { preferred_batch_size: [ 4 ], max_queue_delay_microseconds: 5000000 }
"""

# BLS: the sum of its inputs from the ONNX model simple, doubled.
BLS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(
                model_name="simple", inputs=r.inputs(), requested_output_names=["OUTPUT0"]
            ).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            s = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("TWICE", s * 2)]))
        return out
"""

BLS_CONFIG = """backend: "python"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
output [{ name: "TWICE", data_type: TYPE_INT32, dims: [ 16 ] }]
"""

# No config.pbtxt: auto_complete_config says what it takes.
COMPLETING = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP64", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP64", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", r.inputs()[0].as_numpy() ** 2)]) for r in requests]
"""


# Decoupled: each element of IN comes back as a response of its own (OUT, IDX), sent from a thread after execute
# returned; then the final flag alone. A first element of -1 is answered with an error.
REPEAT = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        assert pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            sender = request.get_response_sender()

            def run(values=values, sender=sender):
                if values[0] == -1:
                    err = pb_utils.TritonError("-1 is not a count")
                    sender.send(pb_utils.InferenceResponse(error=err), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    return
                for i, v in enumerate(values):
                    time.sleep(0.005)
                    sender.send(pb_utils.InferenceResponse([
                        pb_utils.Tensor("OUT", np.array([v], dtype=np.int32)),
                        pb_utils.Tensor("IDX", np.array([i], dtype=np.int32)),
                    ], parameters={"index": i}))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

            threading.Thread(target=run).start()
        return None
"""

REPEAT_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN", data_type: TYPE_INT32, dims: [ -1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }, { name: "IDX", data_type: TYPE_INT32, dims: [ 1 ] }]
instance_group [{ count: 2, kind: KIND_CPU }]
"""


# Decoupled: repeats IN every DELAY ms inside execute until its request is cancelled, then answers CANCELLED and
# prints that it saw the cancellation (COUNT responses at most).
UNTIL_CANCELLED = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        r = requests[0]
        value = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0]
        count = pb_utils.get_input_tensor_by_name(r, "COUNT").as_numpy()[0]
        sender = r.get_response_sender()
        for i in range(count):
            if r.is_cancelled():
                print("until_cancelled: cancelled after", i, "responses", flush=True)
                err = pb_utils.TritonError("request has been cancelled", pb_utils.TritonError.CANCELLED)
                sender.send(pb_utils.InferenceResponse(error=err), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return None
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))]))
            time.sleep(0.05)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

UNTIL_CANCELLED_CONFIG = """backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }, { name: "COUNT", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] }]
"""

# BLS into until_cancelled: sums its responses and cancels the stream once the sum reaches MAX_SUM; answers the sum
# and whether the callee's last response said CANCELLED. %s is "" or "async " (async_exec).
BLS_CANCEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    %sdef execute(self, requests):
        r = requests[0]
        max_sum = pb_utils.get_input_tensor_by_name(r, "MAX_SUM").as_numpy()[0]
        call = pb_utils.InferenceRequest(
            model_name="until_cancelled",
            inputs=[pb_utils.get_input_tensor_by_name(r, "IN"), pb_utils.Tensor("COUNT", np.array([20], np.int32))],
            requested_output_names=["OUT"],
        )
        stream = %s
        total, cancelled = 0, False
        for resp in stream:
            if resp.has_error():
                cancelled = resp.error().code() == pb_utils.TritonError.CANCELLED
                break
            if resp.output_tensors():
                total += int(pb_utils.get_output_tensor_by_name(resp, "OUT").as_numpy()[0])
                if total >= max_sum:
                    stream.cancel()
        stream.cancel()  # after the end: nothing
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("SUM", np.array([total], np.int32)),
            pb_utils.Tensor("IS_CANCELLED", np.array([cancelled], np.bool_)),
        ])]
"""

BLS_CANCEL_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_INT32, dims: [ 1 ] }, { name: "MAX_SUM", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "SUM", data_type: TYPE_INT32, dims: [ 1 ] }, { name: "IS_CANCELLED", data_type: TYPE_BOOL, dims: [ 1 ] }]
"""

# Decoupled with dynamic batching: each request is answered with how many requests its execute call got.
GROUPED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            out = pb_utils.Tensor("N", np.array([[len(requests)]], dtype=np.int32))
            r.get_response_sender().send(
                pb_utils.InferenceResponse([out]), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
        return None
"""

GROUPED_CONFIG = """backend: "python"
max_batch_size: 8
model_transaction_policy { decoupled: true }
input [{ name: "IN", data_type: TYPE_FP32, dims: [ 2 ] }]
output [{ name: "N", data_type: TYPE_INT32, dims: [ 1 ] }]
dynamic_batching { preferred_batch_size: [ 2 ], max_queue_delay_microseconds: 10000000 }
"""

# Optional inputs (optional: true): a request may leave either out; the model sees None and uses a default.
OPTIONAL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0")
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1")
            a = a.as_numpy() if a is not None else np.full((1,), 5, np.int32)
            b = b.as_numpy() if b is not None else np.full((1,), 10, np.int32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b)]))
        return out
"""

OPTIONAL_CONFIG = """backend: "python"
max_batch_size: %d
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ], optional: true },
       { name: "INPUT1", data_type: TYPE_INT32, dims: [ 1 ], optional: true }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] }]
"""

# Response parameters: the model answers with the parameters its input (JSON) names; a float is refused by
# pb_utils, as Triton's is, and the model answers that error. BLS_RESPONSE_PARAMS reads them through BLS.
RESPONSE_PARAMS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            text = pb_utils.get_input_tensor_by_name(r, "P").as_numpy()[0].decode()
            try:
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([text], dtype=object))], parameters=json.loads(text)))
            except Exception as e:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)))
        return out
"""

RESPONSE_PARAMS_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "P", data_type: TYPE_STRING, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_STRING, dims: [ 1 ] }]
"""

BLS_RESPONSE_PARAMS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(model_name="response_params", inputs=r.inputs(),
                                             requested_output_names=["OUT"]).exec()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([resp.parameters()], dtype=object))]))
        return out
"""

# An error response with the code its input names: clients get the model's message as it wrote it, with the status
# its code maps to (Triton's mapping).
ERROR_CODE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            name = pb_utils.get_input_tensor_by_name(r, "P").as_numpy()[0].decode()
            code = getattr(pb_utils.TritonError, name)
            out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("error code: " + name, code)))
        return out
"""

# An ensemble over response_params: its answer carries none of its step's response parameters, as Triton's.
RESPONSE_PARAMS_ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 0
input [{ name: "P", data_type: TYPE_STRING, dims: [ 1 ] }]
output [{ name: "OUT", data_type: TYPE_STRING, dims: [ 1 ] }]
ensemble_scheduling { step [ { model_name: "response_params", model_version: -1,
  input_map { key: "P", value: "P" }, output_map { key: "OUT", value: "OUT" } } ] }
"""

# An ensemble over the stateful accumulate: its answers cannot be cached.
ACC_ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 4
input [{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }]
ensemble_scheduling { step [ { model_name: "accumulate", model_version: -1,
  input_map { key: "INPUT", value: "INPUT" }, output_map { key: "OUTPUT", value: "OUTPUT" } } ] }
"""

# Triton's response cache: the answer carries how many times execute ran, so a cached answer repeats an old count.
COUNTING = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.calls = 0

    def execute(self, requests):
        out = []
        for r in requests:
            self.calls += 1
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("CALLS", np.full(x.shape, self.calls, np.int64))]))
        return out
"""

COUNTING_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [ 2 ] }]
output [{ name: "CALLS", data_type: TYPE_INT64, dims: [ 2 ] }]
response_cache { enable: true }
"""

# Ensembles with optional inputs: one handing both on to the model above, one whose step leaves INPUT1 out of its
# input_map (so the model never gets it).
OPTIONAL_ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 4
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ], optional: true },
       { name: "INPUT1", data_type: TYPE_INT32, dims: [ 1 ], optional: true }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] }]
ensemble_scheduling { step [
  { model_name: "optional_batched", model_version: -1, input_map { key: "INPUT0", value: "INPUT0" },
    input_map { key: "INPUT1", value: "INPUT1" }, output_map { key: "OUTPUT0", value: "OUTPUT0" } } ] }
"""

OPTIONAL_PIPELINE_CONFIG = """platform: "ensemble"
max_batch_size: 4
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 1 ], optional: true }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 1 ] }]
ensemble_scheduling { step [
  { model_name: "optional_batched", model_version: -1, input_map { key: "INPUT0", value: "INPUT0" },
    output_map { key: "OUTPUT0", value: "mid" } },
  { model_name: "optional_batched", model_version: -1, input_map { key: "INPUT1", value: "mid" },
    output_map { key: "OUTPUT0", value: "OUTPUT0" } } ] }
"""

# A response that leaves out one of its declared outputs (OUTPUT1), as Triton's Python backend allows; and an
# ensemble over it whose OUTPUT1 is that output.
PARTIAL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b)]))
        return out
"""

PARTIAL_CONFIG = """backend: "python"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
"""

PARTIAL_ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 8
input [{ name: "INPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "INPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_INT32, dims: [ 16 ] }, { name: "OUTPUT1", data_type: TYPE_INT32, dims: [ 16 ] }]
ensemble_scheduling { step [
  { model_name: "simple", model_version: -1, input_map { key: "INPUT0", value: "INPUT1" },
    input_map { key: "INPUT1", value: "INPUT1" }, output_map { key: "OUTPUT1", value: "zeros" } },
  { model_name: "partial", model_version: -1, input_map { key: "INPUT0", value: "INPUT0" },
    input_map { key: "INPUT1", value: "zeros" }, output_map { key: "OUTPUT0", value: "OUTPUT0" },
    output_map { key: "OUTPUT1", value: "OUTPUT1" } } ] }
"""

# BLS corner cases: cancel() at once, before any response came (MAX_SUM < 0), and a call to the model that leaves
# OUTPUT1 out (MAX_SUM >= 0): SUM is then OUTPUT0's first element, IS_CANCELLED whether OUTPUT1 was left out.
BLS_EDGES = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        r = requests[0]
        x = pb_utils.get_input_tensor_by_name(r, "IN")
        if pb_utils.get_input_tensor_by_name(r, "MAX_SUM").as_numpy()[0] < 0:
            call = pb_utils.InferenceRequest(
                model_name="until_cancelled", inputs=[x, pb_utils.Tensor("COUNT", np.array([200], np.int32))],
                requested_output_names=["OUT"])
            stream = call.exec(decoupled=True)
            stream.cancel()
            got = list(stream)
            total = len([g for g in got if not g.has_error() and g.output_tensors()])
            flag = got[-1].has_error() and got[-1].error().code() == pb_utils.TritonError.CANCELLED
        else:
            v = np.full((1, 16), x.as_numpy()[0], np.int32)
            resp = pb_utils.InferenceRequest(
                model_name="partial", inputs=[pb_utils.Tensor("INPUT0", v), pb_utils.Tensor("INPUT1", v)],
                requested_output_names=["OUTPUT0", "OUTPUT1"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            total = int(pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()[0][0])
            flag = pb_utils.get_output_tensor_by_name(resp, "OUTPUT1") is None
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("SUM", np.array([total], np.int32)),
            pb_utils.Tensor("IS_CANCELLED", np.array([flag], np.bool_)),
        ])]
"""

# Sequence batching: a running sum in implicit state (ACC_IN / ACC_OUT, zero at START), with the START control and
# the request's correlation_id() and flags() answered back.
ACCUMULATE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(r, "START").as_numpy()
            acc = pb_utils.get_input_tensor_by_name(r, "ACC_IN").as_numpy()
            total = acc + x
            flags = np.full(x.shape, r.flags() * 10 + int(start.flat[0]), np.int32)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total.astype(np.int32)),
                pb_utils.Tensor("CORR", np.full(x.shape, r.correlation_id(), np.int64)),
                pb_utils.Tensor("FLAGS", flags),
                pb_utils.Tensor("ACC_OUT", total.astype(np.int32)),
            ]))
        return out
"""

ACCUMULATE_CONFIG = """backend: "python"
max_batch_size: 4
input [{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }]
output [{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }, { name: "CORR", data_type: TYPE_INT64, dims: [ 1 ] },
        { name: "FLAGS", data_type: TYPE_INT32, dims: [ 1 ] }]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [{ name: "START", control [{ kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] }] }]
  state [{ input_name: "ACC_IN", output_name: "ACC_OUT", data_type: TYPE_INT32, dims: [ 1 ],
           initial_state { data_type: TYPE_INT32, dims: [ 1 ], zero_data: true, name: "zero" } }]
}
"""

# Custom metrics (pb_utils.MetricFamily): a counter of requests and a histogram of their sizes.
METERED = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily(
            name="metered_requests_total", description="Requests metered saw", kind=pb_utils.MetricFamily.COUNTER
        )
        self.requests = family.Metric(labels={"model": "metered", "version": "1"})
        sizes = pb_utils.MetricFamily(
            name="metered_request_elements",
            description="Elements per request",
            kind=pb_utils.MetricFamily.HISTOGRAM,
            buckets=[1, 4, 16],
        )
        self.sizes = sizes.Metric(labels={"model": "metered"})
        try:
            pb_utils.MetricFamily(name="fw_http_requests_total", description="x", kind=pb_utils.MetricFamily.GAUGE)
        except pb_utils.TritonModelException:
            pass

    def execute(self, requests):
        out = []
        for r in requests:
            x = r.inputs()[0].as_numpy()
            self.requests.increment(1)
            self.sizes.observe(x.size)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        assert self.requests.value() >= 1
        return out
"""

METERED_CONFIG = """backend: "python"
input [{ name: "X", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "Y", data_type: TYPE_FP32, dims: [ -1 ] }]
"""


# Request parameters and ID: what request.parameters() and request.request_id() say, as outputs. With X > 0 it asks
# itself nothing; bls_params calls it by BLS with parameters and an ID of its own.
ECHO_PARAMS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("PARAMS", np.array([r.parameters()], dtype=object)),
                pb_utils.Tensor("ID", np.array([r.request_id()], dtype=object)),
            ])
            for r in requests
        ]
"""

ECHO_PARAMS_CONFIG = """backend: "python"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [ 1 ] }]
output [{ name: "PARAMS", data_type: TYPE_STRING, dims: [ 1 ] }, { name: "ID", data_type: TYPE_STRING, dims: [ 1 ] }]
"""

BLS_PARAMS = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            resp = pb_utils.InferenceRequest(
                model_name="echo_params", inputs=r.inputs(), requested_output_names=["PARAMS", "ID"],
                request_id="inner", parameters={"from": "bls", "depth": 1},
            ).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            out.append(pb_utils.InferenceResponse(resp.output_tensors()))
        return out
"""

PARAMS_ENSEMBLE_CONFIG = """platform: "ensemble"
max_batch_size: 0
input [{ name: "X", data_type: TYPE_FP32, dims: [ 1 ] }]
output [{ name: "PARAMS", data_type: TYPE_STRING, dims: [ 1 ] }, { name: "ID", data_type: TYPE_STRING, dims: [ 1 ] }]
ensemble_scheduling { step [
  { model_name: "echo_params", model_version: -1, input_map { key: "X", value: "X" },
    output_map { key: "PARAMS", value: "PARAMS" }, output_map { key: "ID", value: "ID" } } ] }
"""


def _write(root: Path, name: str, config: str | None, src: str) -> None:
    (root / name / "1").mkdir(parents=True)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(src)


@pytest.fixture(scope="module")
def finalized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("finalize") / "add_sub"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, finalized: Path) -> Iterator[FwServer]:
    if not (SAMPLES / "simple" / "1" / "model.onnx").is_file():
        if os.environ.get("FW_REQUIRE"):
            pytest.fail(f"Triton samples missing in {SAMPLES}: run `make models`")
        pytest.skip(f"Triton samples missing in {SAMPLES}: run `make models`")
    root = tmp_path_factory.mktemp("pyrepo")
    shutil.copytree(SAMPLES / "simple", root / "simple")
    _write(root, "add_sub", ADD_SUB_CONFIG % finalized, ADD_SUB)
    _write(root, "batched", BATCHED_CONFIG, BATCHED)
    _write(root, "bls", BLS_CONFIG, BLS)
    _write(root, "completing", None, COMPLETING)
    _write(root, "repeat", REPEAT_CONFIG, REPEAT)
    _write(root, "metered", METERED_CONFIG, METERED)
    _write(root, "until_cancelled", UNTIL_CANCELLED_CONFIG, UNTIL_CANCELLED)
    _write(root, "grouped", GROUPED_CONFIG, GROUPED)
    _write(root, "optional", OPTIONAL_CONFIG % 0, OPTIONAL)
    _write(root, "partial", PARTIAL_CONFIG, PARTIAL)
    _write(root, "bls_edges", BLS_CANCEL_CONFIG, BLS_EDGES)
    _write(root, "accumulate", ACCUMULATE_CONFIG, ACCUMULATE)
    _write(root, "echo_params", ECHO_PARAMS_CONFIG, ECHO_PARAMS)
    _write(root, "counting", COUNTING_CONFIG, COUNTING)
    _write(root, "error_code", RESPONSE_PARAMS_CONFIG, ERROR_CODE)
    for name, cfg in (
        ("response_params_ensemble", RESPONSE_PARAMS_ENSEMBLE_CONFIG),
        ("acc_ensemble", ACC_ENSEMBLE_CONFIG),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(cfg)
    _write(root, "response_params", RESPONSE_PARAMS_CONFIG, RESPONSE_PARAMS)
    _write(root, "bls_response_params", RESPONSE_PARAMS_CONFIG, BLS_RESPONSE_PARAMS)
    _write(root, "bls_params", ECHO_PARAMS_CONFIG, BLS_PARAMS)
    (root / "params_ensemble" / "1").mkdir(parents=True)
    (root / "params_ensemble" / "config.pbtxt").write_text(PARAMS_ENSEMBLE_CONFIG)
    (root / "partial_ensemble" / "1").mkdir(parents=True)
    (root / "partial_ensemble" / "config.pbtxt").write_text(PARTIAL_ENSEMBLE_CONFIG)
    _write(root, "optional_batched", OPTIONAL_CONFIG % 4, OPTIONAL)
    for name, cfg in (
        ("optional_ensemble", OPTIONAL_ENSEMBLE_CONFIG),
        ("optional_pipeline", OPTIONAL_PIPELINE_CONFIG),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(cfg)
    _write(root, "bls_cancel", BLS_CANCEL_CONFIG, BLS_CANCEL % ("", "call.exec(decoupled=True)"))
    _write(
        root,
        "bls_async_cancel",
        BLS_CANCEL_CONFIG,
        BLS_CANCEL % ("async ", "await call.async_exec(decoupled=True)"),
    )
    srv = FwServer(
        FW_BIN,
        None,
        "--metrics-port",
        str(METRICS_PORT),
        "--model-repository",
        str(root),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "*",
        "--python",
        sys.executable,
        # tritonserver's options: headers named x-fw-... reach the models as request parameters
        "--http-header-forward-pattern",
        "^x-fw-",
        "--cache-config",
        "local,size=1048576",
        "--grpc-header-forward-pattern",
        "^x-fw-",
        grpc=True,
    )
    srv.wait_ready()
    yield srv
    children = _children(srv.proc.pid)
    assert children, "the Python models run in processes of their own"
    assert srv.stop() == 0, srv.log()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in children if Path(f"/proc/{pid}").exists()]
    assert not left, f"model processes {left} outlived fw serve"


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _client(server: FwServer, proto: str):
    if proto == "http":
        return httpclient, httpclient.InferenceServerClient(server.url)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


def _add_sub(mod, client, a: np.ndarray, b: np.ndarray):
    ins = [mod.InferInput("INPUT0", [4], "FP32"), mod.InferInput("INPUT1", [4], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    return client.infer("add_sub", ins)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_add_sub(server: FwServer, proto: str) -> None:
    mod, client = _client(server, proto)
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32)
    res = _add_sub(mod, client, a, b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - b)
    cfg = client.get_model_config("add_sub")
    cfg = (
        cfg
        if proto == "http"
        else __import__("google.protobuf.json_format").protobuf.json_format.MessageToDict(cfg)
    )
    cfg = cfg.get("config", cfg)
    assert cfg["backend"] == "python"
    assert cfg.get("default_model_filename", cfg.get("defaultModelFilename")) == "model.py"
    meta = client.get_model_metadata("add_sub")
    platform = meta["platform"] if proto == "http" else meta.platform
    assert platform in ("", "python")


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_error_response_and_crash(server: FwServer, proto: str) -> None:
    mod, client = _client(server, proto)
    b = np.zeros(4, dtype=np.float32)
    with pytest.raises(InferenceServerException, match="13 is unlucky"):
        _add_sub(mod, client, np.array([13, 0, 0, 0], dtype=np.float32), b)
    # A model process that dies fails its request, saying so, and the next request gets a fresh one.
    with pytest.raises(InferenceServerException, match="exit status 9"):
        _add_sub(mod, client, np.array([666, 0, 0, 0], dtype=np.float32), b)
    res = _add_sub(mod, client, np.array([1, 1, 1, 1], dtype=np.float32), b)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), np.ones(4, dtype=np.float32))


def test_one_execute_per_batch_of_requests(server: FwServer) -> None:
    """Four concurrent requests reach one ``execute`` (preferred batch 4), each answered on its own."""
    client = httpclient.InferenceServerClient(server.url, concurrency=4)
    words = [b"alpha", b"beta", b"gamma", b"delta"]
    pending = []
    for w in words:
        x = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        x.set_data_from_numpy(np.array([[w]], dtype=object), binary_data=True)
        pending.append(client.async_infer("batched", [x]))
    for w, p in zip(words, pending, strict=True):
        res = p.get_result()
        assert res.as_numpy("UPPER")[0, 0] == w.upper()
        assert res.as_numpy("N")[0, 0] == 4
    stats = client.get_inference_statistics("batched")["model_stats"][0]
    assert stats["execution_count"] == 1 and stats["inference_count"] == 4, stats


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bls_calls_the_onnx_model(server: FwServer, proto: str) -> None:
    mod, client = _client(server, proto)
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    ins = [mod.InferInput("INPUT0", [2, 16], "INT32"), mod.InferInput("INPUT1", [2, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    res = client.infer("bls", ins)
    np.testing.assert_array_equal(res.as_numpy("TWICE"), 2 * (a + b))


def test_auto_complete_config(server: FwServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    cfg = client.get_model_config("completing")
    assert cfg["max_batch_size"] == 4 and cfg["backend"] == "python"
    assert [i["name"] for i in cfg["input"]] == ["X"] and cfg["input"][0]["data_type"] == "TYPE_FP64"
    x = httpclient.InferInput("X", [3, 2], "FP64")
    data = np.arange(6, dtype=np.float64).reshape(3, 2)
    x.set_data_from_numpy(data)
    np.testing.assert_array_equal(client.infer("completing", [x]).as_numpy("Y"), data**2)


def test_concurrent_requests(server: FwServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def one(i: int) -> None:
        a = np.full(4, 1000 + i, dtype=np.float32)
        res = _add_sub(grpcclient, client, a, np.ones(4, dtype=np.float32))
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + 1)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(200)))


def test_unload_runs_finalize_and_load_with_override(server: FwServer, finalized: Path) -> None:
    client = httpclient.InferenceServerClient(server.url)
    client.unload_model("add_sub")
    deadline = time.monotonic() + 20
    while not finalized.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert finalized.read_text() == "finalized"
    assert not client.is_model_ready("add_sub")
    # A load with a configuration override: two instances, each a process of its own.
    override = (
        '{"backend": "python", "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},'
        ' {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],'
        ' "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},'
        ' {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],'
        ' "instance_group": [{"kind": "KIND_CPU", "count": 2}],'
        f' "parameters": {{"finalized": {{"string_value": "{finalized}"}}}}}}'
    )
    before = len(_children(server.proc.pid))
    client.load_model("add_sub", config=override)
    assert client.is_model_ready("add_sub")
    assert client.get_model_config("add_sub")["instance_group"][0]["count"] == 2
    assert len(_children(server.proc.pid)) == before + 2
    res = _add_sub(httpclient, client, np.ones(4, dtype=np.float32), np.ones(4, dtype=np.float32))
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), np.full(4, 2, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model("add_sub", config='{"backend": "python", "platform": "onnxruntime_onnx"}')
    assert client.is_model_ready("add_sub"), "a refused override leaves the model serving"


def test_decoupled_over_the_grpc_stream(server: FwServer) -> None:
    """Each response of a decoupled model comes over the stream as it is sent, in order, with Triton's
    ``triton_final_response`` parameter; the empty final response only when asked for."""
    import queue

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        requests = {"a": [5, 6, 7], "b": [1, 2, 3, 4, 5, 6, 7, 8]}
        for rid, values in requests.items():
            x = grpcclient.InferInput("IN", [len(values)], "INT32")
            x.set_data_from_numpy(np.array(values, dtype=np.int32))
            client.async_stream_infer("repeat", [x], request_id=rid, enable_empty_final_response=True)
        seen: dict[str, list[int]] = {"a": [], "b": []}
        finals = set()
        while len(finals) < 2:
            result, error = got.get(timeout=30)
            assert error is None, error
            resp = result.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            if final:
                assert not resp.outputs, "the empty final response carries no outputs"
                finals.add(resp.id)
                continue
            assert result.as_numpy("IDX")[0] == len(seen[resp.id])
            assert resp.parameters["index"].int64_param == len(
                seen[resp.id]
            )  # each response's own parameters
            seen[resp.id].append(int(result.as_numpy("OUT")[0]))
        assert seen == requests
        # An error response ends its request; the stream goes on.
        x = grpcclient.InferInput("IN", [1], "INT32")
        x.set_data_from_numpy(np.array([-1], dtype=np.int32))
        client.async_stream_infer("repeat", [x], request_id="bad")
        result, error = got.get(timeout=30)
        assert result is None and "-1 is not a count" in str(error)
        # Without enable_empty_final_response: the responses only.
        x.set_data_from_numpy(np.array([9], dtype=np.int32))
        client.async_stream_infer("repeat", [x], request_id="c")
        result, error = got.get(timeout=30)
        assert error is None and result.as_numpy("OUT")[0] == 9
        with pytest.raises(queue.Empty):
            got.get(timeout=0.5)
    finally:
        client.stop_stream()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_optional_inputs(server: FwServer, proto: str) -> None:
    """Inputs marked ``optional: true`` may be left out, in any combination; the model gets None for them, and
    the configuration says they are optional."""
    mod, client = _client(server, proto)
    for model, shape in (("optional", [1]), ("optional_batched", [1, 1]), ("optional_ensemble", [1, 1])):
        for has0 in (True, False):
            for has1 in (True, False):
                inputs = []
                for name, has, value in (("INPUT0", has0, 1), ("INPUT1", has1, 2)):
                    if has:
                        x = mod.InferInput(name, shape, "INT32")
                        x.set_data_from_numpy(np.full(shape, value, dtype=np.int32))
                        inputs.append(x)
                if model != "optional" and not inputs:
                    # With a batch axis the batch size comes from the inputs: at least one is needed.
                    with pytest.raises(InferenceServerException, match="every input was left out"):
                        client.infer(model, inputs)
                    continue
                res = client.infer(model, inputs)
                want = (1 if has0 else 5) + (2 if has1 else 10)
                assert res.as_numpy("OUTPUT0").flat[0] == want, (model, has0, has1)
    # A step that leaves an optional input out of its input_map: its model never gets it (INPUT1 = 10 in step 1)
    x = mod.InferInput("INPUT0", [1, 1], "INT32")
    x.set_data_from_numpy(np.full((1, 1), 3, dtype=np.int32))
    assert client.infer("optional_pipeline", [x]).as_numpy("OUTPUT0").flat[0] == 5 + 13
    for model in ("optional", "optional_ensemble"):
        config = client.get_model_config(model)
        if proto == "grpc":
            assert all(i.optional for i in config.config.input), model
        else:
            assert all(i["optional"] for i in config["input"]), model


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_partial_response(server: FwServer, proto: str) -> None:
    """An output the model's response leaves out is left out of the answer (directly and through an ensemble,
    whose log says so in Triton's words); the others answer as sent."""
    mod, client = _client(server, proto)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    for model in ("partial", "partial_ensemble"):
        x, y = mod.InferInput("INPUT0", [1, 16], "INT32"), mod.InferInput("INPUT1", [1, 16], "INT32")
        x.set_data_from_numpy(a)
        y.set_data_from_numpy(b)
        outs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
        res = client.infer(model, [x, y], outputs=outs)
        want = a + b if model == "partial" else a  # the ensemble adds simple's INPUT1 - INPUT1
        np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), want)
        assert res.as_numpy("OUTPUT1") is None, model
    assert "Composing models did not output tensor OUTPUT1" in server.log()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_sequence_batching(server: FwServer, proto: str) -> None:
    """A Python model with sequence_batching gets the START control and its implicit state as inputs, and its
    requests' correlation_id() and flags(); two interleaved sequences keep their own running sums."""
    mod, client = _client(server, proto)
    base = 1000 if proto == "http" else 2000
    seqs = {base + 1: [1, 2, 3], base + 2: [10, 20]}
    sums = {k: 0 for k in seqs}
    for step in range(3):
        for sid, values in seqs.items():
            if step >= len(values):
                continue
            x = mod.InferInput("INPUT", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[values[step]]], dtype=np.int32))
            res = client.infer(
                "accumulate",
                [x],
                sequence_id=sid,
                sequence_start=step == 0,
                sequence_end=step == len(values) - 1,
            )
            sums[sid] += values[step]
            assert res.as_numpy("OUTPUT")[0][0] == sums[sid], (sid, step)
            assert res.as_numpy("CORR")[0][0] == sid
            start, end = step == 0, step == len(values) - 1
            assert res.as_numpy("FLAGS")[0][0] == (int(start) + 2 * int(end)) * 10 + int(start), (sid, step)
            assert res.as_numpy("ACC_OUT") is None, "implicit state stays inside"
    config = client.get_model_config("accumulate")
    assert config.config.sequence_batching if proto == "grpc" else config["sequence_batching"], config


def test_decoupled_requests_are_batched(server: FwServer) -> None:
    """A decoupled model with dynamic batching gets its requests together in one ``execute``, as Triton's does;
    each is still answered on its own (and one answer alone does not wait for the other)."""
    import queue

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        for rid in ("a", "b"):
            x = grpcclient.InferInput("IN", [1, 2], "FP32")
            x.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
            client.async_stream_infer("grouped", [x], request_id=rid)
        answers = {}
        for _ in range(2):
            result, error = got.get(timeout=30)
            assert error is None, error
            answers[result.get_response().id] = int(result.as_numpy("N")[0][0])
        assert answers == {"a": 2, "b": 2}, answers
    finally:
        client.stop_stream()


@pytest.mark.parametrize("model", ["bls_cancel", "bls_async_cancel"])
def test_bls_stream_cancel(server: FwServer, model: str) -> None:
    """A model's cancel() of its BLS stream reaches the decoupled model it calls (``is_cancelled()``), whose
    CANCELLED response still comes back; a sum it never reaches runs the stream to its end."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for max_sum, want_sum, want_cancelled in [(10, 10, True), (100, 20, False)]:
        x = grpcclient.InferInput("IN", [1], "INT32")
        x.set_data_from_numpy(np.array([1], dtype=np.int32))
        m = grpcclient.InferInput("MAX_SUM", [1], "INT32")
        m.set_data_from_numpy(np.array([max_sum], dtype=np.int32))
        res = client.infer(model, [x, m])
        assert res.as_numpy("SUM")[0] == want_sum, (max_sum, res.as_numpy("SUM"))
        assert bool(res.as_numpy("IS_CANCELLED")[0]) is want_cancelled


def test_bls_edges(server: FwServer) -> None:
    """A BLS stream cancelled before its first response still reaches the called model (which ends at once
    with CANCELLED, not after its 200 responses); a BLS call to a model that leaves an output out answers the
    others."""
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def call(max_sum: int):
        x = grpcclient.InferInput("IN", [1], "INT32")
        x.set_data_from_numpy(np.array([3], dtype=np.int32))
        m = grpcclient.InferInput("MAX_SUM", [1], "INT32")
        m.set_data_from_numpy(np.array([max_sum], dtype=np.int32))
        res = client.infer("bls_edges", [x, m])
        return int(res.as_numpy("SUM")[0]), bool(res.as_numpy("IS_CANCELLED")[0])

    began = time.monotonic()
    responses, cancelled = call(-1)
    assert cancelled and responses <= 2 and time.monotonic() - began < 5, (responses, cancelled)
    assert call(0) == (6, True)


def test_a_client_that_cancels_is_seen_by_the_model(server: FwServer) -> None:
    """``stop_stream(cancel_requests=True)`` ends the request; the model's ``is_cancelled()`` turns true."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: None)
    x = grpcclient.InferInput("IN", [1], "INT32")
    x.set_data_from_numpy(np.array([7], dtype=np.int32))
    n = grpcclient.InferInput("COUNT", [1], "INT32")
    n.set_data_from_numpy(np.array([200], dtype=np.int32))
    client.async_stream_infer("until_cancelled", [x, n])
    time.sleep(0.5)
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 10
    while "until_cancelled: cancelled after" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "until_cancelled: cancelled after" in server.log()


def test_decoupled_generate_stream_and_unary_refused(server: FwServer) -> None:
    import json as jsonlib
    import urllib.request

    req = urllib.request.Request(
        f"http://{server.url}/v2/models/repeat/generate_stream",
        data=jsonlib.dumps({"IN": [3, 1, 4]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = [
            jsonlib.loads(line[6:]) for line in r.read().decode().splitlines() if line.startswith("data: ")
        ]
    assert [e["OUT"] for e in events] == [3, 1, 4] and [e["IDX"] for e in events] == [0, 1, 2]
    for mod, client in (_client(server, "http"), _client(server, "grpc")):
        x = mod.InferInput("IN", [2], "INT32")
        x.set_data_from_numpy(np.array([1, 2], dtype=np.int32))
        with pytest.raises(InferenceServerException, match="decoupled"):
            client.infer("repeat", [x])


def test_metrics_custom_and_triton_names(server: FwServer) -> None:
    """Python models' custom metrics and Triton's nv_inference_* series, on /metrics and on --metrics-port."""
    import urllib.request

    client = httpclient.InferenceServerClient(server.url)
    for n in (1, 3, 10):
        x = httpclient.InferInput("X", [n], "FP32")
        x.set_data_from_numpy(np.ones(n, dtype=np.float32))
        client.infer("metered", [x])
    for url in (f"http://{server.url}/metrics", f"http://127.0.0.1:{METRICS_PORT}/metrics"):
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        assert "# HELP metered_requests_total Requests metered saw" in text
        assert "# TYPE metered_requests_total counter" in text
        assert 'metered_requests_total{model="metered",version="1"} 3' in text
        assert 'metered_request_elements_bucket{model="metered",le="4"} 2' in text
        assert 'metered_request_elements_count{model="metered"} 3' in text
        assert 'nv_inference_request_success{model="metered",version="1"} 3' in text
        assert 'nv_inference_count{model="metered",version="1"} 3' in text
        assert 'nv_inference_exec_count{model="metered",version="1"} 3' in text
        assert "nv_inference_request_duration_us" in text and "nv_inference_pending_request_count" in text
        assert "fw_http_requests_total" in text
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/v2/models/metered", timeout=10)
    assert e.value.code == 404


def _echo(mod, client, model: str, **kw):
    x = mod.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([1], dtype=np.float32))
    res = client.infer(model, [x], **kw)
    return json.loads(res.as_numpy("PARAMS")[0]), res.as_numpy("ID")[0].decode()


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_request_parameters_id_and_forwarded_headers(server: FwServer, proto: str) -> None:
    mod, client = _client(server, proto)
    params = {"temperature": 0.5, "n": 3, "stream": True, "stop": "END"}
    headers = {"x-fw-tenant": 'acme "quoted" ', "x-other": "not forwarded"}
    for model in ("echo_params", "params_ensemble"):  # an ensemble's steps see their request's
        got, rid = _echo(mod, client, model, request_id="req-7", parameters=params, headers=headers)
        assert got == {**params, "x-fw-tenant": 'acme "quoted" '}, (model, got)
        assert rid == "req-7", model
    # None: "{}" and "", as Triton's Python backend gives them
    got, rid = _echo(mod, client, "echo_params")
    assert (got, rid) == ({}, "")
    # BLS: the called model sees the BLS request's own parameters and ID, not its caller's
    got, rid = _echo(mod, client, "bls_params", request_id="outer", parameters={"outer": 1})
    assert (got, rid) == ({"from": "bls", "depth": 1}, "inner")


def test_reserved_and_malformed_parameters_are_refused(server: FwServer) -> None:
    import urllib.error
    import urllib.request

    def post(path: str, body: dict, headers: dict | None = None) -> tuple[int, str]:
        req = urllib.request.Request(
            "http://" + server.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    x = {"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}
    code, text = post("/v2/models/echo_params/infer", {"inputs": [x], "parameters": {"triton_mine": 1}})
    assert code == 400 and "reserved for Triton usage" in text, text
    code, text = post("/v2/models/echo_params/infer", {"inputs": [x], "parameters": {"nested": {"a": 1}}})
    assert code == 400 and "has invalid type" in text, text
    # generate: keys that are not inputs are parameters too
    code, text = post(
        "/v2/models/echo_params/generate", {"X": [1.0], "id": "g1", "max_tokens": 16}, {"X-Fw-Trace": "t"}
    )
    assert code == 200, text
    got = json.loads(text)
    assert json.loads(got["PARAMS"]) == {"max_tokens": 16, "X-Fw-Trace": "t"} and got["ID"] == "g1", got
    # gRPC (tritonclient refuses "triton_" keys itself; the raw stub sends one): refused, naming Triton's own
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    req = service_pb2.ModelInferRequest(model_name="echo_params")
    inp = req.inputs.add(name="X", datatype="FP32", shape=[1])
    inp.contents.fp32_contents.append(1.0)
    req.parameters["triton_mine"].int64_param = 1
    with grpc.insecure_channel(server.grpc_url) as ch:
        with pytest.raises(grpc.RpcError) as e:
            service_pb2_grpc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        "reserved for Triton usage" in e.value.details()
        and "triton_enable_empty_final_response" in e.value.details()
    )


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_response_cache(server: FwServer, proto: str) -> None:
    """``response_cache { enable: true }`` with ``--cache-config local,size=N``: a request seen before is answered
    without running the model (the same count comes back), another one runs it; the statistics count hits and misses
    as Triton's do, and the configuration says the cache is on."""
    mod, client = _client(server, proto)

    def calls(values: list[float], **kw) -> int:
        x = mod.InferInput("X", [2], "FP32")
        x.set_data_from_numpy(np.array(values, dtype=np.float32))
        return int(client.infer("counting", [x], **kw).as_numpy("CALLS")[0])

    def stats() -> tuple[int, int, int]:
        s = client.get_inference_statistics("counting")
        if proto == "grpc":
            st = s.model_stats[0].inference_stats
            return st.cache_hit.count, st.cache_miss.count, s.model_stats[0].execution_count
        st = s["model_stats"][0]["inference_stats"]
        return (
            int(st["cache_hit"]["count"]),
            int(st["cache_miss"]["count"]),
            int(s["model_stats"][0]["execution_count"]),
        )

    h0, m0, e0 = stats()
    seed = 1.0 if proto == "http" else 2.0  # each protocol's own requests (the server is shared)
    first = calls([seed, 0])
    assert calls([seed, 0]) == first  # answered from the cache: execute did not run again
    assert calls([seed, 1]) == first + 1  # other inputs: run
    assert calls([seed, 0], parameters={"k": "v"}) == first + 2  # other parameters: run
    h, m, e = stats()
    assert (h - h0, m - m0, e - e0) == (1, 3, 3), (h - h0, m - m0, e - e0)
    config = client.get_model_config("counting")
    enabled = config.config.response_cache.enable if proto == "grpc" else config["response_cache"]["enable"]
    assert enabled is True


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_response_parameters(server: FwServer, proto: str) -> None:
    """``InferenceResponse(..., parameters={...})`` reaches the client as the response's parameters (bool, int,
    str), and a BLS caller as ``response.parameters()``; other types are refused with Triton's sentence."""
    mod, client = _client(server, proto)

    def infer(model: str, text: str):
        x = mod.InferInput("P", [1], "BYTES")
        x.set_data_from_numpy(np.array([text.encode()], dtype=object))
        return client.infer(model, [x])

    params = {"tokens": 7, "finish": "stop", "cached": False}
    res = infer("response_params", json.dumps(params))
    if proto == "grpc":
        got = {}
        for k, v in res.get_response().parameters.items():
            got[k] = getattr(v, v.WhichOneof("parameter_choice"))
    else:
        got = res.get_response()["parameters"]
    assert got == params
    assert json.loads(infer("bls_response_params", json.dumps(params)).as_numpy("OUT")[0]) == params
    ens = infer("response_params_ensemble", json.dumps(params)).get_response()
    assert not (ens.parameters if proto == "grpc" else ens.get("parameters")), (
        "an ensemble answers none of its steps'"
    )
    with pytest.raises(InferenceServerException, match="Expect parameters values to have type bool/int/str"):
        infer("response_params", json.dumps({"p": 0.5}))


def test_error_codes_of_a_models_answer(server: FwServer) -> None:
    """A model's ``TritonError(msg, code)`` answer: the message unchanged, the status as Triton maps the code (gRPC
    and HTTP); INVALID_ARG is fw's invalid input (400 under /v2)."""
    import grpc

    cases = {
        "UNKNOWN": (grpc.StatusCode.UNKNOWN, 400),
        "INTERNAL": (grpc.StatusCode.INTERNAL, 500),
        "NOT_FOUND": (grpc.StatusCode.NOT_FOUND, 404),
        "INVALID_ARG": (grpc.StatusCode.INVALID_ARGUMENT, 400),
        "UNAVAILABLE": (grpc.StatusCode.UNAVAILABLE, 503),
        "UNSUPPORTED": (grpc.StatusCode.UNIMPLEMENTED, 501),
        "ALREADY_EXISTS": (grpc.StatusCode.ALREADY_EXISTS, 400),
        "CANCELLED": (grpc.StatusCode.CANCELLED, 400),
    }
    gc = grpcclient.InferenceServerClient(server.grpc_url)
    hc = httpclient.InferenceServerClient(server.url)
    for name, (gcode, hstatus) in cases.items():
        for mod, client in ((grpcclient, gc), (httpclient, hc)):
            x = mod.InferInput("P", [1], "BYTES")
            x.set_data_from_numpy(np.array([name.encode()], dtype=object))
            with pytest.raises(InferenceServerException) as e:
                client.infer("error_code", [x])
            assert e.value.message() == "error code: " + name, (name, e.value.message())
            want = f"StatusCode.{gcode.name}" if mod is grpcclient else str(hstatus)
            assert e.value.status() == want, (name, mod.__name__, e.value.status())
    # Triton's failure metric counts them under reason BACKEND (INVALID_ARG, an invalid input, under OTHER)
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=30) as r:
        text = r.read().decode()
    m = re.search(
        r'nv_inference_request_failure\{model="error_code",reason="BACKEND",version="1"\} (\d+)', text
    )
    assert m and int(m.group(1)) >= 2 * (len(cases) - 1), m and m.group(0)


def test_response_cache_refused_for_a_stateful_ensemble(server: FwServer) -> None:
    """An ensemble that runs a stateful model cannot enable the response cache: its answers depend on the sequence."""
    client = httpclient.InferenceServerClient(server.url)
    cfg = client.get_model_config("acc_ensemble")
    cfg["response_cache"] = {"enable": True}
    with pytest.raises(InferenceServerException, match="stateful model"):
        client.load_model("acc_ensemble", config=json.dumps(cfg))
    assert client.is_model_ready("acc_ensemble")  # the old load still serves


def test_triton_grpc_error_ends_the_stream(server: FwServer) -> None:
    """With the stream metadata ``triton_grpc_error: true`` (Triton's), a failed request ends the stream with its
    status; without it, the error comes as a message and the stream goes on."""
    import queue

    def stream(headers: dict | None):
        got: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.start_stream(callback=lambda result, error: got.put(error or result), headers=headers)
        try:
            yield from _stream_requests(client, got)
        finally:
            client.stop_stream()

    def _stream_requests(client, got):
        for name in ("ok", "INTERNAL", "ok"):
            model = "echo_params" if name == "ok" else "error_code"
            x = grpcclient.InferInput("X" if name == "ok" else "P", [1], "FP32" if name == "ok" else "BYTES")
            x.set_data_from_numpy(
                np.array([1], np.float32) if name == "ok" else np.array([name.encode()], dtype=object)
            )
            client.async_stream_infer(model, [x])
            yield got.get(timeout=30)

    plain = list(stream(None))
    assert isinstance(plain[1], InferenceServerException) and not isinstance(
        plain[2], InferenceServerException
    )
    gen = stream({"triton_grpc_error": "true"})
    first = next(gen)
    second = next(gen)
    assert not isinstance(first, InferenceServerException)
    assert isinstance(second, InferenceServerException) and second.status() == "StatusCode.INTERNAL", second
    gen.close()
