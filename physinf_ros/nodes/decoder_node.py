"""
decoder_node: prompts in on ~/prompt, tokens streamed out on ~/tokens.

A thin translator: the engine does the work, in a worker thread, so the executor stays free to
answer ~/cancel, parameter changes and the diagnostics timer while a reply is being decoded.
"""

from dataclasses import dataclass, field
import json
import queue
import sys
import threading
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                SetParametersResult)
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64, String
from std_srvs.srv import Trigger

from ..config import check, DECODER_PARAMS
from ..engine import EngineError, load, Sampling
from ..roofline import LiveFloor
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
    desc = ParameterDescriptor(description=param.description, read_only=param.read_only)
    if param.choices:
        desc.additional_constraints = 'one of: ' + ', '.join(param.choices)
    if param.low is not None and isinstance(param.default, float):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(param.low), to_value=float(param.high), step=0.0)]
    elif param.low is not None:
        desc.integer_range = [IntegerRange(
            from_value=int(param.low), to_value=int(param.high), step=1)]
    return desc


@dataclass
class Request:
    """One accepted prompt and the settings it was accepted with."""

    id: int  # noqa: A003 - the request id, as the events call it
    prompt_ids: list
    max_new_tokens: int
    sampling: Sampling
    cancel: threading.Event = field(default_factory=threading.Event)


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

        self._queue: queue.Queue = queue.Queue(maxsize=s['queue_size'])
        self._next_id = 1
        self._current: Optional[Request] = None
        self._stopping = threading.Event()
        self._latency = LatencyWindow()
        self._counts = {'finished': 0, 'rejected': 0, 'errors': 0}
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
    def _event(self, event: str, request_id: int, reason: str, **extra) -> None:
        payload = {'event': event, 'id': request_id, 'reason': reason, **extra}
        self._publish(self._events_pub, String(data=json.dumps(payload)))

    def _reject(self, request_id: int, reason: str) -> None:
        self._counts['rejected'] += 1
        self.get_logger().warning(f'request {request_id} rejected: {reason}')
        self._event('rejected', request_id, reason)

    def _on_prompt(self, msg: String) -> None:
        request_id, self._next_id = self._next_id, self._next_id + 1
        s = dict(self._settings)
        text = msg.data
        if not text.strip():
            return self._reject(request_id, 'empty prompt: send some text to answer')
        try:
            prompt_ids = self.engine.encode(text, s['use_chat_template'], s['system_prompt'])
        except Exception as exc:  # noqa: B902 - a tokenizer failure must not kill the node
            return self._reject(request_id, f'prompt could not be tokenised: {exc}')
        room = s['max_context'] - len(prompt_ids)
        if room < 1:
            return self._reject(
                request_id, f'prompt is {len(prompt_ids)} tokens; max_context is '
                f'{s["max_context"]}, which leaves no room for a reply: shorten the prompt')
        seed = s['seed'] if s['seed'] >= 0 else None
        request = Request(request_id, prompt_ids, min(s['max_new_tokens'], room),
                          Sampling(s['temperature'], s['top_p'], seed))
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            return self._reject(request_id, f'queue full ({self._queue.maxsize} waiting): '
                                'retry later or start the node with a larger queue_size')
        self._event('accepted', request_id, f'queued at position {self._queue.qsize()}',
                    prompt_tokens=len(prompt_ids))

    def _on_cancel(self, request, response):
        current = self._current
        if current is None:
            response.success, response.message = False, 'nothing to cancel: no request running'
        else:
            current.cancel.set()
            response.success, response.message = True, f'cancelling request {current.id}'
            self.get_logger().info(response.message)
        return response

    # -- decoding (worker thread) ------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                request = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self._current = request
            try:
                self._decode(request)
            except Exception as exc:  # noqa: B902 - report, then keep serving
                self._counts['errors'] += 1
                self.get_logger().error(f'request {request.id} failed: {exc}')
                self._event('error', request.id, f'decoding failed: {exc}')
            finally:
                self._current = None

    def _decode(self, request: Request) -> None:
        self._event('started', request.id, f'decoding {len(request.prompt_ids)} prompt tokens',
                    prompt_tokens=len(request.prompt_ids))
        generation = self.engine.generate(
            request.prompt_ids, request.max_new_tokens, request.sampling,
            cancelled=lambda: request.cancel.is_set() or self._stopping.is_set())
        for piece in generation:
            if piece.text:
                self._publish(self._tokens_pub, String(data=piece.text))
            if piece.step_ms is not None:
                self._latency.add(piece.step_ms)
                self._publish(self._latency_pub, Float64(data=piece.step_ms))
        self._last_ttft_ms = generation.ttft_ms
        self._counts['finished'] += 1
        self._publish(self._response_pub, String(data=generation.text))
        steps = generation.step_ms
        self._event('finished', request.id, generation.finish_reason, detail=generation.detail,
                    tokens=len(generation.token_ids), steps=len(steps),
                    ttft_ms=round(generation.ttft_ms, 3),
                    tokens_per_s=round(generation.tokens_per_s, 2))
        self.get_logger().info(
            f'request {request.id} finished ({generation.finish_reason}): '
            f'{len(generation.token_ids)} tokens, TTFT {generation.ttft_ms:.1f} ms, '
            f'{generation.tokens_per_s:.1f} tokens/s')

    def _publish(self, publisher, msg) -> None:
        try:
            publisher.publish(msg)
        except Exception as exc:  # noqa: B902 - the context may be shutting down under us
            if not self._stopping.is_set():
                self.get_logger().error(f'publish failed: {exc}')

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
            'requests_finished': self._counts['finished'],
            'requests_rejected': self._counts['rejected'], 'errors': self._counts['errors'],
            # t_floor at the context now in the KV cache, against the windowed step p50.
            **self._floor.values(self.engine.decoder.position, summary['p50']),
        }
        status = DiagnosticStatus(
            level=DiagnosticStatus.OK, name=f'{self.get_fully_qualified_name()}: decoder',
            message=f'{values["state"]}, {info.backend} on {info.device}',
            hardware_id=info.device,
            values=[KeyValue(key=k, value=_fmt(v)) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self._publish(self._diag_pub, array)

    def shutdown(self) -> None:
        """Stop the worker within about one decode step."""
        self._stopping.set()
        if self._current is not None:
            self._current.cancel.set()
        self._worker.join(timeout=2.0)


def _fmt(value) -> str:
    return f'{value:.3f}' if isinstance(value, float) else str(value)


def main(args=None) -> int:
    rclpy.init(args=args)
    node = None
    code = 0
    try:
        node = DecoderNode()
        executor = MultiThreadedExecutor(num_threads=3)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except EngineError as exc:
        rclpy.logging.get_logger('decoder').fatal(str(exc))
        code = 1
    finally:
        if node is not None:
            node.shutdown()
            node.get_logger().info('stopped')
            node.destroy_node()
        rclpy.try_shutdown()
    return code


if __name__ == '__main__':
    sys.exit(main())
