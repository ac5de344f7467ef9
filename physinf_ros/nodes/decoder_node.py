"""
decoder_node: prompts in on ~/prompt, tokens streamed out on ~/tokens.

A thin translator: the engine does the work, in a worker thread, so the executor stays free to
answer ~/cancel, parameter changes and the diagnostics timer while a reply is being decoded.
Prompt checks (prompts.py) and request bookkeeping (serving.py) live outside, free of rclpy.
"""

import gc
import json
import signal
import sys
import threading
import time
import traceback
from typing import List, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger

from .common import close, diagnostic_value, publish_guarded
from ..config import check, DECODER_PARAMS
from ..engine import EngineError, load, Sampling
from ..prompts import admit, too_long, truncation_limit
from ..roofline import LiveFloor
from ..serving import Ledger, Request, RequestQueue
from ..stats import LatencyWindow

# Tokens must all arrive, in order, even when a subscriber lags a little: reliable and deep.
TOKENS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# Every request's events matter (a flood of rejections included).
EVENTS_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
# One latency sample per step; a subscriber that falls far behind only loses old samples.
LATENCY_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# Prompts are never dropped by the transport: the node's own bounded queue decides.
PROMPT_QOS = QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE)
# Diagnostics are a state snapshot: only the newest one matters.
DIAGNOSTICS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)


def descriptor(param) -> ParameterDescriptor:
    """Build the ROS parameter descriptor of a config.Param: description, range, read-only."""
    # Types are checked by config.check, whose refusal names the parameter and both types;
    # rclpy's own check would refuse first with only type numbers as its reason.
    desc = ParameterDescriptor(description=param.description, read_only=param.read_only,
                               dynamic_typing=True)
    if param.choices:
        desc.additional_constraints = 'one of: ' + ', '.join(param.choices)
    if param.low is not None and isinstance(param.default, float):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(param.low), to_value=float(param.high), step=0.0)]
    elif param.low is not None:
        desc.integer_range = [IntegerRange(
            from_value=int(param.low), to_value=int(param.high), step=1)]
    return desc


class DecoderNode(Node):
    """Hosts one decoder and serves prompts from a bounded FIFO queue."""

    def __init__(self):
        super().__init__('decoder')
        for param in DECODER_PARAMS:
            self.declare_parameter(param.name, param.default, descriptor(param))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._settings = {p.name: self.get_parameter(p.name).value for p in DECODER_PARAMS}
        for name, value in self._settings.items():
            reason = check(name, value)
            if reason:
                raise EngineError(f'parameter {reason}')

        s = self._settings
        self.get_logger().info(
            f'loading model {s["model"]!r} (backend {s["backend"]}, device {s["device"]}, '
            f'dtype {s["dtype"]}, max_context {s["max_context"]})')
        self.engine = load(s['model'], s['backend'], s['device'], s['dtype'],
                           s['max_context'], log=self.get_logger().info)
        info = self.engine.info
        self.get_logger().info(
            f'ready in {self.engine.load_s:.1f} s: {info.model} on {info.device}, '
            f'backend {info.backend}, {info.dtype}' + (f' ({info.note})' if info.note else ''))
        self._floor = LiveFloor(self.engine.decoder, log=self.get_logger().info)

        self._queue = RequestQueue(s['queue_size'])
        self._next_id = 1
        self._stopping = threading.Event()
        self._latency = LatencyWindow()
        self._ledger = Ledger()
        self._last_ttft_ms = float('nan')

        self._tokens_pub = self.create_publisher(String, '~/tokens', TOKENS_QOS)
        self._response_pub = self.create_publisher(String, '~/response', 10)
        self._latency_pub = self.create_publisher(Float64, '~/step_latency', LATENCY_QOS)
        self._events_pub = self.create_publisher(String, '~/events', EVENTS_QOS)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', DIAGNOSTICS_QOS)
        # Prompts are tokenised in their callback; give it its own group so a long prompt never
        # delays ~/cancel or the diagnostics timer.
        self.create_subscription(String, '~/prompt', self._on_prompt, PROMPT_QOS,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.create_service(Trigger, '~/cancel', self._on_cancel)
        self.create_service(Trigger, '~/cancel_all', self._on_cancel_all)
        self.create_timer(1.0, self._publish_diagnostics)
        self._worker = threading.Thread(target=self._serve, name='decode', daemon=True)
        self._worker.start()

    # -- parameters ---------------------------------------------------------------------------
    def _on_set_parameters(self, params) -> SetParametersResult:
        for param in params:
            reason = check(param.name, param.value)
            if reason:
                self.get_logger().warning(f'parameter change refused: {reason}')
                return SetParametersResult(successful=False, reason=reason)
        for param in params:
            self._settings[param.name] = param.value
            self.get_logger().info(f'{param.name} = {param.value!r} (from the next request)')
        return SetParametersResult(successful=True)

    # -- requests -----------------------------------------------------------------------------
    @property
    def _current(self) -> Optional[Request]:
        return self._queue.current

    def _event(self, event: str, request_id: int, reason: str, **extra) -> None:
        payload = {'event': event, 'id': request_id, 'reason': reason, **extra}
        self._publish(self._events_pub, String(data=json.dumps(payload)))

    def _reject(self, request_id: int, reason: str, **extra) -> None:
        self._ledger.count('rejected')
        self.get_logger().warning(f'request {request_id} rejected: {reason}')
        self._event('rejected', request_id, reason, **extra)

    def _on_prompt(self, msg: String) -> None:
        request_id, self._next_id = self._next_id, self._next_id + 1
        self._ledger.count('received')
        s = dict(self._settings)
        # Size and text checks come before any tokenizer work: a 2 MB payload costs a length.
        admission = admit(msg.data, s['max_prompt_bytes'])
        if not admission.ok:
            return self._reject(request_id, admission.reason,
                                prompt_bytes=admission.prompt_bytes)
        notes = []
        if admission.removed_controls:
            notes.append(f'{admission.removed_controls} control characters removed')
        try:
            prompt_ids = self.engine.encode(admission.text, s['use_chat_template'],
                                            s['system_prompt'])
            if len(prompt_ids) >= s['max_context'] and s['truncate_prompt']:
                full = len(prompt_ids)
                prompt_ids, dropped = self.engine.encode_truncated(
                    admission.text, truncation_limit(s['max_context'], s['max_new_tokens']),
                    s['use_chat_template'], s['system_prompt'])
                notes.append(f'truncated from {full} to {len(prompt_ids)} tokens '
                             f'(the first {dropped} tokens of the text dropped)')
        except Exception as exc:  # noqa: B902 - a tokenizer failure must not kill the node
            return self._reject(request_id, f'prompt could not be tokenised: {exc}')
        room = s['max_context'] - len(prompt_ids)
        if room < 1:
            return self._reject(request_id, too_long(len(prompt_ids), s['max_context']),
                                prompt_tokens=len(prompt_ids), max_context=s['max_context'])
        seed = s['seed'] if s['seed'] >= 0 else None
        request = Request(request_id, prompt_ids, min(s['max_new_tokens'], room),
                          Sampling(s['temperature'], s['top_p'], seed))

        def accepted(position: int) -> None:
            self._ledger.count('accepted')
            self._event('accepted', request_id,
                        '; '.join([f'queued at position {position}'] + notes),
                        prompt_tokens=len(prompt_ids))

        if not self._queue.put(request, accepted):
            self._reject(request_id, f'queue full ({self._queue.maxsize} waiting): '
                         'retry later or start the node with a larger queue_size')

    def _on_cancel(self, request, response):
        current = self._current
        if current is None:
            waiting = self._queue.qsize()
            response.success = False
            response.message = 'nothing to cancel: no request running' + (
                f' ({waiting} waiting; ~/cancel_all drops them)' if waiting else '')
        else:
            current.cancel()
            response.success, response.message = True, f'cancelling request {current.id}'
            self.get_logger().info(response.message)
        return response

    def _on_cancel_all(self, request, response):
        current, waiting = self._queue.snapshot()
        for item in ([current] if current else []) + waiting:
            item.cancel()
        parts = ([f'request {current.id} (running)'] if current else []) + (
            [f'{len(waiting)} waiting ({", ".join(str(r.id) for r in waiting)})']
            if waiting else [])
        response.success = bool(parts)
        response.message = ('cancelling ' + ' and '.join(parts) if parts
                            else 'nothing to cancel: no request running or waiting')
        self.get_logger().info(response.message)
        return response

    # -- decoding (worker thread) ------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            request = self._queue.take(timeout=0.1)
            if request is None:
                if self._stopping.is_set():
                    return
                continue
            if self._stopping.is_set():
                request.cancel()
            try:
                if request.cancelled:
                    self._finish_unstarted(request)
                else:
                    self._decode(request)
            except Exception as exc:  # noqa: B902 - report, then keep serving
                self._ledger.count('errors')
                self.get_logger().error(f'request {request.id} failed: {exc}')
                self._event('error', request.id, f'decoding failed: {exc}')
            finally:
                self._queue.done()

    def _finish_unstarted(self, request: Request) -> None:
        # Cancelled while waiting: it ends like any other request, with an empty reply.
        self._ledger.count('finished', 'cancelled')
        self._publish(self._response_pub, String(data=''))
        self._event('finished', request.id, 'cancelled',
                    detail='node shutting down' if self._stopping.is_set()
                    else 'cancelled while waiting',
                    tokens=0, steps=0, ttft_ms=None, tokens_per_s=0.0)

    def _decode(self, request: Request) -> None:
        self._event('started', request.id, f'decoding {len(request.prompt_ids)} prompt tokens',
                    prompt_tokens=len(request.prompt_ids))
        generation = self.engine.generate(
            request.prompt_ids, request.max_new_tokens, request.sampling,
            cancelled=lambda: request.cancelled)
        for piece in generation:
            if piece.text:
                self._publish(self._tokens_pub, String(data=piece.text))
            if piece.step_ms is not None:
                request.steps += 1
                self._latency.add(piece.step_ms)
                self._publish(self._latency_pub, Float64(data=piece.step_ms))
        self._last_ttft_ms = generation.ttft_ms
        reason = generation.finish_reason
        self._ledger.count('finished', *(['cancelled'] if reason == 'cancelled' else []))
        self._publish(self._response_pub, String(data=generation.text))
        steps = generation.step_ms
        extra = {}
        if reason == 'cancelled' and request.steps_at_cancel is not None:
            # How promptly a cancel takes: steps decoded after it arrived, and the time taken.
            extra = {'steps_after_cancel': len(steps) - request.steps_at_cancel,
                     'cancel_ms': round((time.monotonic() - request.cancelled_at) * 1000, 3)}
        self._event('finished', request.id, reason, detail=generation.detail,
                    tokens=len(generation.token_ids), steps=len(steps),
                    ttft_ms=round(generation.ttft_ms, 3),
                    tokens_per_s=round(generation.tokens_per_s, 2), **extra)
        self.get_logger().info(
            f'request {request.id} finished ({reason}): '
            f'{len(generation.token_ids)} tokens, TTFT {generation.ttft_ms:.1f} ms, '
            f'{generation.tokens_per_s:.1f} tokens/s')

    def _publish(self, publisher, msg) -> None:
        publish_guarded(self, publisher, msg, self._stopping)

    # -- diagnostics --------------------------------------------------------------------------
    def _publish_diagnostics(self) -> None:
        info = self.engine.info
        summary = self._latency.summary()
        values = {
            'backend': info.backend, 'device': info.device, 'dtype': info.dtype,
            'model': info.model, 'max_context': info.max_context,
            'state': 'decoding' if self._current else 'idle',
            'queue_depth': self._queue.qsize(), 'ttft_ms': self._last_ttft_ms,
            'step_ms_p50': summary['p50'], 'step_ms_p90': summary['p90'],
            'step_ms_p99': summary['p99'], 'tokens_per_s': summary['tokens_per_s'],
            **{f'requests_{k}': v for k, v in self._ledger.snapshot().items()},
            # t_floor at the context now in the KV cache, against the windowed step p50.
            **self._floor.values(self.engine.decoder.position, summary['p50']),
        }
        status = DiagnosticStatus(
            level=DiagnosticStatus.OK, name=f'{self.get_fully_qualified_name()}: decoder',
            message=f'{values["state"]}, {info.backend} on {info.device}',
            hardware_id=info.device,
            values=[KeyValue(key=k, value=diagnostic_value(v)) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self._publish(self._diag_pub, array)

    def shutdown(self) -> None:
        """Stop the worker within about one decode step; waiting requests end as cancelled."""
        self._stopping.set()
        current, waiting = self._queue.snapshot()
        for request in ([current] if current else []) + waiting:
            request.cancel()
        # A long prefill cannot be interrupted; the worker is a daemon, so do not wait for it.
        self._worker.join(timeout=1.0)


def _params_files(args: Optional[List[str]]) -> List[str]:
    argv = sys.argv if args is None else args
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == '--params-file']


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(args=None) -> int:
    logger = rclpy.logging.get_logger('decoder')
    try:
        # Ctrl-C and SIGTERM are handled here, not by rclpy, whose handlers shut ROS down at
        # once: the node first ends its requests, and their events still go out.
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except RCLError as exc:
        # rcl parses --ros-args (a broken --params-file included) before any node exists.
        logger.fatal(f'ROS 2 could not start with these arguments: {exc}')
        return 1
    signal.signal(signal.SIGTERM, _interrupt)
    # Python leaves SIGINT ignored when the parent ignored it (a background job, nohup):
    # Ctrl-C and launch's SIGINT must stop the node all the same.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    node = None
    code = 0
    try:
        node = DecoderNode()
        executor = MultiThreadedExecutor(num_threads=3)
        executor.add_node(node)
        while rclpy.ok():
            # Short waits: Python handles a signal between two of them, within 0.1 s.
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except (EngineError, ParameterException) as exc:
        files = _params_files(args)
        logger.fatal(str(exc) + (f' (parameters files: {", ".join(files)})' if files else ''))
        code = 1
    except Exception:  # noqa: B902 - anything else is a bug: say where, exit non-zero
        logger.fatal('decoder_node failed:\n' + traceback.format_exc())
        code = 1
    finally:
        close(node)
    # The process ends now: spare it the interpreter's last garbage collections over torch's
    # and the model's objects, which take seconds on a busy CPU; the memory goes back anyway.
    gc.freeze()
    return code


if __name__ == '__main__':
    sys.exit(main())
