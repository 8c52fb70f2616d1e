"""bench-serve's ResNet-18: torchvision's resnet18 (random weights, seed 0, 10 classes) exported
to ONNX (opset 13, dynamic batch, input `input` [N,3,224,224], output `logits`), the file both
servers load. The exporter's Identity nodes (aliases of initializers) are folded into their
consumers: Shoal's ONNX loader has no Identity operator, and the graph computes the same.

  python bench/export_resnet18.py OUT.onnx
"""
import sys

import onnx
import torch
import torchvision


def main(out):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10).eval()
    torch.onnx.export(model, torch.rand(1, 3, 224, 224), out, opset_version=13,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, dynamo=False)
    m = onnx.load(out)
    g = m.graph
    alias = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity"}
    outputs = {o.name for o in g.output}
    assert not outputs & alias.keys(), "an Identity produces a graph output"
    keep = [n for n in g.node if n.op_type != "Identity"]
    for n in keep:
        for i, name in enumerate(n.input):
            while name in alias:
                name = alias[name]
            n.input[i] = name
    del g.node[:]
    g.node.extend(keep)
    onnx.checker.check_model(m)
    onnx.save(m, out)
    print(f"{out}: {len(alias)} Identity nodes folded, ops {sorted({n.op_type for n in keep})}")


if __name__ == "__main__":
    main(sys.argv[1])
