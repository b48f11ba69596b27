#!/usr/bin/python3
"""The capture's gradient statistics (traces/FORMAT.md, "Gradient statistics") against their
definitions, measured by another path on the same training step.

The capture measures them through hooks on autograd's nodes (comptrain_capture.GradientWatch).
Here, on a tiny model with a convolution, a second convolution reading the same input, a linear
layer on a 2-D input and a bias-less linear layer on a 3-D input (an mm on the folded view), the
same recorded step runs with this test's own hooks: a forward hook keeps each module's input X
and puts a tensor hook on its output, which keeps delta (the gradient of the loss with respect to
it). The weight gradient is then computed from its definition, in float64: G = delta^T X for the
linear layers (the leading dimensions folded), torch.nn.grad.conv2d_weight(X, delta) for the
convolutions. (A hook on the weights themselves would make AccumulateGrad copy the gradient,
ops the probe run does not have.) The RMSs are computed with numpy, and N from the module's
output shape (batch x H_out x W_out for the convolutions, the rows for the linear layers). The trace must carry, on the tensor each
forward op reads as its activation, exactly those numbers (within float tolerance), and on the
input shared by the two convolutions those of the more sensitive one (delta_rms * sqrt(N) /
weight_grad_rms). Without gradient recording the trace has none and is version 2.

Run by capture_test (tests/capture/capture_zoo_test.cpp) with /usr/bin/python3; exit 77 (skipped)
without torch.
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', '..', 'traces', 'capture'))
sys.path.insert(0, HERE)
try:
    import numpy as np
    import torch
    import torchvision  # noqa: F401  (the capture imports it)
except ImportError as error:
    print(f'SKIP: {error} (apt-get install python3-torch python3-torchvision)')
    sys.exit(77)

import comptrain_capture as cap  # noqa: E402

BATCH = 3
SIDE = 10  # input height and width


class TinyNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)  # 10x10 -> 5x5
        self.side = torch.nn.Conv2d(3, 4, 1, stride=2, bias=False)  # reads the same input, 5x5
        self.fc = torch.nn.Linear(4 * 5 * 5, 6)                     # addmm on [batch, 100]
        self.head = torch.nn.Linear(3, 5, bias=False)               # mm on the [batch*2, 3] view
        self.act = torch.nn.ReLU()

    def forward(self, x):
        # `/ 2.0`: DivBackward saves the wrapped number 2.0, which the capture must hand back to
        # autograd as a tensor (comptrain_capture.Recorder.__torch_dispatch__, `detach`).
        h = torch.relu(self.conv(x) + self.side(x)) / 2.0
        # `act` produces fc's input: fc's weight-gradient product must still be named after fc.
        h = torch.relu(self.fc(self.act(h.flatten(1))))
        return self.head(h.view(h.shape[0], 2, 3)).mean(1)


def tiny_net():
    return TinyNet()


def rms(t) -> float:
    a = t.detach().double().numpy()
    return float(np.sqrt(np.mean(a * a)))


def weight_gradient(module, x, delta):
    """dL/dW from the module's input and delta, by the definition, in float64."""
    x, delta = x.detach().double(), delta.detach().double()
    if isinstance(module, torch.nn.Conv2d):
        return torch.nn.grad.conv2d_weight(x, module.weight.shape, delta, stride=module.stride,
                                           padding=module.padding, dilation=module.dilation,
                                           groups=module.groups)
    return delta.reshape(-1, delta.shape[-1]).T @ x.reshape(-1, x.shape[-1])


def sensitivity(s) -> float:
    return s['delta_rms'] * math.sqrt(s['terms']) / s['weight_grad_rms']


def close(a: float, b: float) -> bool:
    # The capture's weight gradients are PyTorch's float32 ones, these float64: 1e-5 is float32's
    # rounding over a few hundred terms with room to spare.
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=0.0)


def capture(record_gradients: bool):
    args = cap.parse_args(['capture_gradient_test:tiny_net', '--batch', str(BATCH), '--input-shape',
                           f'3,{SIDE},{SIDE}', '--num-classes', '5', '--threads', '1', '-o', 'unused.json'])
    session = cap.Session(args)
    probe = session.step(BATCH - 1, keep_saved=False)
    # This test's hooks, on the recorded step only: they only keep references (no torch op runs
    # inside the capture's dispatch mode), the numbers are computed afterwards.
    deltas, inputs, outputs, handles = {}, {}, {}, []
    for name in ('conv', 'side', 'fc', 'head'):
        module = getattr(session.model, name)

        def on_output(_module, module_inputs, out, name=name):
            inputs[name] = module_inputs[0]
            outputs[name] = tuple(out.shape)
            out.register_hook(lambda g: deltas.__setitem__(name, g))

        handles.append(module.register_forward_hook(on_output))
    try:
        main = session.step(BATCH, keep_saved=False, record_values=True, record_gradients=record_gradients)
    finally:
        for handle in handles:
            handle.remove()
    trace = cap.build_trace(session, main, probe, BATCH, BATCH - 1)
    expected = {}
    for name in deltas:
        shape = outputs[name]
        if name in ('conv', 'side'):
            terms = shape[0] * shape[2] * shape[3]  # batch x H_out x W_out
            assert terms == BATCH * 5 * 5, (name, shape)
        else:
            terms = math.prod(shape[:-1])           # the rows: batch (x tokens)
        grad_weight = weight_gradient(getattr(session.model, name), inputs[name], deltas[name])
        expected[name] = {'delta_rms': rms(deltas[name]), 'weight_grad_rms': rms(grad_weight),
                          'terms': float(terms)}
    return trace, expected


def main() -> int:
    trace, expected = capture(record_gradients=True)
    assert trace['version'] == 3, trace['version']
    assert set(expected) == {'conv', 'side', 'fc', 'head'}, sorted(expected)
    assert expected['fc']['terms'] == BATCH and expected['head']['terms'] == 2 * BATCH, expected
    tensors = trace['tensors']
    carriers = set()
    failures = []
    # A Linear's weight-gradient product reads its saved input and no weight: it is still named
    # after the Linear (and of kind linear), not after the input's producer.
    backward_products = [op for op in trace['ops'] if op['phase'] == 'backward' and op['name'].split('.')[-1].split('_')[0] in ('mm', 'addmm')]
    for op in backward_products:
        if op['kind'] != 'linear' or op['name'].split('.', 1)[0] not in ('fc', 'head'):
            failures.append(f'backward product {op["name"]}: kind {op["kind"]}, expected a linear op named after fc or head')
    if len(backward_products) != 4:
        failures.append(f'{len(backward_products)} backward products, expected 4 (input and weight gradients of fc and head)')
    for op in trace['ops']:
        if op['phase'] != 'forward' or op['kind'] not in ('conv', 'linear', 'matmul'):
            continue
        module = op['name'].split('.', 1)[0]
        with_stats = [i for i in op['inputs'] if 'gradient' in tensors[i]]
        if len(with_stats) != 1:
            failures.append(f'{op["name"]}: {len(with_stats)} inputs with gradient statistics, expected 1')
            continue
        index = with_stats[0]
        carriers.add(index)
        got = tensors[index]['gradient']
        want = expected[module]
        if module in ('conv', 'side'):
            # The images feed both convolutions: the more sensitive one's statistics.
            want = max(expected['conv'], expected['side'], key=sensitivity)
            assert tensors[index]['name'] == 'input', tensors[index]['name']
        if set(got) != {'delta_rms', 'weight_grad_rms', 'terms'}:
            failures.append(f'{op["name"]}: fields {sorted(got)}')
            continue
        for key in ('delta_rms', 'weight_grad_rms', 'terms'):
            if not close(got[key], want[key]):
                failures.append(f'{op["name"]}: {key} {got[key]!r}, PyTorch hooks {want[key]!r}')
        # The format's rule for a tensor that scales with the batch (exact rescaling).
        if 'batch_dim' in tensors[index] and got['terms'] % BATCH != 0:
            failures.append(f'{op["name"]}: terms {got["terms"]} not a multiple of the batch {BATCH}')
        print(f'{op["name"]:16s} on {tensors[index]["name"]:28s} delta_rms {got["delta_rms"]:.6g} '
              f'weight_grad_rms {got["weight_grad_rms"]:.6g} terms {got["terms"]:g}')
    if len(carriers) != 3:  # the images (conv, side), fc's input, head's folded input
        failures.append(f'{len(carriers)} tensors carry gradient statistics, expected 3')
    stray = [t['name'] for i, t in enumerate(tensors) if 'gradient' in t and i not in carriers]
    if stray:
        failures.append(f'gradient statistics on tensors no conv/linear op reads: {stray}')
    # The two convolutions must differ enough for the choice to be tested.
    if close(sensitivity(expected['conv']), sensitivity(expected['side'])):
        failures.append('conv and side are equally sensitive: the choice between them is not tested')

    plain, _ = capture(record_gradients=False)
    if any('gradient' in t for t in plain['tensors']) or plain['version'] != 2:
        failures.append(f'without gradient recording: version {plain["version"]}, gradient statistics present')
    if [o['name'] for o in plain['ops']] != [o['name'] for o in trace['ops']]:
        failures.append('the hooks changed the recorded ops')

    for failure in failures:
        print('FAIL:', failure)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
