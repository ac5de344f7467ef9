"""The request queue and the ledger: bounded, ordered, cancellable, nothing lost."""

import threading

from physinf_ros.engine import Sampling
from physinf_ros.serving.request_queue import Ledger, Request, RequestQueue


def request(request_id):
    return Request(request_id, [1, 2, 3], 8, Sampling())


def test_queue_is_bounded_and_announces_before_the_worker_sees():
    queue = RequestQueue(2)
    announced = []
    assert queue.put(request(1), announced.append)
    assert queue.put(request(2), announced.append)
    assert not queue.put(request(3), announced.append)   # full: refused, not announced
    assert announced == [1, 2] and queue.qsize() == 2
    first = queue.take(timeout=0.1)
    assert first.id == 1 and queue.current is first and queue.qsize() == 1
    assert queue.put(request(4), announced.append)      # room again once one is taken
    assert announced == [1, 2, 2]
    queue.done()
    assert queue.current is None
    assert [queue.take(0.1).id, queue.take(0.1).id] == [2, 4]
    assert queue.take(timeout=0.05) is None


def test_take_wakes_when_a_request_arrives():
    queue = RequestQueue(4)
    taken = []
    worker = threading.Thread(target=lambda: taken.append(queue.take(timeout=10.0)))
    worker.start()
    queue.put(request(7), lambda _: None)
    worker.join(timeout=5.0)
    assert not worker.is_alive() and taken[0].id == 7


def test_snapshot_holds_the_running_and_the_waiting():
    queue = RequestQueue(4)
    for i in (1, 2, 3):
        queue.put(request(i), lambda _: None)
    queue.take(0.1)
    current, waiting = queue.snapshot()
    assert current.id == 1 and [r.id for r in waiting] == [2, 3]


def test_cancel_records_the_step_it_arrived_at_once():
    r = request(1)
    r.steps = 5
    assert r.cancel('cancelled by a ~/cancel call')
    r.steps = 6
    assert not r.cancel('cancelled by its client')   # a second cancel changes nothing
    assert r.cancelled and r.steps_at_cancel == 5 and r.cancelled_at is not None
    assert r.cancel_detail == 'cancelled by a ~/cancel call'


def test_of_concurrent_cancels_exactly_one_succeeds():
    r = request(1)
    start = threading.Barrier(8)
    won = []

    def cancel(i):
        start.wait()
        if r.cancel(f'canceller {i}'):
            won.append(i)

    threads = [threading.Thread(target=cancel, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and r.cancel_detail == f'canceller {won[0]}'


def test_a_cancel_after_the_outcome_is_settled_is_refused():
    r = request(1)
    r.settle()   # the last step is done: the outcome is eos or length, whatever comes now
    assert not r.cancel('cancelled by its client')
    assert not r.cancelled and r.cancel_detail == ''


def test_cancel_all_returns_only_what_it_cancelled():
    queue = RequestQueue(4)
    for i in (1, 2, 3):
        queue.put(request(i), lambda _: None)
    current = queue.take(0.1)
    assert current.cancel('cancelled by a ~/cancel call')
    running, waiting = queue.cancel_all('cancelled by a ~/cancel_all call')
    assert running is None and [r.id for r in waiting] == [2, 3]
    assert current.cancel_detail == 'cancelled by a ~/cancel call'
    assert queue.cancel_all('again') == (None, [])


def test_ledger_counts_add_up_across_threads():
    ledger = Ledger()

    def serve(n):
        for i in range(n):
            ledger.count('received')
            if i % 3:
                ledger.count('accepted')
                ledger.count('finished', *(['cancelled'] if i % 2 else []))
            else:
                ledger.count('rejected')

    threads = [threading.Thread(target=serve, args=(300,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = ledger.snapshot()
    assert counts['received'] == 1200 == counts['accepted'] + counts['rejected']
    assert counts['finished'] == counts['accepted'] and counts['open'] == 0
    assert counts['cancelled'] == 400
