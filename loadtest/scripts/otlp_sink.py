#!/usr/bin/env python3
"""A local OTLP/HTTP sink: accepts every export and discards it.

    loadtest/scripts/otlp_sink.py [PORT]      (default 4318, on 127.0.0.1)

For measuring what exporting traces costs a Baton server (BENCHMARKS.md,
"Traces"): point OTEL_EXPORTER_OTLP_ENDPOINT at http://127.0.0.1:PORT. Answers
200 with an empty protobuf body (an empty ExportTraceServiceResponse) to any
POST, so the exporter never retries. Prints how many exports and bytes it got
when stopped (SIGINT or SIGTERM). Standard library only.
"""

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

received = {"exports": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's client expects

    def do_POST(self):  # noqa: N802 (the standard library's name)
        length = int(self.headers.get("Content-Length", "0"))
        remaining = length
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 16))
            if not chunk:
                break
            remaining -= len(chunk)
        received["exports"] += 1
        received["bytes"] += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # one line per export would flood the terminal
        pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
    server = ThreadingHTTPServer(("127.0.0.1", port), Sink)

    def stop(*_):
        print(f"otlp_sink: {received['exports']} exports, {received['bytes']} bytes", flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"otlp_sink: listening on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
