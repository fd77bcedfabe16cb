"""The driver's HTTP endpoint: `/metrics` (Prometheus), `/healthz` (process alive) and `/readyz`
(replicating: see `MetricsObserver.readiness`), all on `metrics_host:metrics_port`.

It starts before Spark so liveness probes answer during the JVM's slow start."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST

log = logging.getLogger("replicator.health")


class HealthServer:
    def __init__(self, host: str, port: int, exposition: Callable[[], bytes],
                 readiness: Callable[[], tuple[bool, str]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, exposition(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._reply(200, b"ok\n")
                elif path == "/readyz":
                    ready, reason = readiness()
                    self._reply(200 if ready else 503, f"{'ready' if ready else 'not ready'}: {reason}\n".encode())
                else:
                    self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

            def _reply(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, fmt: str, *args) -> None:
                log.debug(fmt, *args)  # scrapes and probes every few seconds would drown the log

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise OSError(f"cannot serve metrics on {host}:{port}: {e.strerror}") from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="metrics-http")

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> HealthServer:
        self._thread.start()
        host = self._server.server_address[0]
        log.info("metrics listening on %s:%d", host, self.port, extra={"metrics_port": self.port})
        return self

    def close(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever() that never ran otherwise
            self._server.shutdown()
        self._server.server_close()
