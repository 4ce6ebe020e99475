"""``build_device_mesh`` as the course gives it: a mesh of (pp, dp, tp) over the world, with the pp
dimension named only when there is more than one stage."""

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


def build_device_mesh(rank: int, world_size: int, pp: int, dp: int = -1, tp: int = 1) -> DeviceMesh:
    assert pp >= 1 and tp >= 1 and (dp >= 1 or dp == -1)
    if dp == -1:
        dp = world_size // (pp * tp)
    assert pp * dp * tp == world_size
    dims, names = [dp, tp], ["dp", "tp"]
    if pp > 1:
        dims.insert(0, pp)
        names.insert(0, "pp")
    if not rank:
        print(f"Building {len(dims)}-D device mesh with {names}, {dims}")
    return init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", dims, mesh_dim_names=tuple(names))
