import json
import os
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# The SDK under test is the installed one (the wheel scripts/lib.sh builds into .venv, or the one
# tests/fl/sdk's wheel test installs on PYTHONPATH), never this source tree: it must be
# the package the sources make, so a stale install fails here with how to refresh it.
import shoal_fl  # noqa: E402

SOURCE_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "shoal_fl")


def _check_installed_sdk():
    installed = os.path.dirname(os.path.abspath(shoal_fl.__file__))
    if os.path.realpath(installed) == os.path.realpath(SOURCE_PACKAGE):
        raise pytest.UsageError(f"shoal_fl was imported from the source tree ({installed}), not "
                                "from an installed wheel: run pytest with python -P from outside "
                                "shoal/fl/sdk/python (tests/fl/sdk does)")
    files = sorted(f for f in os.listdir(SOURCE_PACKAGE) if f.endswith((".py", ".typed")))
    stale = [f for f in files if not os.path.exists(os.path.join(installed, f)) or
             open(os.path.join(installed, f), "rb").read() !=
             open(os.path.join(SOURCE_PACKAGE, f), "rb").read()]
    if stale:
        raise pytest.UsageError(f"the installed shoal_fl ({installed}) differs from "
                                f"shoal/fl/sdk/python/shoal_fl in {stale}: reinstall it "
                                "(source scripts/lib.sh && install_python test)")


_check_installed_sdk()


class Recorded:
    def __init__(self, method, path, headers, body):
        self.method, self.path, self.headers, self.body = method, path, headers, body


class FakeServer:
    """A tiny local HTTP server: `handler(request) -> (status, headers, body)` answers each
    request; every request (with its whole body) is kept in `requests`."""

    def __init__(self, handler):
        self.handler = handler
        self.requests = []
        self.drop_after_reply = False
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _serve(self):
                n = int(self.headers.get("Content-Length") or 0)
                if self.headers.get("Transfer-Encoding") == "chunked":
                    raise AssertionError("the SDK sends a Content-Length, not chunks")
                body = self.rfile.read(n) if n else b""
                req = Recorded(self.command, self.path, dict(self.headers.items()), body)
                outer.requests.append(req)
                status, headers, reply = outer.handler(req)
                if isinstance(reply, (dict, list)):
                    reply = json.dumps(reply).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                if outer.drop_after_reply:
                    self.close_connection = True  # closes without saying so (an idle timeout)

            do_GET = do_POST = do_DELETE = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server():
    servers = []

    def start(handler):
        s = FakeServer(handler)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def safetensors_bytes(tensors, metadata=None):
    """A safetensors file of float32 tensors [(name, array)], in the given order (the header
    JSON written with sorted keys, so its order is not the data order)."""
    header, data, off = {}, b"", 0
    for name, a in tensors:
        raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def read_varint(b, i):
    n, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return n, i


def parse_protobuf(b):
    """{field: [values]}: varints as ints, length-delimited as bytes, fixed64 as bytes."""
    out, i = {}, 0
    while i < len(b):
        key, i = read_varint(b, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = read_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {wt}")
        out.setdefault(field, []).append(v)
    return out


def parse_update(body):
    """An SHU1 body, decoded independently of the SDK's encoder: (header fields, tensors)."""
    assert body[:4] == b"SHU1"
    (hlen,) = struct.unpack_from("<I", body, 4)
    h = parse_protobuf(body[8:8 + hlen])
    area = (8 + hlen + 63) // 64 * 64
    tensors = []
    for raw in h.get(8, []):
        e = parse_protobuf(raw)
        shape = []
        if 3 in e:
            j = 0
            while j < len(e[3][0]):
                d, j = read_varint(e[3][0], j)
                shape.append(d)
        off, length = e.get(4, [0])[0], e.get(5, [0])[0]
        tensors.append({"name": e[1][0].decode(), "dtype": e.get(2, [0])[0], "shape": shape,
                        "bytes": body[area + off:area + off + length]})
    return h, tensors
