# The process fw serve starts for each instance of a Python-backend model
# (Triton's backend "python"): it provides the module
# triton_python_backend_utils, loads the model's model.py, and runs its
# TritonPythonModel's initialize, execute and finalize on the messages fw
# sends over this process's standard input and output.
#
# A message is a 4-byte little-endian header length, a JSON header, and
# the bytes of the tensors the header lists ("size" each), one after the
# other. Tensor bytes are little-endian and row-major; a BYTES tensor's
# are Triton's serialized form (each element's 4-byte length, then its
# bytes). The model's own prints go to standard error, which fw logs.
#
# Messages are multiplexed: a reader thread hands fw's "execute" and
# "finalize" to the main thread, which runs the model, "is_ready" to a
# thread of its own (it answers while execute runs), and "bls_result" to
# the thread waiting for it (by "id"); any thread may send. A decoupled
# model's responses ("send", by request "req") may leave from any thread,
# during execute or after it returned. A non-decoupled model's response
# sender keeps the request's one answer for the execute call's "result",
# which waits for it when execute returned None for the request.
# Coroutines (async execute, initialize, finalize, is_ready) run on one
# event loop kept for the process's life; a decoupled model's async
# execute runs there in the background, so several run at once.
import asyncio
import atexit
import enum
import gc
import importlib.util
import inspect
import itertools
import json
import operator
import os
import queue
import struct
import sys
import threading
import traceback
import types
import weakref

import numpy as np

MAX_HEADER = 1 << 20

# TRITONSERVER_DataType's codes, by position.
_CODES = [
    "INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16",
    "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16",
]  # fmt: skip

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


class Channel:
    """The framed messages to and from fw."""

    def __init__(self, rd, wr):
        self.rd, self.wr = rd, wr
        self.wlock = threading.Lock()
        self.main = queue.Queue()
        self.waiters = {}
        self.ids = itertools.count(1)
        # Requests in flight (by fw's id) and those fw said were cancelled:
        # a request's is_cancelled() reads this set, filled by the reader.
        self.live = set()
        self.cancelled = set()
        # Runs fw's "is_ready" messages (set once the model is loaded).
        self.on_is_ready = None
        # Between initialize's return and finalize: BLS calls are taken then
        # only, as Triton's.
        self.serving = False
        # The model has sequence_batching { iterative_sequence: true }: it
        # may reschedule requests.
        self.iterative = False

    def end_request(self, req):
        self.live.discard(req)
        self.cancelled.discard(req)

    def _read(self, n):
        buf = self.rd.read(n)
        if buf is None or len(buf) != n:
            raise EOFError("fw closed the channel")
        return buf

    def recv(self):
        (n,) = struct.unpack("<I", self._read(4))
        if n > MAX_HEADER:
            raise ValueError(f"header of {n} bytes")
        head = json.loads(self._read(n))
        datas = []
        for t in head.get("tensors") or ():
            datas.append(self._read(int(t["size"])))
        return head, datas

    def read_loop(self):
        """The reader thread: each message to the thread it is for."""
        try:
            while True:
                head, datas = self.recv()
                if head.get("op") == "cancel":
                    for req in head.get("reqs") or ():
                        if req in self.live:
                            self.cancelled.add(req)
                    continue
                if head.get("op") == "execute":
                    # Live from now: a cancellation right behind it counts.
                    for r in head.get("requests") or ():
                        self.live.add(r.get("req"))
                    self.main.put((head, datas))
                elif head.get("op") == "is_ready":
                    if self.on_is_ready is None:
                        self.send(
                            {
                                "op": "ready_result",
                                "call": head.get("call"),
                                "ready": True,
                            }
                        )
                    else:
                        self.on_is_ready(head)
                elif head.get("op") == "bls_result":
                    if head.get("final", True):
                        q = self.waiters.pop(head.get("id"), None)
                    else:
                        q = self.waiters.get(head.get("id"))
                    if q is not None:
                        q.put((head, datas))
                else:
                    self.main.put((head, datas))
        except (EOFError, OSError, ValueError):
            pass
        except Exception:  # noqa: BLE001 - a message it cannot read ends the channel, never hangs it
            traceback.print_exc()
        self.main.put(None)
        for q in list(self.waiters.values()):
            q.put(None)

    def send(self, head, datas=()):
        h = json.dumps(head).encode()
        with self.wlock:
            self.wr.write(struct.pack("<I", len(h)))
            self.wr.write(h)
            for d in datas:
                self.wr.write(d)
            self.wr.flush()

    def start(self, head, datas=()):
        """Send head under a new id; the queue its answers arrive on."""
        q = queue.Queue()
        head["id"] = i = next(self.ids)
        self.waiters[i] = q
        self.send(head, datas)
        return i, q

    def call(self, head, datas=()):
        """Send head and wait for the answer with its id."""
        _, q = self.start(head, datas)
        got = q.get()
        if got is None:
            raise EOFError("fw closed the channel")
        return got


def _deserialize_bytes(data, count):
    out, off = [], 0
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, off)
        off += 4
        out.append(bytes(data[off : off + n]))
        off += n
    arr = np.empty(count, dtype=np.object_)
    arr[:] = out
    return arr


def _serialize_bytes(arr):
    parts = []
    for v in arr.reshape(-1, order="C"):
        if isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
        elif isinstance(v, str):
            b = v.encode("utf-8")
        elif isinstance(v, np.bytes_):
            b = bytes(v)
        else:
            b = str(v).encode("utf-8")
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def _datatype(arr):
    if arr.dtype == np.object_ or arr.dtype.type in (np.bytes_, np.str_):
        return "BYTES"
    for name, t in _NUMPY.items():
        if t is not np.object_ and arr.dtype == np.dtype(t):
            return name
    raise TypeError(f"numpy dtype {arr.dtype} has no Triton datatype")


def _to_numpy(desc, data):
    """The tensor's elements; BF16's as their uint16 bit patterns."""
    shape = [int(d) for d in desc["shape"]]
    count = 1
    for d in shape:
        count *= d
    if desc["datatype"] == "BYTES":
        return _deserialize_bytes(data, count).reshape(shape)
    if desc["datatype"] == "BF16":
        return np.frombuffer(data, dtype="<u2").reshape(shape)
    dt = np.dtype(_NUMPY[desc["datatype"]]).newbyteorder("<")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _encode(tensors):
    descs, datas = [], []
    for t in tensors:
        arr = t._array
        dt = "BF16" if t._bf16 else _datatype(arr)
        if dt == "BYTES":
            data = _serialize_bytes(arr)
        else:
            data = np.ascontiguousarray(
                arr, dtype=arr.dtype.newbyteorder("<")
            ).tobytes()
        descs.append(
            {
                "name": t.name(),
                "datatype": dt,
                "shape": list(arr.shape),
                "size": len(data),
            }
        )
        datas.append(data)
    return descs, datas


# The response senders not yet final. A model thread that dies holding one
# leaves it in a reference cycle (its traceback's frames): the reaper
# collects those cycles once a second while any sender is open, so that
# __del__ ends the request instead of leaving it waiting.
_open_senders = weakref.WeakSet()


_dropped = queue.SimpleQueue()


class _Answer:
    """A non-decoupled request's answer: its result entry and tensors,
    once its response sender has one (put from any thread)."""

    def __init__(self):
        self._event = threading.Event()
        self.value = None

    def put(self, value):
        self.value = value
        self._event.set()

    def ready(self):
        return self.value is not None

    def wait(self, timeout):
        self._event.wait(timeout)
        return self.ready()


# The answer of a request whose sender the model dropped without a response.
_DROPPED = (
    {
        "error": {
            "message": "the model returned None for the request from execute and dropped its response sender without sending a response",
            "code": 1,
        }
    },
    [],
)


class _Loop:
    """The event loop an async model's coroutines run on, in a thread of
    its own for the process's life (as Triton's stub keeps one): tasks a
    coroutine starts outlive it, and a decoupled model's execute runs in
    the background, so that several run at once."""

    def __init__(self):
        self._loop = None
        self._lock = threading.Lock()

    def _get(self):
        with self._lock:
            if self._loop is None:
                import concurrent.futures

                self._loop = asyncio.new_event_loop()
                # async_exec waits for BLS answers in this pool's threads.
                self._loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(max_workers=64)
                )
                threading.Thread(target=self._run, daemon=True).start()
            return self._loop

    def _run(self):
        # SystemExit or KeyboardInterrupt raised in a coroutine escapes
        # run_forever; the loop runs on, and the coroutine's caller gets it.
        while True:
            try:
                self._loop.run_forever()
            except BaseException:  # noqa: BLE001, S112 - the coroutine's future carries it
                continue

    def run(self, coro):
        """Run coro on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._get()).result()

    def spawn(self, coro):
        """Start coro on the loop; its concurrent.futures.Future."""
        return asyncio.run_coroutine_threadsafe(coro, self._get())


def _reap(channel):
    msg = "the model dropped the request's response sender without sending TRITONSERVER_RESPONSE_COMPLETE_FINAL"
    while True:
        try:
            req = _dropped.get(timeout=1)
        except queue.Empty:
            if len(_open_senders):
                gc.collect()
            continue
        channel.send(
            {
                "op": "send",
                "req": req,
                "final": True,
                "error": {"message": msg, "code": 1},
            }
        )


def make_pb_utils(channel):
    """Triton's triton_python_backend_utils, as models use it."""
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
    pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    pb.TRITONSERVER_REQUEST_RELEASE_ALL = 1
    pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

    class TritonError(Exception):
        UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE = 0, 1, 2, 3, 4
        UNSUPPORTED, ALREADY_EXISTS, CANCELLED = 5, 6, 7

        def __init__(self, message, code=1):
            super().__init__(message)
            self._message, self._code = message, code

        def message(self):
            return self._message

        def code(self):
            return self._code

    class TritonModelException(Exception):
        pass

    def _torch():
        try:
            import torch
            import torch.utils.dlpack
        except ImportError as e:
            raise TritonModelException(
                "DLPack capsules and BF16 tensors need torch in the interpreter fw runs the model with (fw serve --python)"
            ) from e
        return torch

    def _need(value, types, where):
        """value as Triton's bindings take it (bytes for a str, any integer
        for an int), or the TypeError they raise for another type (None
        among them)."""
        types = types if isinstance(types, tuple) else (types,)
        if isinstance(value, types):
            return value
        if str in types and isinstance(value, (bytes, np.bytes_)):
            return bytes(value).decode("utf-8")
        if int in types and value is not None and hasattr(value, "__index__"):
            return operator.index(value)
        names = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{where} must be {names}, not {type(value).__name__}")

    def _tensors(values, where):
        """A list of Tensors: TypeError for no list, TritonModelException
        for an element that is not a Tensor (as Triton's)."""
        values = list(_need(values, (list, tuple), where))
        for v in values:
            if not isinstance(v, Tensor):
                raise TritonModelException(
                    f"{where} holds a {type(v).__name__} where a pb_utils.Tensor belongs"
                )
        return values

    class Tensor:
        def __init__(self, name, array, _bf16=False):
            name = _need(name, str, "Tensor(): name")
            if array is None:
                raise TypeError("Tensor(): the data must be a numpy array, not None")
            if not isinstance(array, np.ndarray):
                array = np.asarray(array)  # as Triton's binding converts a sequence
            self._name, self._array, self._bf16 = name, array, _bf16

        def name(self):
            return self._name

        def as_numpy(self):
            if self._bf16:
                raise TritonModelException(
                    "tensor dtype is bf16 and cannot be converted to numpy; use to_dlpack"
                )
            return self._array

        def is_cpu(self):
            return True

        def shape(self):
            return list(self._array.shape)

        def triton_dtype(self):
            return _CODES.index("BF16" if self._bf16 else _datatype(self._array))

        def to_dlpack(self):
            torch = _torch()
            if self._bf16:
                t = torch.from_numpy(
                    np.ascontiguousarray(self._array).view(np.int16)
                ).view(torch.bfloat16)
            else:
                t = torch.from_numpy(np.ascontiguousarray(self._array))
            return torch.utils.dlpack.to_dlpack(t)

        @staticmethod
        def from_dlpack(name, capsule):
            if not isinstance(name, str) or name == "":
                raise TritonModelException("Tensor name cannot be an empty string.")
            if type(capsule).__name__ != "PyCapsule" and not (
                hasattr(capsule, "__dlpack__") and hasattr(capsule, "__dlpack_device__")
            ):
                raise TritonModelException(
                    "Provided tensor is not supported. Tensor must be a DLPack capsule "
                    "or have `__dlpack__` and `__dlpack_device__` attributes"
                )
            torch = _torch()
            t = (
                capsule
                if isinstance(capsule, torch.Tensor)
                else torch.utils.dlpack.from_dlpack(capsule)
            )
            t = t.detach().cpu().contiguous()
            if t.dtype == torch.bfloat16:
                return Tensor(
                    name, t.view(torch.int16).numpy().view(np.uint16), _bf16=True
                )
            return Tensor(name, t.numpy())

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None, parameters=None):
            self._outputs = _tensors(
                output_tensors, "InferenceResponse(): output_tensors"
            )
            self._error = error
            self._parameters = _response_parameters(parameters)

        def parameters(self):
            """The response's parameters as a JSON object string ("" without any), as Triton's."""
            return self._parameters

        def output_tensors(self):
            return self._outputs

        def has_error(self):
            return self._error is not None

        def error(self):
            return self._error

    def _response_parameters(parameters):
        # Triton's checks and sentences: a dict of str keys and bool, int or str values.
        if parameters is None:
            return "{}"
        if not isinstance(parameters, dict):
            raise TritonModelException(
                f"Expect parameters to be a dictionary, got {type(parameters)}"
            )
        for k, v in parameters.items():
            if not isinstance(k, str):
                raise TritonModelException(
                    f"Expect parameters keys to have type str, found type {type(k)}"
                )
            if not isinstance(v, (bool, int, str)):
                raise TritonModelException(
                    f"Expect parameters values to have type bool/int/str, found type {type(v)}"
                )
        return json.dumps(parameters)

    class InferenceRequest:
        def __init__(
            self,
            model_name,
            inputs,
            requested_output_names,
            request_id="",
            correlation_id=0,
            flags=0,
            timeout=0,
            model_version=-1,
            parameters=None,
            **_ignored,
        ):
            # Triton's argument checks: TypeError for a missing or
            # mistyped argument, as its bindings raise.
            self._model_name = _need(model_name, str, "InferenceRequest(): model_name")
            self._inputs = _tensors(inputs, "InferenceRequest(): inputs")
            self._outputs = [
                _need(n, str, "InferenceRequest(): each of requested_output_names")
                for n in _need(
                    requested_output_names,
                    (list, tuple),
                    "InferenceRequest(): requested_output_names",
                )
            ]
            self._id = _need(request_id, str, "InferenceRequest(): request_id")
            if correlation_id is None:
                raise TypeError(
                    "InferenceRequest(): correlation_id must be int or str, not None"
                )
            if not isinstance(correlation_id, (int, str)):
                raise TritonModelException("Correlation ID must be integer or string")
            self._corr = correlation_id
            self._flags = _need(flags, int, "InferenceRequest(): flags")
            self._timeout = _need(timeout, int, "InferenceRequest(): timeout")
            self._version = _need(
                model_version, int, "InferenceRequest(): model_version"
            )
            if isinstance(parameters, dict):
                parameters = json.dumps(parameters)
            elif parameters is not None and not isinstance(parameters, str):
                raise TypeError(
                    f"InferenceRequest(): parameters must be dict, not {type(parameters).__name__}"
                )
            self._parameters = parameters or "{}"
            self._sender = None
            self._req_id = None  # fw's id of a request it sent
            self._release = 1  # TRITONSERVER_REQUEST_RELEASE_ALL

        def inputs(self):
            return self._inputs

        def requested_output_names(self):
            return self._outputs

        def request_id(self):
            return self._id

        def correlation_id(self):
            return self._corr

        def flags(self):
            return self._flags

        def timeout(self):
            return self._timeout

        def parameters(self):
            return self._parameters

        def model_name(self):
            return self._model_name

        def is_cancelled(self):
            """Whether fw cancelled the request: its client went away,
            its deadline passed, the server is stopping, or the model that
            sent it by BLS called its response iterator's cancel()."""
            return self._req_id is not None and self._req_id in channel.cancelled

        def get_response_sender(self):
            if self._sender is None:
                raise TritonModelException(
                    "Unable to get a response sender: this request was made by the model "
                    "(BLS), not sent to it"
                )
            return self._sender

        def set_release_flags(self, flags):
            """RELEASE_RESCHEDULE runs the request through execute again
            (its sender, its answer still to come), as Triton's iterative
            sequences do; RELEASE_ALL (the default) releases it."""
            _need(flags, int, "set_release_flags(): flags")
            if flags not in (
                pb.TRITONSERVER_REQUEST_RELEASE_ALL,
                pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
            ):
                raise TritonModelException(
                    f"set_release_flags takes TRITONSERVER_REQUEST_RELEASE_ALL or _RESCHEDULE, not {flags}"
                )
            if (
                flags == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
                and not channel.iterative
            ):
                raise TritonModelException(
                    "a request is rescheduled only by a model with sequence_batching { iterative_sequence: true } "
                    "in its config.pbtxt"
                )
            self._release = flags

        def _bls_head(self, decoupled):
            if not channel.serving:
                raise TritonModelException(
                    "BLS is only supported during the 'execute' function."
                )
            if not self._model_name:
                raise TritonModelException(
                    "InferenceRequest needs model_name to be executed"
                )
            descs, datas = _encode(self._inputs)
            head = {
                "op": "bls",
                "model": self._model_name,
                "version": "" if self._version in (-1, None) else str(self._version),
                "tensors": descs,
                "outputs": self._outputs,
                "decoupled": decoupled,
                "parameters": self._parameters,
                "request_id": self._id or "",
            }
            return head, datas

        @staticmethod
        def _bls_response(head, got):
            if head.get("error"):
                return InferenceResponse(
                    error=TritonError(
                        head["error"], head.get("code", TritonError.INTERNAL)
                    )
                )
            resp = InferenceResponse(
                [
                    Tensor(d["name"], _to_numpy(d, b), _bf16=d["datatype"] == "BF16")
                    for d, b in zip(head.get("tensors", []), got)
                ]
            )
            resp._parameters = (
                head.get("parameters") or "{}"
            )  # the called model's, checked when it made them
            return resp

        def exec(self, decoupled=False):
            head, datas = self._bls_head(decoupled)
            if decoupled:
                it = ResponseIterator(*channel.start(head, datas))
                it._peek()  # as Triton's, exec returns once the first response is in
                return it
            return self._bls_response(*channel.call(head, datas))

        def async_exec(self, decoupled=False):
            """exec in an executor thread, started now: an awaitable of its
            answer; the event loop runs on while the called model works (as
            Triton's)."""
            loop = asyncio.get_running_loop()
            return loop.run_in_executor(None, self.exec, decoupled)

    class ResponseIterator:
        """A BLS call to a decoupled model (exec(decoupled=True)): its
        responses as they come, the last one with the final flag (empty
        when the model sent the flag alone)."""

        def __init__(self, call, q):
            self._call, self._q = call, q
            self._done = self._cancelled = False
            self._first = []  # the response exec waited for, not yet iterated

        def _peek(self):
            self._first.append(self._q.get())

        def __iter__(self):
            return self

        def __next__(self):
            if self._done:
                raise StopIteration
            if self._first:
                got = self._first.pop()
            else:
                got = self._q.get()
            if got is None:
                self._done = True
                raise TritonModelException("fw closed the channel during a BLS call")
            head, datas = got
            self._done = head.get("final", True)
            return InferenceRequest._bls_response(head, datas)

        def cancel(self):
            """Ask the called model to stop: its request's is_cancelled()
            turns true; the responses it still sends come through. Nothing
            once its last response has come."""
            if not self._done and not self._cancelled:
                self._cancelled = True
                channel.send({"op": "bls_cancel", "id": self._call})

    class InferenceResponseSender:
        """A request's way to answer, from any thread. A decoupled model's
        sends any number of responses, the last with
        TRITONSERVER_RESPONSE_COMPLETE_FINAL. A non-decoupled model's sends
        the request's one response, during execute or after execute
        returned None for the request; a response execute returns goes
        through it too. Triton's rules and sentences."""

        def __init__(self, req, decoupled):
            self._req = req
            self._decoupled = decoupled
            self._closed = False
            self._sent = 0
            self._lock = threading.Lock()
            # A non-decoupled request's answer, which execute's caller
            # waits for; a decoupled one's responses leave at once.
            self._answer = None if decoupled else _Answer()
            if decoupled:
                _open_senders.add(self)

        def send(self, response=None, flags=0):
            final = flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            if flags not in (0, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL):
                raise TritonModelException(
                    "Unable to send response. Unsupported flag provided."
                )
            if response is None and not final:
                raise TritonModelException(
                    "Inference Response object must be provided when the response flags is set to zero."
                )
            if response is not None and not isinstance(response, InferenceResponse):
                raise TritonModelException(
                    f"send takes an InferenceResponse, not {type(response).__name__}"
                )
            with self._lock:
                if not self._decoupled:
                    if response is not None and self._sent > 0:
                        raise TritonModelException(
                            "Unable to send response. Non-decoupled model cannot send more than one response."
                        )
                    if response is None and self._sent == 0:
                        raise TritonModelException(
                            "Unable to send response. Non-decoupled model cannot send complete final before sending a response."
                        )
                if self._closed:
                    raise TritonModelException(
                        "Unable to send response. Response sender has been closed."
                    )
                if not self._decoupled:
                    if response is not None:
                        self._answer.put(_answer_of(response))
                        self._sent += 1
                        _open_senders.discard(self)
                    self._closed = final
                    return
                head = {"op": "send", "req": self._req, "final": final}
                datas = []
                if response is not None:
                    if response.has_error():
                        head["error"] = _error_head(response.error())
                    else:
                        head["tensors"], datas = _encode(response.output_tensors())
                        head["response"] = True
                        if response.parameters() != "{}":
                            head["parameters"] = response.parameters()
                channel.send(head, datas)
                self._sent += response is not None
                self._closed = final
                if final:
                    _open_senders.discard(self)
                    channel.end_request(self._req)

        def _fail(self, error, raised=True):
            """End a decoupled request the model left open with error (a
            _error_head) as its final response: an exception from execute
            unless raised is False."""
            with self._lock:
                if self._closed or not self._decoupled:
                    return
                self._closed = True
                _open_senders.discard(self)
                head = {"op": "send", "req": self._req, "final": True, "error": error}
                if raised:
                    head["raised"] = True
                channel.send(head)
                channel.end_request(self._req)

        def is_cancelled(self):
            """Whether fw cancelled the request (see
            InferenceRequest.is_cancelled)."""
            return self._req in channel.cancelled

        def __del__(self):
            # A sender dropped without its final flag (the model's thread
            # died) must not leave the request waiting for ever.
            if not self._decoupled:
                if not self._answer.ready():
                    self._answer.value = (
                        _DROPPED  # seen by the waiter's poll: no lock here
                    )
                return
            if self._closed:
                return
            self._closed = True
            channel.end_request(self._req)
            # Sent by the reaper: a finaliser may run inside a send (a
            # collection), where sending again would deadlock on its lock.
            try:
                _dropped.put(self._req)
            except Exception:  # noqa: BLE001, S110 - at interpreter exit there is no one to tell
                pass

    def _answer_of(response):
        """A response as an execute result carries it: its entry and its
        tensors (descriptions with bytes)."""
        if response.has_error():
            return {"error": _error_head(response.error())}, []
        descs, datas = _encode(response.output_tensors())
        entry = {"outputs": len(descs)}
        if response.parameters() != "{}":
            entry["parameters"] = response.parameters()
        return entry, list(zip(descs, datas))

    class MetricFamily:
        """A custom metric family fw exports on /metrics (Triton's custom metrics)."""

        COUNTER, GAUGE, HISTOGRAM = 0, 1, 2

        def __init__(self, name, description, kind, buckets=None):
            import re

            if not isinstance(name, str) or not re.match(
                r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", name
            ):
                raise TritonModelException(
                    f"metric family name {name!r} is not a Prometheus metric name"
                )
            if kind not in (0, 1, 2):
                raise TritonModelException(
                    "kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM"
                )
            self._name, self._kind = name, kind
            self._buckets = [float(b) for b in buckets] if buckets is not None else None
            channel.send(
                {
                    "op": "metric_family",
                    "model": name,
                    "message": str(description),
                    "code": kind,
                    "buckets": self._buckets,
                }
            )

        def Metric(self, labels=None, buckets=None):
            return Metric(self, dict(labels or {}))

    class Metric:
        def __init__(self, family, labels):
            self._family, self._labels, self._value = (
                family,
                {str(k): str(v) for k, v in labels.items()},
                0.0,
            )
            self._send("create", 0.0)

        def _send(self, action, value):
            channel.send(
                {
                    "op": "metric",
                    "model": self._family._name,
                    "labels": self._labels,
                    "action": action,
                    "value": float(value),
                }
            )

        def increment(self, value):
            if self._family._kind == MetricFamily.HISTOGRAM:
                raise TritonModelException(
                    "increment does not apply to a histogram; use observe"
                )
            if self._family._kind == MetricFamily.COUNTER and value < 0:
                raise TritonModelException("a counter only increases")
            self._value += value
            self._send("inc", value)

        def set(self, value):
            if self._family._kind != MetricFamily.GAUGE:
                raise TritonModelException("set applies to a gauge only")
            self._value = float(value)
            self._send("set", value)

        def observe(self, value):
            if self._family._kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("observe applies to a histogram only")
            self._send("observe", value)

        def value(self):
            if self._family._kind == MetricFamily.HISTOGRAM:
                raise TritonModelException("value does not apply to a histogram")
            return self._value

    def _repository(action, **fields):
        """Ask fw's model repository (pb_utils.load_model and its kin); its
        error raises TritonModelException."""
        head, _ = channel.call({"op": "repo", "action": action, **fields})
        if head.get("error"):
            raise TritonModelException(head["error"])
        return head

    def load_model(model_name, config="", files=None):
        """Load (or reload) a model of the server's repository, config (a
        JSON ModelConfig) replacing its config.pbtxt when given, as Triton's
        repository load does."""
        _need(model_name, str, "load_model(): model_name")
        _need(config, str, "load_model(): config")
        if files:
            raise TritonModelException(
                "load_model(files=...): fw loads a model from its directory in the repository; "
                "write the files there and load it without files"
            )
        _repository("load", model=model_name, config=config)

    def unload_model(model_name, unload_dependents=False):
        """Unload a model: it takes no more requests once this returns;
        those in flight finish (this does not wait for them, as Triton's)."""
        _need(model_name, str, "unload_model(): model_name")
        _need(unload_dependents, bool, "unload_model(): unload_dependents")
        _repository("unload", model=model_name, dependents=unload_dependents)

    def is_model_ready(model_name, model_version=""):
        """Whether the model (that version, or its newest) is ready; an
        unknown model raises, as Triton's."""
        _need(model_name, str, "is_model_ready(): model_name")
        _need(model_version, str, "is_model_ready(): model_version")
        return bool(
            _repository("ready", model=model_name, version=model_version).get("ready")
        )

    def get_input_tensor_by_name(request, name):
        for t in request.inputs():
            if t.name() == name:
                return t
        return None

    def get_output_tensor_by_name(response, name):
        for t in response.output_tensors():
            if t.name() == name:
                return t
        return None

    def _config_by_name(model_config, kind, name):
        for io in model_config.get(kind, []):
            if io.get("name") == name:
                return io
        return None

    def triton_string_to_numpy(s):
        return _NUMPY[s.replace("TYPE_", "").replace("STRING", "BYTES")]

    def numpy_to_triton_type(t):
        """TRITONSERVER_DataType's code of a numpy type (None: none)."""
        try:
            return _CODES.index(_datatype(np.empty(0, dtype=t)))
        except (TypeError, ValueError):
            return None

    def triton_to_numpy_type(code):
        """The numpy type of a TRITONSERVER_DataType code (None: none)."""
        if isinstance(code, int) and 0 < code < len(_CODES) and _CODES[code] in _NUMPY:
            return _NUMPY[_CODES[code]]
        return None

    class LogLevel(enum.Enum):
        """pb_utils.LogLevel: Logger.log takes one of these, not a number (as Triton's)."""

        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    class Logger:
        INFO, WARNING, ERROR, VERBOSE = (
            LogLevel.INFO,
            LogLevel.WARNING,
            LogLevel.ERROR,
            LogLevel.VERBOSE,
        )

        @staticmethod
        def log(message, level=LogLevel.INFO):
            message = _need(message, str, "Logger.log(): message")
            _need(level, LogLevel, "Logger.log(): level")
            print(f"{level.name} {message}", file=sys.stderr, flush=True)

        @staticmethod
        def log_info(message):
            Logger.log(message, LogLevel.INFO)

        @staticmethod
        def log_warn(message):
            Logger.log(message, LogLevel.WARNING)

        @staticmethod
        def log_error(message):
            Logger.log(message, LogLevel.ERROR)

        @staticmethod
        def log_verbose(message):
            Logger.log(message, LogLevel.VERBOSE)

    Logger.LogLevel = LogLevel  # as Triton's (pb_utils.Logger.LogLevel.INFO)
    for name, obj in dict(locals()).items():
        if not name.startswith("_") and name not in ("pb", "channel", "name"):
            if isinstance(obj, type):  # tracebacks name them as Triton's module does
                obj.__module__, obj.__qualname__ = pb.__name__, name
            setattr(pb, name, obj)
    pb.get_input_config_by_name = lambda cfg, name: _config_by_name(cfg, "input", name)
    pb.get_output_config_by_name = lambda cfg, name: _config_by_name(
        cfg, "output", name
    )
    pb.serialize_byte_tensor = lambda arr: np.frombuffer(
        _serialize_bytes(np.asarray(arr)), dtype=np.uint8
    )
    pb.deserialize_bytes_tensor = lambda data: _deserialize_bytes_all(bytes(data))
    pb.ModelConfig = ModelConfig
    pb.using_decoupled_model_transaction_policy = lambda cfg: bool(
        cfg.get("model_transaction_policy", {}).get("decoupled", False)
    )
    return pb


class ModelConfig:
    """pb_utils.ModelConfig: the configuration auto_complete_config completes."""

    def __init__(self, cfg):
        self._cfg = cfg
        cfg.setdefault("input", [])
        cfg.setdefault("output", [])
        cfg.setdefault("max_batch_size", 0)
        for io in cfg["input"] + cfg["output"]:
            if "dims" in io:
                io["dims"] = [int(d) for d in io["dims"]]

    def as_dict(self):
        return self._cfg

    def set_max_batch_size(self, n):
        have = self._cfg.get("max_batch_size", 0)
        if have not in (0, int(n)):
            raise ValueError(
                f"max_batch_size {n} conflicts with the configuration's {have}"
            )
        self._cfg["max_batch_size"] = int(n)

    def _add(self, kind, io):
        """Triton's rule: a tensor listed already is completed, not added
        again, and a value that differs from the configuration's is refused."""
        if not isinstance(io, dict) or not io.get("name"):
            raise ValueError(f"{kind} must be a dict with a name")
        for key in ("data_type", "dims"):
            if key not in io:
                raise ValueError(f"{kind} '{io['name']}' needs '{key}'")
        io = dict(io)
        io["dims"] = [int(d) for d in io["dims"]]
        for have in self._cfg[kind]:
            if have.get("name") != io["name"]:
                continue
            for key, value in io.items():
                if key in have and have[key] not in (value, [], "", "TYPE_INVALID"):
                    raise ValueError(
                        f"{kind} '{io['name']}': {key} {value!r} conflicts with the configuration's {have[key]!r}"
                    )
                have[key] = value
            return
        self._cfg[kind].append(io)

    def add_input(self, io):
        self._add("input", io)

    def add_output(self, io):
        self._add("output", io)

    def set_dynamic_batching(self):
        self._cfg.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, policy):
        self._cfg["model_transaction_policy"] = dict(policy)


def _load_module(pb, head):
    sys.path.insert(0, head["dir"])
    spec = importlib.util.spec_from_file_location("model", head["file"])
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise pb.TritonModelException(
            "{} defines no class TritonPythonModel".format(
                os.path.basename(head["file"])
            )
        )
    return module.TritonPythonModel


def _deserialize_bytes_all(data):
    out, off = [], 0
    while off < len(data):
        (n,) = struct.unpack_from("<I", data, off)
        out.append(bytes(data[off + 4 : off + 4 + n]))
        off += 4 + n
    arr = np.empty(len(out), dtype=np.object_)
    arr[:] = out
    return arr


def _error_head(exc):
    """An exception or TritonError as fw reads it: message and code."""
    code = getattr(exc, "code", None)
    code = code() if callable(code) else 1
    if hasattr(exc, "message") and callable(exc.message):
        msg = exc.message()
    elif isinstance(exc, SystemExit):
        msg = f"the model called sys.exit({exc.code!r})"
    elif type(exc).__name__ in ("TritonModelException",):
        msg = str(exc)
    else:
        msg = f"{type(exc).__name__}: {exc}"
    return {
        "message": msg or type(exc).__name__,
        "code": code if isinstance(code, int) else 1,
    }


def _call(loop, fn, *args):
    """fn(*args), a coroutine's result when it is async (run on loop)."""
    res = fn(*args)
    if inspect.iscoroutine(res):
        res = loop.run(res)
    return res


def main():
    # fw names the process after the source (for ps and pgrep); the model
    # sees no arguments, as in Triton's embedded interpreter (unittest.main
    # and argparse read them).
    del sys.argv[1:]
    # Keep the channel on private descriptors; what the model prints goes
    # to standard error.
    rd = os.fdopen(os.dup(0), "rb")
    wr = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    channel = Channel(rd, wr)
    pb = make_pb_utils(channel)
    sys.modules["triton_python_backend_utils"] = pb

    threading.Thread(target=channel.read_loop, daemon=True).start()
    threading.Thread(target=_reap, args=(channel,), daemon=True).start()
    first = channel.main.get()
    if first is None:
        return 0
    head, _ = first
    if head["op"] == "auto":
        try:
            cls = _load_module(pb, head)
            cfg = ModelConfig(head["config"])
            if hasattr(cls, "auto_complete_config"):
                cfg = cls.auto_complete_config(cfg)
                if not isinstance(cfg, ModelConfig):
                    raise pb.TritonModelException(
                        "auto_complete_config must return the ModelConfig it was given"
                    )
            channel.send({"op": "config", "config": cfg.as_dict()})
        except BaseException as e:  # noqa: BLE001 - every failure is the answer
            traceback.print_exc()
            channel.send({"op": "error", **_error_head(e)})
            return 1
        return 0
    loop = _Loop()
    channel.iterative = bool(head.get("iterative"))
    try:
        model = _load_module(pb, head)()
        if hasattr(model, "initialize"):
            _call(loop, model.initialize, head["args"])
    except BaseException as e:  # noqa: BLE001 - every failure is the load's answer
        traceback.print_exc()
        channel.send({"op": "error", **_error_head(e)})
        return 1
    inst = _Instance(
        pb,
        channel,
        model,
        loop,
        bool(head.get("decoupled")),
        head["args"].get("model_name", ""),
    )
    channel.on_is_ready = inst.is_ready
    channel.serving = True
    channel.send({"op": "ready", "has_is_ready": hasattr(model, "is_ready")})

    while True:
        got = channel.main.get()
        if got is None:
            return 0
        head, datas = got
        if head["op"] == "finalize":
            channel.serving = False
            try:
                if hasattr(model, "finalize"):
                    _call(loop, model.finalize)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            channel.send({"op": "done"})
            # Exit now, after the model's atexit hooks: threads still waiting
            # (an executor's BLS call) are not joined, as interpreter exit
            # would.
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        answer, outdatas = inst.execute(head, datas)
        answer["call"] = head.get("call")
        channel.send(answer, outdatas)


def _result(answers):
    """The "result" message of an execute call and its tensors' bytes: each
    request's answer, an entry and its (description, bytes) tensors."""
    out, tensors = [], []
    for entry, ts in answers:
        out.append(entry)
        tensors.extend(ts)
    head = {"op": "result", "responses": out, "tensors": [d for d, _ in tensors]}
    return head, [b for _, b in tensors]


def _answers(requests):
    """Each request's answer (filled by its sender) and fw's id of it; a
    sender still open is watched by the reaper, which collects it if the
    model drops it. No reference to a request outlives this call."""
    out = []
    for req in requests:
        if not req._sender._answer.ready():
            _open_senders.add(req._sender)
        out.append((req._sender._answer, req._req_id))
    return out


class _Instance:
    """The model instance this process runs: its execute calls."""

    def __init__(self, pb, channel, model, loop, decoupled, name):
        self.pb, self.channel, self.model = pb, channel, model
        self.loop, self.decoupled, self.name = loop, decoupled, name
        self._sequences = itertools.count(1)  # an iterative model's sequence IDs

    def is_ready(self, head):
        """Answer fw's "is_ready" from a thread of its own (execute may be
        running): the model's is_ready(), as Triton's stub calls it."""

        def check():
            answer = {"op": "ready_result", "call": head.get("call")}
            try:
                got = _call(self.loop, self.model.is_ready)
                if not isinstance(got, bool):
                    raise self.pb.TritonModelException(
                        f"is_ready() must return a boolean value, it returned {type(got).__name__}"
                    )
                answer["ready"] = got
            except BaseException as e:  # noqa: BLE001 - the model's failure is the check's answer
                traceback.print_exc()
                answer["error"] = _error_head(e)
            self.channel.send(answer)

        threading.Thread(target=check, daemon=True).start()

    def execute(self, head, datas):
        """Run one execute call; its "result" message and tensor bytes."""
        try:
            return self._execute(head, datas)
        finally:
            if not self.decoupled:  # a decoupled request lives until its final response
                for r in head["requests"]:
                    self.channel.end_request(r.get("req"))

    def _requests(self, head, datas):
        pb, requests, i = self.pb, [], 0
        for r in head["requests"]:
            ins = []
            for d in r["inputs"]:
                bf16 = d["datatype"] == "BF16"
                ins.append(pb.Tensor(d["name"], _to_numpy(d, datas[i]), _bf16=bf16))
                i += 1
            corr, flags = r.get("corr") or 0, r.get("flags") or 0
            if self.channel.iterative and not corr:
                # Each request is its own sequence (Triton's iterative
                # sequences): a fresh ID, START on its first pass.
                corr, flags = (
                    next(self._sequences),
                    flags | pb.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
                )
            req = pb.InferenceRequest(
                model_name=self.name,
                inputs=ins,
                requested_output_names=r.get("outputs", []),
                request_id=r.get("request_id", ""),
                correlation_id=corr,
                flags=flags,
                parameters=r.get("parameters") or "{}",
            )
            req._req_id = r.get("req")  # live since the reader read the execute message
            req._sender = pb.InferenceResponseSender(r["req"], self.decoupled)
            requests.append(req)
        return requests

    def _execute(self, head, datas):
        requests = self._requests(head, datas)
        batch, responses = requests, None
        while batch:  # the requests the model rescheduled run again
            try:
                responses = self.model.execute(batch)
                if inspect.iscoroutine(responses):
                    if self.decoupled:
                        # In the background, as Triton's: the instance takes
                        # its next call while this one awaits.
                        self._background(batch, responses)
                        return {"op": "result"}, []
                    responses = self.loop.run(responses)
                self._returned(batch, responses, head.get("instance", ""))
                batch = self._rescheduled(batch)
            except BaseException as e:  # noqa: BLE001 - the model's failure is this call's answer
                traceback.print_exc()
                if batch is requests:
                    return self._failed(requests, _error_head(e))
                # A later pass (rescheduled requests) fails those alone,
                # as Triton's separate execute would.
                self._fail_pass(batch, _error_head(e))
                batch = []
        if self.decoupled:
            return {"op": "result"}, []
        answers = _answers(requests)
        # Nothing here refers to a request any more: a sender the model
        # dropped is collected, and answers.
        del requests, batch, responses
        return _result([self._wait(answer) for answer in answers])

    def _fail_pass(self, batch, error):
        """End the requests of a rescheduled pass that raised error."""
        for req in batch:
            if self.decoupled:
                req._sender._fail(error)
            elif not req._sender._answer.ready():
                req._sender._closed = True
                req._sender._answer.put(({"error": error, "raised": True}, []))

    def _rescheduled(self, batch):
        """The requests of batch the model rescheduled, released again; one
        fw cancelled is answered CANCELLED instead."""
        pb, out = self.pb, []
        for req in batch:
            if req._release != pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                continue
            req._release = pb.TRITONSERVER_REQUEST_RELEASE_ALL
            req._flags = 0  # the sequence's START was its first pass, as Triton's
            if req._req_id in self.channel.cancelled:
                err = {
                    "message": "the request was cancelled while the model rescheduled it",
                    "code": 7,
                }
                if self.decoupled:
                    req._sender._fail(err, raised=False)
                elif not req._sender._answer.ready():
                    req._sender._answer.put(({"error": err}, []))
                continue
            out.append(req)
        return out

    def _background(self, batch, coro):
        """Run a decoupled model's async execute of batch in the
        background; when it ends, its rescheduled requests run again, and
        an exception is logged and ends the requests it left open."""

        def done(future):
            if future.cancelled():
                return
            exc, ended = future.exception(), batch
            if exc is None:
                again = self._rescheduled(batch)
                try:
                    if again:
                        res = self.model.execute(again)
                        if inspect.iscoroutine(res):
                            self._background(again, res)
                            return
                        self._returned(again, res, "")
                        if self._rescheduled(again):
                            raise self.pb.TritonModelException(
                                "a synchronous execute rescheduled requests of an async one"
                            )
                    return
                except BaseException as e:  # noqa: BLE001 - ends the rescheduled requests, below
                    exc, ended = e, again
            traceback.print_exception(type(exc), exc, exc.__traceback__)
            for req in ended:
                req._sender._fail(_error_head(exc))

        self.loop.spawn(coro).add_done_callback(done)

    def _returned(self, requests, responses, instance):
        """Hand what execute returned to the requests' senders (Triton's
        checks and sentences): a decoupled model returns None, a
        non-decoupled one a response per request, None for one it answers
        through its sender or rescheduled."""
        pb = self.pb
        if self.decoupled:
            if responses is not None:
                raise pb.TritonModelException(
                    f"Python model '{instance}' is using the decoupled mode and the execute function "
                    "must return None. (Its responses go through request.get_response_sender().)"
                )
            return
        if responses is None:  # every request answers through its sender
            responses = [None] * len(requests)
        if not isinstance(responses, (list, tuple)):
            raise pb.TritonModelException(
                f"Expected a list in the execute return, found type '{type(responses)}'."
            )
        if len(responses) != len(requests):
            raise pb.TritonModelException(
                "Number of InferenceResponse objects do not match the number of InferenceRequest objects. "
                f"InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) size is:{len(responses)}"
            )
        for req, resp in zip(requests, responses):  # all checked before any is sent
            if resp is None:
                continue
            if req._release == pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                raise pb.TritonModelException(
                    "Expected a None object in the execute function return list for reschduled request, "
                    f"found type '{type(resp)}'."
                )
            if not isinstance(resp, pb.InferenceResponse):
                raise pb.TritonModelException(
                    "Expected an 'InferenceResponse' object in the execute function return list, "
                    f"found type '{type(resp)}'."
                )
        for i, (req, resp) in enumerate(zip(requests, responses)):
            if resp is None:
                continue
            try:
                req._sender.send(resp, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except pb.TritonModelException as e:
                # Its sender answered it already: that answer stands.
                print(
                    f"execute returned a response for request {i}, which it answered already: {e}",
                    file=sys.stderr,
                )

    def _wait(self, answer):
        """A request's answer once its sender has one; CANCELLED when fw
        cancels the request first."""
        got, req = answer
        while not got.wait(0.1):
            if req in self.channel.cancelled:
                msg = "the request was cancelled before the model sent its response"
                return {"error": {"message": msg, "code": 7}}, []
        return got.value

    def _failed(self, requests, error):
        """The answer of an execute that raised error: the call's error,
        except for a request that was answered before (its answer stands)."""
        for req in requests:  # the error ends them: their senders say nothing more
            req._sender._closed = True
            if self.decoupled:
                self.channel.end_request(req._req_id)
        answered = [
            not self.decoupled and req._sender._answer.ready() for req in requests
        ]
        if not any(answered):
            return {"op": "result", "error": error}, []
        # execute's exception, not a response the model gave, for the rest
        raised = ({"error": error, "raised": True}, [])
        return _result(
            [
                req._sender._answer.value if done else raised
                for req, done in zip(requests, answered)
            ]
        )


if __name__ == "__main__":
    sys.exit(main())
