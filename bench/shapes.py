"""How a load spreads its records over partitions, and what its payloads are made of.

- keyed (the default): keys cycle over KEYS distinct values, so librdkafka's key hash sends records
  to every partition all the time, as keyed DR traffic does.
- keyless: no key, so librdkafka's sticky partitioner fills one partition's batch at a time (the
  shape the bench's first tables measured).
- skewed: HOT_SHARE of the records carry one of HOT_KEYS keys (at most that many partitions run
  hot), the rest are keyed as above.

Payloads are random bytes (incompressible) or, for the compressed bandwidth-capped link, text of
words from a small vocabulary (what JSON or log lines compress like).
"""

from __future__ import annotations

import random
from collections.abc import Iterator

SHAPES = ("keyed", "keyless", "skewed")
KEYS = 4096
HOT_KEYS = 3
HOT_SHARE = 0.8
# Distinct compressible payloads, cycled: more than fit in lz4's 64 KiB window at 1 KiB records,
# so a batch compresses like varied text, not like one record repeated.
TEXT_PAYLOADS = 4096
_WORDS = ("order", "customer", "status", "shipped", "pending", "amount", "currency", "EUR", "USD", "region",
          "eu-west-1", "us-east-1", "timestamp", "event", "click", "view", "session", "user", "id", "true",
          "false", "null", "price", "quantity", "sku", "warehouse", "payment", "card", "refund", "account")


def keys(shape: str) -> Iterator[bytes | None]:
    """The key of each next record, endlessly (deterministic: two runs of a shape load alike)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown load shape {shape!r}; known: {', '.join(SHAPES)}")
    i = 0
    hot_every = round(1 / (1 - HOT_SHARE))  # 1 record in 5 is spread, 4 go to the hot keys
    while True:
        if shape == "keyless":
            yield None
        elif shape == "skewed" and i % hot_every:
            yield b"hot-%d" % (i % HOT_KEYS)
        else:
            yield b"key-%05d" % (i % KEYS)
        i += 1


def text_payloads(size: int, count: int = TEXT_PAYLOADS, seed: int = 7) -> list[bytes]:
    """`count` payloads of exactly `size` bytes of words and numbers, no newline (ProducerPerformance's
    --payload-file takes one per line)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts: list[str] = []
        length = 0
        while length <= size:  # the join has one space fewer than counted
            word = rng.choice(_WORDS) if rng.random() < 0.7 else str(rng.randrange(10**6))
            parts.append(word)
            length += len(word) + 1
        out.append(" ".join(parts).encode()[:size])
    return out
