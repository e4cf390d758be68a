"""A compact HTTP/1.1 server side for the API: requests in, responses out, on any anyio byte
stream. Keep-alive (HTTP/1.1 default, HTTP/1.0 on request), bodies by Content-Length or chunked,
``Expect: 100-continue``; anything malformed is answered 400 and the connection closed."""

from __future__ import annotations

import email.utils
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

__all__ = ["Request", "Response", "serve_http"]

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


@dataclass
class Request:
    """One request; header names are lower case."""

    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Response:
    """One response; ``content_type`` None sends no Content-Type."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Awaitable[Response]]

BAD_REQUEST = Response(400, b"400 Bad Request", "text/plain; charset=utf-8")


class _Malformed(Exception):
    pass


def _parse_head(head: bytes) -> Request:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise _Malformed(line)
            name, value = name.lower(), value.strip()
            if name == "content-length" and headers.get(name, value) != value:
                raise _Malformed("conflicting Content-Length headers")  # Go refuses them too
            headers[name] = value
    except ValueError as exc:
        raise _Malformed(str(exc)) from exc
    if not version.startswith("HTTP/1."):
        raise _Malformed(version)
    return Request(method, target, version, headers)


async def _read_chunked(reader: BufferedByteReceiveStream) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.receive_until(b"\r\n", 1024)
        size_text = size_line.split(b";")[0]
        if not _HEX.fullmatch(size_text):
            raise _Malformed("chunk size")
        size = int(size_text, 16)
        if len(body) + size > MAX_BODY:  # before reading it: one chunk may claim any size
            raise _Malformed("body too large")
        if size == 0:
            while await reader.receive_until(b"\r\n", MAX_HEAD):  # trailers, then a blank line
                pass
            return bytes(body)
        body += await reader.receive_exactly(size)
        if await reader.receive_exactly(2) != b"\r\n":
            raise _Malformed("chunk")


async def _read_body(
    reader: BufferedByteReceiveStream, stream: ByteStream, request: Request
) -> bytes:
    if request.headers.get("expect", "").lower() == "100-continue":  # curl, for big bodies
        await stream.send(b"HTTP/1.1 100 Continue\r\n\r\n")
    if request.headers.get("transfer-encoding", "").lower() == "chunked":
        return await _read_chunked(reader)
    length_text = request.headers.get("content-length", "0")
    if not length_text.isdigit() or int(length_text) > MAX_BODY:
        raise _Malformed("content-length")
    length = int(length_text)
    return await reader.receive_exactly(length) if length else b""


def _keep_alive(request: Request) -> bool:
    connection = request.headers.get("connection", "").lower()
    if request.version == "HTTP/1.0":
        return connection == "keep-alive"
    return connection != "close"


def encode(response: Response, keep_alive: bool) -> bytes:
    """The bytes of a response (no Content-Length on 204, as Go's server)."""
    reason = HTTPStatus(response.status).phrase
    head = [f"HTTP/1.1 {response.status} {reason}"]
    if response.content_type is not None:
        head.append(f"Content-Type: {response.content_type}")
    if response.status != 204:
        head.append(f"Content-Length: {len(response.body)}")
    head.append(f"Date: {email.utils.formatdate(usegmt=True)}")
    head += [f"{name}: {value}" for name, value in response.headers.items()]
    if not keep_alive:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body


async def serve_http(stream: ByteStream, handler: Handler) -> None:
    """Answer requests on ``stream`` with ``handler`` until the client or a request closes it."""
    reader = BufferedByteReceiveStream(stream)
    async with stream:
        while True:
            try:
                head = await reader.receive_until(b"\r\n\r\n", MAX_HEAD)
                request = _parse_head(head)
                request.body = await _read_body(reader, stream, request)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                return
            except (_Malformed, ValueError, anyio.DelimiterNotFound):
                await stream.send(encode(BAD_REQUEST, keep_alive=False))
                return
            response = await handler(request)
            keep_alive = _keep_alive(request)
            try:
                await stream.send(encode(response, keep_alive))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            if not keep_alive:
                return
