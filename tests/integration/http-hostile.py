#!/usr/bin/env python3
"""Hostile HTTP clients against heaptraced's listener (tests/integration/cases-http.sh).

usage: http-hostile.py PORT KIND [N]
Each KIND prints one line "KIND: <what happened>" and exits 0 when every
connection got an answer or a close, 1 otherwise.
  garbage    bytes that are no request
  bigheader  a 100 KB header line
  idle N     N connections that send nothing, held until the daemon closes
             or refuses them (prints how many were answered by a close)
  slowloris  a request sent one byte a second
  pipeline   20 requests in one write
"""
import socket
import sys
import time


def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    return s


def drain(s, limit=30.0):
    """Everything the server sends until it closes: (bytes, closed)."""
    s.settimeout(limit)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out, True
            out += b
    except (ConnectionResetError, BrokenPipeError):
        return out, True
    except socket.timeout:
        return out, False


def status(reply):
    if not reply.startswith(b"HTTP/1.1 "):
        return "close" if not reply else "junk"
    return reply[9:12].decode()


def garbage(port):
    s = conn(port)
    s.sendall(b"\x00\x01\xffGARBAGE here\r\n\r\n")
    r, closed = drain(s)
    print("garbage:", status(r), "closed" if closed else "open")
    return closed and status(r) in ("400", "close")


def bigheader(port):
    s = conn(port)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    except (ConnectionResetError, BrokenPipeError):
        pass
    r, closed = drain(s)
    print("bigheader:", status(r), "closed" if closed else "open")
    return closed and status(r) in ("431", "close")


def idle(port, n):
    socks, refused = [], 0
    for _ in range(n):
        try:
            socks.append(conn(port))
        except OSError:
            refused += 1
    t0 = time.monotonic()
    closed = 0
    for s in socks:
        left = max(0.1, 25 - (time.monotonic() - t0))
        r, c = drain(s, left)
        closed += 1 if c else 0
        s.close()
    print("idle: %d connections, %d closed by the daemon, %d not made, %.1f s"
          % (len(socks), closed, refused, time.monotonic() - t0))
    return closed == len(socks)


def slowloris(port):
    s = conn(port)
    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"b" * 40 + b"\r\n\r\n"
    t0 = time.monotonic()
    closed = False
    for i in range(len(req)):
        try:
            s.sendall(req[i:i + 1])
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        s.settimeout(1.0)
        try:
            b = s.recv(65536)
            if not b:
                closed = True
                break
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed = True
            break
    print("slowloris: %s after %.1f s (%d of %d bytes)"
          % ("closed" if closed else "not closed", time.monotonic() - t0, i, len(req)))
    return closed


def pipeline(port):
    s = conn(port)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
    r, closed = drain(s)
    print("pipeline: %s, %d answers, %s" % (status(r), r.count(b"HTTP/1.1 "),
                                           "closed" if closed else "open"))
    return closed and status(r) == "200"


def main():
    port, kind = int(sys.argv[1]), sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    ok = {"garbage": garbage, "bigheader": bigheader, "slowloris": slowloris,
          "pipeline": pipeline}.get(kind)
    res = idle(port, n) if kind == "idle" else ok(port)
    sys.exit(0 if res else 1)


main()
