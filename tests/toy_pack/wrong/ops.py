import torch


def double(x: torch.Tensor) -> torch.Tensor:
    return x + x.sum()
