"""A producer's fatal error raised from inside one of its delivery callbacks, told as the error it is.

confluent-kafka raises a producer's fatal error (fenced by a twin) from inside flush()/poll(); when
a delivery callback runs after that, Python reports the callback as returning "with an exception
set", a `SystemError` whose cause is the `KafkaException`. Callers classify Kafka errors
(`client_errors.classify`), so the cause is raised in its place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaException


@contextmanager
def kafka_errors_unwrapped() -> Iterator[None]:
    try:
        yield
    except SystemError as e:
        if isinstance(e.__cause__, KafkaException):
            raise e.__cause__ from None
        raise
