"""Runtimes: a runtime is the layer of the grader that knows how student code runs and communicates
(how it is launched, what it calls to exchange data, how that is analysed before it runs and guarded
and traced while it runs), while the engine around it (intake, rubric, scoring, rendering, the CLI)
stays the same for every assignment: ``torchdist`` is torch.distributed on the Gloo backend, and a
thread-simulated ``DistributedContext`` will be another.
"""
