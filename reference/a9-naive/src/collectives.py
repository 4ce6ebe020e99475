"""Task 1: the handout's straightforward collectives, from send/recv/isend/irecv only.

Star-shaped: a root talks to every other rank, so the root's traffic grows with world size
(broadcast: N-1 sends from src; allreduce and allgather: N-1 receives plus N-1 sends at rank 0).
Simple to check, correct for any world size, element count and dtype Gloo can carry.
"""

import torch
import torch.distributed as dist

ROOT = 0


def _contiguous_buffer(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` itself when Gloo can write into it, else a contiguous copy to copy back from."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """``src`` sends the whole tensor to every other rank; the others receive it in place."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if not 0 <= src < world_size:
        raise ValueError(f"src={src} is not a rank of a world of size {world_size}")
    data = tensor.detach()  # the data is overwritten in place; autograd has no part in it
    buf = _contiguous_buffer(data)
    if rank == src:
        for dst in range(world_size):
            if dst != src:
                dist.send(buf, dst)
    else:
        dist.recv(buf, src)
        if buf is not data:
            data.copy_(buf)
    return tensor


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """Gather to rank 0, which accumulates in rank order, then broadcast the sum from rank 0."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = tensor.detach()
    if rank == ROOT:
        incoming = torch.empty(data.shape, dtype=data.dtype)
        for peer in range(world_size):
            if peer != ROOT:
                dist.recv(incoming, peer)
                data.add_(incoming)
    else:
        dist.send(_contiguous_buffer(data), ROOT)
    my_broadcast(data, src=ROOT)
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank sends its block to rank 0, which assembles the result and sends it to everyone."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if tensor.dim() == 0:
        raise ValueError("my_allgather concatenates along dim 0, so it needs a tensor with at least one dim")
    n = tensor.shape[0]
    out = torch.empty((world_size * n, *tensor.shape[1:]), dtype=tensor.dtype)
    if rank == ROOT:
        out[ROOT * n : (ROOT + 1) * n] = tensor.detach()
        for peer in range(world_size):
            if peer != ROOT:
                dist.recv(out[peer * n : (peer + 1) * n], peer)
        for peer in range(world_size):
            if peer != ROOT:
                dist.send(out, peer)
    else:
        dist.send(_contiguous_buffer(tensor.detach()), ROOT)
        dist.recv(out, ROOT)
    return out


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    """Every pair of ranks swaps the chunks each owes the other; the lower rank sends first.

    Each rank walks its peers in increasing order, so all ranks meet their pairs in one global
    order and the blocking send/recv never wait in a cycle.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if tensor.dim() == 0 or tensor.shape[0] % world_size:
        raise ValueError(f"dim 0 of shape {tuple(tensor.shape)} is not divisible by world_size={world_size}")
    chunks = [c.contiguous() for c in tensor.detach().tensor_split(world_size)]
    result = chunks[rank].clone()
    incoming = torch.empty_like(result)
    for peer in range(world_size):
        if peer == rank:
            continue
        if rank < peer:
            dist.send(chunks[peer], peer)
            dist.recv(incoming, peer)
        else:
            dist.recv(incoming, peer)
            dist.send(chunks[peer], peer)
        result.add_(incoming)
    return result


def my_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Chunk i of ``scatter_dim`` goes to rank i; what arrives is concatenated along ``gather_dim``
    in rank order.  All sends and receives are posted non-blocking, then awaited."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    scatter_dim, gather_dim = scatter_dim % tensor.dim(), gather_dim % tensor.dim()
    if tensor.shape[scatter_dim] % world_size:
        raise ValueError(
            f"scatter_dim {scatter_dim} has size {tensor.shape[scatter_dim]}, not divisible by {world_size}"
        )
    outgoing = [c.contiguous() for c in tensor.detach().tensor_split(world_size, scatter_dim)]
    incoming = [chunk if peer == rank else torch.empty_like(chunk) for peer, chunk in enumerate(outgoing)]
    requests = []
    for peer in range(world_size):
        if peer != rank:
            requests.append(dist.isend(outgoing[peer], peer))
            requests.append(dist.irecv(incoming[peer], peer))
    for request in requests:
        request.wait()
    return torch.cat(incoming, dim=gather_dim)
