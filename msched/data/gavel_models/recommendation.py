"""Gavel's "Recommendation" job type (an autoencoder collaborative filter on MovieLens-20M) as an msched
model file, written from the published architecture (Sedhain et al., "AutoRec: Autoencoders Meet
Collaborative Filtering", 2015, item-based, as Gavel's workload configures its recoder library: one
hidden layer of 200 tanh units, input dropout 0.5, Adam). Item-based: a sample is one movie's vector of
ratings by the training users (MovieLens-20M keeps 116,677 training users after the usual
preprocessing). The workload samples negatives so that only the batch's users are computed; the dense
vector here is the upper bound of that. The batch counts movies. Its real step is dominated by building
sparse batches on the CPU, which no layer profile sees (BENCHMARKS.md reports it separately).

    msched estimate msched/data/gavel_models/recommendation.py:recommendation --batch-size 2048
"""

import torch
import torch.nn as nn

USERS, HIDDEN = 116_677, 200


class AutoRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.noise = nn.Dropout(0.5)
        self.encode = nn.Linear(USERS, HIDDEN)
        self.act = nn.Tanh()
        self.decode = nn.Linear(HIDDEN, USERS)

    def forward(self, ratings):
        return self.decode(self.act(self.encode(self.noise(ratings))))


def recommendation():
    return AutoRec(), torch.zeros(1, USERS)
