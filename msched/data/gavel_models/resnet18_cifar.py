"""Gavel's "ResNet-18 (CIFAR-10)" job type as an msched model file, written from the published
architecture (He et al., "Deep Residual Learning for Image Recognition", 2016, with the CIFAR stem used by
Gavel's workload: a 3x3 stride-1 first convolution, no max-pool, 32x32 inputs, 10 classes).

    msched estimate msched/data/gavel_models/resnet18_cifar.py:resnet18_cifar --batch-size 128
"""

#MSCHED --input-shape=3,32,32
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    def __init__(self, blocks=(2, 2, 2, 2), num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        layers, cin = [], 64
        for i, n in enumerate(blocks):
            cout = 64 * 2 ** i
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.pool(self.layers(self.stem(x)))
        return self.fc(x.flatten(1))


def resnet18_cifar():
    return ResNetCifar()
