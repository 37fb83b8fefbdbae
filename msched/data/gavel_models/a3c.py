"""Gavel's "A3C" job type (asynchronous advantage actor-critic on Atari Pong) as an msched model file,
written from the published architecture (Mnih et al., "Asynchronous Methods for Deep Reinforcement
Learning", 2016, in the LSTM variant of the widely used PyTorch port that Gavel's workload follows: four
3x3 stride-2 convolutions of 32 channels with ELU on a 1 x 42 x 42 frame, an LSTM cell of 256 units, a
linear actor over Pong's 6 actions and a linear critic). One step is one update: 20 environment steps
forward through the network, then one backward pass. The emulator's own steps run on the CPU and no
layer profile sees them (BENCHMARKS.md reports A3C separately). Each step samples its action on the host
from the network's output before the emulator can step and the next forward pass start, so the host and
the GPU take turns instead of overlapping: the `--sync-steps` line below tells msched's cost model so (it
adds the two times rather than taking their maximum).

    msched estimate msched/data/gavel_models/a3c.py:a3c --batch-size 1
"""

#MSCHED --sync-steps=20

import torch
import torch.nn as nn

STEPS, ACTIONS = 20, 6


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        layers, cin = [], 1
        for _ in range(4):
            layers += [nn.Conv2d(cin, 32, 3, stride=2, padding=1), nn.ELU()]
            cin = 32
        self.features = nn.Sequential(*layers)
        self.lstm = nn.LSTMCell(32 * 3 * 3, 256)
        self.critic = nn.Linear(256, 1)
        self.actor = nn.Linear(256, ACTIONS)

    def forward(self, frames):
        # frames: (updates, steps, 1, 42, 42); each update unrolls its steps one after another
        b = frames.shape[0]
        h = frames.new_zeros(b, 256)
        c = frames.new_zeros(b, 256)
        outs = []
        for t in range(frames.shape[1]):
            x = self.features(frames[:, t]).flatten(1)
            h, c = self.lstm(x, (h, c))
            outs.append(self.actor(h) + self.critic(h))
        return torch.stack(outs, 1)


def a3c():
    return ActorCritic(), torch.zeros(1, STEPS, 1, 42, 42)
