"""Plain PyTorch models, written as ``nn.Sequential`` of layers a pipeline can split between any two.

``mlp(features, width, hidden, classes)``: ``input`` (Linear features->width, GELU), ``hidden`` blocks
``block_{i}`` (Linear width->width, GELU), and ``head`` (Linear width->classes); input (B, features)
floats, output (B, classes) logits for a cross-entropy loss.

``convnet(channels, blocks, classes)``: ``stem`` (3x3 conv 3->channels, batch norm, ReLU),
``blocks`` residual blocks ``block_{i}`` (two 3x3 convs with batch norm, ReLU after the sum), and
``head`` (global average pool, Linear channels->classes); input (B, 3, H, W) images, output (B, classes).

Both return children in model order; ``nn.Sequential.named_children()`` gives their names.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn


def mlp(features: int, width: int, hidden: int, classes: int) -> nn.Sequential:
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    layers["input"] = nn.Sequential(nn.Linear(features, width), nn.GELU())
    for i in range(hidden):
        layers[f"block_{i}"] = nn.Sequential(nn.Linear(width, width), nn.GELU())
    layers["head"] = nn.Linear(width, classes)
    return nn.Sequential(layers)


class ResidualConv(nn.Module):
    """relu(x + bn(conv(relu(bn(conv(x)))))), channels and image size kept."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


def convnet(channels: int, blocks: int, classes: int) -> nn.Sequential:
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    layers["stem"] = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                                   nn.ReLU())
    for i in range(blocks):
        layers[f"block_{i}"] = ResidualConv(channels)
    layers["head"] = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes))
    return nn.Sequential(layers)
