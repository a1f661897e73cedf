"""The collector paused for large decodes (service/ingest/gcpause.py): nested and
concurrent holds share one pause, and the collector comes back as it was."""

from __future__ import annotations

import gc

from service.ingest import gcpause


def test_holds_nest_and_the_collector_comes_back_on() -> None:
    assert gc.isenabled()
    gcpause.hold()
    with gcpause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the first hold still stands
    gcpause.release()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
