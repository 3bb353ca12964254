"""A stand-in for `python -m sglang.launch_server` in PD mode, for tests without GPUs.

It accepts SGLang's command line (unknown flags are ignored) and models the contract the real
sglang-router 0.3.2 relies on (shared/reference/pd-router.md): the router sends each
`/generate` to BOTH prefill and decode with `bootstrap_host/port/room`; the prefill stand-in
publishes what it saw for that room on its bootstrap port, the decode stand-in fetches it by
room and generates from it. So a decode answer depends on what prefill received, as in a real
KV transfer. Tokens are whitespace-separated words.

Knobs (environment, so a profile's per-role `env` can set them):
  STANDIN_DIE_AFTER=N        exit with status 3 on the (N+1)-th /generate (a crash mid-run)
  STANDIN_NEVER_HEALTHY=1    /health and /health_generate answer 503 forever
  STANDIN_FORGET_BEYOND=K    prefill "forgets" the needle when the prompt has more than K tokens
  STANDIN_STARTUP_DELAY=S    answer 503 on /health for the first S seconds
  STANDIN_TOKEN_DELAY=S      seconds per generated token (default 0.002)
  STANDIN_SPAWN_CHILD=N      start N sleeping child processes (like SGLang's scheduler
                             subprocesses) to prove teardown reaches the whole process group
  STANDIN_IGNORE_SIGTERM=1   ignore SIGTERM, so teardown must escalate to SIGKILL
  STANDIN_REQUIRE_MODULE=M   exit with status 4 at start unless module M is importable (proves
                             a PYTHONPATH overlay reaches the servers)
  STANDIN_DIVERGE_AT=N       from output position N on, generate other tokens than the prompt
                             implies (a KV transfer or kernel that computes wrong): set on the
                             decode role, PD stops matching the colocated server
  STANDIN_LOGPROB_SHIFT=X    add X to every logprob (a numerically different kernel)
  STANDIN_ARITHMETIC=1       answer "What is A + B?" questions correctly (accuracy gates)
  STANDIN_JIT_SECONDS=S       "JIT-compile" a kernel into $TRITON_CACHE_DIR before serving: S
                             seconds unless the kernel file is already there with the right
                             bytes (logged `standin jit: cache hit` / `compiled`), plus a .lock
                             file as real caches leave (the artifact must skip it)
  STANDIN_DEEPGEMM_SHAPES=T:N:K,...  SGLang's all-M DeepGEMM warmup: for each shape, log its
                             "Try DeepGEMM JIT Compiling for <T> N=.., K=.., num_groups=1 with
                             all Ms." line and write a kernel into $SGLANG_DG_CACHE_DIR; with
                             SGLANG_JIT_DEEPGEMM_PRECOMPILE=0 log `standin deep_gemm: all-M
                             warmup skipped` instead (STANDIN_DEEPGEMM_REDUCED=1: also log
                             SGLang's "reducing max_m" warning)
  STANDIN_REQUIRE_FREE_PORT=P  exit with status 5 if something listens on port P during its
                             first STANDIN_REQUIRE_FREE_SECONDS (default 8) seconds (a server
                             that must start only after another one stopped)
Token ids and logprobs are deterministic functions of the prompt and position (a greedy
model), with top-k alternatives when `top_logprobs_num` is asked for; a colocated server
(no --disaggregation-mode) computes the same as the PD pair.
Standard library only: it runs under any Python.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VOCAB = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey"
).split()
NEEDLE = re.compile(r"secret passphrase is ([A-Za-z]+-[0-9]+)")
ARITHMETIC = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")

# Local servers only: an http_proxy in the environment must not route these requests.
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def log(message: str) -> None:
    print(f"standin[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mode = args.disaggregation_mode
        self.started = time.monotonic()
        self.rooms: dict[str, dict] = {}
        self.rooms_lock = threading.Lock()
        self.generate_count = 0
        self.count_lock = threading.Lock()
        env = os.environ
        self.die_after = int(env["STANDIN_DIE_AFTER"]) if env.get("STANDIN_DIE_AFTER") else None
        self.never_healthy = env.get("STANDIN_NEVER_HEALTHY") == "1"
        self.forget_beyond = (
            int(env["STANDIN_FORGET_BEYOND"]) if env.get("STANDIN_FORGET_BEYOND") else None
        )
        self.startup_delay = float(env.get("STANDIN_STARTUP_DELAY", "0"))
        self.token_delay = float(env.get("STANDIN_TOKEN_DELAY", "0.002"))
        self.diverge_at = int(env["STANDIN_DIVERGE_AT"]) if env.get("STANDIN_DIVERGE_AT") else None
        self.logprob_shift = float(env.get("STANDIN_LOGPROB_SHIFT", "0"))
        self.arithmetic = env.get("STANDIN_ARITHMETIC") == "1"

    def healthy(self) -> bool:
        if self.never_healthy:
            return False
        return time.monotonic() - self.started >= self.startup_delay

    def count_generate(self) -> None:
        with self.count_lock:
            self.generate_count += 1
            if self.die_after is not None and self.generate_count > self.die_after:
                log(
                    f"simulated crash: /generate number {self.generate_count}, "
                    f"STANDIN_DIE_AFTER={self.die_after}"
                )
                os._exit(3)

    def prefill_view(self, text: str) -> dict:
        """What prefill 'computes' from a prompt; decode generates from this alone."""
        words = text.split()
        match = NEEDLE.search(text)
        remembered = match.group(1) if match else None
        if remembered and self.forget_beyond is not None and len(words) > self.forget_beyond:
            remembered = None
        sum_ = ARITHMETIC.search(text) if self.arithmetic else None
        answer = None
        if sum_:
            a, op, b = int(sum_.group(1)), sum_.group(2), int(sum_.group(3))
            answer = str(a + b if op == "+" else a - b if op == "-" else a * b)
        return {
            "prompt_tokens": len(words),
            "needle": remembered,
            "answer": answer,
            "digest": hashlib.sha256(text.encode()).hexdigest(),
        }


def generate_tokens(view: dict, max_new_tokens: int, diverge_at: int | None = None) -> list[str]:
    if view["needle"]:
        tokens = ["The", "passphrase", "is", view["needle"] + "."]
    elif view.get("answer"):
        tokens = ["The", "answer", "is", view["answer"] + "."]
    else:
        # A chain of digests: as many tokens as asked for (long outputs), the first 32 from
        # the prompt's digest itself.
        seed, block = bytes.fromhex(view["digest"]), bytes.fromhex(view["digest"])
        while len(seed) < max_new_tokens:
            block = hashlib.sha256(block).digest()
            seed += block
        tokens = [VOCAB[b % len(VOCAB)] for b in seed]
    tokens = tokens[: max(1, max_new_tokens)]
    if diverge_at is not None:
        tokens = [
            t
            if i < diverge_at
            else VOCAB[(VOCAB.index(t) + 1) % len(VOCAB)]
            if t in VOCAB
            else "zulu"
            for i, t in enumerate(tokens)
        ]
    return tokens


def token_id(token: str) -> int:
    return 1000 + VOCAB.index(token) if token in VOCAB else 7


def fetch_room(host: str, port: int, room: str, timeout: float = 10.0) -> dict | None:
    """Poll the prefill's bootstrap server: router sends to both sides at once."""
    deadline = time.monotonic() + timeout
    url = f"http://{host}:{port}/room/{room}"
    while time.monotonic() < deadline:
        try:
            with NO_PROXY.open(url, timeout=2) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return None
        except OSError:
            pass
        time.sleep(0.01)
    return None


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: object) -> None:
            log(f"{getattr(self, 'command', '?')} {getattr(self, 'path', '?')}: {format % args}")

        def reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path in ("/health", "/health_generate"):
                if state.healthy():
                    self.reply(200, {})
                else:
                    self.reply(503, {"error": "starting"})
            elif path in ("/server_info", "/get_server_info"):
                # No model_path/tokenizer_path: the router would try to fetch a tokenizer
                # from HuggingFace for it, and tests run without network.
                self.reply(
                    200,
                    {
                        "served_model": state.args.model_path,
                        "disaggregation_mode": state.mode,
                        "tp_size": state.args.tp,
                        "version": "standin",
                        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    },
                )
            elif path in ("/model_info", "/get_model_info"):
                self.reply(200, {"served_model": state.args.model_path, "is_generation": True})
            elif path == "/v1/models":
                self.reply(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": state.args.model_path, "object": "model", "owned_by": "sglang"}
                        ],
                    },
                )
            else:
                self.reply(404, {"error": f"no route {path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self.reply(400, {"error": "bad json"})
                return
            if self.path.split("?")[0] != "/generate":
                self.reply(404, {"error": f"no route {self.path}"})
                return
            state.count_generate()
            self.generate(body)

        def generate(self, body: dict) -> None:
            text = body.get("text")
            if not isinstance(text, str):
                self.reply(400, {"error": "text must be a string"})
                return
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 16))
            room = body.get("bootstrap_room")
            if state.mode == "prefill":
                if room is None:
                    self.reply(400, {"error": "prefill needs bootstrap_room"})
                    return
                view = state.prefill_view(text)
                with state.rooms_lock:
                    state.rooms[str(room)] = view
                # The router discards the prefill's answer; a real prefill returns 1 token.
                self.reply(
                    200,
                    {
                        "text": "",
                        "meta_info": {
                            "prompt_tokens": view["prompt_tokens"],
                            "completion_tokens": 0,
                        },
                    },
                )
                return
            if state.mode == "decode":
                missing = [
                    k
                    for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room")
                    if body.get(k) is None
                ]
                if missing:
                    self.reply(400, {"error": f"decode needs {', '.join(missing)}"})
                    return
                view = fetch_room(body["bootstrap_host"], int(body["bootstrap_port"]), str(room))
                if view is None:
                    log(f"KV transfer failed: no prefill state for room {room}")
                    self.reply(500, {"error": f"no prefill state for room {room}"})
                    return
            else:
                view = state.prefill_view(text)
            tokens = generate_tokens(view, max_new, state.diverge_at)
            if body.get("stream"):
                self.stream(body, view, tokens)
                return
            time.sleep(state.token_delay * min(len(tokens), 64))
            self.reply(
                200,
                {
                    "text": " ".join(tokens),
                    "meta_info": meta_info(body, view, tokens, len(tokens), state.logprob_shift),
                },
            )

        def stream(self, body: dict, view: dict, tokens: list[str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for n in range(1, len(tokens) + 1):
                time.sleep(state.token_delay)
                chunk = {
                    "text": " ".join(tokens[:n]),
                    "meta_info": meta_info(body, view, tokens, n),
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def logprob(position: int, token: str, shift: float = 0.0) -> float:
    """Deterministic in position and token: the same prompt gives the same numbers."""
    return -0.01 * (position + 1) - 0.001 * (token_id(token) % 7) + shift


def meta_info(body: dict, view: dict, tokens: list[str], n: int, shift: float = 0.0) -> dict:
    info: dict = {
        "id": str(body.get("bootstrap_room", "0")),
        "prompt_tokens": view["prompt_tokens"],
        "completion_tokens": n,
        "finish_reason": {"type": "length", "length": n} if n == len(tokens) else None,
    }
    if body.get("return_logprob"):
        with_text = bool(body.get("return_text_in_logprobs"))
        info["output_token_logprobs"] = [
            [logprob(i, t, shift), token_id(t), t if with_text else None]
            for i, t in enumerate(tokens[:n])
        ]
        k = int(body.get("top_logprobs_num") or 0)
        if k:
            info["output_top_logprobs"] = [
                [[logprob(i, t, shift), token_id(t), t if with_text else None]]
                + [
                    [logprob(i, t, shift) - 1.0 - j, 2000 + (token_id(t) + j) % 97, None]
                    for j in range(k - 1)
                ]
                for i, t in enumerate(tokens[:n])
            ]
        info["input_token_logprobs"] = [[None, 1, None]] + [
            [-1.0, 2, None] for _ in range(view["prompt_tokens"] - 1)
        ]
    return info


def standin_jit(mode: str, seconds: float) -> None:
    """A JIT cache as the real ones behave: a kernel keyed by what it is built for."""
    cache = os.environ.get("TRITON_CACHE_DIR")
    if not cache:
        log("standin jit: no TRITON_CACHE_DIR")
        return
    kernel = os.path.join(cache, "standin", f"{mode}-kernel.bin")
    want = hashlib.sha256(f"kernel for {mode}".encode()).hexdigest().encode()
    try:
        with open(kernel, "rb") as handle:
            if handle.read() == want:
                log(f"standin jit: cache hit {kernel}")
                return
    except OSError:
        pass
    time.sleep(seconds)
    os.makedirs(os.path.dirname(kernel), exist_ok=True)
    with open(kernel + ".lock", "w"):
        pass
    with open(kernel, "wb") as handle:
        handle.write(want)
    log(f"standin jit: compiled {kernel}")


def standin_deep_gemm(shapes: str) -> None:
    """SGLang's all-M DeepGEMM warmup as its log shows it (issue 34 item 4)."""
    if os.environ.get("SGLANG_JIT_DEEPGEMM_PRECOMPILE", "1").lower() in ("0", "false"):
        log("standin deep_gemm: all-M warmup skipped")
        return
    cache = os.environ.get("SGLANG_DG_CACHE_DIR")
    for shape in shapes.split(","):
        kind, n, k = shape.split(":")
        log(f"Try DeepGEMM JIT Compiling for <{kind}> N={n}, K={k}, num_groups=1 with all Ms.")
        if os.environ.get("STANDIN_DEEPGEMM_REDUCED") == "1":
            log("Available memory 1GB is less than required memory 2GB for warmup, reducing "
                "max_m to 4096 to avoid out of memory")  # fmt: skip
        if cache:
            os.makedirs(os.path.join(cache, "cache"), exist_ok=True)
            with open(os.path.join(cache, "cache", f"kernel.{kind}.{n}.{k}.cubin"), "w") as out:
                out.write(shape)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model-path", default="standin-model")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--disaggregation-mode", default="null")
    parser.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    args, ignored = parser.parse_known_args()
    required = os.environ.get("STANDIN_REQUIRE_MODULE")
    if required:
        import importlib.util

        if importlib.util.find_spec(required) is None:
            log(
                f"module {required!r} is not importable; PYTHONPATH="
                f"{os.environ.get('PYTHONPATH')!r}"
            )
            sys.exit(4)
    busy = os.environ.get("STANDIN_REQUIRE_FREE_PORT")
    if busy:
        import socket

        # Watched for a while, not probed once: started with the pair, this server may come
        # up before the other one has bound its port (a race the test must not depend on).
        until = time.monotonic() + float(os.environ.get("STANDIN_REQUIRE_FREE_SECONDS", "8"))
        while time.monotonic() < until:
            with socket.socket() as probe:
                if probe.connect_ex((args.host, int(busy))) == 0:
                    log(f"port {busy} is still served: started too early")
                    sys.exit(5)
            time.sleep(0.1)
    state = State(args)
    if os.environ.get("STANDIN_JIT_SECONDS"):
        standin_jit(state.mode, float(os.environ["STANDIN_JIT_SECONDS"]))
    if os.environ.get("STANDIN_DEEPGEMM_SHAPES"):
        standin_deep_gemm(os.environ["STANDIN_DEEPGEMM_SHAPES"])
    if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
        signal.signal(signal.SIGTERM, lambda *_: log("ignoring SIGTERM"))
    # STANDIN_SPAWN_CHILD=N: N sleeping children (SGLang's TP ranks and scheduler processes)
    for _ in range(int(os.environ.get("STANDIN_SPAWN_CHILD") or 0)):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        log(f"spawned child {child.pid}")
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    if state.mode == "prefill":
        bootstrap = ThreadingHTTPServer(
            (args.host, args.disaggregation_bootstrap_port), make_bootstrap_handler(state)
        )
        bootstrap.daemon_threads = True
        threading.Thread(target=bootstrap.serve_forever, daemon=True).start()
    log(
        f"mode={state.mode} port={args.port} tp={args.tp} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} ignored={ignored}"
    )
    server.serve_forever()


def make_bootstrap_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Bootstrap(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            room = self.path.rsplit("/", 1)[-1]
            with state.rooms_lock:
                view = state.rooms.get(room)
            data = json.dumps(view if view is not None else {"error": "unknown room"}).encode()
            self.send_response(200 if view is not None else 404)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Bootstrap


if __name__ == "__main__":
    main()
