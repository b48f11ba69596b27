#!/usr/bin/python3
"""Saves a few small real activation tensors as float32 .npy with their tensor class (index.txt).

Usage: /usr/bin/python3 make_activations.py   (Debian's torch and torchvision; no download)

torchvision's resnet18 (random initialisation: no weights can be downloaded here, see
README) at batch 2 on 64x64 inputs, plus one transformer encoder layer with GELU for the gelu
and linear classes. Inputs are smooth random images (a low-pass filtered noise field), not a
data set. Forward hooks capture outputs of: ReLU (post_relu), BatchNorm2d (batchnorm), the
encoder's GELU (gelu) and linear layers (linear). Deterministic (seeded).
"""
import numpy as np
import torch
import torchvision

torch.manual_seed(0)
model = torchvision.models.resnet18(weights=None).eval()
x = torch.randn(2, 3, 16, 16)
x = torch.nn.functional.interpolate(x, size=(64, 64), mode="bilinear", align_corners=False)  # smooth images

saved = []


def hook(cls, name):
    def f(_module, _inputs, output):
        if not any(n == name for n, _, _ in saved):
            saved.append((name, cls, output.detach().float().numpy().copy()))
    return f


model.relu.register_forward_hook(hook("post_relu", "resnet18_relu"))
model.bn1.register_forward_hook(hook("batchnorm", "resnet18_bn1"))
model.layer1[0].bn2.register_forward_hook(hook("batchnorm", "resnet18_layer1_bn2"))
model.layer2[0].relu.register_forward_hook(hook("post_relu", "resnet18_layer2_relu"))
model.layer3[0].relu.register_forward_hook(hook("post_relu", "resnet18_layer3_relu"))
with torch.no_grad():
    model(x)

layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, dropout=0.0, activation="gelu", batch_first=True).train()  # train(): no fused fast path, so the hooks run
layer.linear1.register_forward_hook(lambda m, i, o: saved.append(("encoder_linear1", "linear", o.detach().numpy().copy())))
orig_activation = layer.activation


def capture_gelu(t):
    y = orig_activation(t)
    saved.append(("encoder_gelu", "gelu", y.detach().numpy().copy()))
    return y


layer.activation = capture_gelu
with torch.no_grad():
    layer(torch.randn(2, 64, 128))

with open("index.txt", "w") as index:
    index.write("# file class  (written by make_activations.py)\n")
    for name, cls, a in saved:
        np.save(f"{name}.npy", a.astype(np.float32))
        index.write(f"{name}.npy {cls}\n")
        print(name, cls, a.shape, f"zeros {np.mean(a == 0):.3f}")
