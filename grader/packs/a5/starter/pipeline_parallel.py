"""Pipeline parallelism of Assignment 5: point-to-point communication between neighbouring stages,
the split of the layers into stages, and a stage that runs (and back-propagates) only its layers.

The grader's CPU/Gloo copy of the course's file: the same names, signatures and TODO sites.  A
report's snippets for Q5 and Q7 are placed here (``grader.packs.a5.splice``).
"""

import copy
from typing import List

import torch
from torch import distributed as dist
from torch import nn


# Q7: Complete the conditions of the `if` statements within each `operation`
def pipeline_communicate(operation, pp_process_group, tensor=None, shapes=None):
    # `src` and `dest` are global ranks: the group's ranks are translated with dist.get_global_rank
    pp_rank = dist.get_rank(pp_process_group)
    pp_prev_rank = pp_rank - 1
    pp_next_rank = pp_rank + 1

    pp_is_first_stage = pp_rank == 0
    pp_is_last_stage = pp_rank == dist.get_world_size(pp_process_group) - 1

    if operation == 'recv_forward':
        if True: return None  # TODO
        tensor = torch.empty(shapes, requires_grad=True, device="cpu")
        src = dist.get_global_rank(pp_process_group, pp_prev_rank)

    elif operation == 'send_forward':
        if True: return  # TODO
        dest = dist.get_global_rank(pp_process_group, pp_next_rank)

    elif operation == 'recv_backward':
        if True: return None  # TODO
        tensor = torch.empty(shapes, requires_grad=True, device="cpu")
        src = dist.get_global_rank(pp_process_group, pp_next_rank)

    elif operation == 'send_backward':
        if True: return  # TODO
        dest = dist.get_global_rank(pp_process_group, pp_prev_rank)

    is_send = operation.startswith('send')
    peer_rank = dest if is_send else src
    op = dist.P2POp(dist.isend if is_send else dist.irecv, tensor, peer_rank)
    for request in dist.batch_isend_irecv([op]):
        request.wait()
    return tensor if not is_send else None


# Q5: Develop this function
def distribute_layers(num_layers: int, pp_rank: int, pp_world_size: int) -> List:
    """
    Distribute model layers across GPUs as evenly as possible.
    Returns a list with the layer indices that should be processed by this GPU.
    """
    # TODO
    layers_in_current_stage = [0, 1, 2, 3]
    return layers_in_current_stage


class PipelineStage(nn.Module):
    """One stage of the pipeline: a copy of the model's layers that ``distribute_layers`` gives it."""

    def __init__(self, model, number_of_layers, pp_rank, pp_world_size):
        super().__init__()
        self.layer_distribution = distribute_layers(number_of_layers, pp_rank, pp_world_size)
        self.pp_stage_layers = nn.ModuleList([copy.deepcopy(model.layers[i]) for i in self.layer_distribution])

    def forward(self, x):
        for layer in self.pp_stage_layers:
            x = layer(x)
        return x

    def backward(self, input_tensor, output_tensor, output_tensor_grad):
        """Back-propagate this stage: from the gradient the next stage sent (the loss's own gradient
        of ones on the last stage) to the gradient of this stage's input, returned for the previous."""
        if input_tensor is not None:
            input_tensor.retain_grad()
        if output_tensor_grad is None:
            output_tensor_grad = torch.ones_like(output_tensor, memory_format=torch.preserve_format)
        torch.autograd.backward(output_tensor, grad_tensors=output_tensor_grad, retain_graph=False, create_graph=False)
        return input_tensor.grad if input_tensor is not None else None
