"""A grading on a GPU machine, or one with many cores, computes as on a 2-core CPU-only one (issue 38).

No GPU is at hand here, so a CUDA build of torch on a one-GPU, 64-core machine is faked in a process
started exactly as the session's host (``grader.matrix.host``: ``python -I`` in the zygote's scrubbed
environment): torch claims to be a CUDA build, NVML (fork-safe) sees one GPU, the CUDA runtime's device
count (``cuInit``: state a forked child cannot use) and CUDA's lazy initialisation record that they ran,
and the core count is 64.  The process then imports what a zygote imports for every pack, and what each
pack's session imports (HW12's ``torch._dynamo`` among them).  The same fake without the grading's
environment records ``cuInit`` and a 64-worker compile pool: the check can fail, and did on today's code.
What only a real GPU machine shows (a driver's threads, the time) is ``scripts/gpu-check.sh``'s.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.pack import load_pack
from grader.runtimes.torchdist.zygote import scrubbed_environment

pytestmark = pytest.mark.slow  # each pack's rank and session imports, torch._dynamo's too: about 20 s

PACKS = ("a9", "a4", "hw12", "a5")
FAKE_CORES = 64
SIDES = json.dumps({pack: load_pack(pack).rank_side.to_json() for pack in PACKS})  # what each pack's zygote is told

DRIVER = f"""
import json, os, sys, threading
os.cpu_count = lambda: {FAKE_CORES}
os.sched_getaffinity = lambda pid: set(range({FAKE_CORES}))
import torch, torch.cuda, torch._utils
torch._utils.cpu_count = lambda: {FAKE_CORES}
calls = []
def record(name, result):
    def fake(*args, **kwargs):
        calls.append(name)
        return result
    return fake
torch.cuda._is_compiled = lambda: True
torch.cuda._raw_device_count_nvml = lambda: 1
torch._C._cuda_getDeviceCount = record("cuInit", 1)
torch.cuda._lazy_init = record("CUDA context", None)
torch._C._cuda_getCurrentRawStream = record("CUDA stream", 0)  # a CUDA build's, imported by torch._dynamo
from grader.runtimes import RankSide
from grader.runtimes.torchdist import zygote
zygote.preload_runtime()
for pack in sys.argv[1:]:
    zygote.preload_pack(RankSide.from_json(json.loads({SIDES!r})[pack]))
    __import__(f"grader.packs.{{pack}}.expected")
for thread in threading.enumerate():
    if thread is not threading.current_thread():
        thread.join(120)
import torch._inductor.config
children = sum(len(open(f"/proc/self/task/{{t}}/children").read().split()) for t in os.listdir("/proc/self/task"))
print(json.dumps({{
    "calls": calls,
    "available": torch.cuda.is_available(),
    "threads": torch.get_num_threads(),
    "interop": torch.get_num_interop_threads(),
    "compile_threads": torch._inductor.config.compile_threads,
    "children": children,
}}))
"""


def faked_machine(env: dict[str, str], *packs: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-I", "-c", DRIVER, *packs], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def graded_there() -> dict:
    return faked_machine(scrubbed_environment(), *PACKS)


def test_no_cuda_state_is_made_before_the_zygote_forks(graded_there):
    assert graded_there["calls"] == [] and graded_there["available"] is False


def test_no_thread_or_worker_count_comes_from_the_core_count(graded_there):
    counts = {k: graded_there[k] for k in ("threads", "interop", "compile_threads", "children")}
    assert counts == {"threads": 1, "interop": 1, "compile_threads": 1, "children": 0}


def test_without_the_gradings_environment_the_fake_machine_shows_both(graded_there):
    """The control: the same fake, the environment's GPU and pool settings left out, the runtime alone."""
    hidden = (
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "TORCHINDUCTOR_COMPILE_THREADS",
    )
    env = {k: v for k, v in scrubbed_environment().items() if k not in hidden}
    seen = faked_machine(env)
    assert "cuInit" in seen["calls"] and seen["compile_threads"] == min(32, FAKE_CORES)  # inductor's own cap
