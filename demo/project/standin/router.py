"""A stand-in for `python -m sglang_router.launch_router --pd-disaggregation` with the race
the real router has (shared/reference/h200-pd/RECIPE.md): `/health` answers 200 as soon as it
listens, while `/readiness` answers 503 "insufficient healthy workers" and `/generate` fails
until its workers are registered, STANDIN_ROUTER_REGISTER_AFTER seconds later (default 3).

Once ready it routes `/generate` (non-streaming) like the real router: the same request with
`bootstrap_host/port/room` to prefill and decode at once, decode's answer returned. Standard
library only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

# Local servers only: an http_proxy in the environment must not route these requests.
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with NO_PROXY.open(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pd-disaggregation", action="store_true")
    parser.add_argument("--prefill", nargs=2, metavar=("URL", "BOOTSTRAP_PORT"), required=True)
    parser.add_argument("--decode", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    started = time.monotonic()
    delay = float(os.environ.get("STANDIN_ROUTER_REGISTER_AFTER", "3"))
    prefill_url, bootstrap_port = args.prefill[0], int(args.prefill[1])

    def registered() -> bool:
        return time.monotonic() - started >= delay

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *a: object) -> None:
            print(
                f"standin-router: {self.command} {self.path}: {format % a}",
                file=sys.stderr,
                flush=True,
            )

        def reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply(200, b"{}")
            elif self.path == "/readiness":
                if registered():
                    self.reply(200, b'{"status": "ready"}')
                else:
                    self.reply(503, b'{"error": "insufficient healthy workers"}')
            else:
                self.reply(404, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path != "/generate" or body.get("stream"):
                self.reply(404, b'{"error": "stand-in router: non-streaming /generate only"}')
                return
            if not registered():
                self.reply(503, b'{"error": "no prefill/decode workers available"}')
                return
            body.update(
                bootstrap_host=urlparse(prefill_url).hostname,
                bootstrap_port=bootstrap_port,
                bootstrap_room=random.getrandbits(62),
            )
            thread = threading.Thread(target=post, args=(prefill_url + "/generate", body))
            thread.start()
            status, answer = post(args.decode + "/generate", body)
            thread.join()
            self.reply(status, answer)

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
