#!/usr/bin/python3
"""Capture one real training iteration of a PyTorch model as a comptrain trace (traces/FORMAT.md).

    /usr/bin/python3 traces/capture/comptrain_capture.py resnet18 --batch 4 -o resnet18.json
    /usr/bin/python3 traces/capture/comptrain_capture.py mypkg.models:make_net --input-shape 3,32,32 ...
    /usr/bin/python3 traces/capture/comptrain_capture.py mypkg.lm:make_lm --tokens 64 --vocab 1000 --causal-lm ...

MODEL is a torchvision model name or `module:factory` (a callable returning an nn.Module).

Inputs: a float tensor of --input-shape per sample (images), or, with --tokens S, int64 token ids
[batch, S] drawn from [0, --vocab) (language models; with --token-ids arange, position p of every
sample holds token p mod V, for models whose ops depend on the data, such as a mixture-of-experts
router). Labels: one class per sample in
[0, --num-classes) and `cross_entropy(output, labels)`; with --causal-lm, one token per position
[batch, S] and the causal-LM loss of Hugging Face's ForCausalLMLoss on already-shifted labels:
`cross_entropy(logits.float().view(-1, V), labels.view(-1))` over the model's [batch, S, V] logits.

How it works (PyTorch 1.13, CPU):
  - A TorchDispatchMode sees every aten op below autograd: the forward ops, the backward ops the
    autograd engine runs during `loss.backward()` (the CPU engine runs them on the calling thread,
    so the thread-local mode sees them) and the optimizer's ops. Each becomes one trace op, timed
    with perf_counter around the kernel call -- except, outside the forward pass, ops that only
    rename what they read (autograd's `detach` of every saved tensor it unpacks, `t`, `view`):
    they move no data, and as backward writes of saved storages they would keep every saved
    activation from the strategies (Recorder._renames_what_it_reads).
  - Tensors are identified by their storage (`storage().data_ptr()`): an op output sharing the
    storage of one of the op's inputs (a view, `relu_`, `add_`) becomes a new tensor with
    `view_of` = the storage's first tensor, so every tensor keeps exactly one producer. Outputs
    aliasing weights, buffers or optimizer state (in-place updates, `w.t()`) are not new tensors:
    those roles exist before the iteration and have no producer (FORMAT.md, "Views").
  - `saved_tensors_hooks` records the storages autograd saves; those a backward op reads are
    `activation`, everything else produced in the iteration is `temporary` or, for what ends up
    in `param.grad`, `gradient`.
  - Batch scaling: the step is recorded twice, at the requested batch and at a probe batch (one
    more or one less). Both runs issue the same op sequence; a tensor's batch dimension is the
    one whose extent changes, and each op's FLOPs and bytes are solved as fixed + per_sample * b
    from the two runs, so `Trace::rescaled` is exact. The probe run also warms the kernels up
    before the timed run.
  - Optimizer state is created before recording by a step over zero gradients (which leaves the
    weights unchanged for SGD, momentum and Adam), so the recorded step is a steady-state one.
  - Value features (FORMAT.md, "values"; off with --no-values): when the backward pass starts,
    each floating-point storage autograd saved holds its final forward content, the values a
    compressor would see. Its zero fraction, spread, zero-block fraction and block scale are
    computed with numpy (the definitions of calibrate's features_of) and written on the tensor
    the storage's last forward writer produced.
  - Gradient statistics (FORMAT.md, "Gradient statistics"; off with --no-gradients): after the
    forward pass, a hook on the autograd node of every convolution and every matrix product with
    a weight (ConvolutionBackward0, AddmmBackward0, MmBackward0) sees, in the recorded step's
    backward pass, the gradient of the op's output (delta) and of its weight; their RMSs and the
    products per weight-gradient entry go on the trace tensor the forward op read as its input
    (GradientWatch).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time

import torch
import torchvision
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DTYPES = {
    torch.float64: 'f64', torch.float32: 'f32', torch.float16: 'f16', torch.bfloat16: 'bf16',
    torch.int64: 'i64', torch.int32: 'i32', torch.int8: 'i8', torch.uint8: 'u8', torch.bool: 'bool',
}
ELEMENT_SIZE = {'f64': 8, 'f32': 4, 'f16': 2, 'bf16': 2, 'i64': 8, 'i32': 4, 'i8': 1, 'u8': 1, 'bool': 1}
RESIDENT = ('input', 'weight', 'buffer', 'optimizer_state')

# aten op name (without overload) -> op kind. Ops of matrix products are refined by module
# (linear inside nn.Linear, matmul elsewhere); pooling and dropout modules claim their ops.
KIND_BY_OP = {
    'convolution': 'conv', 'convolution_backward': 'conv', '_convolution': 'conv',
    'mkldnn_convolution': 'conv', 'thnn_conv2d': 'conv',
    'addmm': 'matmul', 'mm': 'matmul', 'bmm': 'matmul', 'baddbmm': 'matmul', 'matmul': 'matmul',
    'linear': 'linear',
    'relu': 'relu', 'relu_': 'relu', 'threshold_backward': 'relu',
    'gelu': 'gelu', 'gelu_backward': 'gelu',
    'native_batch_norm': 'batchnorm', 'native_batch_norm_backward': 'batchnorm',
    'native_layer_norm': 'layernorm', 'native_layer_norm_backward': 'layernorm',
    'max_pool2d_with_indices': 'pool', 'max_pool2d_with_indices_backward': 'pool',
    'avg_pool2d': 'pool', 'avg_pool2d_backward': 'pool',
    '_adaptive_avg_pool2d': 'pool', '_adaptive_avg_pool2d_backward': 'pool',
    '_softmax': 'softmax', '_softmax_backward_data': 'softmax',
    '_log_softmax': 'loss', '_log_softmax_backward_data': 'loss',
    'nll_loss_forward': 'loss', 'nll_loss_backward': 'loss', 'nll_loss2d_forward': 'loss',
    'nll_loss2d_backward': 'loss',
    'native_dropout': 'dropout', 'native_dropout_backward': 'dropout', 'bernoulli_': 'dropout',
    'embedding': 'embedding', 'embedding_dense_backward': 'embedding',
    '_scaled_dot_product_attention': 'attention',
    # Row gathers and scatters by an int64 index (FORMAT.md, op kinds; a mixture-of-experts
    # layer's token dispatch and its gradient).
    'index': 'gather', 'index_select': 'gather', 'gather': 'gather',
    'index_add': 'scatter', 'index_add_': 'scatter', 'index_put': 'scatter', 'index_put_': 'scatter',
    '_index_put_impl_': 'scatter', 'scatter': 'scatter', 'scatter_': 'scatter', 'scatter_add': 'scatter',
    'scatter_add_': 'scatter',
}
ELEMENTWISE = {
    'add', 'add_', 'sub', 'sub_', 'mul', 'mul_', 'div', 'div_', 'neg', 'sqrt', 'sqrt_', 'addcmul_',
    'addcdiv_', 'lerp_', 'clone', 'copy_', 'fill_', 'zero_', 'ones_like', 'zeros_like', 'empty_like',
    'sum', 'mean', 'expand', 'tanh', 'tanh_backward', 'sigmoid', 'sigmoid_backward', 'pow', 'maximum',
    'where', '_to_copy', 'new_empty_strided', 'empty_strided', 'abs', 'exp', 'log', 'rsqrt',
}
# Ops whose output's size the data decides: on a GPU their call returns only once the kernel has
# counted the elements (the host waits: "When input is on CUDA, torch.nonzero() causes host-device
# synchronization", PyTorch's torch.nonzero documentation), so the trace marks them host_sync
# (traces/FORMAT.md, "Ops"). Indexing with a boolean mask is one too (host_sync_op below). An
# .item() (_local_scalar_dense) is not marked: the CPU run records those that ATen's CPU kernels
# make and its CUDA kernels skip (one_hot's range checks), and the GPU run's own are the loop's.
DATA_SIZED = {'nonzero', 'masked_select', '_unique', '_unique2', 'unique_dim', 'unique_consecutive',
              'unique_dim_consecutive'}


def host_sync_op(base: str, args) -> bool:
    if base in DATA_SIZED:
        return True
    # x[mask]: aten::index with a boolean (or uint8) index tensor, which runs a nonzero inside.
    return base == 'index' and any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
                                   for t in tensors_in(args[1:]))


# FLOPs per output element of the ops that are not GEMMs (traces/zoo/README.md, "FLOPs").
FLOPS_PER_ELEMENT = {
    'relu': 1, 'relu_': 1, 'threshold_backward': 1, 'gelu': 5, 'gelu_backward': 11,
    'native_batch_norm': 5, 'native_batch_norm_backward': 9, 'native_layer_norm': 7,
    'native_layer_norm_backward': 13, '_softmax': 5, '_softmax_backward_data': 4,
    '_log_softmax': 5, '_log_softmax_backward_data': 4, 'add': 1, 'add_': 1, 'sub': 1, 'sub_': 1,
    'mul': 1, 'mul_': 1, 'div': 1, 'div_': 1, 'mean': 1, 'sum': 1, 'tanh': 1, 'tanh_backward': 3,
    'addcmul_': 2, 'addcdiv_': 2, 'sqrt': 1, 'lerp_': 2,
}


# Scatters that add: one FLOP per element added, the source's (`index_add_(dim, index, source)`,
# `scatter_add_(dim, index, src)`: the fourth argument; `index_put_(indices, values, accumulate)`
# with accumulate, an `x[index]`'s gradient: the third). The op-time model prices such a
# scatter by its elements (models/README.md, "Kernel traffic"), as the zoo builds them.
ADDING_SCATTERS = {'index_add': 3, 'index_add_': 3, 'scatter_add': 3, 'scatter_add_': 3}
ACCUMULATING_PUTS = {'index_put': 2, 'index_put_': 2, '_index_put_impl_': 2}


def scatter_add_flops(base: str, args, kwargs) -> int:
    """The elements an adding scatter adds (0 for every other op)."""
    position = ADDING_SCATTERS.get(base)
    if position is None and base in ACCUMULATING_PUTS:
        accumulate = args[3] if len(args) > 3 else (kwargs or {}).get('accumulate', False)
        position = ACCUMULATING_PUTS[base] if accumulate else None
    if position is None or len(args) <= position or not isinstance(args[position], torch.Tensor):
        return 0
    return args[position].numel()


def op_base_name(func) -> str:
    """`aten.convolution.default` -> `convolution`."""
    return func.overloadpacket.__name__


def storage_key(t: torch.Tensor):
    """The identity of a tensor's memory: its storage's address (None for empty storages,
    which all share address 0 and must not be merged)."""
    ptr = t.storage().data_ptr()
    return ptr if ptr != 0 else None


BLOCK = 32  # values per block, as the block codecs (szp, zeros) cut them


def value_features(values) -> dict:
    """The value features of FORMAT.md ("values") of a 1-D array in memory order, as calibrate's
    features_of computes them: blocks of 32 values from the start (the last may be shorter); min,
    max and the standard deviation over the finite values; a block's magnitude is the better of
    no prediction (max |x|) and 1-D Lorenzo (max |x_i - x_(i-1)|, the first step from 0, steps
    next to a non-finite value skipped), doubled when the coded values include negative ones.
    Processed in chunks of whole blocks so that large tensors need little extra memory."""
    import numpy as np  # python3-numpy comes with python3-torch
    n = values.size
    if n == 0:
        return {}
    chunk = BLOCK * 65536
    zeros = finite_count = 0
    lo, hi, total, total_sq = math.inf, -math.inf, 0.0, 0.0
    zero_blocks = 0
    magnitudes = []  # per block that is not all zero
    for start in range(0, n, chunk):
        x = np.asarray(values[start:start + chunk], dtype=np.float64)
        m = x.size
        is_zero = x == 0
        zeros += int(np.count_nonzero(is_zero))
        finite = np.isfinite(x)
        xf = x[finite]
        if xf.size:
            finite_count += xf.size
            lo, hi = min(lo, float(xf.min())), max(hi, float(xf.max()))
            total += float(xf.sum())
            total_sq += float(np.dot(xf, xf))
        blocks = -(-m // BLOCK)
        pad = blocks * BLOCK - m
        first = np.zeros(m, dtype=bool)
        first[::BLOCK] = True  # chunks start on a block boundary
        previous = np.empty(m)
        previous[0] = 0.0
        previous[1:] = x[:-1]
        previous[first] = 0.0
        previous_finite = np.ones(m, dtype=bool)
        previous_finite[1:] = finite[:-1]
        previous_finite[first] = True
        stepped = finite & previous_finite
        step = np.zeros(m)
        np.subtract(x, previous, out=step, where=stepped)
        plain = np.where(finite, np.abs(x), 0.0)

        def per_block(a, fill, reduce):
            return reduce(np.concatenate([a, np.full(pad, fill, dtype=a.dtype)]).reshape(blocks, BLOCK), axis=1)

        all_zero = per_block(is_zero, True, np.all)
        plain_max = per_block(plain, 0.0, np.max)
        plain_negative = per_block(finite & (x < 0), False, np.any)
        lorenzo_max = per_block(np.abs(step), 0.0, np.max)
        lorenzo_negative = per_block(stepped & (step < 0), False, np.any)
        magnitude = np.where(lorenzo_max < plain_max, lorenzo_max * np.where(lorenzo_negative, 2.0, 1.0),
                             plain_max * np.where(plain_negative, 2.0, 1.0))
        zero_blocks += int(np.count_nonzero(all_zero))
        magnitudes.append(magnitude[~all_zero])
    blocks_total = -(-n // BLOCK)
    value_range = hi - lo if finite_count else 0.0
    spread = block_scale = 0.0
    if value_range > 0:
        mean = total / finite_count
        variance = max(0.0, total_sq / finite_count - mean * mean)
        # std <= range / 2 exactly; rounding must not push it over what a reader accepts.
        spread = min(0.5, math.sqrt(variance) / value_range)
        scales = np.concatenate(magnitudes) / value_range
        if scales.size:
            block_scale = float(np.exp(np.mean(np.log(np.maximum(scales, 1e-6)))))
    return {'zero_fraction': zeros / n, 'spread': spread,
            'zero_block_fraction': zero_blocks / blocks_total, 'block_scale': block_scale,
            'range': float(value_range)}


def storage_values(t: torch.Tensor, elements: int):
    """The first `elements` values of t's storage, in memory order, as a numpy array (float32 or
    float64). Called inside __torch_dispatch__, where the mode is off, so nothing is recorded."""
    flat = torch.empty(0, dtype=t.dtype).set_(t.storage())
    flat = flat[:min(elements, flat.numel())]
    if flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    return flat.numpy()


def rms(t: torch.Tensor) -> float:
    """Root mean square of all entries, accumulated in float64."""
    if t.numel() == 0:
        return 0.0
    return float(torch.linalg.vector_norm(t.detach(), dtype=torch.float64)) / math.sqrt(t.numel())


def weighted_operands(base: str, args):
    """For a convolution or a matrix product one of whose operands is a weight: the (activation,
    weight) tensors of the forward aten op, else None. `convolution(input, weight, ...)`,
    `addmm(bias, mat1, mat2)`, `mm(self, mat2)`; in x @ W.t() the weight operand is a view of
    the parameter, which the caller recognises by its storage."""
    if base == 'convolution':
        return [(args[0], args[1])]
    if base == 'addmm':
        return [(args[1], args[2]), (args[2], args[1])]
    if base == 'mm':
        return [(args[0], args[1]), (args[1], args[0])]
    return None


class GradientWatch:
    """Gradient statistics (FORMAT.md, "Gradient statistics") of the recorded step.

    The forward pass registers, for each convolution and each matrix product with a weight, the
    trace tensor the op read as its activation operand, keyed by the storages of that operand
    and of the weight (`forward_op`). When the forward pass is over (`watch`), the autograd graph
    is walked from the loss; each ConvolutionBackward0, AddmmBackward0 and MmBackward0 node whose
    saved operands are such a pair gets a hook, which in the backward pass receives the
    gradient of the node's output (delta) and the gradients of its inputs, among them the
    weight's (for x @ W.t() that of W.t(), whose RMS is W's). From them:
      delta_rms       = RMS of delta over all its entries;
      weight_grad_rms = RMS of this node's weight gradient;
      terms           = the products each weight-gradient entry sums: for a convolution delta's
                        elements / its channels (batch x output positions), for a transposed one
                        the input's elements / its channels (batch x input positions); for a
                        matrix product the rows of the activation operand (weight on the right)
                        or the columns (weight on the left).
    When several nodes read the same trace tensor, the tensor keeps the statistics of the most
    sensitive one: the largest delta_rms * sqrt(terms) / weight_grad_rms. The hooks run with the
    recorder paused, so that their own torch calls are not recorded."""

    NODES = {
        # node name: its two saved operands (for a convolution: input, weight)
        'ConvolutionBackward0': ('_saved_input', '_saved_weight'),
        'AddmmBackward0': ('_saved_mat1', '_saved_mat2'),
        'MmBackward0': ('_saved_self', '_saved_mat2'),
    }
    # Input positions of the node's gradients (its next_functions): conv (input, weight, bias),
    # addmm (self, mat1, mat2), mm (self, mat2).
    POSITIONS = {'ConvolutionBackward0': (0, 1), 'AddmmBackward0': (1, 2), 'MmBackward0': (0, 1)}

    def __init__(self, rec: 'Recorder'):
        self.rec = rec
        self.operands: dict = {}   # (activation storage, weight storage) -> trace tensor index
        self.stats: dict = {}      # trace tensor index -> statistics
        self.handles: list = []

    def forward_op(self, base: str, args, in_tensors, inputs) -> None:
        """A forward op: if it multiplies an activation by a weight, remember which trace tensor
        (`inputs`, the op's trace inputs in the order of `in_tensors`) the activation is."""
        for activation, weight in weighted_operands(base, args) or ():
            if not isinstance(activation, torch.Tensor) or not isinstance(weight, torch.Tensor):
                continue
            w_key, a_key = storage_key(weight), storage_key(activation)
            w_index = self.rec.by_storage.get(w_key) if w_key is not None else None
            if a_key is None or w_index is None or self.rec.tensors[self.rec.base_of[w_index]]['role'] != 'weight':
                continue
            position = next((k for k, t in enumerate(in_tensors) if t is activation), None)
            if position is not None:
                self.operands[(a_key, w_key)] = inputs[position]
            return

    def watch(self, loss: torch.Tensor) -> None:
        seen, stack = set(), [loss.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            stack.extend(f for f, _ in node.next_functions)
            name = type(node).__name__
            if name not in self.NODES:
                continue
            try:
                saved = [getattr(node, attr) for attr in self.NODES[name]]
            except RuntimeError:
                continue  # an operand autograd did not save (its partner needs no gradient)
            first, second = self.POSITIONS[name]
            # The weight is the saved operand whose storage is a parameter's (for mm/addmm either).
            for activation, weight, w_position in ((saved[0], saved[1], second), (saved[1], saved[0], first)):
                if not isinstance(activation, torch.Tensor) or not isinstance(weight, torch.Tensor):
                    continue
                index = self.operands.get((storage_key(activation), storage_key(weight)))
                if index is None:
                    continue
                if name == 'ConvolutionBackward0':
                    transposed = bool(node._saved_transposed)
                    in_shape = tuple(activation.shape)
                    terms = (lambda delta, s=in_shape: math.prod(s) // s[1]) if transposed else \
                        (lambda delta: delta.numel() // delta.shape[1])
                elif w_position == second:  # activation @ weight: each entry sums over the rows
                    terms = lambda delta: delta.shape[0]
                else:                        # weight @ activation: over the columns
                    terms = lambda delta: delta.shape[1]
                self.handles.append(node.register_hook(self._hook(index, w_position, terms)))
                break
        self.operands.clear()

    def _hook(self, index: int, w_position: int, terms):
        def hook(grad_inputs, grad_outputs):
            delta, grad_weight = grad_outputs[0], grad_inputs[w_position]
            if delta is None or grad_weight is None:
                return None
            paused, self.rec.paused = self.rec.paused, True
            try:
                stats = {'delta_rms': rms(delta), 'weight_grad_rms': rms(grad_weight),
                         'terms': float(terms(delta))}
            finally:
                self.rec.paused = paused
            previous = self.stats.get(index)
            if previous is None or self.sensitivity(stats) > self.sensitivity(previous):
                self.stats[index] = stats
            return None
        return hook

    @staticmethod
    def sensitivity(stats: dict) -> float:
        """delta_rms * sqrt(terms) / weight_grad_rms: the error model's relative gradient error
        per unit error bound (infinite for a zero weight gradient that an error would change)."""
        numerator = stats['delta_rms'] * math.sqrt(stats['terms'])
        if stats['weight_grad_rms'] == 0:
            return math.inf if numerator > 0 else 0.0
        return numerator / stats['weight_grad_rms']

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for index, stats in self.stats.items():
            self.rec.tensors[index]['gradient'] = stats


def tensors_in(tree):
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def conv_macs(out: torch.Tensor, weight: torch.Tensor, transposed: bool, inp: torch.Tensor) -> int:
    """Multiply-accumulates of a convolution: every output element of a non-transposed
    convolution takes (C_in / groups) * prod(kernel) MACs; a transposed one is the adjoint, so
    count it from the input side."""
    kernel = math.prod(weight.shape[2:])
    if transposed:
        return inp.numel() * weight.shape[1] * kernel
    return out.numel() * weight.shape[1] * kernel


def gemm_flops(name: str, args, outputs) -> int:
    """2 per multiply-accumulate (+1 per output element for a fused bias)."""
    if name == 'mm':
        a, b = args[0], args[1]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1]
    if name == 'addmm':
        a, b = args[1], args[2]
        return 2 * a.shape[0] * a.shape[1] * b.shape[1] + a.shape[0] * b.shape[1]
    if name in ('bmm', 'baddbmm'):
        a, b = (args[0], args[1]) if name == 'bmm' else (args[1], args[2])
        return 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]
    if name == 'convolution':
        inp, weight, bias = args[0], args[1], args[2]
        transposed = args[6]
        macs = conv_macs(outputs[0], weight, transposed, inp)
        return 2 * macs + (outputs[0].numel() if bias is not None else 0)
    if name == 'convolution_backward':
        grad_out, inp, weight = args[0], args[1], args[2]
        transposed, mask = args[7], args[10]
        macs = conv_macs(grad_out, weight, transposed, inp)
        return 2 * macs * (int(mask[0]) + int(mask[1])) + (grad_out.numel() if mask[2] else 0)
    return 0


class Recorder(TorchDispatchMode):
    """Records every aten op of one training iteration (see the module docstring)."""

    def __init__(self, resident: dict, module_of: dict):
        super().__init__()
        self.tensors: list[dict] = []  # {name, dtype, shape, storage (base index), role}
        self.ops: list[dict] = []
        self.by_storage: dict = {}     # storage key -> index of its latest tensor
        self.base_of: list[int] = []   # tensor index -> index of the storage's base tensor
        self.phase = 'forward'
        self.module_stack: list[str] = []
        self.module_of = module_of     # module name -> class name
        self.saved_storages: set[int] = set()  # base indices autograd saved
        self.saved_tensors: list = []          # (base index, tensor, creator) for --samples
        self.keep_saved = False
        self.record_values = False   # compute value features when the backward pass starts
        self.saved_refs: dict = {}   # base index -> a saved tensor of that storage (until then)
        self.gradients: GradientWatch | None = None  # gradient statistics (None: not measured)
        self.paused = False          # ops issued by the capture's own hooks: run, not recorded
        self.unread_saved = 0  # saved storages no backward op reads (left temporary)
        self.op_counts: dict = {}
        # Storage base index -> the module of the forward matrix product that read it with a
        # weight (a Linear outside any other module): its backward weight-gradient product reads
        # that activation and no weight, and is named after this module, not the activation's
        # producer (a Dropout before the Linear).
        self.matmul_reader: dict = {}
        for key, (name, role, t) in resident.items():
            self._new_tensor(name, t, role, None, key)

    # --- tensors ---------------------------------------------------------------------------
    def _new_tensor(self, name, t, role, view_of, key):
        index = len(self.tensors)
        shape = list(t.shape)
        dtype = DTYPES.get(t.dtype)
        if dtype is None:
            raise SystemExit(f'comptrain_capture: tensor {name}: dtype {t.dtype} has no trace dtype')
        base = index if view_of is None else self.base_of[view_of]
        if view_of is not None:
            # A view may be larger than its base (expand broadcasts a stride-0 dimension); the
            # format wants views no larger than their base, and a view occupies no memory of
            # its own anyway, so such a view is written with its base's shape.
            b = self.tensors[base]
            if math.prod(shape) * ELEMENT_SIZE[dtype] > math.prod(b['shape']) * ELEMENT_SIZE[b['dtype']]:
                shape, dtype = list(b['shape']), b['dtype']
        self.tensors.append({'name': name, 'dtype': dtype, 'shape': shape, 'role': role,
                             'base': base, 'view_of': None if view_of is None else base})
        self.base_of.append(base)
        if key is not None:
            self.by_storage[key] = index
        return index

    def lookup(self, t: torch.Tensor, context: str) -> int:
        key = storage_key(t)
        index = self.by_storage.get(key) if key is not None else None
        if index is not None and t.dim() == 0 and (self.tensors[index]['shape'] or
                                                  self.tensors[index]['dtype'] != DTYPES.get(t.dtype)):
            # A 0-dim tensor made outside the dispatcher (a wrapped Python number: the scale of
            # `scores * scaling`) at the address of a tensor freed earlier in the step: not that
            # tensor. Taking it for it would make the op sequence depend on where the allocator
            # put the number (the probe and the recorded run then disagree).
            index = None
        if index is None:
            # Made outside the dispatcher (rare): it exists before the op, like a constant.
            index = self._new_tensor(f'external.{len(self.tensors)}', t, 'temporary', None, key)
            if t.dim() == 0:
                return index  # a wrapped Python number (the 8.0 of `x / 8.0`): a constant
            print(f'comptrain_capture: warning: {context} reads a tensor made outside the '
                  f'dispatcher; recorded without a producer', file=sys.stderr)
        return index

    def pack(self, t: torch.Tensor):
        key = storage_key(t)
        index = self.by_storage.get(key) if key is not None else None
        if index is not None and self.tensors[self.base_of[index]]['role'] == 'temporary':
            self.saved_storages.add(self.base_of[index])
            if self.record_values and self.phase == 'forward' and t.is_floating_point():
                self.saved_refs.setdefault(self.base_of[index], t)
            if self.keep_saved:
                creator = type(t.grad_fn).__name__ if t.grad_fn is not None else 'leaf'
                self.saved_tensors.append((self.base_of[index], t, creator))
        return t

    def _record_values(self):
        """At the first op after the forward pass: each saved storage holds its final forward
        content. Its features go on its latest tensor, the one its last forward writer produced
        (where the strategy looks for them, FORMAT.md "values"). The references are dropped, so
        that autograd frees the storages during backward as usual."""
        refs, self.saved_refs = self.saved_refs, {}
        for base, t in refs.items():
            latest = self.by_storage.get(storage_key(t))
            if latest is None or self.base_of[latest] != base:
                continue
            features = value_features(storage_values(t, math.prod(self.tensors[base]['shape'])))
            if features:
                self.tensors[latest]['values'] = features

    # --- ops -------------------------------------------------------------------------------
    def _op_name(self, base: str, inputs: list[int]) -> tuple[str, str]:
        """Forward ops take the innermost module's name; backward ops the module of the weight
        they read, else (a matrix product: a Linear's weight gradient) of the forward product that
        read one of their inputs with a weight, else of the forward op that produced the latest
        tensor they read."""
        if self.phase == 'forward':
            module = self.module_stack[-1] if self.module_stack else ''
        elif self.phase == 'backward':
            module = ''
            for i in inputs:
                t = self.tensors[self.base_of[i]]
                if t['role'] == 'weight':
                    module = t['name'].rsplit('.', 1)[0]
                    break
            if not module and base in ('mm', 'addmm'):
                readers = [self.matmul_reader.get(self.base_of[i]) for i in inputs]
                readers = [r for r in readers if r]
                module = readers[-1] if readers else ''
            if not module:
                producers = [self.tensors[i].get('producer_module') for i in inputs]
                producers = [p for p in producers if p]
                module = producers[-1] if producers else ''
        else:
            module = 'optimizer'
        prefix = '.'.join(p for p in (module, 'backward' if self.phase == 'backward' else '') if p)
        stem = f'{prefix}.{base}' if prefix else base
        count = self.op_counts.get(stem, 0)
        self.op_counts[stem] = count + 1
        return (stem if count == 0 else f'{stem}_{count}'), module

    def _kind(self, base: str, module: str, is_view: bool) -> str:
        if self.phase == 'optimizer':
            return 'optimizer_update'
        cls = self.module_of.get(module, '')
        if 'Dropout' in cls:
            return 'dropout'
        if 'Pool' in cls and base not in ('convolution', 'convolution_backward'):
            return 'pool'
        if is_view:
            return 'view'
        kind = KIND_BY_OP.get(base)
        if kind == 'matmul' and cls == 'Linear':
            return 'linear'
        if kind:
            return kind
        return 'elementwise' if base in ELEMENTWISE else 'other'

    @staticmethod
    def _renames_what_it_reads(base: str, in_tensors, out_tensors) -> bool:
        """Whether an op only gives another name to tensors it reads: it is not in-place (`relu_`,
        `add_` write data), and every output shares the storage of an input and covers at least
        that input's bytes (`detach`, `alias`, `t`, `view`, `_reshape_alias`, `expand`; not a
        `slice`, `select` or `split`, which name a part of what they read).

        Outside the forward pass such an op is not recorded (`__torch_dispatch__`). It moves no
        data, and recording it says something false about the data flow: autograd `detach`es
        every saved tensor it unpacks in the backward pass (and the gradients AccumulateGrad
        stores), and a recorded detach is a backward op *writing* a view of the saved storage. The
        strategies only act on storages that no backward op writes (models/strategies/README.md,
        "Rules"; a backward write would change what a restored or recomputed copy must hold), so
        with those ops recorded they could offload, compress or drop no saved activation of a
        captured trace. Unrecorded, the alias stays unnamed: a later reader is looked up by its
        storage (`lookup`) and reads the storage's latest tensor, the one the alias renames, as
        every reader of that memory does. The zoo has no such op either: it records one op per
        autograd node, and its backward `view` ops (an add's or a reshape's backward) alias
        gradients, never saved activations.

        Views of a part (a `slice` of a gradient in CatBackward) stay recorded as `view` ops: their
        readers read the part, which a lookup by storage would widen to the whole. In the forward
        pass every alias op stays recorded, as the zoo records its forward views (a flatten is a
        forward `view` op)."""
        if not out_tensors or base.endswith('_'):
            return False
        for t in out_tensors:
            key = storage_key(t)
            if key is None or not any(storage_key(i) == key and
                                      t.numel() * t.element_size() >= i.numel() * i.element_size()
                                      for i in in_tensors):
                return False
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        base = op_base_name(func)
        if func.namespace == 'profiler' or self.paused:
            # record_function's bookkeeping (the optimizer step is wrapped in one): no kernel;
            # or the capture's own measurements (GradientWatch's hooks).
            return func(*args, **kwargs)
        if self.saved_refs and self.phase != 'forward':
            self._record_values()
        in_tensors = tensors_in((args, kwargs))
        inputs = [self.lookup(t, base) for t in in_tensors]
        input_keys = {storage_key(t) for t in in_tensors} - {None}
        start = time.perf_counter()
        result = func(*args, **kwargs)
        seconds = time.perf_counter() - start
        if base == 'detach' and not isinstance(result, torch.Tensor):
            # A saved wrapped number (the 8.0 of `x / 8.0`, which DivBackward keeps), unpacked
            # after the saved-tensor hooks, detaches to a Python scalar under a dispatch mode
            # (torch 1.13), which autograd refuses ("detach returned invalid type float"): give it
            # back the 0-dim tensor it detached (a constant: nothing to detach it from).
            return args[0]
        out_tensors = tensors_in(result)
        if self.phase != 'forward' and self._renames_what_it_reads(base, in_tensors, out_tensors):
            return result  # no data moves; later readers read the tensor it renames
        name, module = self._op_name(base, inputs)

        outputs, aliases_only = [], True
        for j, t in enumerate(out_tensors):
            key = storage_key(t)
            if key is not None and key in input_keys:
                prior = self.by_storage[key]
                if self.tensors[self.base_of[prior]]['role'] in RESIDENT:
                    continue  # updates (or views) a resident tensor: it stays an input only
                index = self._new_tensor(f'{name}.out{j or ""}', t, 'temporary', prior, key)
            else:
                aliases_only = False
                index = self._new_tensor(f'{name}.out{j or ""}', t, 'temporary', None, key)
            self.tensors[index]['producer_module'] = module
            outputs.append(index)
        is_view = aliases_only and bool(out_tensors) and not base.endswith('_')
        if is_view and not outputs:
            return result  # a view of a weight or buffer (`w.t()`): no kernel, nothing new
        flops = gemm_flops(base, args, out_tensors)
        if not flops and base in FLOPS_PER_ELEMENT and out_tensors:
            flops = FLOPS_PER_ELEMENT[base] * out_tensors[0].numel()
        if not flops:
            flops = scatter_add_flops(base, args, kwargs)
        kind = self._kind(base, module, is_view)
        for index in outputs:
            self.tensors[index]['producer_kind'] = kind
        if self.phase == 'forward' and base in ('mm', 'addmm'):
            for activation, weight in weighted_operands(base, args):
                w_index = self.by_storage.get(storage_key(weight)) if isinstance(weight, torch.Tensor) else None
                if w_index is None or self.tensors[self.base_of[w_index]]['role'] != 'weight':
                    continue
                position = next((k for k, t in enumerate(in_tensors) if t is activation), None)
                if position is not None:
                    self.matmul_reader[self.base_of[inputs[position]]] = module
        if self.gradients is not None and self.phase == 'forward':
            self.gradients.forward_op(base, args, in_tensors, inputs)
        self.ops.append({
            'name': name, 'phase': self.phase, 'kind': kind,
            'inputs': inputs, 'outputs': outputs, 'flops': flops, 'seconds': seconds,
            'host_sync': host_sync_op(base, args),
        })
        return result


def load_model(spec: str) -> torch.nn.Module:
    if ':' in spec:
        module_name, factory = spec.split(':', 1)
        return getattr(importlib.import_module(module_name), factory)()
    factory = getattr(torchvision.models, spec, None)
    if factory is None or not callable(factory):
        raise SystemExit(f'comptrain_capture: unknown model {spec!r}: expected a torchvision model '
                         f'name (e.g. resnet18) or module:factory')
    return factory()


def make_optimizer(name: str, params, lr: float):
    if name == 'sgd':
        return torch.optim.SGD(params, lr=lr)
    if name == 'momentum':
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == 'adam':
        return torch.optim.Adam(params, lr=lr)
    if name == 'adamw':
        return torch.optim.AdamW(params, lr=lr)
    raise SystemExit(f'comptrain_capture: unknown optimizer {name!r}')


def cpu_model() -> str:
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class Session:
    """The model, its optimizer and the bookkeeping shared by the probe and the recorded run."""

    def __init__(self, args):
        torch.manual_seed(args.seed)
        self.args = args
        self.model = load_model(args.model)
        self.model.train()
        self.dtype = getattr(torch, args.dtype)
        self.model.to(self.dtype)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(args.optimizer, self.params, args.lr)
        # Steady-state optimizer state: one step over zero gradients creates momentum buffers
        # and moments without changing the weights.
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.module_of = {name: type(m).__name__ for name, m in self.model.named_modules()}

    def resident(self, x, y) -> dict:
        out = {}
        for name, p in self.model.named_parameters():
            out[storage_key(p)] = (name, 'weight', p)
        for name, b in self.model.named_buffers():
            if storage_key(b) is not None:
                out[storage_key(b)] = (name, 'buffer', b)
        names = {id(p): n for n, p in self.model.named_parameters()}
        for p, state in self.optimizer.state.items():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and storage_key(value) is not None:
                    out[storage_key(value)] = (f'{names.get(id(p), "param")}.{key}', 'optimizer_state', value)
        out[storage_key(x)] = ('input', 'input', x)
        out[storage_key(y)] = ('labels', 'input', y)
        return out

    def step(self, batch: int, keep_saved: bool, record_values: bool = False,
             record_gradients: bool = False) -> Recorder:
        if self.args.tokens and self.args.token_ids == 'arange':
            # Position p of every sample holds token p mod V: the same inputs at every batch size,
            # for models whose ops depend on the data (a mixture-of-experts router).
            x = (torch.arange(self.args.tokens) % self.args.vocab).repeat(batch, 1)
        elif self.args.tokens:
            x = torch.randint(0, self.args.vocab, (batch, self.args.tokens))
        else:
            shape = [batch] + [int(s) for s in self.args.input_shape.split(',')]
            x = torch.randn(shape, dtype=self.dtype)
        if self.args.causal_lm:
            y = torch.randint(0, self.args.vocab, (batch, self.args.tokens))
        else:
            y = torch.randint(0, self.args.num_classes, (batch,))
        rec = Recorder(self.resident(x, y), self.module_of)
        rec.keep_saved = keep_saved
        rec.record_values = record_values
        if record_gradients:
            rec.gradients = GradientWatch(rec)
        def enter(name):
            def hook(_module, _inputs):
                rec.module_stack.append(name)
            return hook

        def leave(_module, _inputs, _output):
            rec.module_stack.pop()  # returns None: a forward hook's result would replace the output

        hooks = []
        for name, m in self.model.named_modules():
            hooks.append(m.register_forward_pre_hook(enter(name)))
            hooks.append(m.register_forward_hook(leave))
        try:
            with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
                with rec:
                    logits = self.model(x)
                    rec.module_stack = ['loss']  # the loss runs outside any module
                    if self.args.causal_lm:
                        # ForCausalLMLoss (transformers >= 4.46): the logits upcast, the labels
                        # shifted beforehand (here: drawn already shifted).
                        logits = logits.float()
                        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                    else:
                        loss = torch.nn.functional.cross_entropy(logits, y)
                    del logits
                    if rec.gradients is not None:
                        rec.paused = True  # walking the graph unpacks saved tensors
                        try:
                            rec.gradients.watch(loss)
                        finally:
                            rec.paused = False
                    rec.phase = 'backward'
                    loss.backward()
                    rec.phase = 'optimizer'
                    self.optimizer.step()
        finally:
            for h in hooks:
                h.remove()
            if rec.gradients is not None:
                rec.gradients.close()
        # Roles, per storage: what ends up in .grad is a gradient; saved storages that some
        # backward op reads are activations.
        for p in self.params:
            if p.grad is not None:
                index = rec.by_storage.get(storage_key(p.grad))
                if index is not None:
                    rec.tensors[rec.base_of[index]]['role'] = 'gradient'
        read_backward = set()
        for op in rec.ops:
            if op['phase'] == 'backward':
                read_backward.update(rec.base_of[i] for i in op['inputs'])
        for base in rec.saved_storages:
            if rec.tensors[base]['role'] != 'temporary':
                continue
            if base in read_backward:
                rec.tensors[base]['role'] = 'activation'
            else:
                rec.unread_saved += 1
        for t in rec.tensors:
            t['role'] = rec.tensors[t['base']]['role']
        self.optimizer.zero_grad(set_to_none=True)
        del loss
        return rec


def batch_linear(value_main: int, value_probe: int, batch: int, probe: int) -> dict:
    """Solve value = fixed + per_sample * b from two batch sizes; fall back to a fixed value
    when the two do not fit an integer line (the op does not scale with the batch)."""
    diff = value_main - value_probe
    if diff % (batch - probe) == 0:
        per_sample = diff // (batch - probe)
        fixed = value_main - per_sample * batch
        if per_sample >= 0 and fixed >= 0:
            return {'fixed': fixed, 'per_sample': per_sample}
    return {'fixed': value_main, 'per_sample': 0}


def tensor_bytes(t: dict) -> int:
    return math.prod(t['shape']) * ELEMENT_SIZE[t['dtype']]


def build_trace(session: Session, main: Recorder, probe: Recorder, batch: int, probe_batch: int) -> dict:
    if len(main.tensors) != len(probe.tensors) or [o['name'] for o in main.ops] != [o['name'] for o in probe.ops]:
        raise SystemExit('comptrain_capture: the runs at batch sizes '
                         f'{batch} and {probe_batch} issued different ops ({len(main.ops)} vs '
                         f'{len(probe.ops)}); the model is not batch-size independent in its op sequence')
    device = f'cpu ({cpu_model()}, {torch.get_num_threads()} threads)'
    tensors = []
    for i, (t, u) in enumerate(zip(main.tensors, probe.tensors)):
        entry = {'id': i, 'name': t['name'], 'dtype': t['dtype'], 'shape': t['shape'], 'role': t['role']}
        if t['role'] not in ('weight', 'buffer', 'optimizer_state') and t['shape'] != u['shape']:
            for d, (a, b) in enumerate(zip(t['shape'], u['shape'])):
                if a != b and a % batch == 0 and b % probe_batch == 0 and a // batch == b // probe_batch:
                    entry['batch_dim'] = d
                    break
            else:
                print(f'comptrain_capture: warning: tensor {t["name"]} changes shape with the batch '
                      f'({t["shape"]} vs {u["shape"]}) but not linearly; recorded as batch-independent',
                      file=sys.stderr)
        if t['view_of'] is not None:
            entry['view_of'] = t['view_of']
        if 'values' in t and t['role'] == 'activation':
            entry['values'] = t['values']
        if 'gradient' in t:
            entry['gradient'] = t['gradient']
        tensors.append(entry)
    # A view must scale like its base or not at all; the base's verdict wins.
    for entry in tensors:
        if 'view_of' in entry and 'batch_dim' in entry and 'batch_dim' not in tensors[entry['view_of']]:
            del entry['batch_dim']

    def io_bytes(rec, op):
        read = sum(tensor_bytes(rec.tensors[i]) for i in op['inputs'])
        written = sum(tensor_bytes(rec.tensors[i]) for i in op['outputs'])
        if op['kind'] == 'view':
            return 0, 0  # no data moves
        if op['phase'] == 'optimizer':
            written = sum(tensor_bytes(rec.tensors[i]) for i in op['inputs']
                          if rec.tensors[i]['role'] in ('weight', 'optimizer_state'))
        return read, written

    ops = []
    for k, (op, pop) in enumerate(zip(main.ops, probe.ops)):
        read, written = io_bytes(main, op)
        pread, pwritten = io_bytes(probe, pop)
        entry = {
            'id': k, 'name': op['name'], 'phase': op['phase'], 'kind': op['kind'],
            'inputs': op['inputs'], 'outputs': op['outputs'],
            'flops': batch_linear(op['flops'], pop['flops'], batch, probe_batch),
            'bytes_read': batch_linear(read, pread, batch, probe_batch),
            'bytes_written': batch_linear(written, pwritten, batch, probe_batch),
            'measured': {'seconds': op['seconds'], 'device': device, 'batch_size': batch},
        }
        if op['host_sync']:
            entry['host_sync'] = True
        ops.append(entry)
    metadata = {
        'source': 'comptrain_capture.py', 'model': session.args.model,
        'torch': torch.__version__, 'torchvision': torchvision.__version__,
        'device': device, 'optimizer': session.args.optimizer, 'dtype': session.args.dtype,
        **({'tokens': str(session.args.tokens), 'vocab': str(session.args.vocab),
            'loss': 'causal-lm' if session.args.causal_lm else 'classification'}
           if session.args.tokens else
           {'input_shape': session.args.input_shape, 'num_classes': str(session.args.num_classes)}),
        'saved_storages_unread_by_backward': str(main.unread_saved),
        'note': 'CPU run: dropout saves a float32 mask (CUDA saves a 1-byte one)',
    }
    name = session.args.name or session.args.model.rsplit(':', 1)[-1]
    # The oldest version that holds the trace: 2 added per-tensor values, 3 gradient statistics,
    # 4 the op kinds gather and scatter, 8 the ops' host_sync.
    version = 8 if any(entry.get('host_sync') for entry in ops) else \
        4 if any(entry['kind'] in ('gather', 'scatter') for entry in ops) else \
        3 if any('gradient' in entry for entry in tensors) else \
        2 if any('values' in entry for entry in tensors) else 1
    return {'format': 'comptrain-trace', 'version': version, 'name': name, 'batch_size': batch,
            'metadata': metadata, 'tensors': tensors, 'ops': ops}


def write_samples(rec: Recorder, directory: str, count: int) -> None:
    """Save `count` saved activations, spread over the network, as .npy with their class: the
    autograd node of the tensor (its creator's grad_fn) and the kind of the op that produced it,
    for codec experiments on real data. `tensor_id` is the trace tensor."""
    import numpy as np  # python3-numpy comes with python3-torch
    os.makedirs(directory, exist_ok=True)
    seen, unique = set(), []
    for base, t, creator in rec.saved_tensors:
        if base not in seen and rec.tensors[base]['role'] == 'activation' and t.is_floating_point():
            seen.add(base)
            unique.append((base, t, creator))
    if not unique:
        return
    step = max(1, len(unique) // count)
    manifest = []
    for n, (base, t, creator) in enumerate(unique[::step][:count]):
        file = f'{n:02d}_{rec.tensors[base]["name"].replace("/", "_")}.npy'
        np.save(os.path.join(directory, file), t.detach().float().numpy())
        manifest.append({'file': file, 'tensor': rec.tensors[base]['name'], 'tensor_id': base,
                         'class': creator, 'producer_kind': rec.tensors[base].get('producer_kind', 'none'),
                         'shape': list(t.shape), 'dtype': str(t.dtype)})
    with open(os.path.join(directory, 'samples.json'), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1)
        f.write('\n')


def parse_args(argv):
    p = argparse.ArgumentParser(description='Capture one CPU training iteration as a comptrain trace.')
    p.add_argument('model', help='torchvision model name (resnet18) or module:factory')
    p.add_argument('--batch', type=int, default=1, help='batch size to record (default 1)')
    p.add_argument('-o', '--output', required=True, help='trace file to write (.json)')
    p.add_argument('--optimizer', default='momentum', choices=['sgd', 'momentum', 'adam', 'adamw'])
    p.add_argument('--lr', type=float, default=0.01)
    p.add_argument('--input-shape', default='3,224,224', help='per-sample input shape (default 3,224,224)')
    p.add_argument('--dtype', default='float32', choices=['float32', 'float64', 'bfloat16'],
                   help='model and input dtype')
    p.add_argument('--num-classes', type=int, default=1000, help='label range (default 1000)')
    p.add_argument('--tokens', type=int, metavar='S',
                   help='feed int64 token ids [batch, S] from [0, --vocab) instead of --input-shape floats')
    p.add_argument('--vocab', type=int, help='token id range with --tokens (default: --num-classes)')
    p.add_argument('--token-ids', choices=['random', 'arange'], default='random',
                   help='with --tokens: random ids (default), or position p of every sample holding '
                        'token p mod V, so that data-dependent routing (mixture of experts) is the '
                        'same at both recorded batch sizes')
    p.add_argument('--causal-lm', action='store_true',
                   help='with --tokens: labels [batch, S] and the causal-LM loss over [batch, S, V] logits')
    p.add_argument('--name', help='trace name (default: the model)')
    p.add_argument('--samples', metavar='DIR', help='save a few saved activations (.npy) here')
    p.add_argument('--sample-count', type=int, default=8)
    p.add_argument('--threads', type=int, help='torch CPU threads (default: torch\'s choice)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--no-values', dest='values', action='store_false',
                   help='do not compute value features of the saved activations (FORMAT.md, "values")')
    p.add_argument('--no-gradients', dest='gradients', action='store_false',
                   help='do not measure gradient statistics of conv/linear inputs (FORMAT.md, "Gradient statistics")')
    args = p.parse_args(argv)
    if args.batch < 1:
        p.error('--batch must be >= 1')
    if args.tokens is not None and args.tokens < 1:
        p.error('--tokens must be >= 1')
    if (args.vocab is not None or args.causal_lm or args.token_ids != 'random') and not args.tokens:
        p.error('--vocab, --causal-lm and --token-ids need --tokens')
    if args.vocab is None:
        args.vocab = args.num_classes
    if args.vocab < 1:
        p.error('--vocab must be >= 1')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    session = Session(args)
    probe_batch = args.batch - 1 if args.batch > 1 else 2
    # The probe runs first: it also warms the kernels and the allocator up for the timed run.
    probe = session.step(probe_batch, keep_saved=False)
    main_run = session.step(args.batch, keep_saved=bool(args.samples), record_values=args.values,
                            record_gradients=args.gradients)
    trace = build_trace(session, main_run, probe, args.batch, probe_batch)
    tmp = args.output + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(trace, f, separators=(',', ':'))
        f.write('\n')
    os.replace(tmp, args.output)
    if args.samples:
        write_samples(main_run, args.samples, args.sample_count)
    print(f'comptrain_capture: wrote {args.output}: {len(trace["ops"])} ops, '
          f'{len(trace["tensors"])} tensors, batch {args.batch}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
