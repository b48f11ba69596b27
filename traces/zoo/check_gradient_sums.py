#!/usr/bin/python3
"""Which aten op autograd's InputBuffer sums a tensor's gradients with, on the installed PyTorch.

A two-block pre-LN residual stack (each block's input feeds a LayerNorm and the residual add; the
LayerNorm is shared, so its weight and bias get two gradients too) runs backward under a
TorchDispatchMode that logs every add and whether its output is one of its inputs' storage.
PyTorch 1.13 (Debian's python3-torch) prints four `aten.add.Tensor` lines with new outputs: the
sums are new tensors (traces/zoo/README.md, "Gradient sums"). PyTorch 2.0 and later would print
`aten.add_.Tensor` writing into the first gradient. CPU only; run with /usr/bin/python3.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class AddLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.adds = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.__name__.startswith("add"):
            inputs = [a.data_ptr() for a in args if isinstance(a, torch.Tensor)]
            self.adds.append((str(func), isinstance(out, torch.Tensor) and out.data_ptr() in inputs))
        return out


def main():
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(8)
    lin1, lin2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    h = x * 2  # the residual stream, a non-leaf
    y = h + torch.nn.functional.dropout(lin1(ln(h)), 0.1, training=True)
    z = y + torch.nn.functional.dropout(lin2(ln(y)), 0.1, training=True)
    log = AddLog()
    with log:
        z.sum().backward()
    print("PyTorch", torch.__version__)
    for op, in_place in log.adds:
        print(f"  {op}: {'in place into the first gradient' if in_place else 'a new tensor'}")


if __name__ == "__main__":
    main()
