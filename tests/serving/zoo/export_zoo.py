#!/usr/bin/env python3
"""Builds the model zoo of issue 33 with seeded random weights (from configs: nothing is
downloaded) and exports each model with torch.onnx.export (TorchScript exporter, opset 17),
with a fixed input and onnxruntime's output on it beside the graph.

    export_zoo.py OUT_DIR [NAME ...]

For each model NAME writes OUT_DIR/NAME.onnx, NAME.input.bin (float32 little-endian; token ids
as floats for the text models), NAME.ref.bin (onnxruntime's output, float32) and NAME.json
(shapes). A model whose files exist is skipped (the export is cached under the build dir).

Shrunk where the operator coverage stays the same: the transformers keep their width (768,
12 heads) but have 2 layers instead of 12 and a 1000-token vocabulary; ViT-B/16 runs at 64x64
(16 patches). The CNNs are full depth at 64x64 (EfficientNet-B0 at 64x64 too).
"""
import json
import os
import sys


BATCH = 2


def cnn(name):
    import torch
    import torchvision.models as tvm

    ctor = {"resnet50": tvm.resnet50, "mobilenet_v3_small": tvm.mobilenet_v3_small,
            "efficientnet_b0": tvm.efficientnet_b0}[name]
    return ctor(weights=None, num_classes=1000), torch.randn(BATCH, 3, 64, 64)


def vit():
    import torch

    from torchvision.models.vision_transformer import VisionTransformer

    m = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=12,
                          hidden_dim=768, mlp_dim=3072, num_classes=1000)
    # torchvision zero-initialises the head and the class token: give them values so the
    # output depends on every layer.
    torch.nn.init.normal_(m.heads.head.weight, std=0.02)
    torch.nn.init.normal_(m.class_token, std=0.02)
    return m, torch.randn(BATCH, 3, 64, 64)


def token_model(inner, key):
    """The model taking its token ids as float32 (Shoal's inputs are float32), cast to int64."""
    import torch

    class TokenModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            return getattr(self.inner(input_ids=ids.long()), key)

    return TokenModel()


def bert():
    import torch

    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(vocab_size=1000, hidden_size=768, num_hidden_layers=2, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=128, num_labels=4,
                     attn_implementation="eager")
    m = BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(1)
    return token_model(m, "logits"), torch.randint(0, 1000, (BATCH, 16), generator=g).float()


def gpt2():
    import torch

    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=1000, n_positions=128, n_embd=768, n_layer=2, n_head=12,
                     attn_implementation="eager")
    m = GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(2)
    return token_model(m, "logits"), torch.randint(0, 1000, (BATCH, 16), generator=g).float()


MODELS = {
    "resnet50": lambda: cnn("resnet50"),
    "mobilenet_v3_small": lambda: cnn("mobilenet_v3_small"),
    "efficientnet_b0": lambda: cnn("efficientnet_b0"),
    "vit_b16": vit,
    "bert_base": bert,
    "gpt2_small": gpt2,
}


def export(name, out):
    import torch

    path = os.path.join(out, name + ".onnx")
    torch.manual_seed(0)
    model, x = MODELS[name]()
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": x.numpy()})[0]
    x.numpy().astype("<f4").tofile(os.path.join(out, name + ".input.bin"))
    y.astype("<f4").tofile(os.path.join(out, name + ".ref.bin"))
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump({"input": list(x.shape), "output": list(y.shape)}, f)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    todo = [n for n in sys.argv[2:] or MODELS if not os.path.exists(os.path.join(out, n + ".json"))]
    if not todo:
        return  # cached: torch is not even imported
    import torch

    torch.set_num_threads(1)
    torch.backends.mha.set_fastpath_enabled(False)  # export the math, not a fused kernel
    for name in todo:
        export(name, out)


if __name__ == "__main__":
    main()
