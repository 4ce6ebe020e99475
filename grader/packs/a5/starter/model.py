"""The model of Assignment 5, as the course's ``model.py`` defines it: a stack of two-layer MLP blocks
whose input and output have the same shape, so every block's output can be the next one's input."""

import torch.nn.functional as F
from torch import nn


class MyDummyLayer(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, layer_idx: int):
        super().__init__()
        self.fc1 = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.fc2 = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.layer_idx = layer_idx  # the block's place in the whole model, kept when a stage copies it

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class MyDummyModel(nn.Module):
    def __init__(self, number_of_layers: int, hidden_size: int, intermediate_size: int):
        super().__init__()
        blocks = [MyDummyLayer(hidden_size, intermediate_size, layer_idx=i) for i in range(number_of_layers)]
        self.layers = nn.ModuleList(blocks)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
