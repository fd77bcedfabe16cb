"""The load shapes (bench/shapes.py) and the first-minute windows (bench/steady.py)."""

import itertools
import zlib

import pytest

from bench import shapes, steady


def _take(shape: str, n: int) -> list:
    return list(itertools.islice(shapes.keys(shape), n))


def test_keyed_load_cycles_over_every_key_so_every_partition_gets_records():
    keys = _take("keyed", 2 * shapes.KEYS)
    assert len(set(keys)) == shapes.KEYS
    assert keys[: shapes.KEYS] == keys[shapes.KEYS:]  # deterministic: every run loads alike


def test_keyless_load_has_no_keys():
    assert set(_take("keyless", 100)) == {None}


def test_skewed_load_sends_its_hot_share_to_a_few_keys():
    keys = _take("skewed", 10_000)
    hot = [k for k in keys if k.startswith(b"hot-")]
    assert len(set(hot)) == shapes.HOT_KEYS
    assert len(hot) / len(keys) == pytest.approx(shapes.HOT_SHARE, abs=0.01)


def test_an_unknown_shape_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="keyed, keyless, skewed"):
        next(shapes.keys("bursty"))


def test_text_payloads_have_the_size_asked_no_newline_and_compress():
    payloads = shapes.text_payloads(1024, count=64)
    assert {len(p) for p in payloads} == {1024}
    assert not any(b"\n" in p for p in payloads)
    assert len(set(payloads)) == 64
    blob = b"".join(payloads)
    assert len(zlib.compress(blob)) < len(blob) / 2


def test_first_minute_windows_are_ten_seconds_from_the_first_record():
    assert steady.windows(100.0, 130.0) == [(100.0, 110.0), (110.0, 120.0), (120.0, 130.0)]


def test_a_short_last_window_joins_the_one_before():
    assert steady.windows(0.0, 23.0) == [(0.0, 10.0), (10.0, 23.0)]
    assert steady.windows(0.0, 27.0)[-1] == (20.0, 27.0)


def test_the_worst_window_is_the_highest_p99_never_an_empty_one():
    ws = [{"p99_s": 0.1, "received": 10}, {"p99_s": float("nan"), "received": 0}, {"p99_s": 4.2, "received": 9}]
    assert steady.worst_window(ws)["p99_s"] == 4.2
    assert steady.worst_window([{"p99_s": float("nan"), "received": 0}]) is None
