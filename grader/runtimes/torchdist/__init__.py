"""The torch.distributed runtime: the layer that knows how student code runs and communicates when it
runs in rank processes talking through torch.distributed on the Gloo backend, as Assignment 9's does
(a thread-simulated ``DistributedContext`` will be a runtime beside this one); so far it holds the
static analysis of torch.distributed use (:mod:`.static`), and nothing here imports torch.
"""
