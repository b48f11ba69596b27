#!/usr/bin/python3
"""Ground truth for the CNN model zoo, measured with PyTorch's own autograd.

For each torchvision model named on the command line (default: the five zoo CNNs) it prints
  - the parameter count;
  - the forward multiply-accumulates of the convolutions and linear layers per sample (what
    torchvision's "GFLOPS" metadata counts), from forward hooks;
  - the bytes autograd saves for backward, per sample: a saved-tensor hook records every saved
    tensor's storage once (parameters excluded; the input image, the labels, max-pool indices
    and dropout masks included), at batch 1 and batch 2; the difference is the per-sample
    figure, the rest (batch-norm statistics, running stats, nll_loss's total_weight) is fixed;
  - the dropout-mask elements per sample. On the CPU, PyTorch 1.13 implements dropout as
    `input * bernoulli_mask` and saves a float32 mask; on CUDA `native_dropout` saves a bool
    mask. The zoo models CUDA, so its per-sample saved bytes are lower by exactly
    3 bytes x (mask elements per sample); the script prints that adjusted figure too.

Run it on the CPU with the system interpreter (PyTorch 1.13, torchvision 0.14):
    /usr/bin/python3 traces/zoo/check_against_torch.py [alexnet vgg16 resnet18 resnet50 resnet101 resnet152]
It takes a few minutes on two cores (ResNet-152 at batch 2 dominates). The figures are the
ground truth of tests/zoo/cnn_test.cpp.
"""
import collections
import sys

import torch
import torchvision


def conv_linear_macs(model, x):
    """Multiply-accumulates of Conv2d and Linear modules for one forward pass over `x`."""
    macs = 0

    def conv_hook(module, _inputs, output):
        nonlocal macs
        kh, kw = module.kernel_size
        macs += output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear_hook(module, _inputs, output):
        nonlocal macs
        macs += output.numel() * module.in_features

    handles = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, torch.nn.Linear):
            handles.append(module.register_forward_hook(linear_hook))
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return macs // x.shape[0]


def dropout_elements(model, x):
    """Elements of every dropout output (= its mask) for one forward pass over `x`."""
    elements = 0

    def hook(_module, _inputs, output):
        nonlocal elements
        elements += output.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, torch.nn.Dropout)]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return elements // x.shape[0]


def saved_bytes(model, batch, verbose):
    """Bytes of the distinct storages autograd saves for one training step at `batch`."""
    params = {p.data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        storage = t.storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in seen:
            creator = t.grad_fn.__class__.__name__ if t.grad_fn else 'leaf'
            seen[ptr] = (storage.nbytes(), creator)
        return t

    x = torch.randn(batch, 3, 224, 224)
    y = torch.randint(0, 1000, (batch,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    del loss
    total = sum(nbytes for nbytes, _ in seen.values())
    if verbose:
        by_creator = collections.Counter()
        for nbytes, creator in seen.values():
            by_creator[creator] += nbytes
        print(f'  batch {batch}: {total} bytes in {len(seen)} storages')
        for creator, nbytes in by_creator.most_common():
            print(f'    {creator:32s} {nbytes}')
    return total


def measure(name, verbose):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    model.train()
    params = sum(p.numel() for p in model.parameters())
    probe = torch.randn(1, 3, 224, 224)
    macs = conv_linear_macs(model, probe)
    masks = dropout_elements(model, probe)
    at1 = saved_bytes(model, 1, verbose)
    at2 = saved_bytes(model, 2, verbose)
    per_sample = at2 - at1
    print(f'{name}: params {params:,}  conv+linear MACs/sample {macs:,}  '
          f'saved/sample (CPU) {per_sample:,}  fixed {at1 - per_sample:,}  '
          f'dropout mask elements/sample {masks:,}  '
          f'saved/sample (CUDA bool masks) {per_sample - 3 * masks:,}')


def main():
    args = [a for a in sys.argv[1:] if a != '-v']
    verbose = '-v' in sys.argv[1:]
    for name in args or ['alexnet', 'vgg16', 'resnet18', 'resnet50', 'resnet101', 'resnet152']:
        measure(name, verbose)


if __name__ == '__main__':
    main()
