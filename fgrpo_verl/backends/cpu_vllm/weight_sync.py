"""Actor -> vLLM weight sync on vLLM's CPU platform.

verl 0.9.1 syncs weights into its vLLM engine with ``vLLMColocateWorkerExtension.update_weights_from_ipc``
(``verl/workers/rollout/vllm_rollout/utils.py``), which runs inside vLLM's worker process: it receives the actor's
tensors in buckets over ZMQ + shared memory (the ``cpu`` platform has no CUDA IPC), calls ``model.load_weights``
on each bucket, then ``process_weights_after_loading`` once. Two things break on vLLM's CPU platform:

1. **The layers are not in checkpoint format any more.** After the first load, vLLM-CPU repacks every linear
   layer's weight for oneDNN and replaces ``layer.weight`` with a parameter that has no ``weight_loader``, so
   ``load_weights`` fails (``'Parameter' object has no attribute 'weight_loader'``), and a second
   ``process_weights_after_loading`` would repack packed weights. vLLM's own answer for reloading into a
   processed model is its *layerwise reload* (``vllm.model_executor.model_loader.reload``):
   ``initialize_layerwise_reload(model)`` puts every layer back into checkpoint format (on the meta device, with
   loaders that buffer the incoming tensors), each layer is processed and copied into the kernel tensors the
   engine holds as soon as all of its weights have arrived, and ``finalize_layerwise_reload`` processes the rest.
   vLLM's own ``reload_weights`` does exactly this; verl does not use it. The wrapper below brackets verl's
   update with those two calls and skips verl's extra ``process_weights_after_loading``.
2. **Received tensors are views of the shared-memory bucket.** On CPU verl's ``tensor.to(device)`` returns the
   same view, the layerwise loader keeps it until the layer is complete, and the next bucket overwrites it (and
   closing the segment fails: ``BufferError: cannot close exported pointers exist``). Each bucket's tensors are
   copied before they are loaded.

3. **A failed load hangs the run.** verl's sender waits for the engine's reply to each bucket without a timeout;
   when loading raises in vLLM's worker, the reply never comes and the trainer waits forever. Here the
   receiver answers the bucket with the error instead, the sender raises it (naming the engine's exception), and a
   sender that hears nothing for ``$FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S`` seconds
   (``vllm_cpu_engine.weight_sync_timeout_s``: a dead engine process) raises a ``TimeoutError``.

LoRA, quantised models and delta (``verl_delta_ipc``) updates keep verl's path untouched: none of them is
exercised on CPU, and the first two bring their own reload logic.
"""

from __future__ import annotations

import contextlib
import logging

from wrapt import register_post_import_hook

from fgrpo_verl.backends.cpu.verl_patches import ORIGINALS, wrap
from fgrpo_verl.backends.vllm_cpu_engine import WEIGHT_SYNC_TIMEOUT_ENV, weight_sync_timeout_s

VERL_VLLM_UTILS = "verl.workers.rollout.vllm_rollout.utils"
VERL_BUCKETS = "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer"
VLLM_LOADER_UTILS = "vllm.model_executor.model_loader.utils"
VLLM_LAYERWISE = "vllm.model_executor.model_loader.reload.layerwise"
# the receiver's reply to a bucket it could not load: this prefix, then the error
ERROR_REPLY = b"fgrpo-weight-sync-error:"


@contextlib.contextmanager
def _copied_buckets():
    """Within the block, every bucket verl's receiver hands to its callback holds copies, not views, and a bucket
    that fails to load is answered with the error (:data:`ERROR_REPLY`) before the exception propagates."""
    import importlib

    buckets = importlib.import_module(VERL_BUCKETS)
    receiver = buckets.BucketedWeightReceiver
    original = receiver.receive_weights

    def receive_weights(self, on_bucket_received):
        def copy_then_load(weights, is_last):
            try:
                return on_bucket_received([(name, tensor.clone()) for name, tensor in weights], is_last)
            except BaseException as err:
                # the sender is waiting for this bucket's reply (REP socket: one reply per request)
                self.socket.send(ERROR_REPLY + f"{type(err).__name__}: {err}".encode(errors="replace"))
                self._ack_pending = False
                raise

        return original(self, copy_then_load)

    receiver.receive_weights = receive_weights
    try:
        yield
    finally:
        receiver.receive_weights = original


@contextlib.contextmanager
def _layerwise_reload(model, model_config):
    """vLLM's reload of a processed model: checkpoint format in, each layer processed once complete."""
    import importlib

    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    loader_utils = importlib.import_module(VLLM_LOADER_UTILS)
    process = loader_utils.process_weights_after_loading
    initialize_layerwise_reload(model)
    # verl imports this function inside update_weights_from_ipc and calls it once after all buckets; the
    # layerwise finalisation below replaces it (running both would repack packed weights)
    loader_utils.process_weights_after_loading = lambda *args, **kwargs: None
    try:
        yield
    finally:
        loader_utils.process_weights_after_loading = process
    finalize_layerwise_reload(model, model_config)


def _plain_update(self, peft_config, kwargs) -> bool:
    """Whether this update is a full-weight update of an unquantised model (the one path this module changes)."""
    from verl.utils.vllm.vllm_quant_utils import is_quantized_model

    if peft_config or getattr(self, "_is_qat_model", False) or getattr(self, "_is_modelopt_qat", False):
        return False
    return not is_quantized_model(self.model_runner.vllm_config)


UPDATE = "vLLMColocateWorkerExtension.update_weights_from_ipc"
INIT_SOCKET = "BucketedWeightSender._init_socket"


def update_weights_from_ipc(self, peft_config=None, base_sync_done=False, **kwargs):
    """verl's worker-side update; on vLLM's CPU platform, for a plain update, inside vLLM's layerwise reload with
    copied buckets."""
    from vllm.platforms import current_platform

    original = ORIGINALS[UPDATE]
    if not (current_platform.is_cpu() and _plain_update(self, peft_config, kwargs)):
        return original(self, peft_config=peft_config, base_sync_done=base_sync_done, **kwargs)
    runner = self.model_runner
    with _copied_buckets(), _layerwise_reload(runner.model, runner.vllm_config.model_config):
        return original(self, peft_config=peft_config, base_sync_done=base_sync_done, **kwargs)


class _CheckedReplies:
    """verl's REQ socket with a bounded wait, that raises the engine's error when a reply carries one."""

    def __init__(self, socket, timeout: float):
        self._socket, self._timeout = socket, timeout

    def recv(self, *args, **kwargs):
        import zmq

        try:
            reply = self._socket.recv(*args, **kwargs)
        except zmq.Again:
            raise TimeoutError(
                f"the vLLM engine did not answer a weight bucket within {self._timeout:g} s (its worker process "
                f"died or hangs; see the vLLMHttpServer lines of the log); {WEIGHT_SYNC_TIMEOUT_ENV} sets this wait") from None
        if reply.startswith(ERROR_REPLY):
            raise RuntimeError("the vLLM engine failed to load the actor's weights: "
                               + reply[len(ERROR_REPLY):].decode(errors="replace"))
        return reply

    def __getattr__(self, name):
        return getattr(self._socket, name)


def init_socket(self):
    """verl's sender socket, with a bounded wait for each reply and the engine's error raised (:class:`_CheckedReplies`)."""
    import zmq

    ORIGINALS[INIT_SOCKET](self)
    timeout = weight_sync_timeout_s()
    self.socket.setsockopt(zmq.RCVTIMEO, max(1, int(timeout * 1000)))
    self.socket = _CheckedReplies(self.socket, timeout)


def _expected_reload_warning(record: logging.LogRecord) -> bool:
    """Drops vLLM's "RotaryEmbedding: Failed to load weights" at every sync: the rotary cos/sin cache is computed,
    never in a checkpoint, and the layerwise reload puts the engine's own tensor back (the warning's fallback)."""
    return record.getMessage() != "RotaryEmbedding: Failed to load weights"


def install() -> None:
    """Wrap verl's worker-side weight update and its bucket sender when (or now, if) their modules are imported
    (idempotent)."""
    register_post_import_hook(lambda module: wrap(module, UPDATE, update_weights_from_ipc), VERL_VLLM_UTILS)
    register_post_import_hook(lambda module: wrap(module, INIT_SOCKET, init_socket), VERL_BUCKETS)
    # a filter added twice is kept once (logging.Filterer.addFilter)
    register_post_import_hook(lambda module: module.logger.addFilter(_expected_reload_warning), VLLM_LAYERWISE)
