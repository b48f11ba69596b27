#!/usr/bin/python3
"""How the gradient statistics of traces/FORMAT.md ("Gradient statistics and the batch size")
change with the batch size: delta_rms x batch and weight_grad_rms of the three weighted layers of
a small CNN, averaged (as mean squares) over STEPS forward/backward passes with random inputs and
labels per batch size, the weights fixed (no optimizer step). Not a test: the figures FORMAT.md
quotes come from this script (Debian's torch 1.13, CPU, seed 0).

    /usr/bin/python3 tests/capture/gradient_batch_scaling.py
"""
import math

import torch

STEPS = 8


def small_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = small_cnn()
    layers = {'conv1': model[0], 'conv2': model[3], 'fc': model[8]}
    print('batch  ' + '  '.join(f'{n}: delta_rms*batch weight_grad_rms' for n in layers))
    for batch in (4, 16, 64):
        squares = {n: [0.0, 0.0] for n in layers}
        for _ in range(STEPS):
            deltas = {}
            hooks = [m.register_full_backward_hook(
                lambda _m, _gi, go, n=n: deltas.__setitem__(n, go[0].detach())) for n, m in layers.items()]
            x = torch.randn(batch, 3, 16, 16)
            y = torch.randint(0, 10, (batch,))
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            for h in hooks:
                h.remove()
            for n, m in layers.items():
                squares[n][0] += deltas[n].double().pow(2).mean().item() / STEPS
                squares[n][1] += m.weight.grad.double().pow(2).mean().item() / STEPS
        print(f'{batch:5d}  ' + '  '.join(f'{n}: {math.sqrt(d) * batch:.4g} {math.sqrt(w):.4g}'
                                          for n, (d, w) in squares.items()))


if __name__ == '__main__':
    main()
