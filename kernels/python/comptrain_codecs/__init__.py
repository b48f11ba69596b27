"""comptrain's error-bounded compressor kernels for NumPy arrays and torch tensors.

    import numpy as np, comptrain_codecs as cc
    stream = cc.compress(np.random.rand(64, 1024).astype(np.float32), "szp", 1e-3, "rel")
    back = cc.decompress(stream)        # float32 array of the same shape, |x - back| <= bound

`compress` returns the checksummed stream `comptrain compress` writes for the same input and
options, byte for byte (kernels/README.md, "Stream format"); `decompress` reads any such stream.
Arrays are read in place: float32, C-contiguous, 1 to 4 dimensions (NumPy arrays, anything with
the buffer protocol, CPU torch tensors). CUDA torch tensors go through the kernels' CUDA driver
(szp and zeros) when the package was built with nvcc; otherwise, and for the other codecs, through
host memory and the CPU driver, which writes the same stream.

`compressed_activations` (in `comptrain_codecs.activations`, imported on first use so that this
module does not import torch) compresses the tensors autograd saves for backward.

Errors from the kernels (an unknown codec, a bad bound, a corrupted or truncated stream) raise
`CodecError` / `StreamError` (both `ValueError`s) with the kernels' message; so do arguments out
of the kernels' range (`threads` above `MAX_THREADS` or negative, a `count` above `MAX_ELEMENTS`,
`bits` given to a codec other than quant).
"""

import sys

from . import _kernels
from ._kernels import MAX_ELEMENTS, MAX_THREADS, CodecError, StreamError

__all__ = [
    "CodecError",
    "StreamError",
    "MAX_ELEMENTS",
    "MAX_THREADS",
    "codecs",
    "compress",
    "decompress",
    "inspect",
    "absolute_bound",
    "max_compressed_size",
    "cuda_driver_available",
    "compressed_activations",
    "CompressionStats",
    "SavedTensorInfo",
]

# The codecs the CUDA driver implements (kernels/include/comptrain/kernels/cuda.hpp).
CUDA_CODECS = frozenset({"szp", "zeros"})

_CODECS = {c["name"]: c for c in _kernels.codecs()}


def codecs():
    """The kernels' codecs: a list of dicts (name, error_bounded, strict, summary, cuda)."""
    return [dict(c, cuda=c["name"] in CUDA_CODECS) for c in _CODECS.values()]


def inspect(stream):
    """Validates a stream (header, checksum, codec fields) and returns its header as a dict:
    codec, mode, shape, count, error_bound, absolute_bound, codec_parameter, positive_mask,
    payload_bytes, checksum."""
    return _kernels.inspect(stream)


def max_compressed_size(codec, count, bits=None):
    """An upper bound of the stream size of `count` values (header included). count: 0 to
    MAX_ELEMENTS (2^40, the kernels' maximum); bits: quant's only (default 8)."""
    return _kernels.max_compressed_size(codec, count, bits)


def absolute_bound(data, error_bound, mode="rel"):
    """The absolute bound `compress` enforces: error_bound (abs), or error_bound times the
    range (max - min) of the finite values (rel). error_bound must be finite and >= 0."""
    return _kernels.absolute_bound(_host_buffer(data, "absolute_bound"), error_bound, mode)


_cuda_module = None


def cuda_driver_available():
    """Whether the package was built with the kernels' CUDA driver (nvcc was found). Says nothing
    about a GPU being present."""
    return _load_cuda_module() is not None


def _load_cuda_module():
    global _cuda_module
    if _cuda_module is None:
        try:
            from . import _kernels_cuda
        except ImportError:
            _cuda_module = False
        else:
            _kernels_cuda.set_exceptions(CodecError, StreamError)
            _cuda_module = _kernels_cuda
    return _cuda_module or None


def _torch_tensor_type():
    # torch is used only if the caller already imported it: a NumPy user never pays for it.
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else None


def _is_tensor(x):
    tensor_type = _torch_tensor_type()
    return tensor_type is not None and isinstance(x, tensor_type)


def _host_buffer(data, what):
    """A buffer over a CPU tensor's memory (no copy), or `data` itself."""
    if _is_tensor(data):
        if data.device.type != "cpu":
            raise ValueError(f"{what}: expected a CPU tensor here, got one on {data.device}")
        if data.dtype != sys.modules["torch"].float32:
            raise TypeError(f"{what}: expected a float32 tensor, got {data.dtype} (use .float())")
        return data.detach().numpy()
    return data


def _check_bound(codec, error_bound):
    # The CLI's rules, as _kernels.compress applies them, for the CUDA path too.
    info = _CODECS.get(codec)
    if info is None:
        _kernels.max_compressed_size(codec, 0)  # raises CodecError naming the known codecs
    if info["error_bounded"] and error_bound is None:
        raise CodecError(f"codec {codec} needs an error_bound")
    if not info["error_bounded"] and error_bound is not None:
        raise CodecError(f"codec {codec} is not error-bounded: error_bound does not apply (pass None)")


def compress(data, codec, error_bound=None, mode="rel", *, bits=None, threads=1, positive_mask=False):
    """Compresses a float32 array into the kernels' stream (bytes).

    data: a C-contiguous float32 NumPy array (or buffer) of 1 to 4 dimensions, read in place, or
        a float32 torch tensor (CPU: read in place; CUDA: see the module's documentation).
    codec: a name from `codecs()`: szp, szh, zeros, quant, fp16, bf16, zfp.
    error_bound: the bound for error-bounded codecs (szp, szh, zfp); None for the others.
    mode: 'rel' (the bound times max - min of the finite values) or 'abs'.
    bits: quant's bits per value (1, 2, 4, 8; default 8); the other codecs take none.
    threads: CPU threads, 0 to MAX_THREADS (0: all cores, up to MAX_THREADS); the stream does not
        depend on it.
    positive_mask: szp and szh only: also keep one bit per value, x > 0 (n / 8 bytes in the
        stream), so that a decoded value is > 0 exactly when the original was (what a ReLU's
        backward reads); the bound still holds for every value.
    """
    if _is_tensor(data) and data.device.type == "cuda":
        return _compress_cuda(data, codec, error_bound, mode, bits, threads, positive_mask)
    return _kernels.compress(_host_buffer(data, "compress"), codec, error_bound, mode, bits, threads, bool(positive_mask))


def _compress_cuda(tensor, codec, error_bound, mode, bits, threads, positive_mask):
    torch = sys.modules["torch"]
    if tensor.dtype != torch.float32:
        raise TypeError(f"compress: expected a float32 tensor, got {tensor.dtype} (use .float())")
    if not tensor.is_contiguous():
        raise ValueError("compress: expected a contiguous tensor, read in place (use .contiguous())")
    if not 1 <= tensor.dim() <= 4:
        raise ValueError(f"compress: expected 1 to 4 dimensions (the stream's shape), got {tensor.dim()} (reshape it)")
    module = _load_cuda_module()
    if module is None or codec not in CUDA_CODECS:
        # Through host memory: the CPU driver writes the stream the CUDA driver would.
        return _kernels.compress(tensor.detach().cpu().numpy(), codec, error_bound, mode, bits, threads,
                                 bool(positive_mask))
    _check_bound(codec, error_bound)
    _kernels.check_options(codec, bits, threads)  # unused by the CUDA driver, refused as the CPU path does
    if mode not in ("rel", "abs"):
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    with torch.cuda.device(tensor.device):
        # The driver runs on its own runtime's default stream: PyTorch's pending work first.
        torch.cuda.current_stream().synchronize()
        return module.compress(tensor.data_ptr(), list(tensor.shape), tensor.device.index, codec,
                               0.0 if error_bound is None else float(error_bound), mode, bool(positive_mask))


def decompress(stream, *, out=None, device=None, threads=1):
    """Decodes a stream.

    Returns a new float32 NumPy array of the stream's shape; with `device` ('cpu', 'cuda:0', a
    torch.device) a torch tensor there instead; with `out` (a writable C-contiguous float32 NumPy
    array or torch tensor holding as many elements, any shape) decodes into it and returns it.
    A corrupted, truncated or foreign stream raises StreamError before anything is written.
    threads: CPU threads, 0 to MAX_THREADS (0: all cores, up to MAX_THREADS).
    """
    _kernels.check_threads(threads)
    if out is not None:
        if _is_tensor(out) and out.device.type == "cuda":
            _decompress_cuda_into(stream, out, threads)
        else:
            target = out
            if _is_tensor(out):
                target = _host_buffer(out, "decompress")
            _kernels.decompress_into(stream, target, threads)
        return out
    if device is None:
        return _kernels.decompress(stream, threads)
    import torch

    device = torch.device(device)
    if device.type == "cpu":
        return torch.from_numpy(_kernels.decompress(stream, threads))
    header = _kernels.inspect(stream)
    result = torch.empty(header["shape"], dtype=torch.float32, device=device)
    return decompress(stream, out=result, threads=threads)


def _decompress_cuda_into(stream, out, threads):
    torch = sys.modules["torch"]
    if out.dtype != torch.float32 or not out.is_contiguous():
        raise ValueError("decompress: out must be a contiguous float32 tensor")
    module = _load_cuda_module()
    codec = _kernels.inspect(stream)["codec"]
    if module is None or codec not in CUDA_CODECS:
        host = _kernels.decompress(stream, threads)
        if host.size != out.numel():
            raise CodecError(f"decompress: the destination holds {out.numel()} elements, the stream {host.size}")
        out.copy_(torch.from_numpy(host).reshape(out.shape))
        return
    with torch.cuda.device(out.device):
        # `out` may reuse memory PyTorch's stream still reads: let that finish first.
        torch.cuda.current_stream().synchronize()
        module.decompress_into(bytes(stream), out.data_ptr(), out.numel(), out.device.index)


def __getattr__(name):
    # The activation hooks need torch: imported on first use (PEP 562).
    if name in ("compressed_activations", "CompressionStats", "SavedTensorInfo", "ModuleStats", "activations"):
        import importlib

        # import_module, not `from . import`: that would ask this __getattr__ again.
        activations = importlib.import_module(__name__ + ".activations")
        return activations if name == "activations" else getattr(activations, name)
    raise AttributeError(f"module 'comptrain_codecs' has no attribute {name!r}")
