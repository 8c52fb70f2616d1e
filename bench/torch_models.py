"""PyTorch modules for tests/data/inference/gen_refs.py (the checked-in reference files).
bench/infer_anchor.py no longer builds its own models: its anchors run the ONNX file of the very
graph Shoal compiled. Module and attribute names are the state dict's keys, which the reference
files' <name>.weights.bin hold: renaming one changes those files. Imported only where torch is
installed."""
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    """Shoal's `mlp` architecture, 784-128-10 (names fc1/fc2 as shoal/fl/wire/architectures.h)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convs with BatchNorm, a 1x1 conv on the shortcut when the
    stride or the width changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))
