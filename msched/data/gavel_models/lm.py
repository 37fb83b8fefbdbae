"""Gavel's "LM" job type (word-level language model on Wikitext-2) as an msched model file, written from
the published architecture (Zaremba et al., "Recurrent Neural Network Regularization", 2014, as in
PyTorch's word_language_model example that Gavel's workload runs with its defaults): a 200-wide word
embedding, a 2-layer LSTM of 200 units with dropout 0.2, a linear decoder over the 33,278-word
vocabulary, sequences of 35 tokens (truncated back-propagation). The batch counts sequences.

    msched estimate msched/data/gavel_models/lm.py:lm --batch-size 20
"""

import torch
import torch.nn as nn

VOCAB, EMBED, HIDDEN, LAYERS, BPTT = 33278, 200, 200, 2, 35


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(VOCAB, EMBED)
        self.drop = nn.Dropout(0.2)
        self.rnn = nn.LSTM(EMBED, HIDDEN, LAYERS, dropout=0.2, batch_first=True)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        out, _hidden = self.rnn(self.drop(self.encoder(tokens)))
        return self.decoder(self.drop(out))


def lm():
    return RNNModel(), torch.zeros(1, BPTT, dtype=torch.long)
