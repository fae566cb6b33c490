"""Live contexts and recompute handles by id, so that torch.compile can pass them to the ops.

A ContextDetKcp or RecomputeHandleDetKcp is not a tensor, and dynamo would bake a Python object
into the graph as a constant (and retrace for every new handle). Each object therefore carries a
*token*: an int64 CPU tensor of one element holding the object's id here. Dynamo sees the token
as an ordinary graph input (same shape and dtype for every object, so a new handle every
micro-step reuses the compiled graph), and the op's implementation finds the object again by the
token's value at run time (the graph may hand it a copy of the token). The ops declare the
tokens mutated, so the compiled graph keeps every call, in program order, as eager code does
(see _ops.py). Ids are never reused; the registry
holds the objects weakly, and close() removes them, so a closed or freed object is reported by
name instead of being used.
"""
import itertools
import weakref

import torch

_live = weakref.WeakValueDictionary()
_ids = itertools.count(1)


def register(obj):
    """Registers `obj` under a fresh id; returns its token.

    The token holds the object (a reference cycle, which Python's collector frees): a compiled
    graph keeps only tokens, so a handle passed to a compiled, checkpointed function and not
    kept by the caller must stay alive until the backward's recompute has read it, as the
    eager checkpoint's closure keeps it."""
    key = next(_ids)
    _live[key] = obj
    token = torch.tensor([key], dtype=torch.int64)
    token._cake_object = obj
    return token


def unregister(token):
    if token is not None:
        _live.pop(int(token.item()), None)


def lookup(token, cls, name):
    """The live `cls` object of `token`; ValueError naming `name` when it was closed."""
    if token.device.type != "cpu" or token.dtype != torch.int64 or token.numel() != 1:
        raise ValueError(f"{name}: expected the token of a {cls.__name__} (an int64 CPU tensor "
                         f"of 1 element), got {token.dtype} {list(token.shape)} on "
                         f"{token.device}")
    obj = _live.get(int(token.item()))
    if obj is None or not isinstance(obj, cls):
        raise ValueError(f"{name}: this {cls.__name__} was closed")
    return obj
