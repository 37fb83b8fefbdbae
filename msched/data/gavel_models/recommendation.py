"""Gavel's "Recommendation" job type (an autoencoder collaborative filter on MovieLens-20M) as an msched
model file, written from Gavel's published workload:

- github.com/stanford-futuredata/gavel, workloads/pytorch/recommendation/train.py (MIT): the recoder
  library's `DynamicAutoencoder(hidden_layers=[200], activation_type='tanh', noise_prob=0.5)` trained by
  `Recoder(..., optimizer_type='adam', loss='logistic', user_based=False)` with `negative_sampling=True`,
  batch size 2048 by default, on MovieLens-20M as scripts/ml-20m/preprocess.py prepares it;
- that preprocessing is Liang et al.'s ("Variational Autoencoders for Collaborative Filtering", WWW 2018,
  Table 1): 20,108 movies kept, 116,677 training users (136,677 less 2 x 10,000 held out).

Items-based: the autoencoder's input and output layers span the 20,108 items (a sample is one user's
vector of watched movies; the batch counts users): 20,108 x 200 + 200 + 200 x 20,108 + 20,108 =
8,063,508 parameters (about 8.06 M). An earlier version of this file took the 116,677 users as the input
dimension (46.8 M parameters), which is not what Gavel trains. Negative sampling computes only the batch's
items and sampled negatives; the dense vector here is the upper bound of that. The real step is dominated
by building sparse batches on the CPU, which no layer profile sees (BENCHMARKS.md reports it separately).

    msched estimate msched/data/gavel_models/recommendation.py:recommendation --batch-size 2048
"""

import torch
import torch.nn as nn

ITEMS, HIDDEN = 20_108, 200


class AutoRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.noise = nn.Dropout(0.5)
        self.encode = nn.Linear(ITEMS, HIDDEN)
        self.act = nn.Tanh()
        self.decode = nn.Linear(HIDDEN, ITEMS)

    def forward(self, watched):
        return self.decode(self.act(self.encode(self.noise(watched))))


def recommendation():
    return AutoRec(), torch.zeros(1, ITEMS)
