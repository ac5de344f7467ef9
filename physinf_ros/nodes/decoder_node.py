"""
decoder_node: a managed (lifecycle) node; prompts in on ~/prompt, tokens streamed out on ~/tokens.

A thin translator: the engine does the work, in a worker thread, so the executor stays free to
answer ~/cancel, parameter changes, lifecycle transitions and the diagnostics timer while a
reply is being decoded. Prompt checks (serving/prompts.py) and request bookkeeping
(serving/request_queue.py) live outside, free of rclpy.

Lifecycle (as ros2/demos' lifecycle_py places resources): `configure` loads the model and warms
its graphs, `activate` starts serving, `deactivate` ends the running and waiting requests as
cancelled and refuses new prompts, `cleanup` releases the model, `shutdown` ends the process.
With `autostart` (the default) the node configures and activates itself at start.
"""

import gc
import json
import sys
import threading
import time
import traceback
from typing import Any, Dict, List, Optional
import uuid

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import SetParametersResult
import rclpy
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNodeMixin, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Future
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger

from .common import (close, create_lifecycle_services, descriptor, DIAGNOSTICS_QOS, fix_types,
                     has_lifecycle_handlers, LATENCY_QOS, publish_guarded, SERVICES_QOS,
                     start_ros, status, Updater)
from .decoder_interface import EVENTS_QOS, Generate, PROMPT_QOS, TOKENS_QOS
from .entry import held_signals, spin_once
from .goal_clients import GoalClients
from .instance_claim import claim_name, NameTaken, NameWatch
from ..engine import EngineError, load, Sampling, speculative
from ..engine.loading import make_proposer
from ..engine.speculative import Speculation
from ..measurement.roofline import LiveFloor
from ..measurement.stats import LatencyWindow, PrefixReuse, TokenIntervals
from ..serving.params import (AUTOSTART, check, check_value, DECODER_PARAMS, output_format,
                              OUTPUT_PARAMS, PARAMS_BY_NAME)
from ..serving.prompts import (admit, admit_messages, conversation_too_long, too_long,
                               truncation_limit)
from ..serving.request_queue import Ledger, Request, RequestQueue
from ..structured import ConstraintError

# What cancelled a request: its finished event's and its goal result's detail say it.
CANCELLED_BY_CLIENT = 'cancelled by its client'
CANCELLED_BY_CANCEL = 'cancelled by a ~/cancel call'
CANCELLED_BY_CANCEL_ALL = 'cancelled by a ~/cancel_all call'
CLIENT_GONE = 'its action client disappeared'
SHUTTING_DOWN = 'node shutting down'
# On SIGINT/SIGTERM the requests get this long to end before the node ends them itself, then
# the executor spins this long more so their results reach their clients. Bounded well within
# the 5 s after which ros2 launch follows its SIGINT with SIGTERM.
STOP_WAIT_S = 2.0
RESULTS_SEND_S = 0.5
# Why a prompt is refused in each state other than active.
NOT_SERVING = {
    'unconfigured': 'decoder is unconfigured: configure and activate it first',
    'configuring': 'decoder is configuring (loading its model): activate it once configured',
    'inactive': 'decoder is inactive: activate it first',
    'finalized': 'decoder is shut down: start a new one',
}
# What leads back to unconfigured, where configure-time parameters change, from each state.
TO_UNCONFIGURED = {
    'configuring': 'once configured, clean it up',
    'inactive': 'clean it up first',
    'active': 'deactivate it, then clean it up',
    'finalized': 'it is shut down: start a new one with the new value',
}


class TopicReply:
    """A ~/prompt request's reply: its pieces on ~/tokens, the whole on ~/response."""

    readers = frozenset()

    def __init__(self, node: 'DecoderNode'):
        self._node = node

    def piece(self, text: str, tokens: int, step_ms: Optional[float]) -> None:
        self._node._publish(self._node._tokens_pub, String(data=text))

    def end(self, outcome: Dict[str, Any], text: str) -> None:
        self._node._publish(self._node._response_pub, String(data=text))


class GoalReply:
    """A goal's reply: its pieces as feedback, then its outcome to the waiting execute."""

    def __init__(self, goal_handle, done: Future, readers: frozenset):
        self._goal_handle = goal_handle
        self._done = done
        self.readers = readers   # the action's feedback readers when the goal came

    def piece(self, text: str, tokens: int, step_ms: Optional[float]) -> None:
        self._goal_handle.publish_feedback(Generate.Feedback(
            piece=text, tokens=tokens, step_ms=float('nan') if step_ms is None else step_ms))

    def end(self, outcome: Dict[str, Any], text: str) -> None:
        self._done.set_result((outcome, text))


class Executing:
    """Counts the goals whose execute callback runs: while any does, a result is on its way."""

    def __init__(self):
        self._count = 0
        self._lock = threading.Lock()

    def __enter__(self):
        with self._lock:
            self._count += 1

    def __exit__(self, *exc):
        with self._lock:
            self._count -= 1

    def __bool__(self) -> bool:
        return self._count > 0


def _cancel_marked(goal_handle) -> Future:
    """Return a future done once rclpy has marked the goal canceling (within a second)."""
    marked = Future()

    def wait() -> None:
        deadline = time.monotonic() + 1.0
        while not goal_handle.is_cancel_requested and time.monotonic() < deadline:
            time.sleep(0.001)
        marked.set_result(None)

    threading.Thread(target=wait, daemon=True).start()
    return marked


def goal_settings(goal) -> Dict[str, Any]:
    """Return the live parameters a goal sets for its request; its defaults mean the node's."""
    fields = {'max_new_tokens': (goal.max_new_tokens, goal.max_new_tokens != 0),
              'temperature': (float(goal.temperature), goal.temperature >= 0.0),
              'top_p': (float(goal.top_p), goal.top_p != 0.0),
              'seed': (goal.seed, goal.seed >= 0)}
    settings = {name: value for name, (value, given) in fields.items() if given}
    # The reply's format is one setting of four fields: a goal that gives any gives them all.
    output = {name: getattr(goal, name, '') for name in OUTPUT_PARAMS}
    if any(output.values()):
        settings.update(output, tool_choice=output['tool_choice'] or 'auto')
    return settings


class DecoderNode(LifecycleNodeMixin, Node):
    """Hosts one decoder and serves prompts from a bounded FIFO queue while active."""

    def __init__(self):
        # What rclpy's LifecycleNode does, but with a callback group of the transitions' own:
        # loading a model in configure must not hold up ~/cancel, parameters or diagnostics.
        Node.__init__(self, 'decoder')
        transitions = MutuallyExclusiveCallbackGroup()
        deep_lifecycle_services = has_lifecycle_handlers()
        LifecycleNodeMixin.__init__(
            self, enable_communication_interface=not deep_lifecycle_services,
            callback_group=transitions)
        if deep_lifecycle_services:
            create_lifecycle_services(self, transitions)
        else:
            self.get_logger().warning('this rclpy has no LifecycleNodeMixin handlers to bind: '
                                      'the lifecycle services keep its default QoS (depth 10)')
        for param in DECODER_PARAMS:
            self.declare_parameter(param.name, param.default, descriptor(param, managed=True))
        # Read-only once its type is fixed (fix_types): rclpy sets no descriptor on read-only ones.
        untyped = descriptor(AUTOSTART)
        untyped.read_only = False
        self.declare_parameter(AUTOSTART.name, AUTOSTART.default, untyped)
        self._settings = {p.name: self.get_parameter(p.name).value for p in DECODER_PARAMS}
        for name, value in self._settings.items():
            reason = check(name, value, self._settings)
            if reason:
                raise EngineError(f'parameter {reason}')
        self.autostart = self.get_parameter(AUTOSTART.name).value
        reason = check_value(AUTOSTART, self.autostart)
        if reason:
            raise EngineError(f'parameter {reason}')
        fix_types(self, DECODER_PARAMS, managed=True)
        fix_types(self, [AUTOSTART])
        self.add_on_set_parameters_callback(self._on_set_parameters)

        self.state = 'unconfigured'
        self.engine = None
        self._proposer = None   # speculative decoding's drafts (None: speculation off)
        self._speculation = Speculation()   # the setting configure made the proposer for
        self._last_reply = None   # the last decoded request's speculation counts
        self._floor: Optional[LiveFloor] = None
        self._queue: Optional[RequestQueue] = None
        self._worker: Optional[threading.Thread] = None
        self._worker_stop = threading.Event()
        # Prompts are admitted under this lock, and transitions change what serves under it,
        # so no prompt slips into a queue that a transition is emptying.
        self._serving = threading.Lock()
        self._next_id = 1
        self._stopping = threading.Event()
        self._latency = LatencyWindow()
        self._intervals = TokenIntervals()
        self._ledger = Ledger()
        self._last_ttft_ms = float('nan')
        self._reuse = PrefixReuse()
        self.configure_error = ''

        self._tokens_pub = self.create_publisher(String, '~/tokens', TOKENS_QOS)
        self._response_pub = self.create_publisher(String, '~/response', 10)
        self._latency_pub = self.create_publisher(Float64, '~/step_latency', LATENCY_QOS)
        self._events_pub = self.create_publisher(String, '~/events', EVENTS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', DIAGNOSTICS_QOS)
        # Prompts are tokenised in their callback; give it its own group so a long prompt never
        # delays ~/cancel or the diagnostics timer.
        self.create_subscription(String, '~/prompt', self._on_prompt, PROMPT_QOS,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        # Cancels get a group of their own: a burst of parameter calls never delays them.
        cancels = MutuallyExclusiveCallbackGroup()
        self.create_service(Trigger, '~/cancel', self._on_cancel, qos_profile=SERVICES_QOS,
                            callback_group=cancels)
        self.create_service(Trigger, '~/cancel_all', self._on_cancel_all,
                            qos_profile=SERVICES_QOS, callback_group=cancels)
        self.diagnostics = Updater(self, lambda array: self._publish(self._diag_pub, array))
        self.diagnostics.add(self._decoder_status)
        self.diagnostics.add(self._speculation_status)
        self.create_timer(1.0, self.diagnostics.update)
        self._goals: Dict[str, Request] = {}   # by goal id, from acceptance to their end
        self._executing = Executing()
        if Generate is None:
            self.get_logger().warning(
                'the Generate action is off: physinf_ros_interfaces is not built or not '
                'sourced (colcon build --base-paths . interfaces; source install/setup.bash); '
                'the topics serve as usual')
        else:
            # Reentrant: every goal's execute waits (without a thread) for its request's end.
            server = ActionServer(
                self, Generate, '~/generate', execute_callback=self._execute_goal,
                cancel_callback=self._cancel_goal, callback_group=ReentrantCallbackGroup(),
                goal_service_qos_profile=SERVICES_QOS, result_service_qos_profile=SERVICES_QOS,
                cancel_service_qos_profile=SERVICES_QOS)
            self._goal_clients = GoalClients(self, server, Generate,
                                             f'{self.get_fully_qualified_name()}/generate')
            if self._goal_clients.unavailable:
                self.get_logger().warning(
                    'goals cannot be tied to their clients (service introspection: '
                    f'{self._goal_clients.unavailable}): a goal is cancelled once none of the '
                    'action clients present when it came is left')
            self.create_timer(0.2, self._watch_goal_clients)

    # -- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        s = dict(self._settings)
        self.state = 'configuring'
        self.get_logger().info(
            f'configuring: loading model {s["model"]!r} (backend {s["backend"]}, device '
            f'{s["device"]}, dtype {s["dtype"]}, max_context {s["max_context"]})')
        try:
            engine, speculation, proposer = self._load(s)
        except Exception as exc:  # noqa: B902 - any load failure leaves the node reconfigurable
            self.state = 'unconfigured'
            detail = str(exc) if isinstance(exc, EngineError) else f'{type(exc).__name__}: {exc}'
            self.configure_error = detail
            self.get_logger().error(f'configure failed, back to unconfigured: {detail}')
            self._event('error', None, f'configure failed: {detail}; fix the parameters '
                        '(they can be changed while unconfigured) and configure again')
            return TransitionCallbackReturn.FAILURE
        self.configure_error = ''
        info = engine.info
        self.get_logger().info(
            f'model ready in {engine.load_s:.1f} s: {info.model} on {info.device}, backend '
            f'{info.backend}, {info.dtype}' + (f' ({info.note})' if info.note else '')
            + self._memory_note(engine))
        # The engine last: the diagnostics and the prompts read it as "configured".
        self._floor = LiveFloor(engine.decoder, log=self.get_logger().info)
        self._reuse = PrefixReuse()   # a new cache holds nothing yet
        self._speculation, self._proposer = speculation, proposer
        self._last_reply = None
        self._queue = RequestQueue(s['queue_size'])
        self.engine = engine
        self._worker_stop.clear()
        self._worker = threading.Thread(target=self._serve, args=(self._queue,), name='decode',
                                        daemon=True)
        self._worker.start()
        self.state = 'inactive'
        return TransitionCallbackReturn.SUCCESS

    def _load(self, s: Dict[str, Any]) -> tuple:
        """Load the model, and the speculation's proposer (a draft model loads beside it)."""
        log = self.get_logger().info
        engine = load(s['model'], s['backend'], s['device'], s['dtype'], s['max_context'],
                      log=log, deterministic=s['deterministic'])
        speculation = Speculation.parse(s['speculation'])
        proposer = None
        try:
            if speculation.kind == 'draft':
                log(f'speculation {speculation}: loading the draft model')
            try:
                speculative.check_verifies(engine.decoder)
            except EngineError as exc:
                raise EngineError(f'speculation {speculation}: {exc}; use backend eager or '
                                  'graphed, or set speculation off') from None
            try:
                proposer = make_proposer(speculation, engine, log)
            except EngineError as exc:
                raise EngineError(f'speculation {speculation}: {exc}; fix the draft model or '
                                  'set speculation off') from None
        except BaseException:
            if proposer is not None:
                proposer.close()
            engine.close()
            raise
        return engine, speculation, proposer

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._serving:
            self.state = 'active'
        self.get_logger().info('active: serving prompts on ~/prompt')
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_serving('inactive', 'decoder deactivated')
        self.get_logger().info('inactive: prompts are refused until activated')
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.state = 'unconfigured'
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_serving('finalized', SHUTTING_DOWN)
        self._release()
        self.get_logger().info('shut down (lifecycle): exiting')
        return TransitionCallbackReturn.SUCCESS

    def _stop_serving(self, new_state: str, why: str, timeout: float = 10.0) -> None:
        """Refuse new prompts; end the running and waiting requests as cancelled (why)."""
        with self._serving:
            self.state = new_state
            queue = self._queue
        if queue is None:
            return
        queue.cancel_all(why)
        # The worker ends them within about a step; their finished events precede the new state.
        if not queue.wait_idle(timeout) and not self._stopping.is_set():
            self.get_logger().warning(f'{why}: the running request did not end within '
                                      f'{timeout:.0f} s')

    def _release(self) -> None:
        """Stop the worker and let the model go; log the device memory it gives back."""
        if self._worker is not None:
            self._worker_stop.set()
            self._worker.join(timeout=10.0)
            self._worker = None
        engine, self.engine, self._floor, self._queue = self.engine, None, None, None
        proposer, self._proposer = self._proposer, None
        if engine is None:
            return
        before = engine.memory_allocated()
        if proposer is not None:
            proposer.close()   # a draft model's engine
        engine.close()
        after = engine.memory_allocated()
        self.get_logger().info('model released' + (
            '' if before is None else f': CUDA memory allocated {before / 2**20:.1f} MiB '
            f'before, {after / 2**20:.1f} MiB after'))

    @staticmethod
    def _memory_note(engine) -> str:
        allocated = engine.memory_allocated()
        return '' if allocated is None else f'; CUDA memory allocated {allocated / 2**20:.1f} MiB'

    # -- parameters ---------------------------------------------------------------------------
    def set_parameters_atomically(self, parameter_list) -> SetParametersResult:
        """Refuse a value of another type than its parameter's first, with the table's reason."""
        # rclpy would refuse it too (the types are fixed), with only type names as its reason.
        for param in parameter_list:
            spec = PARAMS_BY_NAME.get(param.name)
            if spec is not None and param.type_ != Parameter.Type.NOT_SET \
                    and type(param.value) is not type(spec.default):
                reason = check_value(spec, param.value)
                self.get_logger().warning(f'parameter change refused: {reason}')
                return SetParametersResult(successful=False, reason=reason)
        return super().set_parameters_atomically(parameter_list)

    def set_parameters(self, parameter_list) -> List[SetParametersResult]:
        """Set each parameter on its own, as rclpy does, each through the type check above."""
        return [self.set_parameters_atomically([param]) for param in parameter_list]

    def _on_set_parameters(self, params) -> SetParametersResult:
        # Checked against the settings as this call would leave them (system_prompt against
        # max_prompt_bytes, set together or apart).
        after = {**self._settings, **{param.name: param.value for param in params}}
        for param in params:
            reason = check(param.name, param.value, after)
            if reason is None and PARAMS_BY_NAME[param.name].read_only \
                    and self.state != 'unconfigured':
                reason = (f'{param.name} is read at configure: change it while the node is '
                          f'unconfigured (now {self.state}: {TO_UNCONFIGURED[self.state]})')
            if reason:
                self.get_logger().warning(f'parameter change refused: {reason}')
                return SetParametersResult(successful=False, reason=reason)
        for param in params:
            self._settings[param.name] = param.value
            when = 'configure' if PARAMS_BY_NAME[param.name].read_only else 'request'
            self.get_logger().info(f'{param.name} = {param.value!r} (from the next {when})')
        return SetParametersResult(successful=True)

    # -- requests -----------------------------------------------------------------------------
    @property
    def _current(self) -> Optional[Request]:
        queue = self._queue
        return queue.current if queue is not None else None

    def _event(self, event: str, request_id: Optional[int], reason: str,
               goal_id: Optional[str] = None, **extra) -> None:
        payload = {'event': event, 'id': request_id, 'reason': reason, **extra}
        if goal_id is not None:
            payload['goal_id'] = goal_id
        self._publish(self._events_pub, String(data=json.dumps(payload)))

    def _reject(self, request_id: int, reason: str, goal_id: Optional[str] = None,
                **extra) -> str:
        self._ledger.count('rejected')
        self.get_logger().warning(f'request {request_id} rejected: {reason}')
        self._event('rejected', request_id, reason, goal_id, **extra)
        return reason

    def _on_prompt(self, msg: String) -> None:
        self._submit(msg.data, {}, TopicReply(self))

    def _submit(self, text: str, overrides: Dict[str, Any], reply,
                goal_id: Optional[str] = None, messages: tuple = ()) -> Optional[str]:
        """
        Admit a prompt from ~/prompt or a goal; the reason when refused, else None.

        messages: a goal's conversation, (role, content) pairs; when given, text is unused.
        """
        with self._serving:
            request_id, self._next_id = self._next_id, self._next_id + 1
            self._ledger.count('received')
            if self.state != 'active':
                return self._reject(request_id, NOT_SERVING[self.state], goal_id,
                                    state=self.state)
            settings = {**self._settings, **overrides}
            for name, value in overrides.items():
                reason = check(name, value, settings)
                if reason:
                    return self._reject(request_id, f'goal field {reason}', goal_id)
            if messages:
                return self._admit_conversation(request_id, messages, settings, reply, goal_id)
            return self._admit(request_id, text, settings, reply, goal_id)

    def _admit_conversation(self, request_id: int, messages: tuple, s: Dict[str, Any],
                            reply, goal_id: str) -> Optional[str]:
        # A conversation is checked as a prompt is, never truncated: its turns are the client's.
        conversation = admit_messages(messages, s['max_prompt_bytes'])
        if not conversation.ok:
            return self._reject(request_id, conversation.reason, goal_id,
                                prompt_bytes=conversation.prompt_bytes)
        max_context = self.engine.info.max_context
        notes = [f'{len(messages)} messages']
        if conversation.removed_controls:
            notes.append(f'{conversation.removed_controls} control characters removed')
        try:
            output, constraint = self._output(s, notes)
        except (ConstraintError, EngineError) as exc:
            return self._reject(request_id, f'output format refused: {exc}', goal_id)
        try:
            prompt_ids = self.engine.encode_messages(conversation.messages,
                                                     s['use_chat_template'], s['system_prompt'],
                                                     output)
        except Exception as exc:  # noqa: B902 - a tokenizer failure must not kill the node
            return self._reject(request_id, f'conversation could not be tokenised: {exc}',
                                goal_id)
        if len(prompt_ids) >= max_context:
            return self._reject(request_id, conversation_too_long(len(prompt_ids), max_context),
                                goal_id, prompt_tokens=len(prompt_ids), max_context=max_context)
        return self._enqueue(request_id, prompt_ids, s, reply, goal_id, notes, output,
                             constraint)

    def _output(self, s: Dict[str, Any], notes: List[str]) -> tuple:
        # What the reply must be, compiled now so that a bad schema, grammar or tool set is
        # refused before any decoding (ConstraintError, or EngineError without a tokenizer).
        output = output_format(s)
        constraint = self.engine.constraint(output)
        if constraint is not None and constraint.warnings:
            notes.append('not enforced by the grammar: ' + '; '.join(constraint.warnings))
        return output, constraint

    def _admit(self, request_id: int, text: str, s: Dict[str, Any], reply,
               goal_id: Optional[str]) -> Optional[str]:
        # Size and text checks come before any tokenizer work: a 2 MB payload costs a length.
        admission = admit(text, s['max_prompt_bytes'])
        if not admission.ok:
            return self._reject(request_id, admission.reason, goal_id,
                                prompt_bytes=admission.prompt_bytes)
        notes = []
        if admission.removed_controls:
            notes.append(f'{admission.removed_controls} control characters removed')
        engine = self.engine
        max_context = engine.info.max_context
        try:
            output, constraint = self._output(s, notes)
        except (ConstraintError, EngineError) as exc:
            return self._reject(request_id, f'output format refused: {exc}', goal_id)
        try:
            prompt_ids = engine.encode(admission.text, s['use_chat_template'], s['system_prompt'],
                                       output)
            if len(prompt_ids) >= max_context and s['truncate_prompt']:
                full = len(prompt_ids)
                prompt_ids, dropped = engine.encode_truncated(
                    admission.text, truncation_limit(max_context, s['max_new_tokens']),
                    s['use_chat_template'], s['system_prompt'], output)
                notes.append(f'truncated from {full} to {len(prompt_ids)} tokens '
                             f'(the first {dropped} tokens of the text dropped)')
            room = max_context - len(prompt_ids)
            # Only a refusal says how much of the prompt the system prompt took.
            system_tokens = engine.system_tokens(s['system_prompt']) if room < 1 else 0
        except Exception as exc:  # noqa: B902 - a tokenizer failure must not kill the node
            return self._reject(request_id, f'prompt could not be tokenised: {exc}', goal_id)
        if room < 1:
            return self._reject(request_id, too_long(len(prompt_ids), max_context, system_tokens),
                                goal_id, prompt_tokens=len(prompt_ids), max_context=max_context)
        return self._enqueue(request_id, prompt_ids, s, reply, goal_id, notes, output,
                             constraint)

    def _enqueue(self, request_id: int, prompt_ids: List[int], s: Dict[str, Any], reply,
                 goal_id: Optional[str], notes: List[str], output, constraint) -> Optional[str]:
        room = self.engine.info.max_context - len(prompt_ids)
        seed = s['seed'] if s['seed'] >= 0 else None
        request = Request(request_id, prompt_ids, min(s['max_new_tokens'], room),
                          Sampling(s['temperature'], s['top_p'], seed), goal_id=goal_id,
                          reply=reply, output=output, constraint=constraint)

        def accepted(position: int) -> None:
            self._ledger.count('accepted')
            if goal_id is not None:
                self._goals[goal_id] = request
            self._event('accepted', request_id,
                        '; '.join([f'queued at position {position}'] + notes), goal_id,
                        prompt_tokens=len(prompt_ids))

        if not self._queue.put(request, accepted):
            return self._reject(request_id, f'queue full ({self._queue.maxsize} waiting): '
                                'retry later or configure the node with a larger queue_size',
                                goal_id)
        return None

    # -- the Generate action ------------------------------------------------------------------
    async def _execute_goal(self, goal_handle):
        """Serve one goal through the shared queue; its result is the request's end."""
        with self._executing:
            return await self._serve_goal(goal_handle)

    async def _serve_goal(self, goal_handle):
        goal = goal_handle.request
        goal_id = str(uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid)))
        done = Future()
        refused = self._submit(goal.prompt, goal_settings(goal),
                               GoalReply(goal_handle, done, self._feedback_readers()), goal_id,
                               tuple((m.role, m.content) for m in goal.messages))
        if refused is not None:
            goal_handle.abort()
            return Generate.Result(finish_reason='rejected', detail=refused)
        outcome, text = await done
        request = self._goals.pop(goal_id)
        self._goal_clients.forget(goal_id)
        finished = outcome['event'] == 'finished'
        reason = outcome['reason'] if finished else 'error'
        if reason in ('eos', 'length'):
            goal_handle.succeed()
        elif reason == 'cancelled' and request.cancel_detail == CANCELLED_BY_CLIENT:
            # rclpy marks the goal canceling only after _cancel_goal returns; the request can
            # end before that (a waiting one at once, a running one within a step).
            if not goal_handle.is_cancel_requested:
                await _cancel_marked(goal_handle)
            goal_handle.canceled()
        else:   # an error, or cancelled by the node (deactivate, shutdown, vanished client)
            goal_handle.abort()
        return Generate.Result(
            text=text, finish_reason=reason,
            detail=outcome.get('detail', '') if finished else outcome['reason'],
            tokens=outcome.get('tokens', 0), ttft_ms=outcome.get('ttft_ms') or 0.0,
            tokens_per_s=outcome.get('tokens_per_s', 0.0),
            prompt_tokens=len(request.prompt_ids),
            cached_tokens=outcome.get('cached_tokens', 0),
            tool_calls=json.dumps(outcome.get('tool_calls', [])),
            tokens_per_step=outcome.get('tokens_per_step', 0.0),
            drafted_tokens=outcome.get('drafted_tokens', 0),
            accepted_tokens=outcome.get('accepted_tokens', 0))

    def _cancel_goal(self, goal_handle) -> CancelResponse:
        request = self._goals.get(str(uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid))))
        if request is None or not request.cancel(CANCELLED_BY_CLIENT):
            return CancelResponse.REJECT   # ended, ending, or being cancelled already
        self.get_logger().info(f'cancelling request {request.id} (goal {request.goal_id})')
        if self._queue.remove(request):
            self._finish_unstarted(request)   # waiting: it ends now, not when its turn comes
        return CancelResponse.ACCEPT

    def _feedback_readers(self) -> frozenset:
        """Endpoints now reading the action's feedback: the action clients."""
        topic = f'{self.get_fully_qualified_name()}/generate/_action/feedback'
        return frozenset(bytes(info.endpoint_gid)
                         for info in self.get_subscriptions_info_by_topic(topic))

    def _watch_goal_clients(self) -> None:
        # A goal's client is known from its send_goal event (goal_clients.py); until that event
        # has come (or without introspection), it is one of the feedback readers that were
        # there when the goal came, and gone once none of those is left.
        goals = [r for r in list(self._goals.values()) if not r.cancelled]
        if not goals:
            return
        clients, readers = self._goal_clients.present(), self._feedback_readers()
        for request in goals:
            client = self._goal_clients.client_of(request.goal_id)
            gone = (client not in clients if client is not None
                    else request.reply.readers and not request.reply.readers & readers)
            if gone and request.cancel(CLIENT_GONE):
                self.get_logger().warning(f'request {request.id} (goal {request.goal_id}): '
                                          'its action client disappeared; cancelling it')

    def _on_cancel(self, request, response):
        current, queue = self._current, self._queue
        if current is None:
            waiting = queue.qsize() if queue is not None else 0
            response.success = False
            response.message = 'nothing to cancel: no request running' + (
                f' ({waiting} waiting; ~/cancel_all drops them)' if waiting else '')
        elif current.cancel(CANCELLED_BY_CANCEL):
            response.success, response.message = True, f'cancelling request {current.id}'
            self.get_logger().info(response.message)
        else:   # one cancel per request succeeds; later ones say why there is nothing to do
            response.success = False
            response.message = f'nothing to cancel: request {current.id} is ' + (
                f'being cancelled already ({current.cancel_detail})' if current.cancelled
                else 'ending already (its last step is done)')
        return response

    def _on_cancel_all(self, request, response):
        queue = self._queue
        current, waiting = (queue.cancel_all(CANCELLED_BY_CANCEL_ALL) if queue is not None
                            else (None, []))
        parts = ([f'request {current.id} (running)'] if current else []) + (
            [f'{len(waiting)} waiting ({", ".join(str(r.id) for r in waiting)})']
            if waiting else [])
        response.success = bool(parts)
        # Requests cancelled already (by an earlier call) are not cancelled again.
        response.message = ('cancelling ' + ' and '.join(parts) if parts
                            else 'nothing to cancel: no request running or waiting that is '
                            'not being cancelled already')
        self.get_logger().info(response.message)
        return response

    # -- decoding (worker thread) ------------------------------------------------------------
    def _serve(self, queue: RequestQueue) -> None:
        while True:
            request = queue.take(timeout=0.1)
            if request is None:
                if self._worker_stop.is_set():
                    return
                continue
            try:
                if request.cancelled:
                    self._finish_unstarted(request)
                else:
                    self._decode(request)
            except Exception as exc:  # noqa: B902 - report, then keep serving
                self.get_logger().error(f'request {request.id} failed: {exc}')
                self._end(request, '', 'error', f'decoding failed: {exc}')
            finally:
                queue.done()

    def _end(self, request: Request, text: str, event: str, reason: str, **extra) -> None:
        """Count and publish a request's last event, hand its reply and outcome to its client."""
        if not request.end_once():
            return   # the node ended it already, stopping (stop_on_signal)
        if event == 'error':
            self._ledger.count('errors')
        else:
            self._ledger.count('finished', *(['cancelled'] if reason == 'cancelled' else []))
        self._event(event, request.id, reason, request.goal_id, **extra)
        request.reply.end({'event': event, 'reason': reason, **extra}, text)

    def _finish_unstarted(self, request: Request) -> None:
        # Cancelled while waiting: it ends like any other request, with an empty reply.
        self._end(request, '', 'finished', 'cancelled', detail=request.cancel_detail,
                  tokens=0, steps=0, ttft_ms=None, tokens_per_s=0.0)

    def _decode(self, request: Request) -> None:
        self._event('started', request.id, f'decoding {len(request.prompt_ids)} prompt tokens',
                    request.goal_id, prompt_tokens=len(request.prompt_ids))
        self.engine.decoder.reuse_prefix = self._settings['kv_keep_sequences'] > 0
        generation = self.engine.generate(
            request.prompt_ids, request.max_new_tokens, request.sampling,
            cancelled=lambda: request.cancelled, constraint=request.constraint,
            proposer=self._proposer)
        self._intervals.start()
        # The loop launches the next steps before it hands out a piece (engine/generate.py):
        # everything here overlaps the device's work.
        for piece in generation:
            if piece.text:
                request.reply.piece(piece.text, len(generation.token_ids), piece.step_ms)
                self._intervals.tick(time.monotonic())
            if piece.step_ms is not None:
                request.steps += 1
                self._latency.add(piece.step_ms)
                self._publish(self._latency_pub, Float64(data=piece.step_ms))
        self._last_ttft_ms = generation.ttft_ms
        self._reuse.add(len(request.prompt_ids), generation.cached_tokens)
        speculation = speculative.counts(generation)
        self._last_reply = speculation
        # One story per request: from here a cancel is refused (its caller told there is nothing
        # to cancel), and one accepted before now ends the request cancelled, even one that came
        # after the engine's last look (its reply then whole, and its detail says both).
        request.settle()
        reason = 'cancelled' if request.cancelled else generation.finish_reason
        steps = generation.step_ms
        extra = {}
        if reason == 'cancelled' and request.steps_at_cancel is not None:
            # How promptly a cancel takes: steps decoded after it arrived, and the time taken.
            extra = {'steps_after_cancel': len(steps) - request.steps_at_cancel,
                     'cancel_ms': round((time.monotonic() - request.cancelled_at) * 1000, 3)}
        if request.output is not None and request.output.tools.strip():
            extra['tool_calls'] = self.engine.tool_calls(generation.text, request.output)
        self._end(request, generation.text, 'finished', reason,
                  detail='; '.join(filter(None, [
                      request.cancel_detail if reason == 'cancelled' else '', generation.detail])),
                  tokens=len(generation.token_ids), steps=len(steps),
                  ttft_ms=round(generation.ttft_ms, 3),
                  tokens_per_s=round(generation.tokens_per_s, 2),
                  prompt_tokens=len(request.prompt_ids), cached_tokens=generation.cached_tokens,
                  **speculation, **extra)
        self.get_logger().info(
            f'request {request.id} finished ({reason}): '
            f'{len(generation.token_ids)} tokens, TTFT {generation.ttft_ms:.1f} ms '
            f'({generation.cached_tokens} of {len(request.prompt_ids)} prompt tokens cached), '
            f'{generation.tokens_per_s:.1f} tokens/s'
            + (f', {speculative.summary(speculation)}' if generation.proposer is not None
               else ''))

    def _publish(self, publisher, msg) -> None:
        publish_guarded(self, publisher, msg, self._stopping)

    # -- diagnostics --------------------------------------------------------------------------
    def _decoder_status(self) -> List[DiagnosticStatus]:
        engine, queue, floor = self.engine, self._queue, self._floor
        s = self._settings
        steps = self._latency.summary()
        intervals = self._intervals.summary()
        state = self.state
        if state == 'active':
            state = 'decoding' if self._current else 'idle'
        values = {'lifecycle_state': self.state, 'state': state}
        if engine is None:   # configure sets it after the floor and the queue
            values.update({k: s[k] for k in ('model', 'backend', 'device', 'dtype',
                                             'deterministic')})
            if self.configure_error:
                values['configure_error'] = self.configure_error
        else:
            info = engine.info
            values.update({
                'backend': info.backend, 'device': info.device, 'dtype': info.dtype,
                'model': info.model, 'max_context': info.max_context,
                'deterministic': s['deterministic'], 'queue_depth': queue.qsize(),
                'ttft_ms': self._last_ttft_ms,
                **self._reuse.values(),
                # The engine's step, as on ~/step_latency, and the rate it alone would give.
                'step_ms_p50': steps['p50'], 'step_ms_p90': steps['p90'],
                'step_ms_p99': steps['p99'], 'engine_tokens_per_s': steps['tokens_per_s'],
                # What a subscriber gets: the interval between consecutive ~/tokens messages.
                'token_interval_ms_p50': intervals['p50'],
                'token_interval_ms_p90': intervals['p90'],
                'tokens_per_s': intervals['tokens_per_s'],
                # t_floor at the context now in the KV cache, against the windowed step p50.
                **floor.values(engine.decoder.position, steps['p50']),
            })
        values.update({f'requests_{k}': v for k, v in self._ledger.snapshot().items()})
        failed = engine is None and bool(self.configure_error)
        return [status('decoder', DiagnosticStatus.ERROR if failed else DiagnosticStatus.OK,
                       f'{state}, {values["backend"]} on {values["device"]}'
                       + (f': configure failed: {self.configure_error}' if failed else ''),
                       values, str(values['device']))]

    def _speculation_status(self) -> List[DiagnosticStatus]:
        # The setting in use (the parameter's value until configured) and the last reply's take.
        setting = (self._speculation if self.engine is not None
                   else Speculation.parse(self._settings['speculation']))
        values = {'speculation': str(setting)}
        last = self._last_reply
        if last is not None:
            values.update({f'last_{k}': v for k, v in last.items()})
            values['last_acceptance'] = speculative.acceptance(last)
        message = str(setting) if last is None or not setting.on \
            else f'{setting}: last reply {speculative.summary(last)}'
        return [status('speculation', DiagnosticStatus.OK, message, values)]

    def stop_on_signal(self, executor) -> None:
        """
        On SIGINT/SIGTERM: end every request as the shutdown transition does, and deliver it.

        Running and waiting requests end as cancelled (node shutting down), and the executor
        spins until every goal's result has gone to its client: a goal's execute callback
        resumes in the executor, and its result goes out from there. A request still running
        after STOP_WAIT_S (a prefill cannot be interrupted) is ended here, with the same
        outcome. Further signals meanwhile are only noted: this takes at most
        STOP_WAIT_S + RESULTS_SEND_S.
        """
        with held_signals():
            with self._serving:
                self.state = 'finalized'
                queue = self._queue
            current, waiting = queue.snapshot() if queue else (None, [])
            open_requests = ([current] if current else []) + waiting
            if queue is not None:
                queue.cancel_all(SHUTTING_DOWN)
            self.get_logger().info(f'stopping: ending {len(open_requests)} requests '
                                   f'({SHUTTING_DOWN})')
            deadline = time.monotonic() + STOP_WAIT_S
            while time.monotonic() < deadline and (
                    self._executing or (queue is not None and not queue.wait_idle(0.0))):
                executor.spin_once(timeout_sec=0.02)
            for request in open_requests:
                if not request.ended:
                    self.get_logger().warning(f'request {request.id} did not end within '
                                              f'{STOP_WAIT_S:.0f} s: ending it now')
                    self._end(request, '', 'finished', 'cancelled', detail=SHUTTING_DOWN,
                              tokens=0, steps=request.steps, ttft_ms=None, tokens_per_s=0.0)
            sent_by = time.monotonic() + RESULTS_SEND_S
            while time.monotonic() < sent_by:
                executor.spin_once(timeout_sec=0.02)

    def shutdown(self) -> None:
        """Stop the worker: its requests end as cancelled within about a step."""
        self._stopping.set()
        # A long prefill cannot be interrupted; the worker is a daemon, so do not wait long.
        self._stop_serving('finalized', SHUTTING_DOWN, timeout=1.0)
        self._worker_stop.set()
        if self._worker is not None:
            self._worker.join(timeout=1.0)


def _params_files(args: Optional[List[str]]) -> List[str]:
    argv = sys.argv if args is None else args
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == '--params-file']


def main(args=None) -> int:
    # Ctrl-C and SIGTERM are the node's own: it first ends its requests, and their events
    # still go out (nodes/common.py).
    if not start_ros(args, 'decoder'):
        return 1
    logger = rclpy.logging.get_logger('decoder')
    node = None
    executor = None
    code = 0
    try:
        # Before any model loads: give way to a decoder that runs under this name already.
        own, seen, note = claim_name('decoder')
        node = DecoderNode()
        watch = NameWatch(node, own, seen)
        node.get_logger().info(f'instance check: {note}')
        # A thread for each callback group: prompts, transitions, cancels, the Generate action,
        # and the default one (parameter services, the timers; the instance records).
        executor = MultiThreadedExecutor(num_threads=5)
        executor.add_node(node)
        if node.autostart:
            # As an unmanaged node would: a model that cannot load stops the process (exit 1).
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                raise EngineError(node.configure_error)
            node.trigger_activate()
        else:
            node.get_logger().info('unconfigured (autostart is false): configure and activate '
                                   'through ~/change_state')
        # Spins as serving does: a prompt that comes meanwhile is served, not refused.
        watch.settle(executor)
        finalized_at = None
        while rclpy.ok() and (finalized_at is None or time.monotonic() - finalized_at < 0.5):
            # Short waits: Python handles a signal between two of them, within 0.1 s.
            spin_once(executor, 0.1)
            watch.check()
            if finalized_at is None and node.state == 'finalized':
                # The shutdown transition is done: a moment more to send its answer, then exit.
                finalized_at = time.monotonic()
    except KeyboardInterrupt:
        # Ctrl-C, SIGTERM, or ros2 launch stopping: every client gets its result first.
        if node is not None and executor is not None:
            node.stop_on_signal(executor)
    except ExternalShutdownException:
        pass
    except NameTaken:
        code = 1   # its FATAL line is in the log already (instance_claim.refusal)
    except (EngineError, ParameterException) as exc:
        files = _params_files(args)
        logger.fatal(str(exc) + (f' (parameters files: {", ".join(files)})' if files else ''))
        code = 1
    except Exception:  # noqa: B902 - anything else is a bug: say where, exit non-zero
        logger.fatal('decoder_node failed:\n' + traceback.format_exc())
        code = 1
    finally:
        close(node, 'decoder')
    # The process ends now: spare it the interpreter's last garbage collections over torch's
    # and the model's objects, which take seconds on a busy CPU; the memory goes back anyway.
    gc.freeze()
    return code


if __name__ == '__main__':
    sys.exit(main())
