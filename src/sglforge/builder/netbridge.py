"""Run a command inside the build's network namespace with one way out: a local TCP port
pumped into a Unix socket (stdlib only; run by path, `python -I netbridge.py PORT SOCKET --
CMD…`).

The build's network namespace (builder/sandbox.py; `unshare -n` with --unsafe-no-sandbox) has
only a loopback interface. ccache's HTTP client needs TCP, so this brings loopback up where it
is down (bubblewrap brings it up already), listens on 127.0.0.1:PORT and connects each client
to SOCKET, a filesystem Unix socket served by sglforge's cache proxy outside the namespace
(builder/cacheproxy.py; the socket's directory is bound into the sandbox), which authenticates
and enforces read-only; the bridge itself only carries bytes and holds no credential.
Nothing else can leave the namespace. It runs inside the sandbox, without capabilities, as
the build's first process; the command runs as its child in the same session, so
interrupting the build stops both; the exit status is the command's.
"""

import fcntl
import socket
import struct
import subprocess
import sys
import threading

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, SIOCGIFFLAGS, request))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from source to sink until source's end, which is passed on as a half-close
    (a client may shut down its sending side and still read the answer)."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def carry(client: socket.socket, upstream: socket.socket) -> None:
    """Both directions of one connection; both sockets closed when both are done."""
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=carry, args=(client, upstream), daemon=True).start()


def main(argv: list) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: netbridge.py PORT SOCKET -- CMD...", file=sys.stderr)
        return 2
    port, path, cmd = int(argv[0]), argv[1], argv[3:]
    try:
        loopback_up()
    except OSError as exc:  # not in a namespace of our own: loopback is up already
        print(f"netbridge: loopback: {exc}", file=sys.stderr)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
