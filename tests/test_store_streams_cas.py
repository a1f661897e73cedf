"""The stream snapshots of a batch: one compare-and-set for every stream it loaded, all of
them moving on together, or none (StaleBatch naming the stream another writer moved), on
SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any, cast

import pytest

from service.incidents.snapshots import StreamSnapshot
from service.store import BatchEffects, StaleBatch, Store

pytest_plugins = ("tests.test_store",)  # db_url / store fixtures

KEYS = ["ns/a/vllm", "ns/b/vllm", "ns/c/vllm"]


def snap(status: str, lines: int) -> StreamSnapshot:
    return cast(StreamSnapshot, {"status": status, "stage": "serving", "lines": lines})


def versions(store: Store) -> dict[str, int | None]:
    return {k: store.load_stream_versioned(k)[1] for k in KEYS}


def write(store: Store, lines: int, expected: dict[str, Any]) -> None:
    """A batch that writes the streams of ``expected``, each from the version given."""
    store.commit_batch(
        BatchEffects(
            streams={k: snap("ready", lines) for k in expected},
            stream_versions=dict(expected),
            at=1.0,
        )
    )


def test_every_loaded_stream_moves_on_in_one_batch(store: Store) -> None:
    write(store, 1, dict.fromkeys(KEYS))  # new: inserted
    assert versions(store) == dict.fromkeys(KEYS, 1)
    write(store, 2, dict.fromkeys(KEYS, 1))
    write(store, 3, dict.fromkeys(KEYS, 2))
    assert versions(store) == dict.fromkeys(KEYS, 3)
    assert all(store.load_stream(k)["lines"] == 3 for k in KEYS)


def test_one_stale_stream_fails_the_whole_batch(store: Store) -> None:
    write(store, 1, dict.fromkeys(KEYS))
    write(store, 2, {KEYS[1]: 1})  # another writer moves b on
    with pytest.raises(StaleBatch):
        write(store, 9, dict.fromkeys(KEYS, 1))
    assert versions(store) == {KEYS[0]: 1, KEYS[1]: 2, KEYS[2]: 1}  # nothing written
    assert [store.load_stream(k)["lines"] for k in KEYS] == [1, 2, 1]
    write(store, 3, {KEYS[1]: 2})  # and again: the message can tell which one
    with pytest.raises(StaleBatch, match="stream ns/b/vllm: snapshot changed since version 1"):
        write(store, 9, dict.fromkeys(KEYS, 1))
    assert versions(store) == {KEYS[0]: 1, KEYS[1]: 3, KEYS[2]: 1}


def test_a_stream_gone_since_it_was_loaded_is_stale(store: Store) -> None:
    write(store, 1, dict.fromkeys(KEYS[:2]))  # c never written
    with pytest.raises(StaleBatch, match="ns/c/vllm"):
        write(store, 2, dict.fromkeys(KEYS, 1))
    assert versions(store) == {KEYS[0]: 1, KEYS[1]: 1, KEYS[2]: None}


def test_streams_the_batch_did_not_load_are_written_whatever_their_version(
    store: Store,
) -> None:
    write(store, 1, dict.fromkeys(KEYS))
    store.commit_batch(BatchEffects(streams={k: snap("ready", 5) for k in KEYS}, at=2.0))
    assert versions(store) == dict.fromkeys(KEYS, 2)
