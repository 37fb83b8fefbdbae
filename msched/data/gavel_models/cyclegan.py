"""Gavel's "CycleGAN" job type (unpaired image translation, monet2photo at 256 x 256) as an msched model
file, written from the published architecture (Zhu et al., "Unpaired Image-to-Image Translation using
Cycle-Consistent Adversarial Networks", 2017: ResNet generators with 9 residual blocks and instance
norm, 70 x 70 PatchGAN discriminators). One step trains both generators (identity, adversarial and cycle
terms: six generator passes, two discriminator passes) and both discriminators (four passes on real and
generated images): the module below runs exactly those passes, so its profile is one step's work. The
batch counts image pairs (Gavel runs batch 1).

    msched estimate msched/data/gavel_models/cyclegan.py:cyclegan --batch-size 1
"""

import torch
import torch.nn as nn


class ResidualBlock(nn.Module):
    def __init__(self, ch: int):
        super().__init__()
        self.block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(ch, ch, 3), nn.InstanceNorm2d(ch), nn.ReLU(inplace=True),
            nn.ReflectionPad2d(1), nn.Conv2d(ch, ch, 3), nn.InstanceNorm2d(ch))

    def forward(self, x):
        return x + self.block(x)


def _generator(blocks: int = 9) -> nn.Sequential:
    layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, 64, 7), nn.InstanceNorm2d(64), nn.ReLU(inplace=True)]
    ch = 64
    for _ in range(2):
        layers += [nn.Conv2d(ch, ch * 2, 3, stride=2, padding=1), nn.InstanceNorm2d(ch * 2), nn.ReLU(inplace=True)]
        ch *= 2
    layers += [ResidualBlock(ch) for _ in range(blocks)]
    for _ in range(2):
        layers += [nn.Upsample(scale_factor=2), nn.Conv2d(ch, ch // 2, 3, padding=1), nn.InstanceNorm2d(ch // 2),
                   nn.ReLU(inplace=True)]
        ch //= 2
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(ch, 3, 7), nn.Tanh()]
    return nn.Sequential(*layers)


def _discriminator() -> nn.Sequential:
    layers, cin = [], 3
    for i, cout in enumerate((64, 128, 256, 512)):
        layers.append(nn.Conv2d(cin, cout, 4, stride=2, padding=1))
        if i:
            layers.append(nn.InstanceNorm2d(cout))
        layers.append(nn.LeakyReLU(0.2, inplace=True))
        cin = cout
    layers += [nn.ZeroPad2d((1, 0, 1, 0)), nn.Conv2d(512, 1, 4, padding=1)]
    return nn.Sequential(*layers)


class CycleGANStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.g_ab, self.g_ba = _generator(), _generator()
        self.d_a, self.d_b = _discriminator(), _discriminator()

    def forward(self, pair):
        real_a, real_b = pair[:, 0], pair[:, 1]
        same_a, same_b = self.g_ba(real_a), self.g_ab(real_b)          # identity terms
        fake_b, fake_a = self.g_ab(real_a), self.g_ba(real_b)
        scores = [self.d_b(fake_b), self.d_a(fake_a)]                   # generators' adversarial terms
        recov_a, recov_b = self.g_ba(fake_b), self.g_ab(fake_a)        # cycle terms
        scores += [self.d_a(real_a), self.d_a(fake_a.detach()), self.d_b(real_b), self.d_b(fake_b.detach())]
        return same_a.mean() + same_b.mean() + recov_a.mean() + recov_b.mean() + sum(s.mean() for s in scores)


def cyclegan():
    return CycleGANStep(), torch.zeros(1, 2, 3, 256, 256)
