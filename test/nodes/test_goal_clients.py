"""goal_clients.GoalClients without ROS: events tie goals to clients; no introspection, no tie."""

import uuid

from physinf_ros.nodes.goal_clients import GoalClients


class Info:
    REQUEST_RECEIVED, RESPONSE_SENT = 1, 2

    def __init__(self, event_type, gid):
        self.event_type, self.client_gid = event_type, gid


class Event:

    def __init__(self, event_type, goal_id, gid):
        self.info = Info(event_type, gid)
        goal = type('Request', (), {'goal_id': type('Uuid', (), {'uuid': goal_id.bytes})()})()
        self.request = [goal] if event_type == Info.REQUEST_RECEIVED else []


class Node:

    def __init__(self):
        self.subscribed = []

    def get_clock(self):
        return None

    def create_subscription(self, msg_type, topic, callback, qos):
        self.subscribed.append((topic, callback))


class Server:

    def __init__(self, fails=None):
        self.fails = fails

    def configure_introspection(self, clock, qos, state):
        if self.fails:
            raise self.fails


class Action:
    Impl = type('Impl', (), {'SendGoalService': type('SendGoalService', (), {'Event': object})})


def test_send_goal_events_tie_each_goal_to_its_client():
    node = Node()
    clients = GoalClients(node, Server(), Action, '/ns/decoder/generate')
    (topic, on_event), = node.subscribed
    assert topic == '/ns/decoder/generate/_action/send_goal/_service_event'
    assert clients.unavailable == ''
    first, second = uuid.uuid4(), uuid.uuid4()
    on_event(Event(Info.REQUEST_RECEIVED, first, b'a' * 16))
    on_event(Event(Info.RESPONSE_SENT, second, b'b' * 16))   # not a request: no goal in it
    assert clients.client_of(str(first)) == b'a' * 16 and clients.client_of(str(second)) is None
    clients.forget(str(first))
    assert clients.client_of(str(first)) is None


def test_only_the_newest_goals_are_remembered():
    node = Node()
    clients = GoalClients(node, Server(), Action, '/decoder/generate')
    (_, on_event), = node.subscribed
    goals = [uuid.uuid4() for _ in range(GoalClients.KEEP + 5)]
    for goal in goals:
        on_event(Event(Info.REQUEST_RECEIVED, goal, b'c' * 16))
    assert clients.client_of(str(goals[0])) is None
    assert clients.client_of(str(goals[-1])) == b'c' * 16


def test_without_introspection_goals_stay_untied_and_the_reason_is_kept():
    node = Node()
    clients = GoalClients(node, Server(fails=RuntimeError('not permitted')), Action,
                          '/decoder/generate')
    assert clients.unavailable == 'RuntimeError: not permitted' and node.subscribed == []
    assert clients.client_of(str(uuid.uuid4())) is None
