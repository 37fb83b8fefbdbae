"""Gavel's "Transformer" job type (translation on Multi30k, German to English) as an msched model file,
written from the published architecture (Vaswani et al., "Attention Is All You Need", 2017, base model:
6 encoder and 6 decoder layers, d_model 512, 8 heads, feed-forward 2048, dropout 0.1, no shared
embeddings) at the sizes of Gavel's workload: Multi30k vocabularies of about 5,400 German and 4,600
English words, sentences padded to about 30 tokens. The batch counts sentence pairs.

    msched estimate msched/data/gavel_models/transformer.py:transformer --batch-size 64
"""

import math

import torch
import torch.nn as nn

SRC_VOCAB, TGT_VOCAB, SEQ_LEN = 5400, 4600, 30


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int = 512, heads: int = 8, dropout: float = 0.1):
        super().__init__()
        self.heads, self.d_k = heads, d_model // heads
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.fc = nn.Linear(d_model, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, q, k, v):
        b, lq, lk = q.shape[0], q.shape[1], k.shape[1]
        residual = q
        q = self.w_q(q).view(b, lq, self.heads, self.d_k).transpose(1, 2)
        k = self.w_k(k).view(b, lk, self.heads, self.d_k).transpose(1, 2)
        v = self.w_v(v).view(b, lk, self.heads, self.d_k).transpose(1, 2)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_k), dim=-1)
        out = (self.dropout(attn) @ v).transpose(1, 2).reshape(b, lq, -1)
        return self.norm(self.dropout(self.fc(out)) + residual)


class FeedForward(nn.Module):
    def __init__(self, d_model: int = 512, d_inner: int = 2048, dropout: float = 0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_inner)
        self.relu = nn.ReLU()
        self.w_2 = nn.Linear(d_inner, d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        return self.norm(self.dropout(self.w_2(self.relu(self.w_1(x)))) + x)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadAttention()
        self.ffn = FeedForward()

    def forward(self, x):
        return self.ffn(self.self_attn(x, x, x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadAttention()
        self.enc_attn = MultiHeadAttention()
        self.ffn = FeedForward()

    def forward(self, y, memory):
        return self.ffn(self.enc_attn(self.self_attn(y, y, y), memory, memory))


class Transformer(nn.Module):
    def __init__(self, layers: int = 6, d_model: int = 512):
        super().__init__()
        self.src_emb = nn.Embedding(SRC_VOCAB, d_model)
        self.tgt_emb = nn.Embedding(TGT_VOCAB, d_model)
        self.dropout = nn.Dropout(0.1)
        self.encoder = nn.ModuleList(EncoderLayer() for _ in range(layers))
        self.decoder = nn.ModuleList(DecoderLayer() for _ in range(layers))
        self.project = nn.Linear(d_model, TGT_VOCAB, bias=False)

    def forward(self, src, tgt):
        x = self.dropout(self.src_emb(src))
        for layer in self.encoder:
            x = layer(x)
        y = self.dropout(self.tgt_emb(tgt))
        for layer in self.decoder:
            y = layer(y, x)
        return self.project(y)


def transformer():
    tokens = torch.zeros(1, SEQ_LEN, dtype=torch.long)
    return Transformer(), (tokens, tokens)
