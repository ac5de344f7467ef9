"""A CUDA step's reply row, read as it lands: NativeDecoder's _DeviceStep, with no GPU."""

import threading
import time

import numpy
from physinf_ros.engine.base import EngineError
from physinf_ros.engine.decoders.native import _DeviceStep, _UNWRITTEN
import pytest


class FakeEvent:
    """Stands for the step's CUDA event: complete from the start, or once `complete` is set."""

    def __init__(self, complete=False):
        self.complete = complete

    def query(self):
        return self.complete


def unwritten_row():
    return numpy.full(2, _UNWRITTEN, dtype=numpy.int64)


def test_a_written_row_is_the_result_and_is_cleared_for_the_next_step():
    row = unwritten_row()
    row[:] = (42, 3_500_000)
    read = []
    step = _DeviceStep(row, FakeEvent(), read.append)
    assert step.wait() == (42, 3.5)
    assert list(row) == [_UNWRITTEN, _UNWRITTEN]
    assert step.waited and step.wait() == (42, 3.5)   # a second wait returns the same result
    assert read == [42]   # the decoder hears of the token once, when the host reads it


def test_the_wait_holds_until_both_fields_have_landed():
    # The kernel's two 8-byte writes may land in either order and apart: a row with only its
    # token is not yet a result.
    row = unwritten_row()
    step = _DeviceStep(row, FakeEvent(), lambda token: None)

    def kernel():
        row[0] = 7
        time.sleep(0.05)
        row[1] = 1_000_000

    writer = threading.Thread(target=kernel)
    start = time.perf_counter()
    writer.start()
    result = step.wait()
    writer.join()
    assert result == (7, 1.0)
    assert time.perf_counter() - start >= 0.04


def test_a_step_that_ends_without_its_reply_is_an_error_not_a_hang():
    event = FakeEvent()
    row = unwritten_row()
    row[0] = 5   # the token but never the time
    threading.Timer(0.05, lambda: setattr(event, 'complete', True)).start()
    with pytest.raises(EngineError, match='without writing its reply row'):
        _DeviceStep(row, event, lambda token: None).wait()
