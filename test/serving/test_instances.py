"""Who gives way when two decoders claim one name (physinf_ros/serving/instances.py, no rclpy)."""

from physinf_ros.serving.instances import (InstanceRecord, new_record, rival, taken_message,
                                           unrecorded)

NAME = '/robot/decoder'


def record(started_ns, token, serving=False, pid=100):
    return InstanceRecord(pid=pid, host='jetson', started_ns=started_ns, token=token,
                          serving=serving)


def test_alone_it_serves():
    own = record(10, 'b')
    assert rival(own, []) is None
    assert rival(own, [own]) is None          # its own record, heard back, is not a rival


def test_a_serving_decoder_stays_whatever_its_start_time():
    own = record(10, 'b')
    serving = record(50, 'a', serving=True)   # started "later": another host's clock
    assert rival(own, [serving]) == serving


def test_a_serving_decoder_never_gives_way_to_a_newcomer():
    own = record(10, 'a', serving=True)
    assert rival(own, [record(20, 'b'), record(5, 'c')]) is None


def test_of_two_serving_the_one_that_started_first_stays():
    # Both passed their checks without hearing the other (discovery slower than both).
    early, late = record(10, 'x', serving=True), record(11, 'a', serving=True)
    assert rival(late, [early]) == early
    assert rival(early, [late]) is None
    tie = record(10, 'y', serving=True)
    assert rival(tie, [early]) == early and rival(early, [tie]) is None


def test_of_two_starting_the_earlier_stays():
    early, late = record(10, 'x'), record(11, 'a')
    assert rival(late, [early]) == early
    assert rival(early, [late]) is None


def test_a_tie_of_start_times_is_broken_by_the_token():
    first, second = record(10, 'a'), record(10, 'b')
    assert rival(second, [first]) == first
    assert rival(first, [second]) is None


def test_three_at_once_exactly_one_stays():
    records = [record(10, 'c'), record(10, 'a'), record(12, 'b')]
    staying = [r for r in records if rival(r, records) is None]
    assert staying == [records[1]]


def test_records_round_trip_and_noise_is_ignored():
    own = new_record()
    assert InstanceRecord.from_json(own.to_json()) == own
    assert InstanceRecord.from_json(own.as_serving().to_json()).serving
    for noise in ('', 'hello', '{}', '[1, 2]', '{"pid": "x", "host": "h", "started_ns": 1, '
                  '"token": "t"}'):
        assert InstanceRecord.from_json(noise) is None


def test_nodes_of_its_name_without_a_record_are_counted():
    graph = [('decoder', '/robot'), ('decoder', '/robot'), ('decoder', '/'),
             ('probe', '/robot')]
    assert unrecorded(NAME, graph, records=0) == 1     # an older decoder, or a late record
    assert unrecorded(NAME, graph, records=1) == 0
    assert unrecorded('/decoder', [('decoder', '/')], records=0) == 0


def test_the_fatal_line_names_the_holder():
    holder = record(1_700_000_000_000_000_000, 'a', serving=True, pid=4242)
    assert taken_message(NAME, holder) == (
        'another decoder is already running as /robot/decoder (pid 4242 on jetson since '
        '2023-11-14T22:13:20+00:00): stop it or start this one with another name or namespace')
    assert 'publishes no instance record' in taken_message(NAME, None)
