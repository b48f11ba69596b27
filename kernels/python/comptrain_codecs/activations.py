"""Compressed saved activations in real PyTorch training.

    model = torchvision.models.resnet18()
    with compressed_activations("szp", 1e-2, "rel", module=model) as stats:
        loss = criterion(model(x), y)
        loss.backward()
    print(stats.summary())

Inside the context, every tensor autograd saves for backward goes through a pack hook
(torch.autograd.graph.saved_tensors_hooks). A float32 tensor of at least `min_bytes` is
compressed with the kernels into a bytes object, and autograd keeps that object instead of the
tensor, so the tensor's memory is freed as soon as nothing else holds it; backward decompresses
it (unpack hook) into a new tensor of the same shape, strides, dtype and device. Everything else
passes through unchanged (autograd keeps the tensor itself), with the reason counted in the stats:

  'dtype'      not float32 (integer and bool masks, float16/bfloat16/float64: the kernels read
               float32 only);
  'parameter'  a leaf that requires grad or a view of one (parameters, weight.t() of a linear
               layer), or memory of `module`'s parameters and buffers: it stays alive anyway,
               and backward must see its exact values;
  'small'      under `min_bytes`, 64 KiB by default: a packed tensor costs a fixed ~20 us of
               CPU for pack + unpack and a 96-byte header (measured with szp on one core:
               22 us per 1 KiB tensor, 68 us per 64 KiB one), which small tensors do not repay;
  'layout'     an overlapping view (expanded, zero strides: more elements than its memory);
               sparse, quantized or other non-strided tensors; devices other than cpu/cuda;
  'policy'     `bounds` gave None for it.

Layouts. A tensor whose elements fill exactly `numel` consecutive elements of its storage
(contiguous, channels-last, transposed: "non-overlapping and dense") is compressed from its memory
in storage order, without a copy, and restored with the same strides (torch.empty_strided). Any
other non-overlapping view (a slice) is copied to a contiguous tensor first and comes back
contiguous; autograd only needs its values.

Saved twice. A memory region saved more than once is compressed once (with `deduplicate`, the
default): y = h * h saves h twice; ReLU saves its output and the next layer saves the same tensor,
or a flattened view of it. A later save finds the earlier stream by the tensor's identity (a weak
reference to it, or to its base for a view, which lives as long as the tensor), its storage
offset, its element count (dense tensors are compressed in storage order, so every dense view of
the same elements shares the stream) or its sizes and strides (other views), its version counter
(a tensor modified in place in between is packed again) and the bound asked for (a tighter bound
gets its own stream). In backward, saves of one stream decode into one memory while it is alive:
the first unpack decodes, later unpacks find that memory through a weak reference to its storage
and return views of it; once every unpacked view is freed, the next unpack decodes again. So
there is never more than one decoded copy alive, and there may be several decodes (autograd often
frees a node's unpacked tensors before the next node unpacks the same memory).

Bounds. The bound of a tensor is `error_bound`, unless `bounds` says otherwise:
  a mapping {module path: bound or None}: the bound of the innermost module running the op that
    saves the tensor, looked up by its path in `module` ('layer1.0.conv1', then 'layer1.0',
    'layer1', '' for `module` itself), else `error_bound`; None means "do not compress";
  a callable f(info: SavedTensorInfo) -> bound or None, for per-tensor policies (an adaptive
    policy computing per-layer bounds from gradient statistics plugs in here).
The current module is known from forward pre- and post-hooks registered on every submodule of
`module` for the duration of the context (a per-thread stack of module paths): the module on top
is the innermost one whose forward is running, so ops a parent's forward calls directly
(torch.flatten in ResNet.forward) belong to the parent. Without `module` the path is None.

Stats (the object `with ... as stats` gives): tensors packed and passed through (by reason),
original and compressed bytes, what the graph holds now and what that saves, per module; with
`measure_error` every packed tensor is decompressed at once and compared with the original (max
absolute error, and its ratio to the absolute bound; for a codec without a bound, fp16, bf16,
quant and zeros, the ratio stays None). See CompressionStats.

Devices. CPU tensors are compressed by the CPU driver with `threads` threads (default:
torch.get_num_threads(), at most MAX_THREADS). CUDA tensors go through the CUDA driver (szp, zeros) when the package was
built with nvcc, else through host memory; either way the compressed bytes live in host memory
(the driver returns a host stream), so the GPU memory saved is the whole tensor. Not run on a
GPU yet: the development machine has none.

Accuracy. An error-bounded codec changes each saved value by at most the bound. Where a saved
tensor is multiplied into a weight gradient (a convolution's or a linear layer's input) that is the
whole effect. Where backward reads it as a mask, more changes: ReLU's backward keeps the gradient
where its saved output is > 0, and szp/szh decode outputs in (0, eb) to exactly 0, which drops
their gradient (kernels/README.md, "Python", measures it). `positive_mask` removes that error:
with positive_mask='relu' (or True, or a callable of SavedTensorInfo) the stream of such a tensor
also keeps one bit per value, x > 0, and the decoded tensor is > 0 exactly where the original was
(n / 8 bytes more per tensor, counted in the compressed bytes); ReLU's backward then reads its
exact mask. 'relu' selects the saves whose tensor a ReLU produced (SavedTensorInfo.producer is
RELU_PRODUCER): a ReLU's own saved output, and the same memory saved by its other readers (the
next convolution), which share its stream. `bounds` can also exempt such tensors.

Errors raised inside a hook during forward (a `bounds` callable giving a bad bound) reach the
caller as torch re-raises them from the op: a RuntimeError quoting the original.

Backward may run after the context has exited: autograd keeps the unpack hook with each saved
tensor. The module stack is per thread; the stats' counters are not locked.
"""

import dataclasses
import math
import threading
import time
import weakref
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from . import CUDA_CODECS, MAX_THREADS, _CODECS, _kernels, _load_cuda_module

__all__ = ["compressed_activations", "CompressionStats", "ModuleStats", "SavedTensorInfo", "RELU_PRODUCER"]

# The grad_fn of a ReLU's output (torch.relu, relu_, nn.ReLU, inplace or not): its backward
# (threshold_backward) reads the saved output's sign as its mask.
RELU_PRODUCER = "ReluBackward0"

DEFAULT_MIN_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class SavedTensorInfo:
    """What a `bounds` callable is told about a tensor autograd is saving."""

    module: Optional[str]  # path of the innermost running submodule of `module` ('' for it), or None
    index: int  # position among the tensors saved during the current call of that module (or since entry)
    producer: Optional[str]  # the tensor's grad_fn class (e.g. 'ReluBackward0'), None for a leaf
    shape: Tuple[int, ...]
    nbytes: int
    tensor: torch.Tensor  # do not keep it: that would keep the memory alive


@dataclasses.dataclass
class ModuleStats:
    tensors: int = 0
    original_bytes: int = 0
    compressed_bytes: int = 0
    error_bound: Optional[float] = None  # the last bound used
    max_abs_error: Optional[float] = None  # with measure_error
    max_error_over_bound: Optional[float] = None  # max |x - x'| / absolute bound, with measure_error (None: no bound)

    @property
    def ratio(self) -> float:
        return self.original_bytes / self.compressed_bytes if self.compressed_bytes else math.nan


class _Stream:
    """One compressed memory region: the stream and how to decode it. It holds no reference to
    the original tensor or its storage (only a weak one, to tell whether that memory is freed)."""

    __slots__ = ("data", "count", "device", "original", "cuda_driver", "cache", "__weakref__")

    def __init__(self, data, count, device, original, cuda_driver):
        self.data = data  # bytes: the kernels' stream
        self.count = count  # float32 elements
        self.device = device
        self.original = original  # StorageWeakRef of the original memory
        self.cuda_driver = cuda_driver
        self.cache = None  # StorageWeakRef of the last decoded memory, shared while it is alive

    @property
    def original_nbytes(self):
        return self.count * 4


class _Packed:
    """What autograd keeps instead of a saved tensor: a stream (possibly shared with other saves
    of the same memory) and the view of it to rebuild (sizes, strides from the stream's first
    element)."""

    __slots__ = ("stream", "size", "stride", "__weakref__")

    def __init__(self, stream, size, stride):
        self.stream = stream
        self.size = size
        self.stride = stride


def _contiguous_strides(size):
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class CompressionStats:
    """Counters of one `compressed_activations` context (cumulative over its forward passes).

    tensors_packed, tensors_deduplicated (saves answered with an already packed object),
    passed_through {reason: count}; original_bytes / compressed_bytes: sums over packed tensors;
    bytes_saved = original_bytes - compressed_bytes; held_*(): what the autograd graphs hold now;
    per_module {path: ModuleStats}; max_abs_error / max_error_over_bound with measure_error;
    pack_seconds / unpack_seconds: wall time in the hooks; hooks_cpu_seconds: the process's CPU
    time in them (every thread: the codecs' too).
    """

    def __init__(self, codec, mode):
        self.codec = codec
        self.mode = mode
        self.tensors_packed = 0
        self.tensors_deduplicated = 0
        self.passed_through: Dict[str, int] = {}
        self.original_bytes = 0
        self.compressed_bytes = 0
        self.max_abs_error: Optional[float] = None
        self.max_error_over_bound: Optional[float] = None
        self.per_module: Dict[Optional[str], ModuleStats] = {}
        self.pack_seconds = 0.0
        self.unpack_seconds = 0.0
        self.hooks_cpu_seconds = 0.0
        self.tensors_unpacked = 0
        self._held = weakref.WeakSet()

    @property
    def bytes_saved(self) -> int:
        """Original minus compressed bytes of every tensor packed so far."""
        return self.original_bytes - self.compressed_bytes

    @property
    def ratio(self) -> float:
        return self.original_bytes / self.compressed_bytes if self.compressed_bytes else math.nan

    def held_original_bytes(self) -> int:
        """Bytes of the tensors whose compressed form autograd holds now (each memory region
        once, however many saves share its stream)."""
        return sum(s.original_nbytes for s in list(self._held))

    def held_compressed_bytes(self) -> int:
        """Bytes of the compressed streams autograd holds now."""
        return sum(len(s.data) for s in list(self._held))

    def held_originals_alive(self) -> int:
        """Bytes of held tensors whose original memory is still alive (something else holds it:
        the input batch in the caller's hands, a tensor not yet out of scope). Compressing them
        saved nothing yet."""
        return sum(s.original_nbytes for s in list(self._held) if not s.original.expired())

    def held_bytes_saved(self) -> int:
        """Memory the compression saves now: the original bytes autograd would hold and that
        are freed, minus every compressed stream held."""
        return self.held_original_bytes() - self.held_originals_alive() - self.held_compressed_bytes()

    def summary(self) -> str:
        mib = 1024.0 ** 2
        lines = [
            f"codec {self.codec} ({self.mode}): {self.tensors_packed} tensors packed "
            f"({self.tensors_deduplicated} saves deduplicated), passed through: "
            + (", ".join(f"{k} {v}" for k, v in sorted(self.passed_through.items())) or "none"),
            f"  original {self.original_bytes / mib:.2f} MiB -> compressed {self.compressed_bytes / mib:.2f} MiB "
            f"(ratio {self.ratio:.2f}, {self.bytes_saved / mib:.2f} MiB saved; MiB = 2^20 bytes)",
            f"  held now: {self.held_original_bytes() / mib:.2f} MiB of tensors as "
            f"{self.held_compressed_bytes() / mib:.2f} MiB, {self.held_bytes_saved() / mib:.2f} MiB saved",
            f"  hooks: pack {self.pack_seconds:.3f} s, unpack {self.unpack_seconds:.3f} s "
            f"(wall; {self.hooks_cpu_seconds:.3f} s of CPU)",
        ]
        if self.max_error_over_bound is not None:
            lines.append(f"  max abs error {self.max_abs_error:.3g} ({self.max_error_over_bound:.4f} of the bound)")
        elif self.max_abs_error is not None:
            lines.append(f"  max abs error {self.max_abs_error:.3g} (codec {self.codec} has no error bound)")
        return "\n".join(lines)

    def _pass(self, reason):
        self.passed_through[reason] = self.passed_through.get(reason, 0) + 1


def _dense(t: torch.Tensor) -> bool:
    """Whether t's elements fill exactly numel consecutive storage elements (in some order)."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _non_overlapping(t: torch.Tensor) -> bool:
    """Whether no two elements of t share memory (sufficient test: in order of stride, each
    stride steps past the whole extent of the dimensions with smaller strides)."""
    extent = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride < extent:
            return False
        extent += (size - 1) * stride
    return True


def _storage(t: torch.Tensor):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


class compressed_activations:
    """Context manager: compresses the tensors autograd saves for backward (see the module's
    documentation).

    codec: a kernels codec (szp, szh, zfp, zeros, quant, fp16, bf16; error-bounded or not).
    error_bound: the default bound (ignored for codecs that are not error-bounded).
    mode: 'rel' (the bound times each tensor's max - min) or 'abs'.
    bounds: None, a mapping {module path: bound or None}, or a callable(SavedTensorInfo) ->
        bound or None (None: do not compress that tensor).
    module: the nn.Module whose submodule paths `bounds` and the stats use; its parameters and
        buffers are never compressed.
    min_bytes: smaller tensors pass through.
    measure_error: decompress each packed tensor at once and record the max error (slower).
    threads: CPU threads of the codecs, 0 to MAX_THREADS (default torch.get_num_threads(), up to
        MAX_THREADS); the streams do not depend on it.
    deduplicate: pack a tensor saved twice once.
    bits: quant's bits per value (1, 2, 4, 8; default 8); the other codecs take none.
    positive_mask: keep one bit per value, x > 0, beside the stream (szp, szh): False (default),
        True (every compressed tensor), 'relu' (tensors a ReLU produced: RELU_PRODUCER), or a
        callable f(info: SavedTensorInfo) -> bool.

    Every argument is checked here, when the context is made (CodecError, ValueError, TypeError),
    not inside the forward pass that first compresses.
    """

    def __init__(self, codec: str = "szp", error_bound: float = 1e-2, mode: str = "rel",
                 bounds: Union[None, Mapping[str, Optional[float]], Callable[[SavedTensorInfo], Optional[float]]] = None,
                 *, module: Optional[torch.nn.Module] = None, min_bytes: int = DEFAULT_MIN_BYTES,
                 measure_error: bool = False, threads: Optional[int] = None, deduplicate: bool = True,
                 bits: Optional[int] = None, positive_mask: Union[bool, str, Callable[[SavedTensorInfo], bool]] = False):
        info = _CODECS.get(codec)
        if info is None:
            _kernels.max_compressed_size(codec, 0)  # raises CodecError naming the known codecs
        if mode not in ("rel", "abs"):
            raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
        # What compress would refuse later, inside the user's forward pass: refused now.
        _kernels.check_options(codec, bits, 1 if threads is None else threads)
        if bounds is not None and not callable(bounds) and not isinstance(bounds, Mapping):
            raise TypeError("bounds must be None, a mapping {module path: bound} or a callable(SavedTensorInfo)")
        if isinstance(bounds, Mapping) and module is None:
            raise ValueError("bounds by module path need module= (the model whose submodule paths they name)")
        if isinstance(bounds, Mapping) and module is not None:
            known = {name for name, _ in module.named_modules()}
            unknown = sorted(str(k) for k in bounds if k not in known)
            if unknown:
                raise ValueError(f"bounds name modules that are not in module: {', '.join(unknown)}")
        if not (isinstance(positive_mask, bool) or positive_mask == "relu" or callable(positive_mask)):
            raise ValueError(f"positive_mask must be False, True, 'relu' or a callable(SavedTensorInfo), got {positive_mask!r}")
        if positive_mask is not False and codec not in ("szp", "szh"):
            raise ValueError(f"positive_mask applies to the strict codecs szp and szh only (codec {codec})")
        self.positive_mask = positive_mask
        self.codec = codec
        self.bounded = bool(info["error_bounded"])
        self.error_bound = error_bound
        self.mode = mode
        self.bounds = bounds
        self.module = module
        self.min_bytes = int(min_bytes)
        self.measure_error = measure_error
        self.threads = threads
        self.deduplicate = deduplicate
        self.bits = bits
        if self.bounded:
            self._validate_bound(error_bound, "error_bound")
        self.stats = CompressionStats(codec, mode if self.bounded else "not error-bounded")
        self._hooks = None
        self._module_handles = []
        self._local = threading.local()
        self._excluded_storages = set()
        self._seen: Dict[tuple, Tuple[Any, Any]] = {}
        self._order = 0

    # -- context ---------------------------------------------------------------------------------
    def __enter__(self) -> CompressionStats:
        if self._hooks is not None:
            raise RuntimeError("compressed_activations is not reentrant; make a new one")
        if self.module is not None:
            self._attach(self.module)
        # torch's own thread count can exceed the kernels' maximum on a large machine: capped.
        self._threads = self.threads if self.threads is not None else min(torch.get_num_threads(), MAX_THREADS)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self.stats

    def __exit__(self, *exc):
        try:
            self._hooks.__exit__(*exc)
        finally:
            self._hooks = None
            for handle in self._module_handles:
                handle.remove()
            self._module_handles = []
            self._seen.clear()
        return False

    # -- module paths ----------------------------------------------------------------------------
    def _attach(self, module):
        self._excluded_storages = set()
        for tensor in list(module.parameters()) + list(module.buffers()):
            self._excluded_storages.add((tensor.device, _storage(tensor).data_ptr()))
        for name, sub in module.named_modules():
            self._module_handles.append(sub.register_forward_pre_hook(self._enter_hook(name)))
            self._module_handles.append(sub.register_forward_hook(self._leave_hook(name)))

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _enter_hook(self, name):
        def hook(_module, _inputs):
            self._stack().append([name, 0])  # path, tensors saved during this call

        return hook

    def _leave_hook(self, name):
        def hook(_module, _inputs, _output):
            stack = self._stack()
            # A forward that raised left its entries: drop down to this module's.
            while stack and stack[-1][0] != name:
                stack.pop()
            if stack:
                stack.pop()

        return hook

    def _where(self):
        """(module path, index of this save in the module's current call)."""
        stack = self._stack() if self.module is not None else None
        if stack:
            top = stack[-1]
            index = top[1]
            top[1] += 1
            return top[0], index
        index = self._order
        self._order += 1
        return None, index

    # -- bounds ----------------------------------------------------------------------------------
    @staticmethod
    def _validate_bound(bound, what):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 0:
            raise ValueError(f"{what} must be a finite number >= 0, got {bound!r}")

    @staticmethod
    def _info(tensor, path, index):
        grad_fn = tensor.grad_fn
        return SavedTensorInfo(module=path, index=index, producer=type(grad_fn).__name__ if grad_fn else None,
                               shape=tuple(tensor.shape), nbytes=tensor.numel() * tensor.element_size(), tensor=tensor)

    def _mask_for(self, tensor, path, index):
        """Whether this save's stream keeps the positive mask."""
        if isinstance(self.positive_mask, bool):
            return self.positive_mask
        if self.positive_mask == "relu":
            grad_fn = tensor.grad_fn
            return grad_fn is not None and type(grad_fn).__name__ == RELU_PRODUCER
        return bool(self.positive_mask(self._info(tensor, path, index)))

    def _bound_for(self, tensor, path, index):
        if self.bounds is None:
            return self.error_bound
        if callable(self.bounds) and not isinstance(self.bounds, Mapping):
            bound = self.bounds(self._info(tensor, path, index))
        else:
            bound = self.error_bound
            key = path
            while key is not None:
                if key in self.bounds:
                    bound = self.bounds[key]
                    break
                key = None if key == "" else key.rpartition(".")[0]
        if bound is not None and self.bounded:
            self._validate_bound(bound, f"the bound of a tensor saved in module {path!r}")
        return bound

    # -- hooks -----------------------------------------------------------------------------------
    def _skip_reason(self, t: torch.Tensor) -> Optional[str]:
        if t.dtype != torch.float32:
            return "dtype"
        if t.layout != torch.strided or t.is_quantized or t.device.type not in ("cpu", "cuda"):
            return "layout"
        if (t.is_leaf and t.requires_grad) or (t._base is not None and t._base.is_leaf and t._base.requires_grad):
            return "parameter"
        if self._excluded_storages and (t.device, _storage(t).data_ptr()) in self._excluded_storages:
            return "parameter"
        if t.numel() * 4 < self.min_bytes:
            return "small"
        if not _non_overlapping(t):
            return "layout"  # expanded: a copy would be larger than the memory, and no memory is freed
        return None

    def _memory_key(self, t, dense):
        """Identity of the memory a save covers, and the tensor whose weak reference keeps the
        key valid (the base of a view: its PyObject lives as long as the tensor does). A dense
        tensor is compressed from its memory in storage order, so every dense view of the same
        elements (h and h.flatten(1)) shares one stream; other views match only themselves. The
        version counter makes a tensor modified in place between two saves a new memory."""
        base = t._base if t._base is not None else t
        if dense:
            return (id(base), t.storage_offset(), t.numel(), t._version), base
        return (id(base), t.storage_offset(), tuple(t.shape), t.stride(), t._version), base

    def _pack(self, t: torch.Tensor):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return self._pack_tensor(t)
        finally:
            self.stats.pack_seconds += time.perf_counter() - start
            self.stats.hooks_cpu_seconds += time.process_time() - cpu

    def _pack_tensor(self, t):
        reason = self._skip_reason(t)
        if reason is not None:
            self.stats._pass(reason)
            return t
        path, index = self._where()
        bound = self._bound_for(t, path, index)
        if bound is None:
            self.stats._pass("policy")
            return t
        mask = self._mask_for(t, path, index)
        dense = _dense(t)
        stride = tuple(t.stride()) if dense else None  # None: rebuilt contiguous
        key = base = None
        if self.deduplicate:
            key, base = self._memory_key(t, dense)
            key = key + (bound, mask)  # a save asking for a tighter bound or the mask gets its own stream
            hit = self._seen.get(key)
            if hit is not None:
                base_ref, stream_ref = hit
                stream = stream_ref()
                if base_ref() is base and stream is not None:
                    self.stats.tensors_deduplicated += 1
                    return _Packed(stream, tuple(t.shape), stride)
        stream = self._compress(t.detach(), dense, bound if self.bounded else None, mask)
        self._account(stream, path, bound)
        packed = _Packed(stream, tuple(t.shape), stride)
        if self.measure_error:
            self._measure(t.detach(), packed, path)
        if key is not None:
            seen = self._seen
            base_ref = weakref.ref(base, lambda _ref, k=key: seen.pop(k, None))
            seen[key] = (base_ref, weakref.ref(stream))
        return packed

    def _compress(self, t, dense, eb, mask):
        count = t.numel()
        if dense:
            flat = t.as_strided((count,), (1,), t.storage_offset())  # the memory, in storage order
        else:
            flat = t.contiguous().view(-1)  # a non-overlapping view (a slice): its values only
        original = StorageWeakRef(_storage(t))
        device = t.device
        if device.type == "cuda":
            module = _load_cuda_module()
            if module is not None and self.codec in CUDA_CODECS:
                with torch.cuda.device(device):
                    torch.cuda.current_stream().synchronize()
                    data = module.compress(flat.data_ptr(), [count], device.index, self.codec,
                                           0.0 if eb is None else float(eb), self.mode, mask)
                return _Stream(data, count, device, original, True)
            flat = flat.cpu()
        data = _kernels.compress(flat.numpy(), self.codec, eb, self.mode, self.bits, self._threads, mask)
        return _Stream(data, count, device, original, False)

    def _account(self, stream, path, bound):
        s = self.stats
        s.tensors_packed += 1
        s.original_bytes += stream.original_nbytes
        s.compressed_bytes += len(stream.data)
        s._held.add(stream)
        m = s.per_module.get(path)
        if m is None:
            m = s.per_module[path] = ModuleStats()
        m.tensors += 1
        m.original_bytes += stream.original_nbytes
        m.compressed_bytes += len(stream.data)
        m.error_bound = bound if self.bounded else None

    def _measure(self, t, packed, path):
        back = self._view(self._decode(packed.stream), packed)
        finite = torch.isfinite(t)
        error = (t - back).abs()
        error = torch.where(finite, error, torch.zeros((), dtype=error.dtype, device=error.device))
        max_error = float(error.max()) if error.numel() else 0.0
        s = self.stats
        m = s.per_module[path]
        s.max_abs_error = max_error if s.max_abs_error is None else max(s.max_abs_error, max_error)
        m.max_abs_error = max_error if m.max_abs_error is None else max(m.max_abs_error, max_error)
        if not self.bounded:
            return  # no bound to measure against: max_error_over_bound stays None
        absolute = _kernels.inspect(packed.stream.data)["absolute_bound"]
        # A zero bound (error_bound 0, or a constant tensor in rel mode) held exactly is 0 of it;
        # broken (zfp's tolerance at 0), it is infinitely many times it.
        over = max_error / absolute if absolute > 0 else (0.0 if max_error == 0 else math.inf)
        s.max_error_over_bound = over if s.max_error_over_bound is None else max(s.max_error_over_bound, over)
        m.max_error_over_bound = over if m.max_error_over_bound is None else max(m.max_error_over_bound, over)

    def _decode(self, stream) -> torch.Tensor:
        """The stream's elements as a new 1-D tensor on the original device."""
        flat = torch.empty((stream.count,), dtype=torch.float32, device=stream.device)
        if stream.device.type == "cuda":
            if stream.cuda_driver:
                module = _load_cuda_module()
                with torch.cuda.device(stream.device):
                    torch.cuda.current_stream().synchronize()
                    module.decompress_into(stream.data, flat.data_ptr(), stream.count, stream.device.index)
            else:
                flat.copy_(torch.from_numpy(_kernels.decompress(stream.data, self._threads)))
        else:
            _kernels.decompress_into(stream.data, flat.numpy(), self._threads)
        return flat

    @staticmethod
    def _view(flat, packed):
        stride = packed.stride if packed.stride is not None else _contiguous_strides(packed.size)
        return flat.as_strided(packed.size, stride, 0)

    def _unpack(self, packed):
        if not isinstance(packed, _Packed):
            return packed  # passed through
        start, cpu = time.perf_counter(), time.process_time()
        try:
            stream = packed.stream
            flat = _revive(stream.cache, stream.count, stream.device) if stream.cache is not None else None
            if flat is None:
                flat = self._decode(stream)
                self.stats.tensors_unpacked += 1
                # While the decoded memory is alive (another save's unpacked view holds it), the
                # other saves of this memory are rebuilt on it instead of decoded again. A weak
                # reference to the tensor object would not do: autograd keeps the C++ tensor and
                # lets its Python object die.
                stream.cache = StorageWeakRef(_storage(flat))
            return self._view(flat, packed)
        finally:
            self.stats.unpack_seconds += time.perf_counter() - start
            self.stats.hooks_cpu_seconds += time.process_time() - cpu


def _revive(storage_ref, count, device):
    """A 1-D float32 tensor on the memory a StorageWeakRef names, or None when it is freed (or
    this torch lacks UntypedStorage._new_with_weak_ptr, which torch.multiprocessing uses)."""
    new_with_weak_ptr = getattr(getattr(torch, "UntypedStorage", None), "_new_with_weak_ptr", None)
    if new_with_weak_ptr is None:
        return None
    storage = new_with_weak_ptr(storage_ref.cdata)
    if storage is None:
        return None
    return torch.empty(0, dtype=torch.float32, device=device).set_(storage, 0, (count,), (1,))
