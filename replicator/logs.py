"""Structured logging: key=value text for people, one JSON object per line for log pipelines."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import warnings

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        out.update({k: v for k, v in record.__dict__.items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        if extra:
            line += " " + " ".join(f"{k}={v}" for k, v in extra.items())
        return line


def configure(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else
                         _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("py4j", "pyspark", "kafka"):  # kafka: kafka-python (verify, transaction listing)
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("kafka.net.selector").addFilter(_not_a_slow_step)
    # kafka-python logs every lost connection at ERROR from several loggers (transport, connection,
    # manager, cluster): four to six lines a second per client while a broker restarts, for a
    # lookup our own warning already reports. One line of a kind per 30 s, as for librdkafka.
    handler.addFilter(_KafkaPythonRepeats())
    # Libraries' warnings go through the same handler (logger "py.warnings"), not raw onto stderr.
    logging.captureWarnings(True)
    # PySpark checks the pandas version at start-up although no pandas code runs here.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)


def _not_a_slow_step(record: logging.LogRecord) -> bool:
    # kafka-python 3 times every step of its network loop and warns past 0.1 s ("Task <...> ran for
    # 0.541s ... blocking the event loop"): decoding a 5,000-partition lag answer on a busy box. A hint
    # for its own developers; to an operator it read as a fault, and the lookup had simply taken longer.
    return "blocking the event loop" not in record.getMessage()


class RepeatFilter(logging.Filter):
    """Lets one line of a kind through per `window_s` and counts the rest: a broker that is down
    makes every client log "Connect to ... failed" many times a second for as long as it is down."""

    _VARYING = re.compile(r"\d+")

    def __init__(self, window_s: float = 30.0) -> None:
        super().__init__()
        self.window_s = window_s
        self._last: dict[str, tuple[float, int]] = {}  # kind -> (when last let through, suppressed since)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = self._VARYING.sub("#", record.getMessage())
        now = time.monotonic()
        last, suppressed = self._last.get(kind, (-self.window_s, 0))
        if now - last < self.window_s:
            self._last[kind] = (last, suppressed + 1)
            return False
        if len(self._last) > 1000:  # kinds are few; this only bounds memory against odd messages
            self._last.clear()
        self._last[kind] = (now, 0)
        if suppressed:
            record.msg, record.args = f"{record.getMessage()} ({suppressed} more like it in the last " \
                                      f"{now - last:.0f} s)", None
        return True


class _KafkaPythonRepeats(RepeatFilter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kafka."):
            return True
        if record.exc_info and record.exc_info[1] is not None:
            # kafka-python logs a lost connection with its traceback ("Error receiving network data
            # closing socket", also from a race on its own closed socket); the client reconnects,
            # and a traceback in our log reads as a crash of ours. One line, with the error.
            error = record.exc_info[1]
            record.msg, record.args = f"{record.getMessage()}: {type(error).__name__}: {error}", None
            record.exc_info, record.exc_text = None, None
        return super().filter(record)
