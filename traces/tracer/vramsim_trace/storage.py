"""Device storages and their lifetimes, as PyTorch's reference counting decides them.

The simulated GPU is PyTorch's meta device: tensors with shapes, dtypes and storages of a size, but no
memory and no math. A storage is "on the device" unless it was made host-side (parameters and buffers built
on the CPU before `.to("cuda")`, which the tracer keeps on meta too so that a 7B model needs no host memory).
A storage is freed when the real one would be: the tracer holds only weak references, and checks them after
every operator (torch.multiprocessing.reductions.StorageWeakRef, which PyTorch 1.13 and 2.x both have)."""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .output import Allocation

# The descriptor behind Tensor.device, kept before device.py replaces the Python-level property. Inside a
# TorchFunctionMode a property read is dispatched to the *public* (patched) property, so real_device_type()
# asks is_meta / is_cpu, which the tracer leaves alone.
# torch._C._TensorBase is torch._C.TensorBase from PyTorch 2.2 on.
TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
_REAL_DEVICE = TensorBase.device


def real_device_type(t: torch.Tensor) -> str:
    if t.is_meta:
        return "meta"
    return "cpu" if t.is_cpu else _REAL_DEVICE.__get__(t).type


def storage_of(t: torch.Tensor):
    # untyped_storage() is PyTorch 2.x; storage() is 1.13 (and deprecated, with a warning, in 2.x).
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()


def storage_key(storage) -> int:
    return storage._cdata


def storage_nbytes(storage) -> int:
    return int(storage.nbytes())


class StorageTable:
    """Which meta storages are host-side, and which device storages are live (with their Allocation)."""

    def __init__(self) -> None:
        self._host: Dict[int, StorageWeakRef] = {}
        self._live: Dict[int, Tuple[StorageWeakRef, Allocation, int]] = {}  # key -> (ref, alloc, nbytes)
        self.in_kernel = 0  # > 0 while an aten kernel runs (its Python meta kernels see the real device)

    # ---- host-side meta storages ------------------------------------------------------------------------

    def mark_host(self, t: torch.Tensor) -> None:
        s = storage_of(t)
        self._host[storage_key(s)] = StorageWeakRef(s)

    def is_host_key(self, key: int) -> bool:
        ref = self._host.get(key)
        if ref is None:
            return False
        if ref.expired():  # a freed host storage whose address a new storage reuses
            del self._host[key]
            return False
        return True

    def is_device_tensor(self, t: torch.Tensor) -> bool:
        if real_device_type(t) != "meta":
            return False
        return not self.is_host_key(storage_key(storage_of(t)))

    # ---- live device storages -----------------------------------------------------------------------------

    def live_allocation(self, t: torch.Tensor) -> Optional[Allocation]:
        entry = self._live.get(storage_key(storage_of(t)))
        return entry[1] if entry is not None else None

    def lookup(self, key: int) -> Optional[Tuple[StorageWeakRef, Allocation, int]]:
        return self._live.get(key)

    def add(self, storage, alloc: Allocation) -> None:
        self._live[storage_key(storage)] = (StorageWeakRef(storage), alloc, alloc.size_bytes)

    def remove(self, key: int) -> Allocation:
        return self._live.pop(key)[1]

    def expired(self) -> Iterable[Allocation]:
        """Removes and yields the allocations whose storage died, in allocation order."""
        dead = [k for k, (ref, _, _) in self._live.items() if ref.expired()]
        if not dead:
            return []
        allocs = [self._live.pop(k)[1] for k in dead]
        allocs.sort(key=lambda a: a.index)
        return allocs

    def live_allocations(self) -> Iterable[Allocation]:
        return [entry[1] for entry in self._live.values()]

    def __len__(self) -> int:
        return len(self._live)
