#!/usr/bin/python3
"""Writes the CPU executor's reference files once, with PyTorch (1.13 here) and onnx.

For each model: <name>.onnx (torch.onnx.export, opset 13, dynamic batch), <name>.input.bin and
<name>.output.bin (raw little-endian float32, batch-major; the shapes are in the C++ test), and
<name>.weights.bin: the state dict in a format readable without protobuf (the GPU-only build has
none), read by tests/unit/inference/reference_files.h:
  "SHWT", u32 count, then per tensor: u32 name length, name, u32 rank, i64 dims[rank],
  f32 values (all little-endian).
  mlp     Shoal's `mlp` architecture, 784-128-10 (names fc1/fc2 as model/architectures.h)
  cnn     Shoal's `cnn` architecture with hidden 8 (the file stays under 500 KB)
  resnet  a torchvision-style ResNet (BasicBlocks, widths 8/16, one block each, 3x3 stem,
          32x32 input), BatchNormalization after every conv with non-trivial statistics,
          exported unfolded (training=PRESERVE) so Shoal's loader folds it
Plus two small hand-built files for the loader's error paths: lstm.onnx (an operator Shoal does
not run) and int_input.onnx (an INT64 graph input).

Run from anywhere with the Debian python: /usr/bin/python3 tests/data/inference/gen_refs.py. Not a test dependency: the files it
writes are checked in.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import TensorProto, helper

OUT = os.path.dirname(os.path.abspath(__file__))
# The PyTorch modules (bench/torch_models.py).
sys.path.insert(0, os.path.join(OUT, "..", "..", "..", "bench"))
from torch_models import BasicBlock, Mlp  # noqa: E402


class Cnn(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


class SmallResNet(nn.Module):
    """ResNetGraph({widths 8,16; blocks 1,1; image 32; classes 10; small_stem}) in Shoal."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.layer1 = nn.Sequential(BasicBlock(8, 8, 1))
        self.layer2 = nn.Sequential(BasicBlock(8, 16, 2))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.reshape(x, (-1, 16))  # exported as Constant + Reshape
        return self.fc(x)


def randomise_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = torch.rand(c, generator=gen) + 0.5
            m.bias.data = torch.rand(c, generator=gen) * 0.2 - 0.1
            m.running_mean.data = torch.rand(c, generator=gen) * 0.2 - 0.1
            m.running_var.data = torch.rand(c, generator=gen) + 0.5


def write_weights(name, model):
    import struct
    tensors = [(k, v) for k, v in model.state_dict().items() if v.dtype == torch.float32]
    with open(os.path.join(OUT, name + ".weights.bin"), "wb") as f:
        f.write(b"SHWT" + struct.pack("<I", len(tensors)))
        for k, v in tensors:
            key = k.encode()
            f.write(struct.pack("<I", len(key)) + key + struct.pack("<I", v.dim()))
            f.write(struct.pack(f"<{v.dim()}q", *v.shape))
            f.write(v.contiguous().numpy().astype("<f4").tobytes())


def export(name, model, x, training=torch.onnx.TrainingMode.EVAL):
    model.eval()
    write_weights(name, model)
    path = os.path.join(OUT, name + ".onnx")
    torch.onnx.export(model, x, path, opset_version=13, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"},
                                                             "logits": {0: "batch"}},
                      training=training, do_constant_folding=False)
    onnx.checker.check_model(onnx.load(path))
    with torch.no_grad():
        y = model(x)
    x.numpy().astype("<f4").tofile(os.path.join(OUT, name + ".input.bin"))
    y.numpy().astype("<f4").tofile(os.path.join(OUT, name + ".output.bin"))
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    print(f"{name}: {os.path.getsize(path)} bytes, ops {ops}, out {tuple(y.shape)}")


def error_models():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    lstm = helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm_1", hidden_size=2)
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, 8, 8], np.zeros(64, np.float32))
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, 8, 2], np.zeros(16, np.float32))
    g = helper.make_graph([lstm], "lstm", [x], [y], [w, r])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(OUT, "lstm.onnx"))
    xi = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 4])
    yo = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 4])
    relu = helper.make_node("Relu", ["ids"], ["out"], name="relu")
    g = helper.make_graph([relu], "ints", [xi], [yo])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(OUT, "int_input.onnx"))


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    export("mlp", Mlp(), torch.rand(4, 784, generator=gen))
    export("cnn", Cnn(), torch.rand(3, 1, 28, 28, generator=gen))
    resnet = SmallResNet()
    randomise_bn(resnet, gen)
    export("resnet", resnet, torch.rand(2, 3, 32, 32, generator=gen) * 2 - 1,
           training=torch.onnx.TrainingMode.PRESERVE)
    error_models()


if __name__ == "__main__":
    main()
