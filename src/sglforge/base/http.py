"""Tiny JSON-over-HTTP client on the standard library (the smoke must run before any
third-party package is trusted), with timings for TTFT and throughput."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# The smoke talks only to the servers it launched on the profile's host: an http_proxy of the
# user's environment (a corporate proxy) must not route those requests, so no proxy is used.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Response:
    status: int  # 0: no HTTP answer (connection refused, timeout)
    body: Any  # parsed JSON, or text when not JSON
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200


def request(method: str, url: str, payload: Any = None, timeout: float = 10.0) -> Response:
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    start = time.monotonic()
    try:
        with _OPENER.open(req, timeout=timeout) as answer:
            raw = answer.read()
            status = answer.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    except (OSError, ValueError) as exc:  # URLError, timeouts, resets
        return Response(0, None, time.monotonic() - start, error=str(exc))
    text = raw.decode(errors="replace")
    try:
        body = json.loads(text) if text else None
    except json.JSONDecodeError:
        body = text
    return Response(
        status,
        body,
        time.monotonic() - start,
        error="" if status == 200 else f"HTTP {status}: {text[:300]}",
    )


def get(url: str, timeout: float = 10.0) -> Response:
    return request("GET", url, timeout=timeout)


def post(url: str, payload: Any, timeout: float) -> Response:
    return request("POST", url, payload, timeout=timeout)


@dataclass(frozen=True)
class StreamEvent:
    seconds: float  # since the request was sent
    data: dict[str, Any]


def stream(url: str, payload: Any, timeout: float) -> Iterator[StreamEvent]:
    """POST and yield SGLang's server-sent events (`data: {...}` … `data: [DONE]`)."""
    req = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    start = time.monotonic()
    with _OPENER.open(req, timeout=timeout) as answer:
        for raw in answer:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield StreamEvent(time.monotonic() - start, json.loads(data))
