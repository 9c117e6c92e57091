"""Small PyTorch models for `tracker profile --torch torch_models:FUNCTION` in the tests (this
folder is put on the path): a residual CNN that calls one ReLU module three times, torchvision's
ResNet-18 (tools/gpu_stage.sh 11), and functions that return or raise what a user's might by mistake."""

from __future__ import annotations

import torch
from torch import nn


class ResidualCNN(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU(inplace=True)  # called three times; in place, as models often write it
        self.block = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = self.act(self.bn(self.stem(x)))
        x = self.act(self.block(x)) + x  # the residual add is no module's
        x = self.pool(x)
        return self.head(self.act(x).flatten(1))


def residual_cnn():
    torch.manual_seed(0)
    return ResidualCNN(), torch.randn(4, 3, 8, 8)


def resnet18():
    """torchvision's ResNet-18 at batch 32 (the second target: its counters in <= 60 s
    through --torch); torchvision is imported here, as only this model needs it."""
    from torchvision.models import resnet18 as build

    torch.manual_seed(0)
    return build(), torch.randn(32, 3, 224, 224)


def not_a_model():
    return 1, 2


def broken():
    raise ValueError("no weights file")


def no_batch():
    return nn.Linear(3, 2), 5


class RaisesInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied\n(2x3 and 4x2)")  # torch's are two lines


def forward_raises():
    return RaisesInForward(), torch.randn(2, 3)


def exits():
    raise SystemExit(0)  # not an Exception: it passed through and tracker exited 0


class NoLeaves(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential()  # a container, and empty: falsy, so any() took the model for a leaf

    def forward(self, x):
        return x * 2


def no_leaves():
    return NoLeaves(), torch.randn(2, 3)


class FixedBatch(nn.Module):
    """A model written for one batch size: its reshape names the batch."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 2)

    def forward(self, x):
        return self.fc(x.reshape(4, 12))


def fixed_batch():
    return FixedBatch(), torch.randn(4, 3, 4)
